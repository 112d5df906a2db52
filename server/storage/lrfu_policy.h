// LrfuPolicy: the block store's eviction policy for prefix-cache workloads (issue 21).
//
// What it does, per block:
// - Value: LRFU's decayed access count, C = sum over accesses of 2^(-age/H) (lrfu_shadow.h),
//   one access per request (a Lookup and the GetBlocks after it count once). H -> 0 ranks like
//   LRU; a long H ranks like LFU, which keeps a popular system prompt or document through a
//   burst of one-off requests.
// - Leaves first: only blocks without live children are candidates (a heap of leaves), so a
//   chain shrinks from its end and a shared ancestor stays while anything below it does. A
//   block's value includes its descendants' accesses (they reach it through it), so shared
//   ancestors weigh more without extra rules.
// - A put call's last block (RequestInfo::last_in_call: usually the partly filled block a
//   conversation's next turn does not repeat) starts as the least valuable.
// - Ghosts: evicted blocks by fingerprint (ghost_ratio per block of capacity), each with a 5-bit
//   code of its key (steps of a quarter turnover, or of a quarter half-life when that is
//   longer); a block stored again resumes its decayed value. This is the history that separates
//   a block seen before from a new one (P(reused) 0.84 after two references vs 0.42 after one on
//   the Mooncake trace).
// - Unseen age: a block with no ghost (seen for the first time, as far as the ghosts know) enters
//   as if accessed `unseen age` turnovers ago, so that blocks used once (58% of the Mooncake
//   trace's) leave before those used again. The age adapts between 0 and max_unseen_age as ARC
//   sizes its recency list, from which kind of ghost comes back: one evicted unused lowers it,
//   one evicted after a use raises it. Where blocks seen once come back soon (a chat's next turn,
//   with room for it) it goes to 0.
// - Following: in a cluster, the nodes take one node's half-life and unseen age
//   (FollowTuning, sent by the sharded client), so that the pieces of a chain on different
//   nodes are ranked alike; in the cluster model three nodes that tune apart hit down to 0.93x
//   of one node of their total capacity, three that follow one 0.98-1.00x (docs/cluster.md).
// - Adaptive H: eight shadow caches simulate H = {0, 1/4, 1/2, 1, 2, 4, 8, 16} turnovers of the
//   capacity on a hashed sample of the blocks (lrfu_shadow.h); every epoch the policy takes the
//   half-life of the shadow with the most recent hits and rescales every key to it (a monotone
//   map, so no reordering). Chats and agent loops want H near 0 (their next turn reuses the
//   newest blocks); Zipf-popular prompts and documents want a long H.
//
// Memory per block: 16-byte node (4 more for its tenant once a store has blocks of more than
// one tenant), a 4-byte heap entry per leaf, ghost_ratio x 2.5 bytes of ghosts (10); the shadows
// are bounded by shadow_blocks (about 0.5 MB each at the default), not by the store's size. Cost:
// OnInsert/OnHit/OnErase are O(log leaves) (a hit on an inner block is O(1)); a sampled access also
// costs O(log shadow_blocks) per shadow; a change of half-life is O(live blocks + ghosts) and
// happens at most once per epoch; the ghosts' codes are shifted (O(ghosts)) every two turnovers
// (or two half-lives, when those are longer) of accesses. Deterministic for a given input.
//
// Not thread-safe (see eviction_policy.h).
#ifndef TURBOKV_SERVER_STORAGE_LRFU_POLICY_H_
#define TURBOKV_SERVER_STORAGE_LRFU_POLICY_H_

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "server/storage/eviction_policy.h"
#include "server/storage/lrfu_shadow.h"

