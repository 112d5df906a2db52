// In-memory index of every stored block: existence, size, recency (an exact LRU list), leases,
// an expiry queue (blocks of namespaces with a TTL, ordered by when they expire) and
// per-namespace accounting. The store rebuilds it on open from its metadata column families,
// so Lookup and Stats never touch RocksDB, and expiry never scans the whole index.
//
// Not thread-safe: BlockStore guards it with its mutex.
#ifndef TURBOKV_SERVER_STORAGE_BLOCK_INDEX_H_
#define TURBOKV_SERVER_STORAGE_BLOCK_INDEX_H_

#include <cstdint>
#include <list>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

namespace turbokv::server {

struct IndexEntry {
  std::string key;  // storage key: 8-byte big-endian namespace id || block hash
  uint64_t namespace_id = 0;
  uint64_t value_bytes = 0;  // packed block bytes
  uint64_t charge = 0;       // bytes counted against the capacity (value + keys + metadata)
  int64_t last_access = 0;   // unix seconds of the last put or get (TTL; persisted)
  int64_t lease_until = 0;   // unix seconds; the block is not evictable while now < lease_until
  // Unix seconds at which the block expires: max(last_access + ttl, lease_until) for a
  // namespace with a TTL, 0 = never. Kept by the store through SetExpiry, which keeps the
  // expiry queue in order.
  int64_t expire_at = 0;
  // The packed block's trailing checksum (xxHash3-64 of its bytes). A value read back for this
  // key must end in it: that binds the stored bytes to their key. 0 = unknown (metadata
  // written before the field existed).
  uint64_t checksum = 0;
  uint64_t version = 0;  // bumped by the store on every put of the key (detects races)
  // Eviction order key, higher = more recently used (persisted with last_access): the store
  // numbers each call that touches a chain and each block's position in it,
  // (call << kRecencyIndexBits) - position, so a chain's later blocks rank just below its
  // earlier ones and a restart rebuilds the same order (BlockStore::Open sorts by it).
  uint64_t recency = 0;
};

// Bits of IndexEntry::recency that hold a block's position within its call.
inline constexpr int kRecencyIndexBits = 20;
// The call number a recency key belongs to: (call << kRecencyIndexBits) - position, rounded up.
inline uint64_t RecencyCall(uint64_t recency) {
  return (recency + (uint64_t{1} << kRecencyIndexBits) - 1) >> kRecencyIndexBits;
}

struct NamespaceUsage {
  uint64_t blocks = 0;
  uint64_t value_bytes = 0;  // packed bytes of the values
  uint64_t charge = 0;       // bytes counted against the capacity
};

class BlockIndex {
 public:
  BlockIndex() = default;
  BlockIndex(const BlockIndex&) = delete;
  BlockIndex& operator=(const BlockIndex&) = delete;

  // Inserts `entry`, replacing an entry with the same key (whose lease is kept). Where it goes
  // in the eviction order: `below` empty: the most recently used end; otherwise immediately
  // less recently used than the entry with key `below` (the previous block of its chain), or
  // the least recently used end when that entry is gone (a chain cut there cannot be matched
  // past the cut, so what follows it goes first). O(1).
  void Upsert(IndexEntry entry, std::string_view below = {});
  // Null when absent. The pointer stays valid until the entry is erased.
  IndexEntry* Find(std::string_view key);
  const IndexEntry* Find(std::string_view key) const;
  // Moves the entry to the most recently used end, or next to `below` as in Upsert. O(1).
  void Touch(IndexEntry* entry, std::string_view below = {});
  // Removes the entry; false when absent.
  bool Erase(std::string_view key);
  // Sets entry->expire_at (0 = never) and moves it in the expiry queue.
  void SetExpiry(IndexEntry* entry, int64_t expire_at);
  // Keys of up to `max` entries with 0 < expire_at <= now, soonest first.
  std::vector<std::string> DueForExpiry(int64_t now, size_t max) const;

  // Removes and returns least recently used entries that are not leased at `now`, whose key
  // is not in `exclude` and whose recency is not of call `keep_call` (0: none), until their
  // charges add up to at least `bytes_to_free` or no candidate is left.
  std::vector<IndexEntry> TakeVictims(uint64_t bytes_to_free, int64_t now,
                                      const absl::flat_hash_set<std::string>& exclude,
                                      uint64_t keep_call = 0);
  // Puts entries taken by TakeVictims back at the least recently used end, in their order.
  void Restore(std::vector<IndexEntry> victims);
  // Charges of the entries TakeVictims could remove at `now`, ignoring exclusions. O(blocks).
  uint64_t EvictableBytes(int64_t now) const;

  // Entries of a namespace (copies), any order.
  std::vector<IndexEntry> EntriesOf(uint64_t namespace_id) const;
  // Entries for which `pred` is true (copies), least recently used first.
  template <typename Pred>
  std::vector<IndexEntry> Select(Pred pred) const {
    std::vector<IndexEntry> out;
    for (const IndexEntry& e : lru_) {
      if (pred(e)) out.push_back(e);
    }
    return out;
  }

  uint64_t used_bytes() const { return used_bytes_; }
  uint64_t value_bytes() const { return value_bytes_; }
  uint64_t blocks() const { return map_.size(); }
  const absl::flat_hash_map<uint64_t, NamespaceUsage>& usage() const { return usage_; }

 private:
  void Account(const IndexEntry& e, bool add);
  void Unqueue(const IndexEntry& e);  // removes e from expiry_ when queued
  // Where Upsert/Touch place an entry: see Upsert.
  std::list<IndexEntry>::iterator PositionFor(std::string_view below);

  std::list<IndexEntry> lru_;  // front = least recently used
  absl::flat_hash_map<std::string_view, std::list<IndexEntry>::iterator>
      map_;  // views of lru_ keys
  std::set<std::pair<int64_t, std::string_view>> expiry_;  // (expire_at, view of lru_ key)
  absl::flat_hash_map<uint64_t, NamespaceUsage> usage_;
  uint64_t used_bytes_ = 0;
  uint64_t value_bytes_ = 0;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_STORAGE_BLOCK_INDEX_H_
