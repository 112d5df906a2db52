#include "server/storage/block_index.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"

namespace turbokv::server {

BlockIndex::BlockIndex() : keys_(0, SlotHash{this}, SlotEq{this}) {}

size_t BlockIndex::SlotHash::operator()(uint32_t slot) const {
  const BlockEntry& e = index->at(slot);
  return (*this)(KeyRef{e.namespace_slot, e.hash_view()});
}

size_t BlockIndex::SlotHash::operator()(const KeyRef& key) const {
  return absl::Hash<std::pair<uint32_t, absl::string_view>>{}(
      {key.namespace_slot, absl::string_view(key.hash.data(), key.hash.size())});
}

bool BlockIndex::SlotEq::operator()(uint32_t a, const KeyRef& b) const {
  const BlockEntry& e = index->at(a);
  return e.namespace_slot == b.namespace_slot && e.hash_view() == b.hash;
}

uint32_t BlockIndex::NamespaceSlot(uint64_t namespace_id) {
  auto [it, inserted] =
      namespace_slots_.try_emplace(namespace_id, static_cast<uint32_t>(namespace_ids_.size()));
  if (inserted) {
    namespace_ids_.push_back(namespace_id);
    namespace_tenants_.push_back(0);
  }
  return it->second;
}

void BlockIndex::SetNamespaceTenant(uint64_t namespace_id, uint32_t tenant) {
  const uint32_t ns = NamespaceSlot(namespace_id);
  const uint32_t old = namespace_tenants_[ns];
  if (old == tenant) return;
  namespace_tenants_[ns] = tenant;
  const uint32_t most = std::max(old, tenant);
  if (tenant_usage_.size() <= most) tenant_usage_.resize(most + 1);
  if (auto it = usage_.find(namespace_id); it != usage_.end()) {
    const NamespaceUsage& u = it->second;
    tenant_usage_[old].blocks -= u.blocks;
    tenant_usage_[old].value_bytes -= u.value_bytes;
    tenant_usage_[old].charge -= u.charge;
    tenant_usage_[tenant].blocks += u.blocks;
    tenant_usage_[tenant].value_bytes += u.value_bytes;
    tenant_usage_[tenant].charge += u.charge;
  }
}

uint32_t BlockIndex::NamespaceTenant(uint64_t namespace_id) const {
  const uint32_t ns = FindNamespaceSlot(namespace_id);
  return ns == kNoSlot ? 0 : namespace_tenants_[ns];
}

uint32_t BlockIndex::FindNamespaceSlot(uint64_t namespace_id) const {
  auto it = namespace_slots_.find(namespace_id);
  return it == namespace_slots_.end() ? kNoSlot : it->second;
}

uint32_t BlockIndex::Find(uint64_t namespace_id, std::string_view hash) const {
  const uint32_t ns = FindNamespaceSlot(namespace_id);
  if (ns == kNoSlot || hash.size() > sizeof(BlockEntry::hash)) return kNoSlot;
  auto it = keys_.find(KeyRef{ns, hash});
  return it == keys_.end() ? kNoSlot : *it;
}

uint32_t BlockIndex::AllocateSlot() {
  if (!free_slots_.empty()) {
    const uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    return slot;
  }
  const uint32_t slot = slot_limit_++;
  if ((slot >> kChunkBits) >= chunks_.size()) {
    chunks_.push_back(std::make_unique<BlockEntry[]>(size_t{1} << kChunkBits));
  }
  return slot;
}

uint32_t BlockIndex::Insert(uint64_t namespace_id, std::string_view hash, uint64_t sequence,
                            const RecordLocation& location, uint32_t last_access) {
  const uint32_t slot = AllocateSlot();
  BlockEntry& e = at(slot);
  RecordLocation where = location;
  where.hash_bytes = static_cast<uint8_t>(hash.size());
  e.set_location(where);
  e.set_sequence(sequence);
  e.namespace_slot = NamespaceSlot(namespace_id);
  e.last_access = last_access;
  std::memcpy(e.hash, hash.data(), hash.size());
  keys_.insert(slot);
  const uint64_t charge = BlockCharge(where);
  NamespaceUsage& u = usage_[namespace_id];
  u.blocks += 1;
  u.value_bytes += location.value_bytes;
  u.charge += charge;
  const uint32_t tenant = namespace_tenants_[e.namespace_slot];
  if (tenant_usage_.size() <= tenant) tenant_usage_.resize(tenant + 1);
  NamespaceUsage& t = tenant_usage_[tenant];
  t.blocks += 1;
  t.value_bytes += location.value_bytes;
  t.charge += charge;
  used_bytes_ += charge;
  value_bytes_ += location.value_bytes;
  blocks_ += 1;
  return slot;
}

void BlockIndex::Reserve(size_t blocks) {
  keys_.reserve(blocks);
  chunks_.reserve((blocks >> kChunkBits) + 1);
}

void BlockIndex::ShrinkToFit() {
  // What the set would have grown to by itself; rehash(0) rehashes even when that is its size.
  absl::flat_hash_set<uint32_t, SlotHash, SlotEq> fitted(0, SlotHash{this}, SlotEq{this});
  fitted.reserve(keys_.size());
  if (fitted.capacity() < keys_.capacity()) keys_.rehash(0);
  free_slots_.shrink_to_fit();
}

void BlockIndex::Erase(uint32_t slot) {
  BlockEntry& e = at(slot);
  keys_.erase(slot);
  const uint64_t namespace_id = NamespaceId(e.namespace_slot);
  const uint64_t charge = BlockCharge(e.location());
  auto it = usage_.find(namespace_id);
  it->second.blocks -= 1;
  it->second.value_bytes -= e.value_bytes;
  it->second.charge -= charge;
  if (it->second.blocks == 0) usage_.erase(it);
  NamespaceUsage& t = tenant_usage_[namespace_tenants_[e.namespace_slot]];
  t.blocks -= 1;
  t.value_bytes -= e.value_bytes;
  t.charge -= charge;
  used_bytes_ -= charge;
  value_bytes_ -= e.value_bytes;
  blocks_ -= 1;
  e.set_sequence(0);
  free_slots_.push_back(slot);
}

std::vector<uint32_t> BlockIndex::SlotsOf(uint64_t namespace_id) const {
  std::vector<uint32_t> out;
  const uint32_t ns = FindNamespaceSlot(namespace_id);
  if (ns == kNoSlot) return out;
  for (uint32_t slot = 0; slot < slot_limit_; ++slot) {
    const BlockEntry& e = at(slot);
    if (e.sequence() != 0 && e.namespace_slot == ns) out.push_back(slot);
  }
  return out;
}

uint64_t BlockIndex::MemoryBytes() const {
  return chunks_.size() * (sizeof(BlockEntry) << kChunkBits) +
         free_slots_.capacity() * sizeof(uint32_t) +
         keys_.capacity() * (sizeof(uint32_t) + 1);  // slots + one control byte each
}

}  // namespace turbokv::server
