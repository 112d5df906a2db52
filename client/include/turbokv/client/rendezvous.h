// Placement of blocks on nodes (docs/cluster.md).
//
// THE CONTRACT (every client language must reproduce it bit for bit; test vectors live in
// client/python/turbokv/rendezvous_vectors.json and are checked by the C++ and the Python
// tests):
//
//   weight(node_id, block_hash) = the first 8 bytes of
//                                 SHA-256( node_id as UTF-8 ‖ 0x00 ‖ block_hash )
//                                 read as a big-endian uint64
//   rank(nodes, block_hash)     = the nodes sorted by weight, highest first; equal weights
//                                 by node_id ascending (bytewise)
//
// Segments: a prefix chain is cut into segments of S = segment_blocks consecutive blocks by
// absolute position ([0, S), [S, 2S), ...); every block of a segment is placed by the hash of the
// segment's first block, its placement key:
//
//   placement_key(chain, i) = chain[(i / S) * S]
//   owners(chain, i)        = the first R nodes of rank(nodes, placement_key(chain, i))
//
// (R = replication factor; S = 1 places each block by its own hash.) This is rendezvous or
// highest-random-weight hashing (Thaler & Ravishankar, "A Name-Based Mapping Scheme for
// Rendezvous", 1996): when a node joins N others, only the keys it now wins move (~1/(N+1) of
// them); when one leaves, only its keys move.
//
// Chain context: a call whose hashes do not start at their chain's head says where they sit
// (ChainContext): the position of hashes[0] and, when its segment starts before it, the hash of the
// segment's first block.
//
// A node's id is its endpoint string: "host:port" exactly as written in a static list, or "ip:port"
// ("[ip6]:port") for each A/AAAA record of a "dns:///name:port" target.
//
// Endpoint specs: a comma-separated list of items, each "host:port", "[ip6]:port" or
// "dns:///name:port" (no authority).
//
// Thread safety: free functions without shared state.
#ifndef TURBOKV_CLIENT_RENDEZVOUS_H_
#define TURBOKV_CLIENT_RENDEZVOUS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace turbokv::client {

// weight(node_id, block_hash) above.
uint64_t RendezvousWeight(absl::string_view node_id, absl::string_view block_hash);

// Indices into node_ids in rank order for block_hash (all of them).
std::vector<size_t> RendezvousRank(absl::Span<const std::string> node_ids,
                                   absl::string_view block_hash);

// The first min(replicas, node_ids.size()) indices of the rank (replicas < 1 counts as 1).
std::vector<size_t> RendezvousOwners(absl::Span<const std::string> node_ids,
                                     absl::string_view block_hash, int replicas);

// The key the cluster's tuning node is ranked by (docs/cluster.md, "One tuning for the
// cluster"): the first node of its rank is the one whose eviction-policy tuning ShardedClient
// sends to the others with their Lookups. The same in client/python/turbokv/sharding.py.
inline constexpr absl::string_view kTuningKey = "turbokv/policy-tuning";
// Index into node_ids of the tuning node (the first of kTuningKey's rank); node_ids.size() when
// empty.
size_t TuningNode(absl::Span<const std::string> node_ids);

// Default segment_blocks: 1, each block by its own hash. It balances the nodes' loads best and
// hits best in the cache replay benchmark; longer segments ask fewer nodes per Lookup for a
// lower hit ratio (docs/cluster.md, "Placement").
inline constexpr int kDefaultSegmentBlocks = 1;
// Largest segment_blocks accepted.
inline constexpr int kMaxSegmentBlocks = 1 << 20;

// Where a call's hashes sit in their prefix chain (placement needs it).
struct ChainContext {
  // Chain index of hashes[0]; 0: hashes[0] is the chain's head (the default).
  uint64_t position = 0;
  // The block hash at chain index (position / S) * S, the first block of hashes[0]'s segment.
  // Required when that index is before `position`; ignored when position is a multiple of S.
  std::string segment_head;
};

// InvalidArgument naming segment_blocks when it is outside [1, kMaxSegmentBlocks].
[[nodiscard]] absl::Status ValidateSegmentBlocks(int segment_blocks);

// The context of chain[start:] (`chain`: the prefix chain from its head; only the hash at (start /
// segment_blocks) * segment_blocks is read). InvalidArgument: start > chain.size(), bad
// segment_blocks.
[[nodiscard]] absl::StatusOr<ChainContext> MakeChainContext(absl::Span<const std::string> chain,
                                                            size_t start, int segment_blocks);

// For each of `hashes` (consecutive blocks of one chain, hashes[0] at chain.position) its placement
// key: a view of an element of `hashes` or of chain.segment_head (valid while they are).
// InvalidArgument naming chain.segment_head when hashes[0]'s segment starts before it and
// chain.segment_head is empty; naming segment_blocks when it is out of range.
[[nodiscard]] absl::StatusOr<std::vector<absl::string_view>> PlacementKeys(
    absl::Span<const std::string> hashes, int segment_blocks, const ChainContext& chain);

// One item of an endpoint spec.
struct Endpoint {
  std::string host;   // name or IP literal (IPv6 without brackets)
  uint16_t port = 0;  // 1..65535
  bool dns = false;   // true: "dns:///host:port", re-resolved by the sharded client

  // The item as it would be written ("dns:///" prefix when dns).
  std::string Spec() const;
};

// "host:port", IPv6 literals in brackets.
std::string FormatHostPort(absl::string_view host, uint16_t port);

// Parses an endpoint spec. InvalidArgument: empty spec or item, missing or bad port,
// "dns://authority/...", duplicate item.
[[nodiscard]] absl::StatusOr<std::vector<Endpoint>> ParseEndpoints(absl::string_view spec);

// Node ids of an endpoint list: static items as written, DNS items expanded with getaddrinfo
// to one "ip:port" per distinct A/AAAA address (IPv4 before IPv6, each sorted by address).
// Duplicates are dropped, first occurrence kept. Unavailable: a name does not resolve, or the
// list resolves to no address.
[[nodiscard]] absl::StatusOr<std::vector<std::string>> ResolveEndpoints(
    absl::Span<const Endpoint> endpoints);

}  // namespace turbokv::client

#endif  // TURBOKV_CLIENT_RENDEZVOUS_H_
