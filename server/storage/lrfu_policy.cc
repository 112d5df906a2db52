#include "server/storage/lrfu_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace turbokv::server {
namespace {

// Node keys are floats relative to a base; the base follows the clock every this many accesses
// (or every 4 turnovers when that is longer) so keys stay small.
constexpr double kRebaseAccesses = 1 << 22;

// A ghost's class: what the block was when evicted, for the unseen age's adaptation
// (LrfuOptions::max_unseen_age); the ghost table keeps the higher classes longer.
enum GhostClass : uint32_t {
  kIgnored = 0,  // the last block of its put call (a rule of its own)
  kUnused = 1,   // stored with no ghost and gone without a use
  kUsed = 2,     // stored from a ghost, or used while stored
};

// A ghost's key is kept as a 5-bit code c in [-16, 15] (stored as c + 16): key = reference + c x
// step, step = M / 4 with M = max(half-life, capacity) in accesses, the reference less than
// kGhostReferenceLag steps behind the clock. A key below the range reads as its lowest (a value
// decayed 2^-4 or more), one above as its highest. On the traces of bench/cache_replay, the hit
// ratios at 5-50% capacity are within -0.2%..+0.6% of float keys on one node; 4-bit codes lost
// 2% of three nodes' hits (docs/cache.md, "Ghosts in 2.5 bytes").
constexpr int kGhostCodeMin = -16;
constexpr int kGhostCodeMax = 15;
// The reference moves (a pass over the ghost table) once it is this many steps behind: every 2 M
// accesses. Keys up to 7 steps (1.75 M) above the clock keep their code (about 0.5% of the
// evicted blocks' keys are higher: chat at 10% on three nodes); moving every 2 or 4 steps gave
// the same hit ratios on the traces of docs/cache.md.
constexpr int kGhostReferenceLag = 8;

}  // namespace

absl::Status LrfuOptions::Validate() const {
  if (half_lives.empty()) return absl::InvalidArgumentError("half_lives is empty");
  for (double h : half_lives) {
    if (!(h >= 0) || !std::isfinite(h)) {
      return absl::InvalidArgumentError(absl::StrCat("half-life ", h, " is not a finite >= 0"));
    }
  }
  if (std::find(half_lives.begin(), half_lives.end(), initial_half_life) == half_lives.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("initial_half_life ", initial_half_life, " is not in half_lives"));
  }
  if (!(ghost_ratio >= 0) || ghost_ratio > 64) {
    return absl::InvalidArgumentError(absl::StrCat("ghost_ratio ", ghost_ratio, " not in [0, 64]"));
  }
  if (!(max_unseen_age >= 0) || max_unseen_age > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_unseen_age ", max_unseen_age, " not in [0, 64]"));
  }
  if (!(unseen_age_step >= 0) || !std::isfinite(unseen_age_step)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unseen_age_step ", unseen_age_step, " is not a finite >= 0"));
  }
  if (shadow_blocks == 0) return absl::InvalidArgumentError("shadow_blocks is 0");
  if (!(epoch_turnovers > 0) || !std::isfinite(epoch_turnovers)) {
    return absl::InvalidArgumentError(
        absl::StrCat("epoch_turnovers ", epoch_turnovers, " is not a finite > 0"));
  }
  return absl::OkStatus();
}

LrfuPolicy::LrfuPolicy(LrfuOptions options) : options_(std::move(options)) {
  if (!options_.Validate().ok()) {
    // Field by field: keep what is valid.
    const LrfuOptions defaults;
    LrfuOptions half_lives_only = defaults;
    half_lives_only.half_lives = options_.half_lives;
    half_lives_only.initial_half_life = options_.initial_half_life;
    if (!half_lives_only.Validate().ok()) {
      options_.half_lives = defaults.half_lives;
      options_.initial_half_life = defaults.initial_half_life;
    }
    if (!(options_.ghost_ratio >= 0) || options_.ghost_ratio > 64) {
      options_.ghost_ratio = defaults.ghost_ratio;
    }
    if (!(options_.max_unseen_age >= 0) || options_.max_unseen_age > 64) {
      options_.max_unseen_age = defaults.max_unseen_age;
    }
    if (!(options_.unseen_age_step >= 0) || !std::isfinite(options_.unseen_age_step)) {
      options_.unseen_age_step = defaults.unseen_age_step;
    }
    if (options_.shadow_blocks == 0) options_.shadow_blocks = defaults.shadow_blocks;
    if (!(options_.epoch_turnovers > 0) || !std::isfinite(options_.epoch_turnovers)) {
      options_.epoch_turnovers = defaults.epoch_turnovers;
    }
  }
  half_life_ = options_.initial_half_life;
  shadows_.reserve(options_.half_lives.size());
  for (double h : options_.half_lives) shadows_.emplace_back(h, options_.ghost_ratio);
}

