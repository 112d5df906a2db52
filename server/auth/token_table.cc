#include "server/auth/token_table.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/byte_size.h"

namespace turbokv::server {
namespace {

absl::Status LineError(int line, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("token file line ", line, ": ", std::string(what)));
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "[admin]" after the tenant; InvalidArgument for anything else.
absl::StatusOr<Principal> ParsePrincipal(int line, const std::vector<std::string_view>& f,
                                         size_t at) {
  if (f.size() <= at) return LineError(line, "the tenant is missing");
  Principal p;
  p.tenant = std::string(f[at]);
  if (!ValidTenantName(p.tenant)) {
    return LineError(line, "a tenant name is 1..64 characters of A-Z a-z 0-9 . _ -");
  }
  if (f.size() == at + 2 && f[at + 1] == "admin") {
    p.admin = true;
  } else if (f.size() > at + 1) {
    return LineError(line, "after the tenant only \"admin\" may follow");
  }
  return p;
}

}  // namespace

Sha256Digest Sha256(std::string_view data) {
  Sha256Digest d;
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), d.data());
  return d;
}

std::string Sha256Text(std::string_view data) {
  const Sha256Digest d = Sha256(data);
  return absl::StrCat("sha256:", absl::BytesToHexString(absl::string_view(
                                     reinterpret_cast<const char*>(d.data()), d.size())));
}

bool ValidTenantName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!(absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) {
      return false;
    }
  }
  return true;
}

const Principal* TokenTable::FindToken(std::string_view token) const {
  const Sha256Digest d = Sha256(token);
  const Principal* found = nullptr;
  for (const Token& t : tokens) {
    // No early exit: every entry is compared whatever matched.
    const bool match = CRYPTO_memcmp(t.digest.data(), d.data(), d.size()) == 0;
    if (match && found == nullptr) found = &t.principal;
  }
  return found;
}

const Principal* TokenTable::FindCert(std::string_view identity) const {
  for (const Cert& c : certs) {
    if (c.identity == identity) return &c.principal;
  }
  return nullptr;
}

absl::StatusOr<TokenTable> ParseTokenTable(std::string_view text) {
  TokenTable table;
  int line_no = 0;
  for (absl::string_view line_view :
       absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    std::string_view line(line_view.data(), line_view.size());
    ++line_no;
    if (size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    std::vector<std::string_view> f;
    for (absl::string_view field : absl::StrSplit(absl::string_view(line.data(), line.size()),
                                                  absl::ByAnyChar(" \t\r"), absl::SkipEmpty())) {
      f.emplace_back(field.data(), field.size());
    }
    if (f.empty()) continue;
    if (f[0] == "token") {
      if (f.size() < 2) return LineError(line_no, "token needs sha256:<64 hex digits>");
      std::string_view digest = f[1];
      if (digest.substr(0, 7) != "sha256:" || digest.size() != 7 + 64) {
        return LineError(line_no,
                         "a token is stored as sha256:<64 hex digits> (printf '%s' \"$TOKEN\" | "
                         "sha256sum), never in plain text");
      }
      TokenTable::Token t;
      for (size_t i = 0; i < 32; ++i) {
        const int hi = HexValue(digest[7 + 2 * i]), lo = HexValue(digest[8 + 2 * i]);
        if (hi < 0 || lo < 0) return LineError(line_no, "the digest has a non-hex digit");
        t.digest[i] = static_cast<uint8_t>(hi * 16 + lo);
      }
      auto p = ParsePrincipal(line_no, f, 2);
      if (!p.ok()) return p.status();
      t.principal = *std::move(p);
      table.tokens.push_back(std::move(t));
    } else if (f[0] == "cert") {
      if (f.size() < 2) return LineError(line_no, "cert needs a certificate identity");
      TokenTable::Cert c;
      c.identity = std::string(f[1]);
      auto p = ParsePrincipal(line_no, f, 2);
      if (!p.ok()) return p.status();
      c.principal = *std::move(p);
      table.certs.push_back(std::move(c));
    } else if (f[0] == "quota") {
      if (f.size() != 3) return LineError(line_no, "quota needs <tenant> <bytes>");
      if (!ValidTenantName(f[1])) {
        return LineError(line_no, "a tenant name is 1..64 characters of A-Z a-z 0-9 . _ -");
      }
      absl::StatusOr<uint64_t> bytes = ParseByteSize(f[2]);
      if (!bytes.ok()) return LineError(line_no, std::string(bytes.status().message()));
      table.quotas[std::string(f[1])] = *bytes;
    } else {
      // The entry itself is not quoted: a line holding a token by mistake must not reach a log.
      return LineError(line_no, "an entry starts with token, cert or quota");
    }
  }
  return table;
}

}  // namespace turbokv::server
