#include "server/storage/lrfu_shadow.h"

#include <algorithm>
#include <limits>

namespace turbokv::server::lrfu {

void ShadowCache::SiftUp(size_t pos) {
  HeapSiftUp(
      heap_, pos, [this](uint32_t e) { return entries_[e].key; },
      [this](uint32_t e, uint32_t p) { entries_[e].heap_pos = p; });
}

void ShadowCache::SiftDown(size_t pos) {
  HeapSiftDown(
      heap_, pos, [this](uint32_t e) { return entries_[e].key; },
      [this](uint32_t e, uint32_t p) { entries_[e].heap_pos = p; });
}

void ShadowCache::HeapFix(size_t pos) {
  SiftUp(pos);
  SiftDown(entries_[heap_[pos]].heap_pos == pos ? pos : entries_[heap_[pos]].heap_pos);
}

void ShadowCache::Remove(uint32_t entry) {
  const size_t pos = entries_[entry].heap_pos;
  const uint32_t last = heap_.back();
  heap_.pop_back();
  if (last != entry) {
    heap_[pos] = last;
    entries_[last].heap_pos = static_cast<uint32_t>(pos);
    HeapFix(pos);
  }
  bytes_ -= entries_[entry].charge;
  index_.erase(entries_[entry].mixed);
  free_.push_back(entry);
}

void ShadowCache::Access(uint64_t mixed, uint64_t request, bool last_in_call, uint32_t charge,
                         uint64_t capacity_bytes, double capacity_blocks) {
  RecentRequest& recent = recent_[request % recent_.size()];
  if (request != 0 && recent.request != request) recent = RecentRequest{request, false};
  const double half_life = HalfLifeAccesses(capacity_blocks);
  const size_t ghosts = static_cast<size_t>(ghost_ratio_ * capacity_blocks);
  if (ghosts > ghosts_.capacity() * 2 || (ghosts_.capacity() == 0 && ghosts > 0)) {
    ghosts_.Resize(ghosts);
  }
  // Ghost keys are floats relative to base_: keep them near it.
  if (clock_ - base_ > 1e6) {
    const double shift = clock_ - base_;
    ghosts_.TransformKeys([shift](float k) { return static_cast<float>(k - shift); });
    base_ = clock_;
  }

  auto it = index_.find(mixed);
  if (it != index_.end()) {
    Entry& e = entries_[it->second];
    if (request != 0 && e.request == request) return;  // this request already counted it
    e.request = request;
    clock_ += 1;
    if (request == 0 || !recent.broken) score_ += 1;
    e.key = KeyAfterAccess(e.key, clock_, half_life);
    SiftDown(e.heap_pos);
    return;
  }
  if (request != 0) recent.broken = true;
  clock_ += 1;
  double key = -std::numeric_limits<double>::infinity();
  if (std::optional<float> ghost = ghosts_.Take(mixed); ghost.has_value()) key = base_ + *ghost;
  key = KeyAfterAccess(key, clock_, half_life);
  if (last_in_call) key = clock_ - 4 * std::max(half_life, capacity_blocks);
  uint32_t entry;
  if (!free_.empty()) {
    entry = free_.back();
    free_.pop_back();
  } else {
    entry = static_cast<uint32_t>(entries_.size());
    entries_.emplace_back();
  }
  entries_[entry] = Entry{mixed, key, charge, static_cast<uint32_t>(heap_.size()), request};
  index_.emplace(mixed, entry);
  heap_.push_back(entry);
  SiftUp(heap_.size() - 1);
  bytes_ += charge;
  while (bytes_ > capacity_bytes && !heap_.empty()) {
    const uint32_t victim = heap_.front();
    ghosts_.Put(entries_[victim].mixed, static_cast<float>(entries_[victim].key - base_));
    Remove(victim);
  }
}

void ShadowCache::DropAtOrAbove(uint32_t threshold) {
  std::vector<uint32_t> drop;
  for (uint32_t e : heap_) {
    if (static_cast<uint32_t>(entries_[e].mixed >> 32) >= threshold) drop.push_back(e);
  }
  for (uint32_t e : drop) Remove(e);
  ghosts_.DropAtOrAbove(threshold);
}

size_t ShadowCache::MemoryBytes() const {
  return entries_.capacity() * sizeof(Entry) + heap_.capacity() * sizeof(uint32_t) +
         free_.capacity() * sizeof(uint32_t) +
         index_.capacity() * (sizeof(uint64_t) + sizeof(uint32_t) + 1) + ghosts_.MemoryBytes();
}

}  // namespace turbokv::server::lrfu