double LrfuPolicy::sample_rate() const { return std::ldexp(1.0, -static_cast<int>(sample_shift_)); }

double LrfuPolicy::CapacityBlocks() const {
  if (options_.capacity_bytes == 0 || blocks_ == 0) {
    return std::max<double>(1, static_cast<double>(blocks_));
  }
  const double mean_charge =
      std::max(1.0, static_cast<double>(bytes_) / static_cast<double>(blocks_));
  return std::max(1.0, static_cast<double>(options_.capacity_bytes) / mean_charge);
}

double LrfuPolicy::EpochAccesses() const {
  return std::max(256.0, options_.epoch_turnovers * CapacityBlocks());
}

double LrfuPolicy::HalfLifeAccesses() const { return std::max(1.0, half_life_ * CapacityBlocks()); }

uint32_t LrfuPolicy::ParentOf(uint32_t slot) const {
  const uint32_t p = nodes_[slot].parent;
  if (p == kNoSlot || !Live(p) || nodes_[p].gen != nodes_[slot].parent_gen) return kNoSlot;
  return p;
}

void LrfuPolicy::AddChild(uint32_t parent) {
  Node& p = nodes_[parent];
  if (IsLeaf(parent)) {
    HeapRemove(parent);
    p.pos_or_children = 1;
  } else {
    ++p.pos_or_children;
  }
}

void LrfuPolicy::RemoveChild(uint32_t parent) {
  Node& p = nodes_[parent];
  // A leaf here, or a count already 0, means a stale link that matched a reused slot after 128
  // generations: leave that node alone.
  if (IsLeaf(parent) || p.pos_or_children == 0) return;
  if (--p.pos_or_children == 0) HeapPush(parent);
}

void LrfuPolicy::Link(uint32_t slot, uint32_t parent) {
  if (parent == slot || !Live(parent) || ParentOf(slot) == parent) return;
  Unlink(slot);
  nodes_[slot].parent = parent;
  nodes_[slot].parent_gen = nodes_[parent].gen;
  AddChild(parent);
}

void LrfuPolicy::Unlink(uint32_t slot) {
  if (const uint32_t p = ParentOf(slot); p != kNoSlot) RemoveChild(p);
  nodes_[slot].parent = kNoSlot;
}

void LrfuPolicy::SiftUp(size_t pos) {
  lrfu::HeapSiftUp(
      heap_, pos, [this](uint32_t s) { return nodes_[s].key; },
      [this](uint32_t s, uint32_t p) { nodes_[s].pos_or_children = p | kLeafBit; });
}

void LrfuPolicy::SiftDown(size_t pos) {
  heap_in_push_order_ = false;
  lrfu::HeapSiftDown(
      heap_, pos, [this](uint32_t s) { return nodes_[s].key; },
      [this](uint32_t s, uint32_t p) { nodes_[s].pos_or_children = p | kLeafBit; });
}

void LrfuPolicy::HeapPush(uint32_t slot) {
  if (heap_.empty()) heap_in_push_order_ = true;
  // A key at or above the last push's, while every earlier change was such a push: the last
  // push holds the largest key, so SiftUp would not move this one (a recovery pushes millions
  // of blocks in key order; this skips the cache miss of each one's heap parent).
  if (heap_in_push_order_ && !heap_.empty() && nodes_[slot].key < nodes_[heap_.back()].key) {
    heap_in_push_order_ = false;
  }
  heap_.push_back(slot);
  if (heap_in_push_order_) {
    nodes_[slot].pos_or_children = static_cast<uint32_t>(heap_.size() - 1) | kLeafBit;
  } else {
    SiftUp(heap_.size() - 1);
  }
}

