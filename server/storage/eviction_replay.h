// Replays a request trace through an EvictionPolicy in-process (no RocksDB, no server), the way
// the store serves a prefix-cache client, and the optimal offline policy (Belady) on the same
// trace. Used by bench/policy_sim.cc and the policy's unit tests.
//
// Per request, with its prefix chain of block ids:
//   Lookup(chain): matched = the leading blocks present (before the request stores anything);
//     OnHit for each, in chain order, with its parent.
//   GetBlocks(matched): OnHit for each again (same request number) when get_reports_hits.
//   PutBlocks(the rest, in chain order): a block already present (behind a missing one) is an
//     OnHit; a new one needs room: SelectVictims (never this request's own blocks), OnErase
//     each victim, then OnInsert. A block that does not fit ends the request's put.
// Hit ratio = matched blocks / all blocks of all chains (each request's chain counts in full).
//
// Not thread-safe (a run owns its policy).
#ifndef TURBOKV_SERVER_STORAGE_EVICTION_REPLAY_H_
#define TURBOKV_SERVER_STORAGE_EVICTION_REPLAY_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "server/storage/eviction_policy.h"

namespace turbokv::server {

// One request: its arrival time and its prefix chain (block ids name a block and its prefix:
// equal ids mean equal prefixes, the Mooncake trace's hash_ids).
struct TraceRequest {
  int64_t timestamp_ms = 0;
  std::vector<uint64_t> blocks;
};

struct ReplayOptions {
  // Bytes the replayed store holds. Required (> 0).
  uint64_t capacity_bytes = 0;
  // Bytes every block counts. Default: 1 (capacity in blocks).
  uint32_t block_charge = 1;
  // Whether the first block a request puts after a Lookup match names the last matched block
  // as its parent (a store that ties a request's calls together, or a PutBlocks carrying the
  // parent hash). Default: true.
  bool parent_across_calls = true;
  // Whether GetBlocks reports its blocks as hits again after the Lookup. Default: true.
  bool get_reports_hits = true;
  // Whether each call (Lookup, GetBlocks, PutBlocks) carries a request number of its own instead
  // of sharing the request's. Default: false.
  bool number_calls_apart = false;
};

struct ReplayResult {
  uint64_t hit_blocks = 0;         // matched by Lookup
  uint64_t referenced_blocks = 0;  // all chain blocks
  uint64_t inserted_blocks = 0;
  uint64_t evicted_blocks = 0;
  uint64_t unstored_blocks = 0;  // did not fit (or, for Belady, were not worth storing)
  double hit_ratio() const {
    return referenced_blocks == 0
               ? 0.0
               : static_cast<double>(hit_blocks) / static_cast<double>(referenced_blocks);
  }
};

// Replays `trace` through `policy`, which must be empty.
ReplayResult Replay(absl::Span<const TraceRequest> trace, EvictionPolicy& policy,
                    const ReplayOptions& options);

// The same replay with the optimal offline policy: evicts the block whose next use is furthest
// (leaves first on ties), and does not store a block whose next use is further than every
// stored one's (L. Belady, IBM Systems Journal 5(2), 1966). An upper bound for any policy with
// uniform charges (with the prefix constraint it is optimal up to ties).
ReplayResult ReplayBelady(absl::Span<const TraceRequest> trace, const ReplayOptions& options);

// Distinct block ids of the trace.
size_t DistinctBlocks(absl::Span<const TraceRequest> trace);
// Hit ratio with unbounded capacity (every block referenced before is matched).
double InfiniteCacheHitRatio(absl::Span<const TraceRequest> trace);

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_STORAGE_EVICTION_REPLAY_H_
