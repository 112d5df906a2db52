// Eviction policies of the block store: which stored blocks go when a put needs room.
//
// The store owns the blocks; a policy only ranks them. The store names every block by a dense
// slot number it assigns (reused once the block is gone) and tells the policy what happens to
// it: stored (OnInsert), matched or read (OnHit), gone (OnErase). When a put needs room,
// SelectVictims lists blocks to evict, least valuable first; the store evicts them (OnErase
// each) or none of them. Two policies: LruPolicy (below; the store's order before issue 21)
// and LrfuPolicy (lrfu_policy.h; adaptive, the better one on every workload measured).
//
// Prefix tree. A block hash names a block and everything before it in its prefix chain, so
// the blocks form a forest: a block's parent is the previous block of its chain. Lookup
// matches leading blocks only, so a block is worth nothing once its parent is gone. The store
// passes the parent's slot whenever it knows it (Lookup knows the whole chain; a put knows the
// previous block of its call); a link first learned on a hit is recorded then. SelectVictims
// lists a block only after all its live children (leaves first), so evicting its list never
// cuts a chain in the middle.
//
// Cost: every call is O(1) or O(log n) in the live blocks, except SelectVictims, which is
// O(k log k) in the blocks it looks at (the listed ones plus those the predicate or the tenant
// filter refused).
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

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"

namespace turbokv::server {

// "No block": a root's parent, or a parent the store does not know.
inline constexpr uint32_t kNoSlot = std::numeric_limits<uint32_t>::max();

// What the store knows about the request an event belongs to.
struct RequestInfo {
  // Number of the client request (the Lookup, GetBlocks and PutBlocks of one engine request
  // may share it), increasing with arrival; 0 = unknown. A policy counts one access per block
  // and request however many calls of that request touch it.
  uint64_t request = 0;
  // Milliseconds on the store's monotonic clock. Not used by the shipped policies.
  int64_t now_ms = 0;
  // OnInsert: the block is the last one of its PutBlocks call: usually the request's last,
  // partly filled block, whose hash the next request of the same conversation does not
  // repeat (such blocks are referenced again about 5% of the time on the Mooncake trace).
  bool last_in_call = false;
};

// What a policy chose to rank blocks by, where it adapts (LrfuPolicy): the nodes of a cluster
// share one node's choice (LookupRequest.follow_tuning, docs/cluster.md).
struct PolicyTuning {
  double half_life = 0;   // turnovers of the capacity in blocks
  double unseen_age = 0;  // turnovers of the capacity in blocks
};

// Why a block is gone.
enum class EraseReason {
  kEvicted,  // chosen by SelectVictims
  kExpired,  // its TTL ran out
  kDeleted,  // DeleteBlocks, DropNamespace, a failed checksum, a new charge
};

// Returns false for a slot that must not be evicted now (leased, written by a request in
// flight, an earlier block of the putting request's own chain).
using EvictablePredicate = absl::FunctionRef<bool(uint32_t slot)>;
// The charge of live block `slot`: what OnInsert was given for it (the store reads it from its
// index, so a policy need not keep one per block).
using ChargeOf = absl::FunctionRef<uint32_t(uint32_t slot)>;

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;

  // The name MakeEvictionPolicy takes: "lru", "lrfu".
  virtual std::string_view name() const = 0;

  // Block `slot` was stored. `slot` is not live (a put of a block already stored is an OnHit, or
  // OnErase(kDeleted) then OnInsert when its charge changes); `parent` is a live slot or kNoSlot.
  // `fingerprint`: a 64-bit hash of the block's storage key (namespace and block hash), so a block
  // that comes back after an eviction is recognized; 0 = none. `charge`: bytes it counts against
  // the capacity (< 2^31). `tenant`: its owner, for SelectVictims' filter.
  virtual void OnInsert(uint32_t slot, uint32_t parent, uint64_t fingerprint, uint32_t charge,
                        uint32_t tenant, const RequestInfo& info) = 0;
  // Lookup matched live block `slot`, or GetBlocks returned it. `parent`: the previous block of
  // its chain (live), or kNoSlot when unknown or a chain's first block. Lookup reports its
  // matched blocks in chain order. `charge`: the block's, as at OnInsert.
  virtual void OnHit(uint32_t slot, uint32_t parent, uint64_t fingerprint, uint32_t charge,
                     const RequestInfo& info) = 0;
  // Block `slot` is gone. Any live slot, leaf or not (its children lose their parent). No-op for
  // a slot that is not live. `charge`: the block's, as at OnInsert.
  virtual void OnErase(uint32_t slot, uint64_t fingerprint, uint32_t charge,
                       EraseReason reason) = 0;

