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
// A block lives on the first R nodes of its rank (R = replication factor). This is rendezvous
// or highest-random-weight hashing (Thaler & Ravishankar, "A Name-Based Mapping Scheme for
// Rendezvous", 1996): when a node joins N others, only the keys it now wins move (~1/(N+1)
// of them); when one leaves, only its keys move.
//
// A node's id is its endpoint string: "host:port" exactly as written in a static list, or
// "ip:port" ("[ip6]:port") for each A/AAAA record of a "dns:///name:port" target.
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
