#include "server/storage/eviction_policy.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "server/storage/lrfu_policy.h"

namespace turbokv::server {

uint32_t LruPolicy::ParentOf(uint32_t slot) const {
  const uint32_t p = nodes_[slot].parent;
  if (p == kNoSlot || !Live(p) || nodes_[p].gen != nodes_[slot].parent_gen) return kNoSlot;
  return p;
}

void LruPolicy::Link(uint32_t slot, uint32_t parent) {
  if (parent == slot || !Live(parent) || ParentOf(slot) == parent) return;
  Unlink(slot);
  nodes_[slot].parent = parent;
  nodes_[slot].parent_gen = nodes_[parent].gen;
  ++nodes_[parent].children;
}

void LruPolicy::Unlink(uint32_t slot) {
  const uint32_t p = ParentOf(slot);
  // A count that is already 0 belongs to a slot reused after 128 generations under a stale
  // link: leave it alone.
  if (p != kNoSlot && nodes_[p].children > 0) --nodes_[p].children;
  nodes_[slot].parent = kNoSlot;
}

void LruPolicy::Unqueue(uint32_t slot) {
  Node& n = nodes_[slot];
  if (n.prev != kNoSlot) {
    nodes_[n.prev].next = n.next;
  } else {
    head_ = n.next;
  }
  if (n.next != kNoSlot) {
    nodes_[n.next].prev = n.prev;
  } else {
    tail_ = n.prev;
  }
  n.prev = n.next = kNoSlot;
}

void LruPolicy::Place(uint32_t slot, uint32_t parent) {
  Node& n = nodes_[slot];
  if (parent != kNoSlot) {
    n.prev = parent;
    n.next = nodes_[parent].next;
    nodes_[parent].next = slot;
  } else {
    n.prev = kNoSlot;
    n.next = head_;
    head_ = slot;
  }
  if (n.next != kNoSlot) {
    nodes_[n.next].prev = slot;
  } else {
    tail_ = slot;
  }
}

void LruPolicy::OnInsert(uint32_t slot, uint32_t parent, uint64_t /*fingerprint*/, uint32_t charge,
                         uint32_t tenant, const RequestInfo& /*info*/) {
  if (slot == kNoSlot || Live(slot)) return;
  if (slot >= nodes_.size()) nodes_.resize(size_t{slot} + 1);
  Node& n = nodes_[slot];
  ++n.gen;
  n.parent = kNoSlot;
  n.children = 0;
  n.tenant = tenant;
  Link(slot, parent);
  Place(slot, ParentOf(slot));
  ++blocks_;
  bytes_ += charge;
}

void LruPolicy::OnHit(uint32_t slot, uint32_t parent, uint64_t /*fingerprint*/, uint32_t /*charge*/,
                      const RequestInfo& /*info*/) {
  if (!Live(slot)) return;
  Link(slot, parent);
  Unqueue(slot);
  Place(slot, parent != kNoSlot && ParentOf(slot) == parent ? parent : kNoSlot);
}

void LruPolicy::OnErase(uint32_t slot, uint64_t /*fingerprint*/, uint32_t charge,
                        EraseReason /*reason*/) {
  if (!Live(slot)) return;
  Unlink(slot);
  Unqueue(slot);
  Node& n = nodes_[slot];
  ++n.gen;  // even: gone; children's links to it go stale
  n.children = 0;
  --blocks_;
  bytes_ -= charge;
}

uint64_t LruPolicy::SelectVictims(uint64_t bytes_needed, std::optional<uint32_t> tenant,
                                  EvictablePredicate evictable, ChargeOf charge_of,
                                  std::vector<uint32_t>* out) {
  // Blocks *out lists already (an earlier selection of the same eviction) count as listed.
  for (uint32_t s : *out) {
    if (const uint32_t p = Live(s) ? ParentOf(s) : kNoSlot; p != kNoSlot) --nodes_[p].children;
  }
  uint64_t listed = 0;
  // Walks from the least recent end. Listing a block takes it from its parent's count for the
  // rest of the walk, so a parent whose children are all listed is listed when the walk gets
  // to it (it is more recent than they are unless it was touched without them).
  for (uint32_t s = tail_; s != kNoSlot && listed < bytes_needed; s = nodes_[s].prev) {
    const Node& n = nodes_[s];
    if (n.children != 0 || (tenant.has_value() && n.tenant != *tenant) || !evictable(s)) {
      continue;
    }
    out->push_back(s);
    listed += charge_of(s);
    if (const uint32_t p = ParentOf(s); p != kNoSlot) --nodes_[p].children;
  }
  for (uint32_t s : *out) {
    if (const uint32_t p = Live(s) ? ParentOf(s) : kNoSlot; p != kNoSlot) ++nodes_[p].children;
  }
  return listed;
}

size_t LruPolicy::MemoryBytes() const { return nodes_.capacity() * sizeof(Node); }

absl::StatusOr<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(std::string_view name,
                                                                   uint64_t capacity_bytes) {
  if (name == "lru") return std::make_unique<LruPolicy>();
  if (name == "lrfu") {
    LrfuOptions options;
    options.capacity_bytes = capacity_bytes;
    return std::make_unique<LrfuPolicy>(options);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("eviction policy \"", std::string(name), "\" is not one of: lru, lrfu"));
}

}  // namespace turbokv::server
