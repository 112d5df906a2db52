// In-memory index of every stored block: its key, where its value lives in the value log, its
// write sequence and last access; per-namespace and total accounting. Rebuilt on open from
// block_meta, so Lookup and Stats never touch RocksDB.
//
// Blocks are numbered by dense slots (uint32), which the eviction policy (eviction_policy.h)
// and the store's side tables (leases, expiry) use as handles. A slot is valid from Insert to
// Erase; Erase frees it for reuse.
//
// Memory: 60 bytes an entry (the key inline: block hashes are at most 32 bytes), kept in
// chunks of 64 Ki entries (no reallocation copies a 10M-block index), plus 5 to 10 bytes an
// entry of the hash set that maps keys to slots (absl::flat_hash_set of slot numbers, looked
// up by key through the entries themselves).
//
// Not thread-safe: BlockStore guards it with its mutex.
#ifndef TURBOKV_SERVER_STORAGE_BLOCK_INDEX_H_
#define TURBOKV_SERVER_STORAGE_BLOCK_INDEX_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "server/storage/eviction_policy.h"
#include "server/storage/value_log.h"

namespace turbokv::server {

// Bytes a block counts against the capacity: its value-log record (whole pages) and an
// estimate of its metadata in RocksDB (its key in block_meta and access, their values, and
// RocksDB's per-entry overhead). What RocksDB really holds beyond these estimates is measured
// and counted on top (BlockStore's disk overhead).
inline uint64_t BlockCharge(const RecordLocation& l) {
  return RecordBytes(l) + 2 * (8 + uint64_t{l.hash_bytes}) + 96;
}

// One stored block. 60 bytes, 4-byte aligned (the key inline: block hashes are at most 32
// bytes): the write sequence is kept as two 32-bit halves, its top 8 bits holding the hash's
// length, so write sequences must stay below 2^56 (BlockStore allocates them one by one from 1).
struct BlockEntry {
  uint32_t namespace_slot = 0;  // BlockIndex::NamespaceSlot of its namespace
  uint32_t last_access = 0;     // unix seconds of the last put or get (TTL)
  uint32_t segment = 0;         // its value-log record (RecordLocation)
  uint32_t page = 0;
  uint32_t value_bytes = 0;
  uint32_t sequence_low = 0;             // write sequence, bits 0..31 (0 overall: free slot)
  uint32_t sequence_high_and_bytes = 0;  // bits 0..23: sequence bits 32..55; 24..31: hash bytes
  char hash[32];                         // block hash, hash_bytes() of them

  static constexpr uint64_t kSequenceLimit = uint64_t{1} << 56;
  uint64_t sequence() const {
    return (uint64_t{sequence_high_and_bytes & 0xffffffu} << 32) | sequence_low;
  }
  // `sequence` < kSequenceLimit.
  void set_sequence(uint64_t sequence) {
    sequence_low = static_cast<uint32_t>(sequence);
    sequence_high_and_bytes = (sequence_high_and_bytes & 0xff000000u) |
                              (static_cast<uint32_t>(sequence >> 32) & 0xffffffu);
  }
  uint8_t hash_bytes() const { return static_cast<uint8_t>(sequence_high_and_bytes >> 24); }
  RecordLocation location() const {
    RecordLocation l;
    l.segment = segment;
    l.page = page;
    l.value_bytes = value_bytes;
    l.hash_bytes = hash_bytes();
    return l;
  }
  // The record's place and length, and the hash's length (`l.hash_bytes`).
  void set_location(const RecordLocation& l) {
    segment = l.segment;
    page = l.page;
    value_bytes = l.value_bytes;
    sequence_high_and_bytes =
        (sequence_high_and_bytes & 0xffffffu) | (uint32_t{l.hash_bytes} << 24);
  }
  std::string_view hash_view() const { return std::string_view(hash, hash_bytes()); }
};
static_assert(sizeof(BlockEntry) == 60, "BlockEntry is meant to stay at 60 bytes");

struct NamespaceUsage {
  uint64_t blocks = 0;
  uint64_t value_bytes = 0;  // packed bytes of the values
  uint64_t charge = 0;       // bytes counted against the capacity
};

class BlockIndex {
 public:
  BlockIndex();
  BlockIndex(const BlockIndex&) = delete;
  BlockIndex& operator=(const BlockIndex&) = delete;

