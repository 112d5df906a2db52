// What the block store tells the rest of the server about blocks appearing and disappearing:
// the seam between the store and the KV-event publisher (server/events/, docs/kv-events.md),
// which announces them to routers in vLLM's KV-event schema.
//
// The store calls a BlockEventSink after each change is committed to RocksDB:
//   * OnBlocksStored   a PutBlocks made blocks visible (not for blocks it refused or failed);
//   * OnBlocksRemoved  blocks went away: evicted to make room, expired (TTL), deleted by a
//                      client (DeleteBlocks), dropped because they failed verification, or
//                      lost with a put that was replacing them and failed to write;
//   * OnNamespaceCleared  DropNamespace removed the namespace and every block in it (no
//                      per-block removals are reported for them).
// A hash is reported only for a block that existed (was stored, or was in the index when it
// was removed); a block put twice is reported stored twice (the second put refreshed it).
//
// Contract for implementations:
//   * Non-blocking and cheap: the store calls with its index lock held, on request and
//     maintenance threads. Copy what is needed and return; never wait for I/O or a consumer,
//     never call back into the store. Drop (and count) rather than block when overwhelmed.
//   * Thread-safe: calls come from many threads at once.
//   * `hashes` (and the bytes they view) are valid only during the call.
//   * Order: for one block, calls are made in the order of the commits they report (the
//     store makes them while it still holds the block's key), so a consumer that applies
//     them in call order ends with the store's view of that block.
#ifndef TURBOKV_SERVER_STORAGE_BLOCK_EVENTS_H_
#define TURBOKV_SERVER_STORAGE_BLOCK_EVENTS_H_

#include <cstdint>
#include <string_view>

#include "absl/types/span.h"

namespace turbokv::server {

// Why blocks were removed (the publisher's label; bounded).
enum class RemovalReason {
  kEvicted,  // capacity eviction (least recently used, unleased) to make room for a put
  kExpired,  // the namespace's TTL passed since the block's last use
  kDeleted,  // a client's DeleteBlocks
  kCorrupt,  // the stored value failed verification and was deleted
  kLost,     // a put replacing it failed to write after its old value was released
};
inline constexpr int kNumRemovalReasons = 5;

// "evicted", "expired", "deleted", "corrupt", "lost".
constexpr const char* RemovalReasonName(RemovalReason reason) {
  switch (reason) {
    case RemovalReason::kEvicted:
      return "evicted";
    case RemovalReason::kExpired:
      return "expired";
    case RemovalReason::kDeleted:
      return "deleted";
    case RemovalReason::kCorrupt:
      return "corrupt";
    case RemovalReason::kLost:
      return "lost";
  }
  return "unknown";
}

class BlockEventSink {
 public:
  virtual ~BlockEventSink() = default;

  // `hashes`: the block hashes (8..32 bytes each, as clients sent them) of blocks that are now
  // stored in `namespace_id`, in the order of the put.
  virtual void OnBlocksStored(uint64_t namespace_id, absl::Span<const std::string_view> hashes) = 0;
  // `hashes`: blocks of `namespace_id` that are no longer stored, all for `reason`.
  virtual void OnBlocksRemoved(uint64_t namespace_id, absl::Span<const std::string_view> hashes,
                               RemovalReason reason) = 0;
  // `namespace_id` and all its blocks were dropped.
  virtual void OnNamespaceCleared(uint64_t namespace_id) = 0;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_STORAGE_BLOCK_EVENTS_H_
