// A client of many turbokv servers (docs/cluster.md).
//
// Placement (rendezvous.h): a prefix chain is cut into segments of
// ShardedClientOptions::segment_blocks consecutive blocks by position, and each block goes to the
// first R nodes of the rendezvous rank of its segment's first block. The default, 1, places each
// block by its own hash, which spreads every chain and so the load evenly over the nodes and hits
// best (docs/cluster.md, "Placement"); longer segments keep runs of a chain on one node, so a
// Lookup asks fewer nodes. A PutBlocks call's per-node calls that do not hold its last block carry
// CallOptions::chain_continues, so each server's eviction policy sees the request's last block
// where a single server would.
//
// Chain context: placing a block needs its position in the chain, so every call that takes hashes
// takes a ChainContext (last argument) saying where hashes[0] sits; the default says hashes[0] is
// the chain's head. The engines' pattern:
//
//   Lookup(ns, chain)                                  // the chain from its head
//   GetBlocks(ns, chain[0, m))                         // starts at the head too
//   PutBlocks(ns, chain[m, n), ..., *MakeChainContext(chain, m, segment_blocks))
//
// A call starting inside a segment without the segment's head hash fails with InvalidArgument
// naming chain.segment_head (PlacementKeys). Every client of a cluster must use the same
// segment_blocks (it is part of the placement, like the node ids).
//
// Batched calls are split per node, run concurrently (one thread per node and call), and the
// answers merged in request order:
//   PutBlocks     each block goes to all of its R owners; its result is OK when at least one
//                 copy was stored, else the first owner's error (Unavailable when down).
//   GetBlocks     each block is read from its owners in rank order; the first that has it
//                 wins (blocks are named by their prefix hash: every copy is the same block).
//   Lookup        each node is asked about the chain hashes it owns, in chain order, and
//                 answers with its leading match; the chain matches up to the first block none
//                 of whose owners has it. With R >= 2 one node's miss does not end the chain,
//                 so owners still unknown at the first unresolved block are asked again from
//                 there (R = 1 always takes one round).
//                 Each Lookup also sends the other nodes the eviction-policy tuning the
//                 cluster's tuning node (TuningNode) returned last (CallOptions::follow_tuning),
//                 so every node ranks the pieces of a chain alike (docs/cluster.md, "One
//                 tuning for the cluster").
//   RegisterNamespace  on every node; a node that later answers NotFound for a namespace this
//                 client registered (a new pod, a wiped volume) gets it registered again and
//                 the call is retried once on it.
//   DeleteBlocks  from every owner; returns the copies deleted.
//   DropNamespace on every node; returns the blocks deleted (all copies).
//   Stats         sums over the nodes that answer (NodeStats: per node).
//
// Failures: a node that fails with Unavailable or DeadlineExceeded is marked down for
// ShardedClientOptions::node_down (skipped meanwhile) and costs misses: its blocks miss on
// Lookup and GetBlocks (nothing, with R >= 2 and a live replica), and puts of blocks with no
// live owner get a per-block Unavailable. The call itself fails only when the cluster cannot
// answer: none of the nodes it asked answered and every other node is marked down (Unavailable;
// NotFound when every node asked said NotFound), or with the caller's own errors
// (InvalidArgument, ...), as Client documents them. (With segments one call often asks a single
// node; its failure costs that call's blocks, as misses or per-block results, not the call.)
//
// DNS targets are re-resolved on the first call after ShardedClientOptions::dns_refresh; a
// failed resolution keeps the previous nodes.
//
// Thread safety: a ShardedClient is thread-safe; share one per process.
#ifndef TURBOKV_CLIENT_SHARDED_CLIENT_H_
#define TURBOKV_CLIENT_SHARDED_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "turbokv/client/client.h"
#include "turbokv/client/rendezvous.h"

namespace turbokv::client {

struct ShardedClientOptions {
  // Options of each per-node Client. Default: ClientOptions defaults with max_attempts 2 (a
  // down node should cost little) and max_reconnect_backoff 1 s (a node that comes back is
  // used again soon).
  ClientOptions client = DefaultNodeOptions();
  // Copies of each block (R). Range [1, 16]; capped at the number of nodes. Default: 1.
  int replicas = 1;
  // Blocks of a chain placed together (S, rendezvous.h). Range [1, kMaxSegmentBlocks]; 1 places
  // each block by its own hash. Default: kDefaultSegmentBlocks (1).
  int segment_blocks = kDefaultSegmentBlocks;
  // How long a node that failed is skipped. Range [0, 1 h]. Default: 5 s.
  absl::Duration node_down = absl::Seconds(5);
  // Re-resolution period of dns:/// endpoints. Range [1 s, 1 day]. Default: 30 s.
  absl::Duration dns_refresh = absl::Seconds(30);