  // A namespace's dense number (assigned on first use, kept while it has blocks or is held).
  uint32_t NamespaceSlot(uint64_t namespace_id);
  // kNoSlot when the namespace has no slot.
  uint32_t FindNamespaceSlot(uint64_t namespace_id) const;
  uint64_t NamespaceId(uint32_t namespace_slot) const { return namespace_ids_[namespace_slot]; }
  // The namespace's tenant (BlockStore's dense tenant number; 0 until set). Its blocks'
  // usage moves to the new tenant.
  void SetNamespaceTenant(uint64_t namespace_id, uint32_t tenant);
  uint32_t NamespaceTenant(uint64_t namespace_id) const;
  // The tenant of the block in `slot` (in use).
  uint32_t tenant(uint32_t slot) const { return namespace_tenants_[at(slot).namespace_slot]; }
  // What a tenant's blocks hold (zeros for a tenant without blocks).
  NamespaceUsage TenantUsage(uint32_t tenant) const {
    return tenant < tenant_usage_.size() ? tenant_usage_[tenant] : NamespaceUsage{};
  }

  // The slot holding (namespace, hash), or kNoSlot.
  uint32_t Find(uint64_t namespace_id, std::string_view hash) const;
  // A hint: (namespace, hash) is about to be inserted or looked up; starts loading what the key
  // set will probe for it (recovery inserts millions of blocks, each a cache miss otherwise).
  void Prefetch(uint64_t namespace_id, std::string_view hash) const {
    const uint32_t ns = FindNamespaceSlot(namespace_id);
    if (ns != kNoSlot) keys_.prefetch(KeyRef{ns, hash});
  }
  // Adds a block (its key must be absent); returns its slot.
  uint32_t Insert(uint64_t namespace_id, std::string_view hash, uint64_t sequence,
                  const RecordLocation& location, uint32_t last_access);
  // A hint: about `blocks` blocks are about to be inserted (recovery), so the key set is sized
  // once instead of rehashed as it grows. ShrinkToFit afterwards gives back what an
  // overestimate reserved.
  void Reserve(size_t blocks);
  void ShrinkToFit();
  // Removes the block in `slot` (which must be in use) and frees the slot.
  void Erase(uint32_t slot);

  BlockEntry& at(uint32_t slot) { return chunks_[slot >> kChunkBits][slot & kChunkMask]; }
  const BlockEntry& at(uint32_t slot) const {
    return chunks_[slot >> kChunkBits][slot & kChunkMask];
  }
  uint64_t namespace_id(uint32_t slot) const { return NamespaceId(at(slot).namespace_slot); }
  uint64_t charge(uint32_t slot) const { return BlockCharge(at(slot).location()); }

  // Slots of a namespace's blocks (O(slots in use)).
  std::vector<uint32_t> SlotsOf(uint64_t namespace_id) const;

  uint64_t used_bytes() const { return used_bytes_; }    // sum of charges
  uint64_t value_bytes() const { return value_bytes_; }  // sum of packed value bytes
  uint64_t blocks() const { return blocks_; }
  // One past the highest slot ever used (the range of slot numbers to size side tables by).
  uint32_t slot_limit() const { return slot_limit_; }
  const absl::flat_hash_map<uint64_t, NamespaceUsage>& usage() const { return usage_; }
  // Bytes this index holds in memory (entries, free list, the key set), for the scale benchmark.
  uint64_t MemoryBytes() const;

 private:
  static constexpr int kChunkBits = 16;
  static constexpr uint32_t kChunkMask = (1u << kChunkBits) - 1;
  struct KeyRef {
    uint32_t namespace_slot;
    std::string_view hash;
  };
  // Hash and equality of slots by their keys, transparent to KeyRef lookups.
  struct SlotHash {
    using is_transparent = void;
    const BlockIndex* index;
    size_t operator()(uint32_t slot) const;
    size_t operator()(const KeyRef& key) const;
  };
  struct SlotEq {
    using is_transparent = void;
    const BlockIndex* index;
    bool operator()(uint32_t a, uint32_t b) const { return a == b; }
    bool operator()(uint32_t a, const KeyRef& b) const;
    bool operator()(const KeyRef& a, uint32_t b) const { return (*this)(b, a); }
  };

  uint32_t AllocateSlot();

  std::vector<std::unique_ptr<BlockEntry[]>> chunks_;
  std::vector<uint32_t> free_slots_;
  uint32_t slot_limit_ = 0;
  absl::flat_hash_set<uint32_t, SlotHash, SlotEq> keys_;
  std::vector<uint64_t> namespace_ids_;       // by namespace slot
  std::vector<uint32_t> namespace_tenants_;   // by namespace slot
  std::vector<NamespaceUsage> tenant_usage_;  // by tenant
  absl::flat_hash_map<uint64_t, uint32_t> namespace_slots_;
  absl::flat_hash_map<uint64_t, NamespaceUsage> usage_;
  uint64_t used_bytes_ = 0;
  uint64_t value_bytes_ = 0;
  uint64_t blocks_ = 0;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_STORAGE_BLOCK_INDEX_H_