void LrfuPolicy::HeapRemove(uint32_t slot) {
  heap_in_push_order_ = false;
  const size_t pos = HeapPos(slot);
  const uint32_t last = heap_.back();
  heap_.pop_back();
  if (last == slot) return;
  heap_[pos] = last;
  nodes_[last].pos_or_children = static_cast<uint32_t>(pos) | kLeafBit;
  HeapFix(last);
}

void LrfuPolicy::HeapFix(uint32_t slot) {
  SiftUp(HeapPos(slot));
  SiftDown(HeapPos(slot));
}

void LrfuPolicy::Rescale(double from, double to) {
  if (from == to) return;
  for (uint32_t s = 0; s < nodes_.size(); ++s) {
    if (Live(s)) SetKey(s, lrfu::RescaleKey(AbsKey(s), clock_, from, to));
  }
  const double ratio = to / from;
  if (std::abs(GhostStep() - ratio * ghost_step_) <= 1e-9 * GhostStep()) {
    // The step scales as the keys do (M is the half-life before and after): with the reference
    // mapped too, every code stays what it was, exactly.
    ghost_reference_ = lrfu::RescaleKey(ghost_reference_, clock_, from, to);
    ghost_step_ *= ratio;
  } else {
    Requantize([&](double key) { return lrfu::RescaleKey(key, clock_, from, to); });
  }
}

double LrfuPolicy::GhostStep() const { return std::max(HalfLifeAccesses(), CapacityBlocks()) / 4; }

uint32_t LrfuPolicy::GhostCode(double key) const {
  const double c = std::round((key - ghost_reference_) / ghost_step_);
  return static_cast<uint32_t>(std::clamp(c, double{kGhostCodeMin}, double{kGhostCodeMax}) -
                               kGhostCodeMin);
}

double LrfuPolicy::GhostKey(uint32_t code) const {
  return ghost_reference_ + (static_cast<int>(code) + kGhostCodeMin) * ghost_step_;
}

template <typename Fn>
void LrfuPolicy::Requantize(Fn map_key) {
  const double old_reference = ghost_reference_;
  const double old_step = ghost_step_;
  ghost_reference_ = clock_;
  ghost_step_ = GhostStep();
  if (ghosts_.size() == 0) return;
  uint8_t codes[lrfu::CompactGhostTable::kCodes];
  for (uint32_t c = 0; c < lrfu::CompactGhostTable::kCodes; ++c) {
    const int signed_code = static_cast<int>(c) + kGhostCodeMin;
    // The range's ends stay ends: "at least this old" / "at least this valuable".
    if (signed_code == kGhostCodeMin) {
      codes[c] = 0;
    } else if (signed_code == kGhostCodeMax) {
      codes[c] = kGhostCodeMax - kGhostCodeMin;
    } else {
      codes[c] = static_cast<uint8_t>(GhostCode(map_key(old_reference + signed_code * old_step)));
    }
  }
  ghosts_.TransformCodes([&codes](uint32_t c) { return codes[c]; });
}

void LrfuPolicy::MaybeMoveGhostReference() {
  const double step = GhostStep();
  if (step > 1.125 * ghost_step_ || step < ghost_step_ / 1.125) {
    // The capacity in blocks moved (the store filled, or its mean block size changed).
    Requantize([](double key) { return key; });
    return;
  }
  // Whole steps: codes shift exactly (no rounding adds up), the lowest saturating.
  const auto steps = static_cast<int>(std::floor((clock_ - ghost_reference_) / ghost_step_));
  if (steps < kGhostReferenceLag) return;
  ghost_reference_ += steps * ghost_step_;
  if (ghosts_.size() == 0) return;
  ghosts_.TransformCodes([steps](uint32_t c) {
    return static_cast<uint32_t>(std::max(0, static_cast<int>(c) - steps));
  });
}

void LrfuPolicy::Rebase() {
  const auto shift = static_cast<float>(clock_ - base_);
  for (uint32_t s = 0; s < nodes_.size(); ++s) {
    if (Live(s)) nodes_[s].key -= shift;
  }
  base_ += shift;
}

