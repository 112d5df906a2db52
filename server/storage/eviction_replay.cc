#include "server/storage/eviction_replay.h"

#include <algorithm>
#include <limits>
#include <set>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

namespace turbokv::server {
namespace {

constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();

// A nonzero fingerprint per block id (any injective map does: policies mix it themselves).
uint64_t FingerprintOf(uint64_t id) { return id == kNever ? 1 : id + 1; }

// Belady's policy, told each accessed block's next use (a request index) before each event.
class BeladyPolicy final : public EvictionPolicy {
 public:
  void set_next_use(uint64_t next_use) { next_use_ = next_use; }

  std::string_view name() const override { return "belady"; }
  void OnInsert(uint32_t slot, uint32_t parent, uint64_t, uint32_t charge, uint32_t,
                const RequestInfo&) override {
    if (slot >= nodes_.size()) nodes_.resize(size_t{slot} + 1);
    Node& n = nodes_[slot];
    n = Node{};
    n.live = true;
    n.charge = charge;
    if (parent != kNoSlot && parent != slot && nodes_[parent].live) {
      n.parent = parent;
      n.depth = nodes_[parent].depth + 1;
      ++nodes_[parent].children;
    }
    n.next_use = next_use_;
    order_.insert({n.next_use, n.depth, slot});
    ++blocks_;
    bytes_ += charge;
  }
  void OnHit(uint32_t slot, uint32_t, uint64_t, uint32_t, const RequestInfo&) override {
    Node& n = nodes_[slot];
    order_.erase({n.next_use, n.depth, slot});
    n.next_use = next_use_;
    order_.insert({n.next_use, n.depth, slot});
  }
  void OnErase(uint32_t slot, uint64_t, uint32_t, EraseReason) override {
    if (slot >= nodes_.size() || !nodes_[slot].live) return;
    Node& n = nodes_[slot];
    order_.erase({n.next_use, n.depth, slot});
    if (n.parent != kNoSlot && nodes_[n.parent].children > 0) --nodes_[n.parent].children;
    n.live = false;
    --blocks_;
    bytes_ -= n.charge;
  }
  uint64_t SelectVictims(uint64_t bytes_needed, std::optional<uint32_t>,
                         EvictablePredicate evictable, ChargeOf /*charge_of*/,
                         std::vector<uint32_t>* out) override {
    // Furthest next use first; on equal next use the deeper block first, so a parent (whose
    // next use is never later than its child's) comes after its children.
    const size_t first = out->size();
    uint64_t listed = 0;
    for (auto it = order_.rbegin(); it != order_.rend() && listed < bytes_needed; ++it) {
      const uint32_t s = std::get<2>(*it);
      if (nodes_[s].children != 0 || !evictable(s)) continue;
      out->push_back(s);
      listed += nodes_[s].charge;
      if (nodes_[s].parent != kNoSlot) --nodes_[nodes_[s].parent].children;
    }
    for (size_t i = first; i < out->size(); ++i) {
      if (nodes_[(*out)[i]].parent != kNoSlot) ++nodes_[nodes_[(*out)[i]].parent].children;
    }
    return listed;
  }
  // Whether a block whose next use is next_use_ is worth more than the least valuable block
  // that could make room for it.
  bool WorthStoring(EvictablePredicate evictable) const {
    for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
      const uint32_t s = std::get<2>(*it);
      if (nodes_[s].children == 0 && evictable(s)) return next_use_ < std::get<0>(*it);
    }
    return true;
  }
  size_t blocks() const override { return blocks_; }
  uint64_t charged_bytes() const override { return bytes_; }
  size_t MemoryBytes() const override { return nodes_.capacity() * sizeof(Node); }

