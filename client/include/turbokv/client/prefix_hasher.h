// Prefix hashing of token sequences into block hashes (docs/architecture.md, "Terms").
//
// THE CONTRACT (every client language must reproduce it bit for bit; test vectors live in
// client/python/turbokv/hash_vectors.json and are checked by the C++ and the Python tests):
//
//   SHA-256 is FIPS 180-4 SHA-256; "‖" is byte concatenation; all integers little-endian.
//
//   h_{-1} = SHA-256( namespace_id as 8 bytes, little-endian )
//   h_i    = SHA-256( h_{i-1}                                   (32 bytes)
//                   ‖ t[i*B], t[i*B+1], ..., t[i*B+B-1]          (B tokens, each uint32 LE)
//                   ‖ extra_key )                                (0 or more bytes, same for
//                                                                 every block)
//   for i = 0 .. floor(n / B) - 1, where n = number of tokens and B = block_tokens.
//
//   * Only full blocks are hashed: a trailing partial block (n mod B tokens) gets no hash, and
//     fewer than B tokens give an empty prefix chain.
//   * Token ids are unsigned 32-bit; an int32 id is reinterpreted (two's complement), so
//     vocabularies up to 2^32 fit. The Python client rejects ids outside [0, 2^32).
//   * extra_key is whatever else the KV depends on beyond the namespace and the tokens
//     (a LoRA adapter id, a multimodal input hash, ...). Empty by default. It is appended to
//     every block, so the same tokens under different extra keys never share a hash.
//   * Every hash is 32 bytes. h_i names block i and everything before it: two chains share
//     h_i exactly when they share the namespace, the extra key and the first (i+1)*B tokens.
//
// Thread safety: PrefixHasher is immutable; its const methods may be called concurrently.
#ifndef TURBOKV_CLIENT_PREFIX_HASHER_H_
#define TURBOKV_CLIENT_PREFIX_HASHER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace turbokv::client {

class PrefixHasher {
 public:
  // Bytes of every block hash.
  static constexpr size_t kHashBytes = 32;

  // `extra_key`: bytes appended to every block's input (see the contract above).
  explicit PrefixHasher(uint64_t namespace_id, std::string extra_key = "");

  uint64_t namespace_id() const { return namespace_id_; }
  const std::string& extra_key() const { return extra_key_; }

  // h_{-1}: SHA-256 of the namespace id as 8 bytes little-endian. 32 bytes.
  std::string RootHash() const;

  // h_i from h_{i-1} (`prev`, 32 bytes) and the block's tokens. Returns 32 bytes.
  std::string NextHash(absl::string_view prev, absl::Span<const uint32_t> block) const;

  // The prefix chain of `tokens`: floor(tokens.size() / block_tokens) hashes of 32 bytes each,
  // in order. InvalidArgument when block_tokens < 1.
  [[nodiscard]] absl::StatusOr<std::vector<std::string>> BlockHashes(
      absl::Span<const uint32_t> tokens, int block_tokens) const;
  // Same, for int32 token ids (reinterpreted as uint32).
  [[nodiscard]] absl::StatusOr<std::vector<std::string>> BlockHashes(
      absl::Span<const int32_t> tokens, int block_tokens) const;

 private:
  uint64_t namespace_id_;
  std::string extra_key_;
};

// Lower-case hex of arbitrary bytes ("0a1b..."), for logs and test vectors.
std::string HexEncode(absl::string_view bytes);

}  // namespace turbokv::client

#endif  // TURBOKV_CLIENT_PREFIX_HASHER_H_