void LrfuPolicy::Sample(uint64_t mixed, uint64_t request, bool last_in_call, uint32_t charge) {
  const double cap_blocks = CapacityBlocks();
  // Lower the rate (never raise it: the blocks it dropped are gone) while a shadow would hold
  // more than shadow_blocks.
  uint32_t shift = sample_shift_;
  while (shift < 32 && std::ldexp(cap_blocks, -static_cast<int>(shift)) > options_.shadow_blocks) {
    ++shift;
  }
  if (shift != sample_shift_) {
    sample_shift_ = shift;
    const auto threshold = static_cast<uint32_t>(uint64_t{1} << (32 - shift));
    for (lrfu::ShadowCache& shadow : shadows_) shadow.DropAtOrAbove(threshold);
    if (!Sampled(mixed)) return;
  }
  const double rate = sample_rate();
  const double capacity_bytes =
      static_cast<double>(options_.capacity_bytes != 0 ? options_.capacity_bytes : bytes_);
  const auto shadow_bytes = static_cast<uint64_t>(capacity_bytes * rate);
  const double shadow_blocks = std::max(1.0, cap_blocks * rate);
  // Scores forget hits older than about one turnover of a shadow (at least 1000 accesses).
  const double decay =
      1.0 - 1.0 / std::max(1000.0, options_.score_window_turnovers * shadow_blocks);
  for (lrfu::ShadowCache& shadow : shadows_) {
    shadow.DecayScore(decay);
    shadow.Access(mixed, request, last_in_call, charge, shadow_bytes, shadow_blocks);
  }
}

void LrfuPolicy::CountGhost(uint32_t ghost_class, double delta) {
  if (ghost_class == kUnused) unused_ghosts_ = std::max(0.0, unused_ghosts_ + delta);
  if (ghost_class == kUsed) used_ghosts_ = std::max(0.0, used_ghosts_ + delta);
}

void LrfuPolicy::MaybeRetune() {
  if (static_cast<double>(++since_retune_) < EpochAccesses()) return;
  since_retune_ = 0;
  if (clock_ < follow_until_) return;  // following another node's tuning
  const lrfu::ShadowCache* best = nullptr;
  const lrfu::ShadowCache* current = nullptr;
  for (const lrfu::ShadowCache& shadow : shadows_) {
    if (shadow.half_life() == half_life_) current = &shadow;
    if (best == nullptr || shadow.score() > best->score()) best = &shadow;
  }
  if (best == nullptr || best->half_life() == half_life_) return;
  if (current != nullptr &&
      !(best->score() - current->score() >
        options_.switch_margin * std::sqrt(best->score() + current->score()))) {
    return;
  }
  const double from = HalfLifeAccesses();
  half_life_ = best->half_life();
  ++half_life_changes_;
  Rescale(from, HalfLifeAccesses());
}

void LrfuPolicy::FollowTuning(const PolicyTuning& tuning) {
  if (std::isfinite(tuning.unseen_age)) {
    unseen_age_ = std::clamp(tuning.unseen_age, 0.0, options_.max_unseen_age);
  }
  follow_until_ = clock_ + 4 * EpochAccesses();
  if (tuning.half_life == half_life_ ||
      std::find(options_.half_lives.begin(), options_.half_lives.end(), tuning.half_life) ==
          options_.half_lives.end()) {
    return;
  }
  const double from = HalfLifeAccesses();
  half_life_ = tuning.half_life;
  ++half_life_changes_;
  Rescale(from, HalfLifeAccesses());
}

void LrfuPolicy::Tick(uint64_t fingerprint, uint64_t request, bool last_in_call, uint32_t charge) {
  clock_ += 1;
  if (clock_ - base_ > std::max(kRebaseAccesses, 4 * HalfLifeAccesses())) Rebase();
  const size_t ghosts = static_cast<size_t>(options_.ghost_ratio * CapacityBlocks());
  if (ghosts > 2 * ghosts_.capacity() || (ghosts_.capacity() == 0 && ghosts > 0)) {
    ghosts_.Resize(ghosts);
    unused_ghosts_ = used_ghosts_ = 0;
    ghost_reference_ = clock_;
    ghost_step_ = GhostStep();
  }
  if (clock_ - ghost_reference_ >= kGhostReferenceLag * ghost_step_) MaybeMoveGhostReference();
  if (fingerprint != 0) {
    const uint64_t mixed = lrfu::Mix64(fingerprint);
    if (Sampled(mixed)) Sample(mixed, request, last_in_call, charge);
  }
  MaybeRetune();
}

