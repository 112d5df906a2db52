#include "server/storage/block_index.h"

#include <algorithm>
#include <iterator>
#include <utility>

namespace turbokv::server {

void BlockIndex::Account(const IndexEntry& e, bool add) {
  NamespaceUsage& u = usage_[e.namespace_id];
  if (add) {
    used_bytes_ += e.charge;
    value_bytes_ += e.value_bytes;
    u.blocks += 1;
    u.value_bytes += e.value_bytes;
    u.charge += e.charge;
  } else {
    used_bytes_ -= e.charge;
    value_bytes_ -= e.value_bytes;
    u.blocks -= 1;
    u.value_bytes -= e.value_bytes;
    u.charge -= e.charge;
    if (u.blocks == 0) usage_.erase(e.namespace_id);
  }
}

void BlockIndex::Unqueue(const IndexEntry& e) {
  if (e.expire_at != 0) expiry_.erase({e.expire_at, std::string_view(e.key)});
}

std::list<IndexEntry>::iterator BlockIndex::PositionFor(std::string_view below) {
  if (below.empty()) return lru_.end();
  auto it = map_.find(below);
  return it == map_.end() ? lru_.begin() : it->second;
}

void BlockIndex::Upsert(IndexEntry entry, std::string_view below) {
  auto it = map_.find(entry.key);
  if (it != map_.end()) {
    entry.lease_until = std::max(entry.lease_until, it->second->lease_until);
    Unqueue(*it->second);
    Account(*it->second, /*add=*/false);
    lru_.erase(it->second);
    map_.erase(it);
  }
  if (below == entry.key) below = {};
  auto node = lru_.insert(PositionFor(below), std::move(entry));
  map_.emplace(std::string_view(node->key), node);
  if (node->expire_at != 0) expiry_.emplace(node->expire_at, std::string_view(node->key));
  Account(*node, /*add=*/true);
}

void BlockIndex::SetExpiry(IndexEntry* entry, int64_t expire_at) {
  if (entry->expire_at == expire_at) return;
  Unqueue(*entry);
  entry->expire_at = expire_at;
  if (expire_at != 0) expiry_.emplace(expire_at, std::string_view(entry->key));
}

std::vector<std::string> BlockIndex::DueForExpiry(int64_t now, size_t max) const {
  std::vector<std::string> out;
  for (auto it = expiry_.begin(); it != expiry_.end() && it->first <= now && out.size() < max;
       ++it) {
    out.emplace_back(it->second);
  }
  return out;
}

IndexEntry* BlockIndex::Find(std::string_view key) {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : &*it->second;
}

const IndexEntry* BlockIndex::Find(std::string_view key) const {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : &*it->second;
}

void BlockIndex::Touch(IndexEntry* entry, std::string_view below) {
  auto it = map_.find(entry->key);
  if (it == map_.end() || below == entry->key) return;
  auto pos = PositionFor(below);
  if (pos == it->second) return;
  lru_.splice(pos, lru_, it->second);
}

bool BlockIndex::Erase(std::string_view key) {
  auto it = map_.find(key);
  if (it == map_.end()) return false;
  auto node = it->second;
  map_.erase(it);
  Unqueue(*node);
  Account(*node, /*add=*/false);
  lru_.erase(node);
  return true;
}

std::vector<IndexEntry> BlockIndex::TakeVictims(uint64_t bytes_to_free, int64_t now,
                                                const absl::flat_hash_set<std::string>& exclude,
                                                uint64_t keep_call) {
  std::vector<IndexEntry> victims;
  uint64_t freed = 0;
  for (auto it = lru_.begin(); it != lru_.end() && freed < bytes_to_free;) {
    if (it->lease_until > now || exclude.contains(it->key) ||
        (keep_call != 0 && RecencyCall(it->recency) == keep_call)) {
      ++it;
      continue;
    }
    auto next = std::next(it);
    freed += it->charge;
    map_.erase(std::string_view(it->key));
    Unqueue(*it);
    Account(*it, /*add=*/false);
    victims.push_back(std::move(*it));
    lru_.erase(it);
    it = next;
  }
  return victims;
}

void BlockIndex::Restore(std::vector<IndexEntry> victims) {
  for (auto it = victims.rbegin(); it != victims.rend(); ++it) {
    if (map_.contains(it->key)) continue;  // re-put meanwhile: the newer entry wins
    lru_.push_front(std::move(*it));
    map_.emplace(std::string_view(lru_.front().key), lru_.begin());
    if (lru_.front().expire_at != 0) {
      expiry_.emplace(lru_.front().expire_at, std::string_view(lru_.front().key));
    }
    Account(lru_.front(), /*add=*/true);
  }
}

uint64_t BlockIndex::EvictableBytes(int64_t now) const {
  uint64_t bytes = 0;
  for (const IndexEntry& e : lru_) {
    if (e.lease_until <= now) bytes += e.charge;
  }
  return bytes;
}

std::vector<IndexEntry> BlockIndex::EntriesOf(uint64_t namespace_id) const {
  return Select([namespace_id](const IndexEntry& e) { return e.namespace_id == namespace_id; });
}

}  // namespace turbokv::server
