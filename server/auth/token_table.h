// The token file: who may call, as which tenant, with which quota (docs/server.md, "Tokens
// and tenants"). One entry per line; '#' starts a comment; fields separated by blanks:
//
//   token sha256:<64 hex digits> <tenant> [admin]   a bearer token, stored as its SHA-256
//   cert  <identity> <tenant> [admin]               a verified mTLS client certificate whose
//                                                   CN or one of whose SANs is <identity>
//   quota <tenant> <bytes>                          most packed bytes the tenant may store
//                                                   (plain bytes or with a unit: 10GiB)
//
// Tenant names are 1..64 characters of [A-Za-z0-9._-]. The digest of a token is
// `printf '%s' "$TOKEN" | sha256sum`; the file never holds a token itself.
//
// Thread safety: a TokenTable is immutable once parsed.
#ifndef TURBOKV_SERVER_AUTH_TOKEN_TABLE_H_
#define TURBOKV_SERVER_AUTH_TOKEN_TABLE_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "server/auth/principal.h"

namespace turbokv::server {

using Sha256Digest = std::array<uint8_t, 32>;
Sha256Digest Sha256(std::string_view data);
// "sha256:" + 64 lowercase hex digits.
std::string Sha256Text(std::string_view data);

struct TokenTable {
  struct Token {
    Sha256Digest digest;
    Principal principal;
  };
  struct Cert {
    std::string identity;
    Principal principal;
  };
  std::vector<Token> tokens;
  std::vector<Cert> certs;
  absl::flat_hash_map<std::string, uint64_t> quotas;  // tenant -> bytes

  // The principal of a bearer token, or nullptr. Hashes the token, then compares the digest
  // with every entry in constant time (CRYPTO_memcmp, no early exit), so neither the position
  // of a match nor a common prefix shows in the time taken.
  const Principal* FindToken(std::string_view token) const;
  // The principal of a client-certificate identity, or nullptr.
  const Principal* FindCert(std::string_view identity) const;
};

// InvalidArgument naming the line ("token file line 3: ...").
[[nodiscard]] absl::StatusOr<TokenTable> ParseTokenTable(std::string_view text);

// True for 1..64 characters of [A-Za-z0-9._-].
bool ValidTenantName(std::string_view name);

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_AUTH_TOKEN_TABLE_H_