namespace turbokv::server {

struct LrfuOptions {
  // Bytes the store may hold. Sets the time scale (half-lives are in turnovers of the capacity
  // in blocks: capacity_bytes / mean charge) and the shadows' capacity. Default: 0, the live
  // bytes stand in (right once the store is full).
  uint64_t capacity_bytes = 0;
  // Candidate half-lives, in turnovers of the capacity (>= 0; 0 ranks like LRU). Default:
  // 0, 1/4, ..., 16.
  std::vector<double> half_lives = {0, 0.25, 0.5, 1, 2, 4, 8, 16};
  // Half-life until the shadows have decided, in turnovers (one of half_lives). Default: 1.
  double initial_half_life = 1;
  // Ghost entries per block of capacity (0: no ghosts), 2.5 bytes each. Default: 4 (10 bytes per
  // block: about four turnovers of evictions; on the Mooncake trace at 5% capacity, 61% of the
  // blocks used once and then again are so 2-10 capacities later).
  double ghost_ratio = 4;
  // Largest unseen age, in turnovers of the capacity (0 turns it off; at most 64). A block with
  // no ghost (never stored, or evicted longer ago than the ghosts remember) enters with the
  // value of an access `unseen age` turnovers old (half-lives, when those are longer), below
  // blocks that came back or were used since. The age adapts between 0 and this bound the way
  // ARC sizes its recency list (N. Megiddo, D. Modha, "ARC: A Self-Tuning, Low Overhead
  // Replacement Cache", FAST'03): a stored block whose ghost says it was evicted unused lowers
  // it (blocks used once were evicted too early), one whose ghost says it had been used again
  // raises it; it starts at 0. Default: 1.
  double max_unseen_age = 1;
  // Change of the unseen age per ghost found, in turnovers per block of capacity, times ARC's
  // ratio (the other kind's ghosts over this kind's, at least 1). Default: 1.
  double unseen_age_step = 1;
  // Sampled blocks per shadow cache: the sampling rate is the largest power of two <= 1 that
  // keeps a shadow's capacity at or below this. Default: 8192.
  uint32_t shadow_blocks = 8192;
  // The half-life is reconsidered every epoch_turnovers x capacity-in-blocks accesses (at
  // least 256). Default: 0.1.
  double epoch_turnovers = 0.1;
  // Shadow scores count hits with weight 2^(-a/W), a in sampled accesses, W = max(1000,
  // score_window_turnovers x a shadow's capacity in blocks). Default: 1.
  double score_window_turnovers = 1;
  // A shadow replaces the current half-life only when its score beats the current one's by
  // switch_margin x sqrt(sum of both) (a z-score on Poisson counts). Default: 0.
  double switch_margin = 0;

  // InvalidArgument when a field is out of range (an empty or negative half-life list, an
  // initial half-life not in it, a negative ghost ratio, shadow_blocks 0, epoch <= 0).
  [[nodiscard]] absl::Status Validate() const;
};

class LrfuPolicy final : public EvictionPolicy {
 public:
  // Invalid options (Validate) fall back to the defaults' values field by field.
  explicit LrfuPolicy(LrfuOptions options = {});
  LrfuPolicy(const LrfuPolicy&) = delete;
  LrfuPolicy& operator=(const LrfuPolicy&) = delete;

  std::string_view name() const override { return "lrfu"; }
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
  void Reserve(size_t slots) override;
  void Prefetch(uint32_t slot) const override {
    // Within the reserved capacity even before the slot's node exists (Reserve).
    if (slot < nodes_.capacity()) __builtin_prefetch(nodes_.data() + slot, 1);
  }

  // The half-life in use, in turnovers of the capacity, and how often it changed.
  double half_life() const { return half_life_; }
  // The unseen age in use, in turnovers of the capacity (max_unseen_age).
  double unseen_age() const { return unseen_age_; }
  uint64_t half_life_changes() const { return half_life_changes_; }
  std::optional<PolicyTuning> tuning() const override {
    return PolicyTuning{half_life_, unseen_age_};
  }
  // A half-life that is not one of the options' half_lives is ignored (the unseen age is still
  // taken, clamped to [0, max_unseen_age]; a NaN is ignored); the policy makes no half-life
  // decision of its own for four epochs after the last call (0.4 turnovers at the default
  // epoch_turnovers, at least 1,024 accesses), so it follows a node that keeps sending and
  // tunes itself again once none does. A change of half-life rescales every key (O(live blocks
  // + ghosts)), as the policy's own changes do.
  void FollowTuning(const PolicyTuning& tuning) override;
  // The sampling rate of the shadows (a power of two <= 1).
  double sample_rate() const;

 private:
  static constexpr uint32_t kLeafBit = 1u << 31;
  // No charge: the store passes it with each event (its index holds it).
  struct Node {
    uint32_t parent = kNoSlot;
    float key = 0;  // LRFU key relative to base_
    // A leaf: kLeafBit | its place in heap_; an inner block: the live children naming it.
    uint32_t pos_or_children = 0;
    uint16_t request = 0;    // low 14 bits of the last request that accessed it | flags
    uint8_t gen = 0;         // odd while live; bumped by insert and erase
    uint8_t parent_gen = 0;  // parent's gen when linked: a stale link is ignored
  };
  static_assert(sizeof(Node) == 16);
  // Node::request's low bits, and its flags: stored with no ghost and not used since; the last
  // block of its put call.
  static constexpr uint16_t kRequestMask = 0x3fff;
  static constexpr uint16_t kUnseenFlag = 0x4000;
  static constexpr uint16_t kLastFlag = 0x8000;
  // The tenant of the block in `slot` (0 while no block of another tenant was ever inserted).
  uint32_t TenantOf(uint32_t slot) const { return slot < tenants_.size() ? tenants_[slot] : 0; }

