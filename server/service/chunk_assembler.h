// The first stage of a PutBlocks stream: turns its messages into blocks. Checks each message
// against the stream (one namespace, the header only on the first message, no more blocks than
// the header's block_count) and against the block in progress (hash, encoding, block_bytes,
// offsets in order, no overrun), and says what the message did: a block refused, a block cut
// short, a new block, a chunk of the current block (moved out of the message, not copied),
// and whether it completed the block. Results are numbered in stream order: every block the
// stream names gets exactly one, refused or not (PutBlocksResponse.results).
//
// Pure: no gRPC call, no threads, no clock, no budget; the reactor feeds it one message at a
// time and acts on the Step (put_pipeline.h). Not thread-safe (one stream, one caller at
// a time).
//
// Per-block problems are INVALID_ARGUMENT results (a hash outside 8..32 bytes, an encoding
// other than RAW/PACKED, block_bytes other than the namespace's raw/packed size, chunks out of
// order or overrunning, a block cut short by the next block or the end of the stream), or
// RESOURCE_EXHAUSTED for a block larger than the tenant's whole quota. Stream problems
// (namespace_id changing, a header after the first message, more blocks than declared) are
// the non-OK status of Accept: the stream fails as a whole (INVALID_ARGUMENT).
#ifndef TURBOKV_SERVER_SERVICE_CHUNK_ASSEMBLER_H_
#define TURBOKV_SERVER_SERVICE_CHUNK_ASSEMBLER_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "turbokv/v1/turbokv.pb.h"

namespace turbokv::server {

// What the assembler needs of a namespace (Namespace::codec), and of the caller's tenant.
struct BlockSizes {
  uint64_t namespace_id = 0;
  uint64_t raw_bytes = 0;     // one RAW block, bytes
  uint64_t packed_bytes = 0;  // one PACKED block, bytes
  // The RAW layout for messages: "[num_layers][2][block_tokens][num_kv_heads][head_dim] of
  // fp16".
  std::string raw_layout;
  uint64_t quota_bytes = 0;  // the tenant's whole quota; 0: none
};

// Hex of a block hash for messages; a (malformed) hash longer than 32 bytes is cut short so a
// hostile client cannot blow up the response.
std::string HashHex(std::string_view hash);

class ChunkAssembler {
 public:
  // What one message did, in this order: `cut` (the block in progress ended unstored), then
  // `result` (a new result slot, number result_index), then `chunk` (bytes of the block
  // `block_index`; with `completes` the block is whole).
  struct Step {
    struct Cut {
      size_t block_index;
      absl::Status status;  // non-OK
    };
    std::optional<Cut> cut;
    // A new result: its hash (echoed) and status; OK when a block starts (its encoding and
    // expected size in `encoding` / `block_bytes`), non-OK when the block is refused.
    std::optional<absl::Status> result;
    std::string result_hash;
    size_t result_index = 0;
    v1::Encoding encoding = v1::ENCODING_UNSPECIFIED;
    uint64_t block_bytes = 0;
    bool chunk = false;
    size_t block_index = 0;
    uint64_t offset = 0;  // of `data` within the block
    std::string data;
    bool completes = false;
  };

  // The stream's first message (its namespace resolved to `sizes` by the caller) sets the
  // stream's header: block_count (0: undeclared) and chain_continues.
  explicit ChunkAssembler(BlockSizes sizes, const v1::PutBlocksRequest& first);

  // One message, in stream order. Its `data` is moved into the Step. Non-OK: the stream fails
  // as a whole (see above); nothing else in the Step counts then.
  [[nodiscard]] absl::Status Accept(v1::PutBlocksRequest& req, Step* step);
  // The end of the stream: the block in progress, if any, was cut short.
  std::optional<Step::Cut> End();

  const BlockSizes& sizes() const { return sizes_; }
  bool chain_continues() const { return chain_continues_; }
  size_t results() const { return results_; }
  bool in_block() const { return current_.has_value(); }
  // Every block the header declared has been read whole or refused: only the end may come.
  bool all_declared_in() const {
    return declared_.has_value() && results_ >= *declared_ && !current_.has_value();
  }

 private:
  struct Current {
    size_t index;
    std::string hash;
    v1::Encoding encoding;
    uint64_t expected;
    uint64_t received = 0;
  };
  void Start(v1::PutBlocksRequest& req, Step* step);
  void Append(v1::PutBlocksRequest& req, Step* step);
  void Refuse(const std::string& hash, absl::Status status, Step* step);
  void CutCurrent(absl::Status status, Step* step);

  const BlockSizes sizes_;
  std::optional<uint64_t> declared_;
  bool chain_continues_ = false;
  bool first_ = true;
  size_t results_ = 0;
  std::optional<Current> current_;
  // Later chunks of a refused block are dropped silently (an optional: a refused empty hash
  // is a hash too, so its later chunks give no extra results).
  std::optional<std::string> skip_hash_;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVICE_CHUNK_ASSEMBLER_H_
