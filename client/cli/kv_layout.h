// Conversions between a whole-sequence KV tensor and raw KV blocks.
//
//   sequence: [num_layers][2][num_tokens][num_kv_heads][head_dim]   (the CLI's KV.npy)
//   block i:  [num_layers][2][block_tokens][num_kv_heads][head_dim]  = tokens
//             [i * block_tokens, (i + 1) * block_tokens) of the sequence
// Elements are opaque `itemsize`-byte values (the functions never look at them).
#ifndef TURBOKV_CLIENT_CLI_KV_LAYOUT_H_
#define TURBOKV_CLIENT_CLI_KV_LAYOUT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace turbokv::cli {

struct KvShape {
  uint64_t num_layers = 0;
  uint64_t num_tokens = 0;  // tokens of the sequence (or of one block)
  uint64_t num_kv_heads = 0;
  uint64_t head_dim = 0;
  uint64_t itemsize = 0;  // bytes per element

  // Bytes of one token of one layer and one of K/V: num_kv_heads * head_dim * itemsize.
  uint64_t row_bytes() const { return num_kv_heads * head_dim * itemsize; }
  uint64_t total_bytes() const { return num_layers * 2 * num_tokens * row_bytes(); }
};

// The floor(num_tokens / block_tokens) full blocks of `sequence` (shape `seq`), each
// [L][2][block_tokens][H][D]. InvalidArgument when sequence.size() != seq.total_bytes() or
// block_tokens == 0.
[[nodiscard]] absl::StatusOr<std::vector<std::string>> SplitBlocks(absl::string_view sequence,
                                                                   const KvShape& seq,
                                                                   uint64_t block_tokens);

// Concatenates blocks along the token axis: the inverse of SplitBlocks. `block` gives the
// shape of every block (num_tokens = block_tokens); the result is
// [L][2][blocks.size() * block_tokens][H][D]. InvalidArgument on a block of the wrong size.
[[nodiscard]] absl::StatusOr<std::string> JoinBlocks(absl::Span<const std::string> blocks,
                                                     const KvShape& block);

}  // namespace turbokv::cli

#endif  // TURBOKV_CLIENT_CLI_KV_LAYOUT_H_