  // Appends to *out live blocks for which `evictable` is true (and whose tenant is `tenant`
  // when set), least valuable first, until their charges (`charge_of`) add up to at least
  // `bytes_needed` or no such block is left; returns the charges listed (the appended ones). A
  // block is listed only after all its live children, so evicting any prefix of the list in order
  // never strands a child. Blocks *out holds already (live; an earlier selection for the same
  // eviction, which `evictable` must refuse) count as listed: their parents can follow. Changes
  // nothing: the store evicts what it takes, calling OnErase(kEvicted) for each.
  virtual uint64_t SelectVictims(uint64_t bytes_needed, std::optional<uint32_t> tenant,
                                 EvictablePredicate evictable, ChargeOf charge_of,
                                 std::vector<uint32_t>* out) = 0;

  // Live blocks and the sum of their charges.
  virtual size_t blocks() const = 0;
  virtual uint64_t charged_bytes() const = 0;
  // Bytes of memory the policy holds (per-slot arrays, heaps, tables; capacity, not size).
  virtual size_t MemoryBytes() const = 0;
  // A hint: slots [0, slots) are about to be inserted (the store's recovery), so per-slot
  // arrays are sized once instead of grown by doubling (which leaves up to half unused).
  virtual void Reserve(size_t slots) { (void)slots; }
  // The policy's current tuning; nullopt for a policy that has none (LRU).
  virtual std::optional<PolicyTuning> tuning() const { return std::nullopt; }
  // Takes `tuning` (another node's choice) instead of choosing one itself for a while (LrfuPolicy:
  // four epochs after the last call). Values out of the policy's range are ignored or clamped.
  // No-op for a policy without tuning.
  virtual void FollowTuning(const PolicyTuning& tuning) { (void)tuning; }
  // A hint: `slot` is inserted or hit soon (the store's recovery hands blocks over in a random
  // slot order), so its per-slot state may be loaded into the cache now. Changes nothing.
  virtual void Prefetch(uint32_t slot) const { (void)slot; }
};

// Least recently used first, in chain order: a hit or a put places a block immediately less
// recent than its parent (the most recent end when the parent is unknown), so a chain's later
// blocks go before its earlier ones. This is the order BlockIndex kept before issue 21, the
// baseline the other policies are measured against. 24 bytes per slot.
class LruPolicy final : public EvictionPolicy {
 public:
  LruPolicy() = default;
  LruPolicy(const LruPolicy&) = delete;
  LruPolicy& operator=(const LruPolicy&) = delete;

  std::string_view name() const override { return "lru"; }
  void OnInsert(uint32_t slot, uint32_t parent, uint64_t fingerprint, uint32_t charge,
                uint32_t tenant, const RequestInfo& info) override;
  void OnHit(uint32_t slot, uint32_t parent, uint64_t fingerprint, uint32_t charge,
             const RequestInfo& info) override;
  void OnErase(uint32_t slot, uint64_t fingerprint, uint32_t charge, EraseReason reason) override;
  uint64_t SelectVictims(uint64_t bytes_needed, std::optional<uint32_t> tenant,
                         EvictablePredicate evictable, ChargeOf charge_of,
                         std::vector<uint32_t>* out) override;
  size_t blocks() const override { return blocks_; }
  uint64_t charged_bytes() const override { return bytes_; }
  size_t MemoryBytes() const override;
  void Reserve(size_t slots) override { nodes_.reserve(slots); }

 private:
  struct Node {
    uint32_t prev = kNoSlot;  // more recently used neighbour
    uint32_t next = kNoSlot;  // less recently used neighbour
    uint32_t parent = kNoSlot;
    uint32_t children = 0;  // live children that name this node as parent
    uint32_t tenant = 0;
    uint8_t gen = 0;         // odd while live; bumped by insert and erase
    uint8_t parent_gen = 0;  // parent's gen when linked: a stale link is ignored
  };
  bool Live(uint32_t slot) const { return slot < nodes_.size() && (nodes_[slot].gen & 1) != 0; }
  uint32_t ParentOf(uint32_t slot) const;
  void Link(uint32_t slot, uint32_t parent);
  void Unlink(uint32_t slot);
  void Unqueue(uint32_t slot);
  void Place(uint32_t slot, uint32_t parent);  // below parent, or at the most recent end

  std::vector<Node> nodes_;
  uint32_t head_ = kNoSlot;  // most recently used
  uint32_t tail_ = kNoSlot;  // least recently used
  size_t blocks_ = 0;
  uint64_t bytes_ = 0;
};

// The policy named `name` ("lru", or "lrfu" with default options and `capacity_bytes`);
// InvalidArgument for any other name.
[[nodiscard]] absl::StatusOr<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(
    std::string_view name, uint64_t capacity_bytes);

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_STORAGE_EVICTION_POLICY_H_
