// PLACEHOLDER (store branch only): a plain LRU so the new store can be built and tested before
// the policy branch lands; replaced by the policy branch's eviction_policy.cc at merge.
#include "server/storage/eviction_policy.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace turbokv::server {
namespace {

class PlainLru final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "lru"; }
  void OnInsert(uint32_t slot, uint32_t, uint32_t charge, uint32_t tenant,
                const RequestInfo&) override {
    Grow(slot);
    Node& n = nodes_[slot];
    n.live = true;
    n.charge = charge;
    n.tenant = tenant;
    PushBack(slot);
    ++blocks_;
    charged_ += charge;
  }
  void OnHit(uint32_t slot, uint32_t, const RequestInfo&) override {
    if (slot >= nodes_.size() || !nodes_[slot].live) return;
    Unlink(slot);
    PushBack(slot);
  }
  void OnErase(uint32_t slot) override {
    if (slot >= nodes_.size() || !nodes_[slot].live) return;
    Unlink(slot);
    nodes_[slot].live = false;
    --blocks_;
    charged_ -= nodes_[slot].charge;
  }
  uint64_t SelectVictims(uint64_t bytes_needed, std::optional<uint32_t> tenant,
                         EvictablePredicate evictable, std::vector<uint32_t>* out) override {
    uint64_t got = 0;
    for (uint32_t s = head_; s != kNoSlot && got < bytes_needed; s = nodes_[s].next) {
      if (tenant.has_value() && nodes_[s].tenant != *tenant) continue;
      if (!evictable(s)) continue;
      out->push_back(s);
      got += nodes_[s].charge;
    }
    return got;
  }
  size_t blocks() const override { return blocks_; }
  uint64_t charged_bytes() const override { return charged_; }
  size_t MemoryBytes() const override { return nodes_.capacity() * sizeof(Node); }

 private:
  struct Node {
    uint32_t prev = kNoSlot, next = kNoSlot, charge = 0, tenant = 0;
    bool live = false;
  };
  void Grow(uint32_t slot) {
    if (slot >= nodes_.size()) nodes_.resize(slot + 1);
  }
  void PushBack(uint32_t s) {
    nodes_[s].prev = tail_;
    nodes_[s].next = kNoSlot;
    if (tail_ != kNoSlot) nodes_[tail_].next = s; else head_ = s;
    tail_ = s;
  }
  void Unlink(uint32_t s) {
    Node& n = nodes_[s];
    if (n.prev != kNoSlot) nodes_[n.prev].next = n.next; else head_ = n.next;
    if (n.next != kNoSlot) nodes_[n.next].prev = n.prev; else tail_ = n.prev;
  }
  std::vector<Node> nodes_;
  uint32_t head_ = kNoSlot, tail_ = kNoSlot;
  size_t blocks_ = 0;
  uint64_t charged_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(std::string_view name) {
  if (name == "lru" || name == "chain") return std::make_unique<PlainLru>();
  return absl::InvalidArgumentError(absl::StrCat("unknown eviction policy '", std::string(name), "'"));
}

}  // namespace turbokv::server