 private:
  struct Node {
    uint64_t next_use = kNever;
    uint32_t parent = kNoSlot;
    uint32_t children = 0;
    uint32_t depth = 0;
    uint32_t charge = 0;
    bool live = false;
  };
  std::vector<Node> nodes_;
  std::set<std::tuple<uint64_t, uint32_t, uint32_t>> order_;  // (next use, depth, slot)
  uint64_t next_use_ = kNever;
  size_t blocks_ = 0;
  uint64_t bytes_ = 0;
};

// The replay loop. `belady`: non-null to feed it next uses (`next_use`: one per chain block,
// trace order) and let it decline blocks.
ReplayResult Run(absl::Span<const TraceRequest> trace, EvictionPolicy& policy,
                 const ReplayOptions& options, BeladyPolicy* belady,
                 const std::vector<uint64_t>& next_use) {
  ReplayResult result;
  absl::flat_hash_map<uint64_t, uint32_t> slot_of;
  std::vector<uint64_t> id_of;
  std::vector<uint32_t> free_slots;
  std::vector<uint32_t> chain;  // slots of the current request's chain so far
  absl::flat_hash_set<uint32_t> own;
  std::vector<uint32_t> victims;
  size_t event = 0;  // index into next_use
  const uint32_t charge = options.block_charge;
  for (size_t r = 0; r < trace.size(); ++r) {
    const std::vector<uint64_t>& ids = trace[r].blocks;
    RequestInfo info;
    info.now_ms = trace[r].timestamp_ms;
    const uint64_t request = r + 1;
    auto numbered = [&](uint64_t call) {
      RequestInfo i = info;
      i.request = options.number_calls_apart ? 3 * request + call : request;
      return i;
    };
    chain.clear();
    for (uint64_t id : ids) {
      auto it = slot_of.find(id);
      if (it == slot_of.end()) break;
      chain.push_back(it->second);
    }
    const size_t matched = chain.size();
    result.hit_blocks += matched;
    result.referenced_blocks += ids.size();
    for (uint64_t call = 0; call < (options.get_reports_hits ? 2u : 1u); ++call) {
      const RequestInfo call_info = numbered(call);
      for (size_t j = 0; j < matched; ++j) {
        if (belady != nullptr) belady->set_next_use(next_use[event + j]);
        policy.OnHit(chain[j], j == 0 ? kNoSlot : chain[j - 1], FingerprintOf(ids[j]), charge,
                     call_info);
      }
    }
    event += matched;
    own.clear();
    own.insert(chain.begin(), chain.end());
    RequestInfo put_info = numbered(2);
    bool stopped = false;
    for (size_t j = matched; j < ids.size(); ++j, ++event) {
      if (stopped) {
        ++result.unstored_blocks;
        continue;
      }
      if (belady != nullptr) belady->set_next_use(next_use[event]);
      put_info.last_in_call = j + 1 == ids.size();
      const uint32_t parent =
          j > 0 && (j > matched || options.parent_across_calls) ? chain[j - 1] : kNoSlot;
      const uint64_t fingerprint = FingerprintOf(ids[j]);
      if (auto it = slot_of.find(ids[j]); it != slot_of.end()) {
        policy.OnHit(it->second, parent, fingerprint, charge, put_info);
        chain.push_back(it->second);
        own.insert(it->second);
        continue;
      }
      auto evictable = [&own](uint32_t s) { return !own.contains(s); };
      if (policy.charged_bytes() + charge > options.capacity_bytes) {
        if (belady != nullptr && !belady->WorthStoring(evictable)) {
          stopped = true;
          ++result.unstored_blocks;
          continue;
        }
        victims.clear();
        policy.SelectVictims(
            policy.charged_bytes() + charge - options.capacity_bytes, std::nullopt, evictable,
            [charge](uint32_t) { return charge; }, &victims);
        for (uint32_t v : victims) {
          policy.OnErase(v, FingerprintOf(id_of[v]), charge, EraseReason::kEvicted);
          slot_of.erase(id_of[v]);
          free_slots.push_back(v);
          ++result.evicted_blocks;
        }
        if (policy.charged_bytes() + charge > options.capacity_bytes) {
          stopped = true;
          ++result.unstored_blocks;
          continue;
        }
      }
      uint32_t slot;
      if (!free_slots.empty()) {
        slot = free_slots.back();
        free_slots.pop_back();
      } else {
        slot = static_cast<uint32_t>(id_of.size());
        id_of.push_back(0);
      }
      id_of[slot] = ids[j];
      slot_of.emplace(ids[j], slot);
      policy.OnInsert(slot, parent, fingerprint, charge, /*tenant=*/0, put_info);
      ++result.inserted_blocks;
      chain.push_back(slot);
      own.insert(slot);
    }
  }
  return result;
}

}  // namespace

ReplayResult Replay(absl::Span<const TraceRequest> trace, EvictionPolicy& policy,
                    const ReplayOptions& options) {
  return Run(trace, policy, options, nullptr, {});
}

ReplayResult ReplayBelady(absl::Span<const TraceRequest> trace, const ReplayOptions& options) {
  // next_use[k]: the request index of the next reference of the k-th chain block (trace
  // order), kNever when none.
  size_t total = 0;
  for (const TraceRequest& r : trace) total += r.blocks.size();
  std::vector<uint64_t> next_use(total);
  absl::flat_hash_map<uint64_t, uint64_t> next;
  size_t k = total;
  for (size_t r = trace.size(); r-- > 0;) {
    for (size_t j = trace[r].blocks.size(); j-- > 0;) {
      --k;
      auto it = next.find(trace[r].blocks[j]);
      next_use[k] = it == next.end() ? kNever : it->second;
      next[trace[r].blocks[j]] = r;
    }
  }
  BeladyPolicy belady;
  return Run(trace, belady, options, &belady, next_use);
}

size_t DistinctBlocks(absl::Span<const TraceRequest> trace) {
  absl::flat_hash_set<uint64_t> seen;
  for (const TraceRequest& r : trace) seen.insert(r.blocks.begin(), r.blocks.end());
  return seen.size();
}

double InfiniteCacheHitRatio(absl::Span<const TraceRequest> trace) {
  absl::flat_hash_set<uint64_t> seen;
  uint64_t hits = 0;
  uint64_t refs = 0;
  for (const TraceRequest& r : trace) {
    size_t m = 0;
    while (m < r.blocks.size() && seen.contains(r.blocks[m])) ++m;
    hits += m;
    refs += r.blocks.size();
    seen.insert(r.blocks.begin(), r.blocks.end());
  }
  return refs == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(refs);
}

}  // namespace turbokv::server