void LrfuPolicy::OnInsert(uint32_t slot, uint32_t parent, uint64_t fingerprint, uint32_t charge,
                          uint32_t tenant, const RequestInfo& info) {
  if (slot == kNoSlot || Live(slot)) return;
  if (slot >= nodes_.size()) nodes_.resize(size_t{slot} + 1);
  ++blocks_;
  bytes_ += charge;
  Tick(fingerprint, info.request, info.last_in_call, charge);

  Node& n = nodes_[slot];
  ++n.gen;
  n.parent = kNoSlot;
  n.pos_or_children = kLeafBit;  // a leaf; HeapPush below gives it its place
  if (tenant != 0 && tenants_.empty()) tenants_.resize(nodes_.size(), 0);
  if (!tenants_.empty()) {
    if (slot >= tenants_.size()) tenants_.resize(nodes_.size(), 0);
    tenants_[slot] = tenant;
  }
  n.request = static_cast<uint16_t>(info.request & kRequestMask);
  if (info.last_in_call) n.request |= kLastFlag;
  const double half_life = HalfLifeAccesses();
  double key = -std::numeric_limits<double>::infinity();
  if (fingerprint != 0) {
    if (const std::optional<lrfu::CompactGhostTable::Ghost> ghost =
            ghosts_.Take(lrfu::Mix64(fingerprint));
        ghost.has_value()) {
      key = GhostKey(ghost->code);
      // ARC's adaptation: a block evicted unused came back (the unseen age evicts such blocks
      // too early), or one that had been used did (it keeps them too long). As ARC's, a step
      // is larger when the other kind of ghost is the more common.
      const double step = options_.unseen_age_step / CapacityBlocks();
      const auto c = static_cast<GhostClass>(ghost->ghost_class);
      CountGhost(c, -1);
      if (c == kUnused) {
        const double ratio = std::max(1.0, used_ghosts_ / std::max(1.0, unused_ghosts_));
        unseen_age_ = std::max(0.0, unseen_age_ - step * ratio);
      }
      if (c == kUsed) {
        const double ratio = std::max(1.0, unused_ghosts_ / std::max(1.0, used_ghosts_));
        unseen_age_ = std::min(options_.max_unseen_age, unseen_age_ + step * ratio);
      }
    }
  }
  if (std::isfinite(key)) {
    key = lrfu::KeyAfterAccess(key, clock_, half_life);
  } else {
    key = clock_ - unseen_age_ * std::max(half_life, CapacityBlocks());
    n.request |= kUnseenFlag;
  }
  if (info.last_in_call) key = clock_ - 4 * std::max(half_life, CapacityBlocks());
  SetKey(slot, key);
  HeapPush(slot);
  Link(slot, parent);
}

void LrfuPolicy::OnHit(uint32_t slot, uint32_t parent, uint64_t fingerprint, uint32_t charge,
                       const RequestInfo& info) {
  if (!Live(slot)) return;
  if (parent != kNoSlot) Link(slot, parent);
  Node& n = nodes_[slot];
  const auto request = static_cast<uint16_t>(info.request & kRequestMask);
  // Counted for this request already?
  if (info.request != 0 && (n.request & kRequestMask) == request) return;
  n.request = request;  // used: no longer unseen, nor only the last of a put
  Tick(fingerprint, info.request, /*last_in_call=*/false, charge);
  SetKey(slot, lrfu::KeyAfterAccess(AbsKey(slot), clock_, HalfLifeAccesses()));
  if (IsLeaf(slot)) SiftDown(HeapPos(slot));
}

