// BlockStore's tenants (quotas, shares of the capacity: block_store.h, "Tenants") and its
// statistics.
#include <algorithm>
#include <cstddef>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "rocksdb/db.h"
#include "server/storage/block_store.h"

namespace turbokv::server {

uint32_t BlockStore::TenantNumber(std::string_view name) {
  auto [it, inserted] =
      tenant_numbers_.try_emplace(std::string(name), static_cast<uint32_t>(tenant_names_.size()));
  if (inserted) {
    tenant_names_.emplace_back(name);
    tenant_reserved_.emplace_back();
  }
  return it->second;
}

uint64_t BlockStore::QuotaOf(uint32_t tenant) const {
  return quotas_ ? quotas_(tenant_names_[tenant]) : 0;
}

BlockStore::InFlight& BlockStore::ReservedOf(uint32_t tenant) { return tenant_reserved_[tenant]; }

void BlockStore::ReleaseTenantReservations(const absl::flat_hash_map<uint32_t, InFlight>& added) {
  for (const auto& [tenant, a] : added) {
    tenant_reserved_[tenant].value_bytes -= a.value_bytes;
    tenant_reserved_[tenant].charge -= a.charge;
  }
}

void BlockStore::SetTenantQuotas(TenantQuotaFn quotas) {
  std::lock_guard<std::mutex> l(mu_);
  quotas_ = std::move(quotas);
}

NamespaceUsage BlockStore::TenantUsage(std::string_view tenant) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = tenant_numbers_.find(std::string(tenant));
  return it == tenant_numbers_.end() ? NamespaceUsage{} : index_.TenantUsage(it->second);
}

std::vector<uint32_t> BlockStore::PickQuotaVictims(uint32_t tenant, uint64_t value_bytes,
                                                   const std::vector<uint32_t>& prior,
                                                   EvictablePredicate evictable) {
  // The policy counts charges, which are more than the packed bytes: ask for the charges of
  // `value_bytes` at the tenant's ratio, and for twice as much until the packed bytes listed
  // add up or the policy has nothing more to list. One call each time, from the start: a
  // second call could not go on up a chain whose tail the first one listed (its blocks are
  // still live, so their parents are not leaves yet).
  const NamespaceUsage u = index_.TenantUsage(tenant);
  const double ratio =
      u.value_bytes > 0 ? static_cast<double>(u.charge) / static_cast<double>(u.value_bytes) : 1.0;
  auto ask = static_cast<uint64_t>(static_cast<double>(value_bytes) * std::max(ratio, 1.0)) + 1;
  auto charge_of = [this](uint32_t slot) { return PolicyCharge(slot); };
  std::vector<uint32_t> out;
  for (;;) {
    out = prior;
    const uint64_t listed = policy_->SelectVictims(ask, tenant, evictable, charge_of, &out);
    // Any prefix of the list is safe to evict (children come before their parents).
    uint64_t freed = 0;
    size_t k = prior.size();
    while (k < out.size() && freed < value_bytes) freed += index_.at(out[k++]).value_bytes;
    if (freed >= value_bytes || listed < ask) {  // enough, or every evictable block is listed
      return std::vector<uint32_t>(out.begin() + static_cast<ptrdiff_t>(prior.size()),
                                   out.begin() + static_cast<ptrdiff_t>(k));
    }
    ask *= 2;
  }
}

