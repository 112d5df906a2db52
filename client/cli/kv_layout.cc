#include "kv_layout.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace turbokv::cli {

absl::StatusOr<std::vector<std::string>> SplitBlocks(absl::string_view sequence, const KvShape& seq,
                                                     uint64_t block_tokens) {
  if (block_tokens == 0) return absl::InvalidArgumentError("block_tokens must be >= 1");
  if (sequence.size() != seq.total_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("KV tensor has ", sequence.size(),
                                                   " bytes, its shape needs ", seq.total_bytes()));
  }
  const uint64_t n = seq.num_tokens / block_tokens;
  const uint64_t row = seq.row_bytes();
  const uint64_t slab = block_tokens * row;  // one (layer, K/V) slice of one block
  std::vector<std::string> out(n, std::string(seq.num_layers * 2 * slab, '\0'));
  for (uint64_t b = 0; b < n; ++b) {
    char* dst = out[b].data();
    for (uint64_t lk = 0; lk < seq.num_layers * 2; ++lk) {
      const char* src = sequence.data() + (lk * seq.num_tokens + b * block_tokens) * row;
      std::memcpy(dst + lk * slab, src, slab);
    }
  }
  return out;
}

absl::StatusOr<std::string> JoinBlocks(absl::Span<const std::string> blocks, const KvShape& block) {
  const uint64_t row = block.row_bytes();
  const uint64_t slab = block.num_tokens * row;
  const uint64_t n = blocks.size();
  std::string out(block.num_layers * 2 * n * slab, '\0');
  for (uint64_t b = 0; b < n; ++b) {
    if (blocks[b].size() != block.total_bytes()) {
      return absl::InvalidArgumentError(absl::StrCat("block ", b, " has ", blocks[b].size(),
                                                     " bytes, expected ", block.total_bytes()));
    }
    for (uint64_t lk = 0; lk < block.num_layers * 2; ++lk) {
      std::memcpy(out.data() + (lk * n + b) * slab, blocks[b].data() + lk * slab, slab);
    }
  }
  return out;
}

}  // namespace turbokv::cli