  static ClientOptions DefaultNodeOptions();
  [[nodiscard]] absl::Status Validate() const;
};

class ShardedClient final : public StoreClient {
 public:
  // `endpoints`: an endpoint spec (rendezvous.h), e.g. "10.0.0.1:50051,10.0.0.2:50051" or
  // "dns:///turbokv.default.svc.cluster.local:50051". Resolves DNS items now; does not
  // connect. InvalidArgument: bad spec or options. Unavailable: a name does not resolve.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ShardedClient>> Connect(
      absl::string_view endpoints, const ShardedClientOptions& options = {});
  ~ShardedClient() override;
  ShardedClient(const ShardedClient&) = delete;
  ShardedClient& operator=(const ShardedClient&) = delete;

  const ShardedClientOptions& options() const;
  // Current node ids (re-resolving DNS items when due).
  std::vector<std::string> Nodes() const;
  // Node ids of placement key block_hash (a segment's first block: they hold its whole segment),
  // preferred first.
  std::vector<std::string> Owners(absl::string_view block_hash) const;
  // For each of `hashes` (consecutive blocks of one chain, placed as `chain` says), the node ids
  // holding it, preferred first. InvalidArgument as PlacementKeys.
  [[nodiscard]] absl::StatusOr<std::vector<std::vector<std::string>>> Placement(
      absl::Span<const std::string> hashes, const ChainContext& chain = {}) const;
  // MakeChainContext(chain, start, options().segment_blocks).
  [[nodiscard]] absl::StatusOr<ChainContext> ContextOf(absl::Span<const std::string> chain,
                                                       size_t start) const;
  // Replaces the endpoint spec (e.g. after scaling); clients of remaining nodes are kept.
  [[nodiscard]] absl::Status SetEndpoints(absl::string_view endpoints);

  // StoreClient's calls over the cluster (semantics in the file comment). `chain`: where
  // hashes[0] sits in its prefix chain (default: at its head); InvalidArgument as PlacementKeys.
  // Stats: sums of capacity, usage, blocks, bytes, evictions and checksum failures; namespaces
  // merged by id; codec_backend / durability / version: the distinct values joined by ",".

  // Per node: its Stats or its error.
  std::vector<std::pair<std::string, absl::StatusOr<ServerStats>>> NodeStats(
      const CallOptions& call = {}) const;

 private:
  absl::StatusOr<NamespaceInfo> DoRegisterNamespace(const NamespaceDescriptor& descriptor,
                                                    const CallOptions& call) const override;
  absl::StatusOr<std::vector<BlockPutResult>> DoPutBlocks(
      uint64_t namespace_id, absl::Span<const std::string> hashes,
      absl::Span<const absl::Span<const uint8_t>> blocks, Encoding encoding,
      const CallOptions& call, const ChainContext& chain) const override;
  absl::StatusOr<LookupResult> DoLookup(uint64_t namespace_id, absl::Span<const std::string> hashes,
                                        uint32_t lease_seconds, const CallOptions& call,
                                        const ChainContext& chain) const override;
  absl::StatusOr<GetBlocksResult> DoGetBlocks(uint64_t namespace_id,
                                              absl::Span<const std::string> hashes,
                                              const GetOptions& get, const CallOptions& call,
                                              const ChainContext& chain) const override;
  absl::StatusOr<uint32_t> DoDeleteBlocks(uint64_t namespace_id,
                                          absl::Span<const std::string> hashes,
                                          const CallOptions& call,
                                          const ChainContext& chain) const override;
  absl::StatusOr<uint64_t> DoDropNamespace(uint64_t namespace_id,
                                           const CallOptions& call) const override;
  absl::StatusOr<ServerStats> DoStats(const CallOptions& call) const override;

  struct Impl;
  explicit ShardedClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace turbokv::client

#endif  // TURBOKV_CLIENT_SHARDED_CLIENT_H_