std::vector<uint32_t> BlockStore::PickCapacityVictims(uint64_t bytes, uint32_t putter,
                                                      int64_t growth,
                                                      const std::vector<uint32_t>& prior,
                                                      EvictablePredicate evictable) {
  // The policy sees `prior` and each step's picks as listed already (their parents can follow);
  // what is returned is the new part.
  std::vector<uint32_t> out = prior;
  auto charge_of = [this](uint32_t slot) { return PolicyCharge(slot); };
  auto fresh_part = [&] {
    return std::vector<uint32_t>(out.begin() + static_cast<ptrdiff_t>(prior.size()), out.end());
  };
  // The tenants holding blocks or putting, with what they hold and their caps.
  struct Load {
    uint32_t tenant;
    int64_t charge;  // charged bytes held, reserved by puts in flight, and this put's growth
    uint64_t cap;    // its quota in charged bytes; max when none
    uint64_t share = 0;
  };
  std::vector<Load> loads;
  for (uint32_t t = 0; t < tenant_names_.size(); ++t) {
    const NamespaceUsage u = index_.TenantUsage(t);
    if (u.blocks == 0 && t != putter) continue;
    Load load{t, static_cast<int64_t>(u.charge) + tenant_reserved_[t].charge,
              std::numeric_limits<uint64_t>::max()};
    if (t == putter) load.charge += growth;
    loads.push_back(load);
  }
  if (loads.size() <= 1) {
    // One tenant: the global policy, exactly as without tenants.
    policy_->SelectVictims(bytes, std::nullopt, evictable, charge_of, &out);
    return fresh_part();
  }
  for (Load& load : loads) {
    if (const uint64_t quota = QuotaOf(load.tenant); quota != 0) {
      // The charged bytes of a quota's worth of its blocks (1:1 for a tenant without blocks).
      const NamespaceUsage u = index_.TenantUsage(load.tenant);
      const double ratio = u.value_bytes > 0
                               ? static_cast<double>(u.charge) / static_cast<double>(u.value_bytes)
                               : 1.0;
      load.cap = static_cast<uint64_t>(static_cast<double>(quota) * ratio);
    }
  }
  // Max-min fair shares (water-filling): the smallest caps first, each tenant the lesser of
  // its cap and an equal part of what is left.
  std::sort(loads.begin(), loads.end(), [](const Load& a, const Load& b) { return a.cap < b.cap; });
  // Shares of what eviction works down to, so that a store above high_watermark always has a
  // tenant above its share (unless every tenant is capped by a quota below its equal part).
  const auto low =
      static_cast<uint64_t>(static_cast<double>(options_.capacity_bytes) * options_.low_watermark);
  uint64_t left = low - std::min(low, disk_overhead_bytes_);
  for (size_t k = 0; k < loads.size(); ++k) {
    loads[k].share = std::min<uint64_t>(loads[k].cap, left / (loads.size() - k));
    left -= loads[k].share;
  }
  // Above their share, the most above first.
  std::vector<Load*> over;
  for (Load& load : loads) {
    if (load.charge > static_cast<int64_t>(load.share)) over.push_back(&load);
  }
  std::sort(over.begin(), over.end(), [](const Load* a, const Load* b) {
    return a->charge - static_cast<int64_t>(a->share) > b->charge - static_cast<int64_t>(b->share);
  });
  absl::flat_hash_set<uint32_t> listed;
  auto fresh = [&](uint32_t slot) { return !listed.contains(slot) && evictable(slot); };
  uint64_t freed = 0;
  bool still_over = false;
  for (Load* load : over) {
    if (freed >= bytes) break;
    const auto excess = static_cast<uint64_t>(load->charge - static_cast<int64_t>(load->share));
    const size_t first = out.size();
    const uint64_t want = std::min(excess, bytes - freed);
    const uint64_t got = policy_->SelectVictims(want, load->tenant, fresh, charge_of, &out);
    for (size_t k = first; k < out.size(); ++k) listed.insert(out[k]);
    freed += got;
    if (got < want) still_over = true;
  }
  if (freed < bytes) {
    // Then the putter's own blocks; another tenant's only when no tenant is above its share.
    const size_t first = out.size();
    freed += policy_->SelectVictims(bytes - freed, putter, fresh, charge_of, &out);
    for (size_t k = first; k < out.size(); ++k) listed.insert(out[k]);
    if (freed < bytes && !still_over) {
      policy_->SelectVictims(bytes - freed, std::nullopt, fresh, charge_of, &out);
    }
  }
  return fresh_part();
}

// ---- statistics ----------------------------------------------------------------------------

StoreStats BlockStore::Stats() const {
  StoreStats s;
  s.capacity_bytes = options_.capacity_bytes;
  const std::vector<NamespaceRecord> records = namespaces_->List();
  std::lock_guard<std::mutex> l(mu_);
  s.used_bytes = index_.used_bytes();
  s.value_bytes = index_.value_bytes();
  s.blocks = index_.blocks();
  s.evicted_blocks = evicted_blocks_;
  s.evicted_bytes = evicted_bytes_;
  s.quota_evicted_blocks = quota_evicted_blocks_;
  s.quota_evicted_bytes = quota_evicted_bytes_;
  s.expired_blocks = expired_blocks_;
  s.checksum_failures = checksum_failures_;
  s.repair = repair_;
  s.disk_bytes = disk_usage_.total();
  s.write_resumes = write_resumes_;
  for (const NamespaceRecord& r : records) {
    NamespaceStatsEntry n;
    n.record = r;
    if (auto it = index_.usage().find(r.id); it != index_.usage().end()) {
      n.blocks = it->second.blocks;
      n.value_bytes = it->second.value_bytes;
    }
    n.logical_bytes = n.blocks * r.logical_block_bytes;
    s.logical_bytes += n.logical_bytes;
    s.namespaces.push_back(std::move(n));
  }
  return s;
}

uint64_t BlockStore::StoredValueBytes(absl::Span<const uint64_t> namespace_ids) const {
  uint64_t bytes = 0;
  std::lock_guard<std::mutex> l(mu_);
  for (uint64_t id : namespace_ids) {
    if (auto it = index_.usage().find(id); it != index_.usage().end()) {
      bytes += it->second.value_bytes;
    }
  }
  return bytes;
}

DbStats BlockStore::GetDbStats() const {
  DbStats d;
  for (rocksdb::ColumnFamilyHandle* cf :
       {cf_default_, cf_blocks_, cf_meta_, cf_access_, cf_namespaces_, cf_namespaces_copy_}) {
    uint64_t v = 0;
    if (db_->GetIntProperty(cf, "rocksdb.total-sst-files-size", &v)) d.sst_bytes += v;
    if (db_->GetIntProperty(cf, "rocksdb.estimate-pending-compaction-bytes", &v)) {
      d.pending_compaction_bytes += v;
    }
  }
  d.value_log_bytes = log_->AllocatedBytes();
  d.value_log_segments = log_->SegmentCount();
  d.read_cache = log_->CacheStats();
  d.read_cache_hits = read_cache_hits_.load(std::memory_order_relaxed);
  d.read_cache_misses = read_cache_misses_.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> l(mu_);
  d.block_index_memory_bytes = index_.MemoryBytes();
  d.policy_memory_bytes = policy_->MemoryBytes();
  d.index_memory_bytes = d.block_index_memory_bytes + d.policy_memory_bytes;
  return d;
}

}  // namespace turbokv::server
