// vLLM's KV-event wire format, written with msgpack-c (docs/kv-events.md).
//
// vLLM (`vllm.distributed.kv_events`, the same in 0.32 and 0.34) publishes a `KVEventBatch` per
// ZMQ message: a msgspec struct encoded *array-like*, `[ts, events, data_parallel_rank]` (ts:
// float64 seconds since the Unix epoch; data_parallel_rank nil), where each event is a tagged
// struct encoded as a *map* whose "type" key names the class:
//   {"type": "BlockStored", "block_hashes": [bin...], "parent_block_hash": bin|nil,
//    "token_ids": [int...], "block_size": int, "lora_id": nil, "medium": str,
//    "lora_name": nil}
//   {"type": "BlockRemoved", "block_hashes": [bin...], "medium": str}
//   {"type": "AllBlocksCleared"}
// Block hashes are msgpack bin (vLLM's ExternalBlockHash is `bytes | int`). Fields vLLM gives
// defaults to (extra_keys, group_idx, ...) are omitted, as msgspec's omit_defaults does: the
// bytes are those msgspec writes for the same KVEventBatch (kv_event_publisher_test pins them).
#ifndef TURBOKV_SERVER_EVENTS_KV_EVENT_ENCODING_H_
#define TURBOKV_SERVER_EVENTS_KV_EVENT_ENCODING_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"

namespace turbokv::server {

struct KvEvent {
  enum class Type { kBlockStored, kBlockRemoved, kAllBlocksCleared };
  Type type = Type::kBlockStored;
  std::vector<std::string> hashes;  // block hashes, opaque bytes; empty for kAllBlocksCleared
  uint32_t block_size = 0;          // kBlockStored: tokens per block (0 when unknown)
};

// The msgpack bytes of one KVEventBatch holding `events` (see above); every event carries
// `medium`. BlockStored events have no parent hash and no token ids: the server knows neither
// (docs/kv-events.md says how a router maps turbokv's hashes).
std::string EncodeKvEventBatch(double ts, absl::Span<const KvEvent> events,
                               std::string_view medium);

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_EVENTS_KV_EVENT_ENCODING_H_
