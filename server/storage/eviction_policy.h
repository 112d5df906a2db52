// Eviction policies of the block store: which stored blocks go when a put needs room.
//
// The store owns the blocks; a policy only ranks them. The store names every block by a dense
// slot number it assigns (reused after the block is gone) and tells the policy what happens to
// it: stored (OnInsert), matched or read (OnHit), gone for any reason (OnErase). When a put
// needs room, SelectVictims lists the blocks to evict, least valuable first; the store evicts
// them (calling OnErase for each) or keeps them all.
//
// Prefix tree. A block hash names a block and everything before it in its prefix chain, so
// the blocks form a forest: a block's parent is the previous block of its chain. A Lookup
// matches leading blocks only, so a block is worth nothing once its parent is gone. The store
// passes the parent's slot whenever it knows it (Lookup gives the whole chain; a put knows the
// previous block of its call); a policy never selects a block while one of its children stays
// (leaves first), so no chain is cut in its middle by eviction. A link learned late (a hit
// names the parent of a block inserted without one) is recorded then.
//
// Thread safety: none. The store calls a policy under its own lock.
#ifndef TURBOKV_SERVER_STORAGE_EVICTION_POLICY_H_
#define TURBOKV_SERVER_STORAGE_EVICTION_POLICY_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"

namespace turbokv::server {

// "No block": a root's parent, an unknown parent.
inline constexpr uint32_t kNoSlot = std::numeric_limits<uint32_t>::max();

// What the store knows about the request an event belongs to.
struct RequestInfo {
  // Number of the client request (a Lookup and the GetBlocks and PutBlocks that follow it may
  // share it; 0 = unknown). Increases with arrival; events of one request share it, so a
  // policy counts one hit per block and request however many calls touch it.
  uint64_t request = 0;
  // Milliseconds on any monotonic clock (the store's). Not used by the shipped policies.
  int64_t now_ms = 0;
  // OnInsert: the block is the last of its PutBlocks call (usually the request's last,
  // partially filled block, whose hash the next turn of a chat does not repeat).
  bool last_in_call = false;
};

// Returns false for a slot that must not be evicted now (leased, written by a request in
// flight, an earlier block of the putting request's own chain).
using EvictablePredicate = absl::FunctionRef<bool(uint32_t slot)>;

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;

  // "lru", "chain": the name MakeEvictionPolicy takes.
  virtual std::string_view name() const = 0;

  // Block `slot` was stored (an overwrite is OnErase then OnInsert). `slot` must not be live;
  // `parent` is live or kNoSlot. `charge`: bytes it counts against the capacity. `tenant`:
  // the owner, for SelectVictims' filter.
  virtual void OnInsert(uint32_t slot, uint32_t parent, uint32_t charge, uint32_t tenant,
                        const RequestInfo& info) = 0;
  // Lookup matched live block `slot`, or GetBlocks returned it. `parent`: the previous block
  // of the chain (live), or kNoSlot when unknown or a chain's first block. A Lookup reports
  // its matched blocks in chain order.
  virtual void OnHit(uint32_t slot, uint32_t parent, const RequestInfo& info) = 0;
  // Block `slot` is gone (deleted, expired, dropped with its namespace, evicted). Any live
  // slot, leaf or not: its children lose their parent. No-op for a slot that is not live.
  virtual void OnErase(uint32_t slot) = 0;

  // Appends to *out live blocks for which `evictable` is true (and of `tenant` when set),
  // least valuable first, until their charges add up to at least `bytes_needed` or no such
  // block is left. A block is listed only after all its live children (leaves first: evicting
  // the list's blocks in order, or any prefix of the list, never strands a child). Changes
  // nothing: the store evicts the blocks it takes (OnErase each). Returns the charges listed.
  virtual uint64_t SelectVictims(uint64_t bytes_needed, std::optional<uint32_t> tenant,
                                 EvictablePredicate evictable, std::vector<uint32_t>* out) = 0;

  // Whether a new block (child of `parent`, or a root) is worth storing when the store is
  // full, i.e. worth more than the least valuable evictable block. A store that asks skips a
  // block it declines, and the rest of that call's chain. Default: always.
  virtual bool ShouldAdmit(uint32_t parent, const RequestInfo& info) {
    (void)parent;
    (void)info;
    return true;
  }

  // Live blocks and their charges.
  virtual size_t blocks() const = 0;
  virtual uint64_t charged_bytes() const = 0;
  // Bytes of memory the policy holds (its per-slot arrays and tables).
  virtual size_t MemoryBytes() const = 0;
};

// The policy named `name` ("lru" or "chain"); InvalidArgument for any other name.
[[nodiscard]] absl::StatusOr<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(
    std::string_view name);

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_STORAGE_EVICTION_POLICY_H_
