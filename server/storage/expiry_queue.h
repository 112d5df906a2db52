// The blocks of namespaces with a TTL, by when they expire, so that expiry never scans the
// index. A block is pushed each time its expiry moves (a put, a read, a lease); older pushes
// of it stay in the queue and are recognised as stale when they come out (the caller checks
// the block's current expiry). Compact() drops them when they outnumber the live ones.
//
// Not thread-safe: BlockStore guards it with its mutex.
#ifndef TURBOKV_SERVER_STORAGE_EXPIRY_QUEUE_H_
#define TURBOKV_SERVER_STORAGE_EXPIRY_QUEUE_H_

#include <cstdint>
#include <functional>
#include <queue>
#include <vector>

namespace turbokv::server {

class ExpiryQueue {
 public:
  struct Item {
    int64_t expire_at = 0;  // unix seconds
    uint32_t slot = 0;
    uint64_t sequence = 0;  // the block's write sequence when pushed (a reused slot differs)
  };

  void Push(const Item& item) { heap_.push(item); }
  size_t size() const { return heap_.size(); }

  // Pops up to `max` items due at `now` (expire_at <= now), soonest first.
  std::vector<Item> PopDue(int64_t now, size_t max) {
    std::vector<Item> out;
    while (!heap_.empty() && out.size() < max && heap_.top().expire_at <= now) {
      out.push_back(heap_.top());
      heap_.pop();
    }
    return out;
  }

  // Keeps only the items for which `current` is true (the block still expires then).
  void Compact(const std::function<bool(const Item&)>& current) {
    std::vector<Item> keep;
    while (!heap_.empty()) {
      if (current(heap_.top())) keep.push_back(heap_.top());
      heap_.pop();
    }
    heap_ = Heap(Later(), std::move(keep));
  }

 private:
  struct Later {
    bool operator()(const Item& a, const Item& b) const { return a.expire_at > b.expire_at; }
  };
  using Heap = std::priority_queue<Item, std::vector<Item>, Later>;
  Heap heap_;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_STORAGE_EXPIRY_QUEUE_H_
