#include "turbokv/client/prefix_hasher.h"

#include <openssl/evp.h>

#include <cstring>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace turbokv::client {
namespace {

// One-shot SHA-256 over a list of byte ranges. EVP is OpenSSL 3's non-deprecated interface;
// a failure there means a broken libcrypto, which no caller can handle, so it aborts.
std::string Sha256(std::initializer_list<absl::string_view> parts) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  bool ok = ctx != nullptr && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1;
  for (absl::string_view p : parts) {
    ok = ok && EVP_DigestUpdate(ctx.get(), p.data(), p.size()) == 1;
  }
  ok = ok && EVP_DigestFinal_ex(ctx.get(), digest, &len) == 1;
  if (!ok || len != PrefixHasher::kHashBytes) std::abort();
  return std::string(reinterpret_cast<const char*>(digest), len);
}

// Tokens as uint32 little-endian bytes, independent of the host byte order.
std::string TokensLe(absl::Span<const uint32_t> tokens) {
  std::string out(tokens.size() * 4, '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    const uint32_t t = tokens[i];
    out[4 * i + 0] = static_cast<char>(t & 0xff);
    out[4 * i + 1] = static_cast<char>((t >> 8) & 0xff);
    out[4 * i + 2] = static_cast<char>((t >> 16) & 0xff);
    out[4 * i + 3] = static_cast<char>((t >> 24) & 0xff);
  }
  return out;
}

}  // namespace

PrefixHasher::PrefixHasher(uint64_t namespace_id, std::string extra_key)
    : namespace_id_(namespace_id), extra_key_(std::move(extra_key)) {}

std::string PrefixHasher::RootHash() const {
  char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<char>((namespace_id_ >> (8 * i)) & 0xff);
  return Sha256({absl::string_view(le, 8)});
}

std::string PrefixHasher::NextHash(absl::string_view prev, absl::Span<const uint32_t> block) const {
  return Sha256({prev, TokensLe(block), extra_key_});
}

absl::StatusOr<std::vector<std::string>> PrefixHasher::BlockHashes(
    absl::Span<const uint32_t> tokens, int block_tokens) const {
  if (block_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_tokens must be >= 1, got ", block_tokens));
  }
  const size_t bt = static_cast<size_t>(block_tokens);
  const size_t n = tokens.size() / bt;
  std::vector<std::string> out;
  out.reserve(n);
  std::string prev = RootHash();
  for (size_t i = 0; i < n; ++i) {
    prev = NextHash(prev, tokens.subspan(i * bt, bt));
    out.push_back(prev);
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> PrefixHasher::BlockHashes(absl::Span<const int32_t> tokens,
                                                                   int block_tokens) const {
  std::vector<uint32_t> u(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) u[i] = static_cast<uint32_t>(tokens[i]);
  return BlockHashes(absl::MakeConstSpan(u), block_tokens);
}

std::string HexEncode(absl::string_view bytes) { return absl::BytesToHexString(bytes); }

}  // namespace turbokv::client
