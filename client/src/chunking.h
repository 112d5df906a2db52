// Splitting blocks into PutBlocks chunks and reassembling GetBlocks chunks. Internal to
// turbokv::client; pure functions and a small state machine so they are unit-testable without
// a server.
#ifndef TURBOKV_CLIENT_SRC_CHUNKING_H_
#define TURBOKV_CLIENT_SRC_CHUNKING_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace turbokv::client::internal {

// A byte range [offset, offset + size) of a block.
struct ChunkRange {
  uint64_t offset = 0;
  uint64_t size = 0;
  friend bool operator==(const ChunkRange& a, const ChunkRange& b) {
    return a.offset == b.offset && a.size == b.size;
  }
};

// The chunks of a block of `block_bytes`, each at most `max_chunk_bytes` (>= 1), in order.
// A block of 0 bytes still yields one (empty) chunk: its first message carries the hash.
std::vector<ChunkRange> SplitIntoChunks(uint64_t block_bytes, uint64_t max_chunk_bytes);

// Reassembles the chunks of a GetBlocks response stream for `num_blocks` requested blocks.
// Rules enforced (a violation is DataLoss with a message naming the block index):
//   * index < num_blocks; a block is reported either missing (found = false, once) or as
//     found chunks with offsets 0, then contiguous, totalling exactly block_bytes;
//   * block_bytes of every chunk of a block is the same; chunks of one block do not overlap
//     with the block being reported twice.
// Chunks of different blocks may interleave.
class BlockAssembler {
 public:
  explicit BlockAssembler(size_t num_blocks);

  // found = false: the block is missing (no data may follow for it).
  [[nodiscard]] absl::Status AddMissing(uint32_t index);
  [[nodiscard]] absl::Status AddChunk(uint32_t index, uint64_t block_bytes, uint64_t offset,
                                      absl::string_view data);
  // Same, for a chunk given as pieces of `size` bytes in total (WireChunk::data): each piece
  // is appended to the block once, without an intermediate copy.
  [[nodiscard]] absl::Status AddChunk(uint32_t index, uint64_t block_bytes, uint64_t offset,
                                      absl::Span<const absl::string_view> pieces, uint64_t size);
  // Same, taking ownership of `data` (avoids a copy for a single-chunk block).
  [[nodiscard]] absl::Status AddChunk(uint32_t index, uint64_t block_bytes, uint64_t offset,
                                      std::string&& data);

  // After the stream ended: DataLoss if any block is incomplete or was never reported.
  // On success moves the blocks out (nullopt = missing).
  [[nodiscard]] absl::Status Finish(std::vector<std::optional<std::string>>* out);

 private:
  enum class State : uint8_t { kPending, kMissing, kPartial, kDone };
  struct Slot {
    State state = State::kPending;
    uint64_t block_bytes = 0;
    std::string data;
  };
  absl::Status Check(uint32_t index, uint64_t block_bytes, uint64_t offset, uint64_t size);
  std::vector<Slot> slots_;
};

}  // namespace turbokv::client::internal

#endif  // TURBOKV_CLIENT_SRC_CHUNKING_H_