  bool Live(uint32_t slot) const { return slot < nodes_.size() && (nodes_[slot].gen & 1) != 0; }
  bool IsLeaf(uint32_t slot) const { return (nodes_[slot].pos_or_children & kLeafBit) != 0; }
  uint32_t HeapPos(uint32_t slot) const { return nodes_[slot].pos_or_children & ~kLeafBit; }
  uint32_t ParentOf(uint32_t slot) const;
  void Link(uint32_t slot, uint32_t parent);
  void Unlink(uint32_t slot);
  void AddChild(uint32_t parent);
  void RemoveChild(uint32_t parent);

  // Heap of leaves by key, least valuable at [0].
  void HeapPush(uint32_t slot);
  void HeapRemove(uint32_t slot);
  void HeapFix(uint32_t slot);
  void SiftUp(size_t pos);
  void SiftDown(size_t pos);

  double CapacityBlocks() const;
  double HalfLifeAccesses() const;
  double EpochAccesses() const;  // counted accesses between half-life decisions
  double AbsKey(uint32_t slot) const { return base_ + nodes_[slot].key; }
  void SetKey(uint32_t slot, double key) { nodes_[slot].key = static_cast<float>(key - base_); }
  // One counted access: advances the clock, feeds the shadows, maybe changes the half-life.
  void Tick(uint64_t fingerprint, uint64_t request, bool last_in_call, uint32_t charge);
  void Sample(uint64_t mixed, uint64_t request, bool last_in_call, uint32_t charge);
  bool Sampled(uint64_t mixed) const {
    return sample_shift_ == 0 || (mixed >> (64 - sample_shift_)) == 0;
  }
  void MaybeRetune();
  // Counts a ghost of class `ghost_class` (GhostClass) in or out.
  void CountGhost(uint32_t ghost_class, double delta);
  void Rescale(double from_half_life_accesses, double to_half_life_accesses);
  // Ghost keys: the step the codes should have now (M / 4, M = max(half-life, capacity) in
  // accesses); a key's code and a code's key; re-coding every ghost for a reference at the clock
  // and that step, each key mapped by `map_key` first; moving the reference by whole steps
  // towards the clock (or re-coding, when the step is off by more than 1/8).
  double GhostStep() const;
  uint32_t GhostCode(double key) const;
  double GhostKey(uint32_t code) const;
  template <typename Fn>
  void Requantize(Fn map_key);
  void MaybeMoveGhostReference();
  void Rebase();

  LrfuOptions options_;
  std::vector<Node> nodes_;
  // Tenants by slot, kept only once a block of a tenant other than 0 arrives (a store with one
  // tenant spends nothing on them); then sized like nodes_.
  std::vector<uint32_t> tenants_;
  std::vector<uint32_t> heap_;  // leaf slots
  // True while heap_ changed only by pushes of non-decreasing keys (Rebase and Rescale keep
  // that: monotone maps): then heap_ is sorted and a push needs no SiftUp. Set again when
  // heap_ empties.
  bool heap_in_push_order_ = true;
  lrfu::CompactGhostTable ghosts_;
  std::vector<lrfu::ShadowCache> shadows_;
  double half_life_;       // turnovers
  double unseen_age_ = 0;  // turnovers, in [0, max_unseen_age]
  // Ghosts of blocks evicted unused and used (GhostClass in lrfu_policy.cc), for the unseen age's
  // steps.
  double unused_ghosts_ = 0;
  double used_ghosts_ = 0;
  uint64_t half_life_changes_ = 0;
  double follow_until_ = -1;  // clock_ until which MaybeRetune leaves the half-life alone
  double clock_ = 0;          // counted accesses
  double base_ = 0;           // node keys are relative to it
  // Ghost keys are codes of (key - ghost_reference_) / ghost_step_ (GhostCode, GhostKey).
  double ghost_reference_ = 0;
  double ghost_step_ = 1;
  uint64_t since_retune_ = 0;
  uint32_t sample_shift_ = 0;  // sampling rate 2^-sample_shift_ (only ever grows)
  size_t blocks_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_STORAGE_LRFU_POLICY_H_