void LrfuPolicy::OnErase(uint32_t slot, uint64_t fingerprint, uint32_t charge, EraseReason reason) {
  if (!Live(slot)) return;
  Node& n = nodes_[slot];
  // A deleted block was not pushed out by others; nothing says it will be back.
  if (reason != EraseReason::kDeleted && fingerprint != 0) {
    const GhostClass c = (n.request & kLastFlag) != 0     ? kIgnored
                         : (n.request & kUnseenFlag) != 0 ? kUnused
                                                          : kUsed;
    CountGhost(c, +1);
    if (const std::optional<uint32_t> lost =
            ghosts_.Put(lrfu::Mix64(fingerprint), {c, GhostCode(AbsKey(slot))});
        lost.has_value()) {
      CountGhost(*lost, -1);
    }
  }
  if (IsLeaf(slot)) HeapRemove(slot);
  Unlink(slot);
  ++n.gen;  // even: gone; children's links to it go stale and they become roots
  --blocks_;
  bytes_ -= charge;
  n.pos_or_children = 0;
}

uint64_t LrfuPolicy::SelectVictims(uint64_t bytes_needed, std::optional<uint32_t> tenant,
                                   EvictablePredicate evictable, ChargeOf charge_of,
                                   std::vector<uint32_t>* out) {
  // Walks the leaves in key order without changing the heap: a second heap of candidates
  // starts with heap_'s root and gets each popped heap entry's children. A parent whose
  // children are all listed becomes a candidate too (its count is lowered while listing and
  // restored after).
  struct Candidate {
    float key;
    uint32_t ref;  // heap_ position, or a slot when !in_heap
    bool in_heap;
  };
  auto greater = [](const Candidate& a, const Candidate& b) { return a.key > b.key; };
  std::vector<Candidate> candidates;
  std::vector<uint32_t> lowered;
  if (!heap_.empty()) candidates.push_back({nodes_[heap_[0]].key, 0, true});
  // Blocks *out lists already (an earlier selection of the same eviction) count as listed:
  // a parent whose children are all there is a candidate.
  for (uint32_t s : *out) {
    const uint32_t p = Live(s) ? ParentOf(s) : kNoSlot;
    if (p == kNoSlot || IsLeaf(p) || nodes_[p].pos_or_children == 0) continue;
    lowered.push_back(p);
    if (--nodes_[p].pos_or_children == 0) {
      candidates.push_back({nodes_[p].key, p, false});
      std::push_heap(candidates.begin(), candidates.end(), greater);
    }
  }
  uint64_t listed = 0;
  while (listed < bytes_needed && !candidates.empty()) {
    std::pop_heap(candidates.begin(), candidates.end(), greater);
    const Candidate c = candidates.back();
    candidates.pop_back();
    uint32_t s = c.ref;
    if (c.in_heap) {
      s = heap_[c.ref];
      for (size_t child = 2 * size_t{c.ref} + 1; child <= 2 * size_t{c.ref} + 2; ++child) {
        if (child < heap_.size()) {
          candidates.push_back({nodes_[heap_[child]].key, static_cast<uint32_t>(child), true});
          std::push_heap(candidates.begin(), candidates.end(), greater);
        }
      }
    }
    if ((tenant.has_value() && TenantOf(s) != *tenant) || !evictable(s)) continue;
    out->push_back(s);
    listed += charge_of(s);
    const uint32_t p = ParentOf(s);
    if (p == kNoSlot || IsLeaf(p) || nodes_[p].pos_or_children == 0) continue;
    lowered.push_back(p);
    if (--nodes_[p].pos_or_children == 0) {
      candidates.push_back({nodes_[p].key, p, false});
      std::push_heap(candidates.begin(), candidates.end(), greater);
    }
  }
  for (uint32_t p : lowered) ++nodes_[p].pos_or_children;
  return listed;
}

void LrfuPolicy::Reserve(size_t slots) {
  nodes_.reserve(slots);
  heap_.reserve(slots);  // every block is a leaf until a hit links it to its parent
}

size_t LrfuPolicy::MemoryBytes() const {
  size_t bytes = nodes_.capacity() * sizeof(Node) + heap_.capacity() * sizeof(uint32_t) +
                 tenants_.capacity() * sizeof(uint32_t) + ghosts_.MemoryBytes();
  for (const lrfu::ShadowCache& shadow : shadows_) bytes += shadow.MemoryBytes();
  return bytes;
}

}  // namespace turbokv::server
