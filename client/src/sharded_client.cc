#include "turbokv/client/sharded_client.h"

#include <algorithm>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "turbokv/client/rendezvous.h"

namespace turbokv::client {

ClientOptions ShardedClientOptions::DefaultNodeOptions() {
  ClientOptions o;
  o.max_attempts = 2;
  o.max_reconnect_backoff = absl::Seconds(1);
  return o;
}

absl::Status ShardedClientOptions::Validate() const {
  if (absl::Status st = client.Validate(); !st.ok()) return st;
  if (replicas < 1 || replicas > 16) {
    return absl::InvalidArgumentError(absl::StrCat("replicas ", replicas, " is outside [1, 16]"));
  }
  if (absl::Status st = ValidateSegmentBlocks(segment_blocks); !st.ok()) return st;
  if (node_down < absl::ZeroDuration() || node_down > absl::Hours(1)) {
    return absl::InvalidArgumentError("node_down must be in [0, 1 h]");
  }
  if (dns_refresh < absl::Seconds(1) || dns_refresh > absl::Hours(24)) {
    return absl::InvalidArgumentError("dns_refresh must be in [1 s, 1 day]");
  }
  return absl::OkStatus();
}

namespace {

// Errors that say "this node cannot answer now" rather than "the request is wrong".
bool IsNodeFailure(const absl::Status& st) {
  return st.code() == absl::StatusCode::kUnavailable ||
         st.code() == absl::StatusCode::kDeadlineExceeded ||
         st.code() == absl::StatusCode::kNotFound;
}

// Runs fn(i) for i in [0, n) concurrently and waits for all.
template <typename T>
std::vector<T> RunAll(size_t n, const std::function<T(size_t)>& fn) {
  std::vector<std::future<T>> futures;
  futures.reserve(n);
  for (size_t i = 0; i < n; ++i) futures.push_back(std::async(std::launch::async, fn, i));
  std::vector<T> out;
  out.reserve(n);
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

// For each of `hashes`, its owners' indices into `nodes` (placement in rendezvous.h): one
// rendezvous rank per distinct placement key, i.e. per segment.
absl::StatusOr<std::vector<std::vector<size_t>>> OwnersOf(absl::Span<const std::string> nodes,
                                                          absl::Span<const std::string> hashes,
                                                          const ChainContext& chain,
                                                          const ShardedClientOptions& options) {
  absl::StatusOr<std::vector<absl::string_view>> keys =
      PlacementKeys(hashes, options.segment_blocks, chain);
  if (!keys.ok()) return keys.status();
  std::vector<std::vector<size_t>> out(hashes.size());
  for (size_t i = 0; i < hashes.size(); ++i) {
    if (i > 0 && (*keys)[i] == (*keys)[i - 1]) {
      out[i] = out[i - 1];  // the same segment
    } else {
      out[i] = RendezvousOwners(nodes, (*keys)[i], options.replicas);
    }
  }
  return out;
}

}  // namespace

struct ShardedClient::Impl {
  ShardedClientOptions options;
  mutable std::mutex mu;
  std::vector<Endpoint> endpoints;                                // guarded by mu
  bool has_dns = false;                                           // guarded by mu
  std::vector<std::string> nodes;                                 // guarded by mu
  absl::Time resolved_at;                                         // guarded by mu
  std::map<std::string, std::shared_ptr<Client>> clients;         // guarded by mu
  absl::flat_hash_map<std::string, absl::Time> down_until;        // guarded by mu
  absl::flat_hash_map<uint64_t, NamespaceDescriptor> namespaces;  // guarded by mu
  absl::flat_hash_map<uint64_t, uint32_t> block_tokens;           // guarded by mu
  // The tuning node's last eviction-policy tuning, and that node (a new tuning node starts
  // with nothing to send): docs/cluster.md, "One tuning for the cluster". Guarded by mu.
  std::string tuning_node;
  std::optional<PolicyTuning> tuning;

  absl::Status SetNodes(std::vector<std::string> new_nodes) {
    std::lock_guard<std::mutex> lock(mu);
    for (const std::string& n : new_nodes) {
      if (clients.count(n)) continue;
      absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(n, options.client);
      if (!c.ok()) return c.status();
      clients[n] = std::shared_ptr<Client>(*std::move(c));
    }
    const std::set<std::string> keep(new_nodes.begin(), new_nodes.end());
    for (auto it = clients.begin(); it != clients.end();) {
      it = keep.count(it->first) ? std::next(it) : clients.erase(it);
    }
    nodes = std::move(new_nodes);
    resolved_at = absl::Now();
    return absl::OkStatus();
  }

  // Current nodes and their clients (a consistent snapshot).
  std::pair<std::vector<std::string>, std::vector<std::shared_ptr<Client>>> Snapshot() {
    std::vector<Endpoint> eps;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (has_dns && absl::Now() - resolved_at >= options.dns_refresh) {
        eps = endpoints;
        resolved_at = absl::Now();  // one re-resolution per period, even when it fails
      }
    }
    if (!eps.empty()) {
      absl::StatusOr<std::vector<std::string>> r = ResolveEndpoints(eps);
      if (r.ok()) SetNodes(*std::move(r)).IgnoreError();  // failure keeps the old nodes
    }
    std::lock_guard<std::mutex> lock(mu);
    std::vector<std::shared_ptr<Client>> cs;
    for (const std::string& n : nodes) cs.push_back(clients.at(n));
    return {nodes, cs};
  }

  // fn(client) on one node, honouring the down mark, re-registering on NotFound.
  template <typename T>
  absl::StatusOr<T> OnNode(const std::string& node, const Client& client,
                           std::optional<uint64_t> ns,
                           const std::function<absl::StatusOr<T>(const Client&)>& fn) {
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = down_until.find(node);
      if (it != down_until.end() && it->second > absl::Now()) {
        return absl::UnavailableError(absl::StrCat("node ", node, " is marked down"));
      }
    }
    for (int attempt = 0;; ++attempt) {
      absl::StatusOr<T> r = fn(client);
      if (r.ok()) return r;
      const absl::Status st = r.status();
      if (st.code() == absl::StatusCode::kUnavailable ||
          st.code() == absl::StatusCode::kDeadlineExceeded) {
        std::lock_guard<std::mutex> lock(mu);
        down_until[node] = absl::Now() + options.node_down;
        return absl::Status(st.code(), absl::StrCat(node, ": ", st.message()));
      }
      if (st.code() != absl::StatusCode::kNotFound || !ns.has_value() || attempt == 1) return st;
      std::optional<NamespaceDescriptor> d;
      {
        std::lock_guard<std::mutex> lock(mu);
        auto it = namespaces.find(*ns);
        if (it != namespaces.end()) d = it->second;
      }
      if (!d.has_value()) return st;
      if (absl::StatusOr<NamespaceInfo> info = client.RegisterNamespace(*d); !info.ok()) {
        return info.status();
      }
    }
  }

  // The call's error when none of the nodes it asked (`nodes`, with `errors`) answered: NotFound
  // when every one said so; OK when some other node of the cluster (`all`) is not marked down, so
  // the call reports the asked nodes' blocks as misses (with segments one call often asks one node,
  // and a down node must cost misses, not a failed call, while the cluster answers); else
  // Unavailable naming each node's error. OK when some node answered.
  absl::Status NoneAnswered(const std::vector<std::string>& all,
                            const std::vector<std::string>& nodes,
                            const std::vector<absl::Status>& errors) {
    if (errors.empty() ||
        std::any_of(errors.begin(), errors.end(), [](const absl::Status& s) { return s.ok(); })) {
      return absl::OkStatus();
    }
    if (std::all_of(errors.begin(), errors.end(),
                    [](const absl::Status& s) { return absl::IsNotFound(s); })) {
      return errors.front();
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      const absl::Time now = absl::Now();
      for (const std::string& n : all) {
        if (std::find(nodes.begin(), nodes.end(), n) != nodes.end()) continue;
        auto it = down_until.find(n);
        if (it == down_until.end() || it->second <= now) return absl::OkStatus();
      }
    }
    std::vector<std::string> parts;
    for (size_t i = 0; i < errors.size(); ++i) {
      parts.push_back(absl::StrCat(nodes[i], ": ", errors[i].ToString()));
    }
    return absl::UnavailableError(
        absl::StrCat("no turbokv node answered (", absl::StrJoin(parts, "; "), ")"));
  }
};

ShardedClient::ShardedClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ShardedClient::~ShardedClient() = default;

absl::StatusOr<std::unique_ptr<ShardedClient>> ShardedClient::Connect(
    absl::string_view endpoints, const ShardedClientOptions& options) {
  if (absl::Status st = options.Validate(); !st.ok()) return st;
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  std::unique_ptr<ShardedClient> c(new ShardedClient(std::move(impl)));
  if (absl::Status st = c->SetEndpoints(endpoints); !st.ok()) return st;
  return c;
}

absl::Status ShardedClient::SetEndpoints(absl::string_view endpoints) {
  absl::StatusOr<std::vector<Endpoint>> eps = ParseEndpoints(endpoints);
  if (!eps.ok()) return eps.status();
  absl::StatusOr<std::vector<std::string>> nodes = ResolveEndpoints(*eps);
  if (!nodes.ok()) return nodes.status();
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->has_dns = std::any_of(eps->begin(), eps->end(), [](const Endpoint& e) { return e.dns; });
    impl_->endpoints = *std::move(eps);
  }
  return impl_->SetNodes(*std::move(nodes));
}

const ShardedClientOptions& ShardedClient::options() const { return impl_->options; }

std::vector<std::string> ShardedClient::Nodes() const { return impl_->Snapshot().first; }

std::vector<std::string> ShardedClient::Owners(absl::string_view block_hash) const {
  const std::vector<std::string> nodes = Nodes();
  std::vector<std::string> out;
  for (size_t i : RendezvousOwners(nodes, block_hash, impl_->options.replicas)) {
    out.push_back(nodes[i]);
  }
  return out;
}

absl::StatusOr<std::vector<std::vector<std::string>>> ShardedClient::Placement(
    absl::Span<const std::string> hashes, const ChainContext& chain) const {
  const std::vector<std::string> nodes = Nodes();
  absl::StatusOr<std::vector<std::vector<size_t>>> owners =
      OwnersOf(nodes, hashes, chain, impl_->options);
  if (!owners.ok()) return owners.status();
  std::vector<std::vector<std::string>> out(hashes.size());
  for (size_t i = 0; i < hashes.size(); ++i) {
    for (size_t k : (*owners)[i]) out[i].push_back(nodes[k]);
  }
  return out;
}

absl::StatusOr<ChainContext> ShardedClient::ContextOf(absl::Span<const std::string> chain,
                                                      size_t start) const {
  return MakeChainContext(chain, start, impl_->options.segment_blocks);
}

absl::StatusOr<NamespaceInfo> ShardedClient::DoRegisterNamespace(
    const NamespaceDescriptor& descriptor, const CallOptions& call) const {
  auto snapshot = impl_->Snapshot();  // named members: lambdas below capture them
  std::vector<std::string>& nodes = snapshot.first;
  std::vector<std::shared_ptr<Client>>& clients = snapshot.second;
  std::vector<absl::StatusOr<NamespaceInfo>> results =
      RunAll<absl::StatusOr<NamespaceInfo>>(nodes.size(), [&](size_t i) {
        return impl_->OnNode<NamespaceInfo>(
            nodes[i], *clients[i], std::nullopt,
            [&](const Client& c) { return c.RegisterNamespace(descriptor, call); });
      });
  std::vector<absl::Status> errors;
  for (const auto& r : results) {
    if (!r.ok() && !IsNodeFailure(r.status())) return r.status();  // the caller's error
    errors.push_back(r.status());
  }
  if (absl::Status st = impl_->NoneAnswered(nodes, nodes, errors); !st.ok()) return st;
  for (const auto& r : results) {
    if (!r.ok()) continue;
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->namespaces[r->namespace_id] = descriptor;
    impl_->block_tokens[r->namespace_id] = descriptor.block_tokens;
    return *r;
  }
  return absl::InternalError("unreachable");
}

absl::StatusOr<std::vector<BlockPutResult>> ShardedClient::DoPutBlocks(
    uint64_t namespace_id, absl::Span<const std::string> hashes,
    absl::Span<const absl::Span<const uint8_t>> blocks, Encoding encoding, const CallOptions& call,
    const ChainContext& chain) const {
  if (hashes.size() != blocks.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("PutBlocks got ", hashes.size(), " hashes but ", blocks.size(), " blocks"));
  }
  if (hashes.empty()) return std::vector<BlockPutResult>{};
  auto snapshot = impl_->Snapshot();  // named members: lambdas below capture them
  std::vector<std::string>& nodes = snapshot.first;
  std::vector<std::shared_ptr<Client>>& clients = snapshot.second;
  absl::StatusOr<std::vector<std::vector<size_t>>> owners_or =
      OwnersOf(nodes, hashes, chain, impl_->options);
  if (!owners_or.ok()) return owners_or.status();
  const std::vector<std::vector<size_t>>& owners = *owners_or;
  std::vector<std::vector<size_t>> per_node(nodes.size());
  for (size_t i = 0; i < hashes.size(); ++i) {
    for (size_t n : owners[i]) per_node[n].push_back(i);
  }
  using Results = absl::StatusOr<std::vector<BlockPutResult>>;
  std::vector<Results> results = RunAll<Results>(nodes.size(), [&](size_t n) -> Results {
    if (per_node[n].empty()) return std::vector<BlockPutResult>{};
    std::vector<std::string> hs;
    std::vector<absl::Span<const uint8_t>> bs;
    for (size_t i : per_node[n]) {
      hs.push_back(hashes[i]);
      bs.push_back(blocks[i]);
    }
    // A node without the call's last block gets only a middle part of the chain: its last
    // block is not the request's last (CallOptions::chain_continues).
    CallOptions node_call = call;
    node_call.chain_continues = call.chain_continues || per_node[n].back() + 1 != hashes.size();
    return impl_->OnNode<std::vector<BlockPutResult>>(
        nodes[n], *clients[n], namespace_id,
        [&](const Client& c) { return c.PutBlocks(namespace_id, hs, bs, encoding, node_call); });
  });
  std::vector<std::string> asked;
  std::vector<absl::Status> errors;
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (per_node[n].empty()) continue;
    if (!results[n].ok() && !IsNodeFailure(results[n].status())) return results[n].status();
    asked.push_back(nodes[n]);
    errors.push_back(results[n].status());
  }
  if (absl::Status st = impl_->NoneAnswered(nodes, asked, errors); !st.ok()) return st;
  // Position of block i in per_node[n]'s results.
  std::vector<absl::flat_hash_map<size_t, size_t>> where(nodes.size());
  for (size_t n = 0; n < nodes.size(); ++n) {
    for (size_t k = 0; k < per_node[n].size(); ++k) where[n][per_node[n][k]] = k;
  }
  std::vector<BlockPutResult> out(hashes.size());
  for (size_t i = 0; i < hashes.size(); ++i) {
    const BlockPutResult* first = nullptr;
    const BlockPutResult* ok = nullptr;
    for (size_t n : owners[i]) {
      if (!results[n].ok()) continue;
      const BlockPutResult& r = (*results[n])[where[n].at(i)];
      if (first == nullptr) first = &r;
      if (ok == nullptr && r.status.ok()) ok = &r;
    }
    if (ok != nullptr || first != nullptr) {
      out[i] = ok != nullptr ? *ok : *first;
    } else {
      out[i].block_hash = hashes[i];
      out[i].status = absl::UnavailableError(absl::StrCat(
          "no owner of the block is reachable (", results[owners[i][0]].status().message(), ")"));
    }
  }
  return out;
}

absl::StatusOr<LookupResult> ShardedClient::DoLookup(uint64_t namespace_id,
                                                     absl::Span<const std::string> hashes,
                                                     uint32_t lease_seconds,
                                                     const CallOptions& call,
                                                     const ChainContext& chain) const {
  auto snapshot = impl_->Snapshot();  // named members: lambdas below capture them
  std::vector<std::string>& nodes = snapshot.first;
  std::vector<std::shared_ptr<Client>>& clients = snapshot.second;
  const size_t n = hashes.size();
  absl::StatusOr<std::vector<std::vector<size_t>>> owners_or =
      OwnersOf(nodes, hashes, chain, impl_->options);
  if (!owners_or.ok()) return owners_or.status();
  const std::vector<std::vector<size_t>>& owners = *owners_or;
  std::vector<std::vector<size_t>> positions(nodes.size());  // chain positions per node
  for (size_t i = 0; i < n; ++i) {
    for (size_t k : owners[i]) positions[k].push_back(i);
  }
  // known[i][k]: 1 present, 0 missing, -1 not known yet (only for k among owners[i]).
  std::vector<absl::flat_hash_map<size_t, int>> known(n);
  std::vector<size_t> cursor(nodes.size(), 0);
  uint64_t tokens_per_block = 0;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->block_tokens.find(namespace_id);
    if (it != impl_->block_tokens.end()) tokens_per_block = it->second;
  }
  bool answered = false;
  std::vector<absl::Status> first_errors;
  std::vector<std::string> first_asked;
  // One tuning for the cluster: the tuning node's last answer goes to the others.
  const size_t leader = TuningNode(nodes);
  std::optional<PolicyTuning> follow;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (leader < nodes.size() && impl_->tuning_node == nodes[leader]) follow = impl_->tuning;
  }

  // Asks each node in `ask` about its hashes from its cursor on; records what it says.
  auto run = [&](const std::vector<size_t>& ask) -> absl::Status {
    std::vector<absl::StatusOr<LookupResult>> results =
        RunAll<absl::StatusOr<LookupResult>>(ask.size(), [&](size_t j) {
          const size_t k = ask[j];
          std::vector<std::string> hs;
          for (size_t p = cursor[k]; p < positions[k].size(); ++p) {
            hs.push_back(hashes[positions[k][p]]);
          }
          CallOptions node_call = call;
          node_call.follow_tuning = k == leader ? std::nullopt : follow;
          return impl_->OnNode<LookupResult>(
              nodes[k], *clients[k], namespace_id, [&](const Client& c) {
                return c.Lookup(namespace_id, hs, lease_seconds, node_call);
              });
        });
    for (size_t j = 0; j < ask.size(); ++j) {
      const size_t k = ask[j];
      const auto& r = results[j];
      if (!r.ok() && !IsNodeFailure(r.status())) return r.status();
      if (!r.ok()) {
        for (size_t p = cursor[k]; p < positions[k].size(); ++p) known[positions[k][p]][k] = 0;
        cursor[k] = positions[k].size();
        first_asked.push_back(nodes[k]);
        first_errors.push_back(r.status());
        continue;
      }
      answered = true;
      if (k == leader && r->tuning.has_value()) {
        std::lock_guard<std::mutex> lock(impl_->mu);
        impl_->tuning_node = nodes[k];
        impl_->tuning = r->tuning;
      }
      first_errors.push_back(absl::OkStatus());
      first_asked.push_back(nodes[k]);
      const size_t m = std::min<size_t>(r->matched_blocks, positions[k].size() - cursor[k]);
      if (m > 0 && r->matched_tokens > 0) tokens_per_block = r->matched_tokens / m;
      for (size_t p = cursor[k]; p < cursor[k] + m; ++p) known[positions[k][p]][k] = 1;
      if (cursor[k] + m < positions[k].size()) known[positions[k][cursor[k] + m]][k] = 0;
      cursor[k] += m + 1;
    }
    return absl::OkStatus();
  };

  std::vector<size_t> all;
  for (size_t k = 0; k < nodes.size(); ++k) {
    if (!positions[k].empty()) all.push_back(k);
  }
  if (absl::Status st = run(all); !st.ok()) return st;
  if (!answered) {
    if (absl::Status st = impl_->NoneAnswered(nodes, first_asked, first_errors); !st.ok()) {
      return st;
    }
  }
  size_t g = 0;
  while (g < n) {
    bool present = false;
    std::vector<size_t> unknown;
    for (size_t k : owners[g]) {
      auto it = known[g].find(k);
      if (it == known[g].end()) {
        unknown.push_back(k);
      } else if (it->second == 1) {
        present = true;
      }
    }
    if (present) {
      ++g;
      continue;
    }
    if (unknown.empty()) break;
    if (absl::Status st = run(unknown); !st.ok()) return st;
  }
  LookupResult out;
  out.matched_blocks = static_cast<uint32_t>(g);
  out.matched_tokens = g * tokens_per_block;
  return out;
}

absl::StatusOr<GetBlocksResult> ShardedClient::DoGetBlocks(uint64_t namespace_id,
                                                           absl::Span<const std::string> hashes,
                                                           const GetOptions& get,
                                                           const CallOptions& call,
                                                           const ChainContext& chain) const {
  auto snapshot = impl_->Snapshot();  // named members: lambdas below capture them
  std::vector<std::string>& nodes = snapshot.first;
  std::vector<std::shared_ptr<Client>>& clients = snapshot.second;
  GetBlocksResult out;
  out.encoding = get.encoding;
  out.blocks.resize(hashes.size());
  if (hashes.empty()) return out;
  absl::StatusOr<std::vector<std::vector<size_t>>> owners_or =
      OwnersOf(nodes, hashes, chain, impl_->options);
  if (!owners_or.ok()) return owners_or.status();
  const std::vector<std::vector<size_t>>& owners = *owners_or;
  size_t rounds = 0;
  for (const std::vector<size_t>& o : owners) rounds = std::max(rounds, o.size());
  std::vector<size_t> pending(hashes.size());
  for (size_t i = 0; i < pending.size(); ++i) pending[i] = i;
  bool answered = false;
  std::vector<std::string> asked;
  std::vector<absl::Status> errors;
  for (size_t round = 0; round < rounds && !pending.empty(); ++round) {
    std::vector<std::vector<size_t>> per_node(nodes.size());
    for (size_t i : pending) {
      if (round < owners[i].size()) per_node[owners[i][round]].push_back(i);
    }
    using Result = absl::StatusOr<GetBlocksResult>;
    std::vector<Result> results = RunAll<Result>(nodes.size(), [&](size_t k) -> Result {
      if (per_node[k].empty()) return GetBlocksResult{};
      std::vector<std::string> hs;
      for (size_t i : per_node[k]) hs.push_back(hashes[i]);
      return impl_->OnNode<GetBlocksResult>(
          nodes[k], *clients[k], namespace_id,
          [&](const Client& c) { return c.GetBlocks(namespace_id, hs, get, call); });
    });
    for (size_t k = 0; k < nodes.size(); ++k) {
      if (per_node[k].empty()) continue;
      Result& r = results[k];
      if (!r.ok() && !IsNodeFailure(r.status())) return r.status();
      asked.push_back(nodes[k]);
      errors.push_back(r.status());
      if (!r.ok()) continue;
      answered = true;
      if (r->blocks.size() != per_node[k].size()) {
        return absl::InternalError(absl::StrCat(nodes[k], " returned ", r->blocks.size(),
                                                " blocks for ", per_node[k].size()));
      }
      for (size_t j = 0; j < per_node[k].size(); ++j) {
        if (!r->blocks[j].has_value()) continue;
        if (out.dtype == DType::kUnspecified) out.dtype = r->dtype;
        out.blocks[per_node[k][j]] = std::move(r->blocks[j]);
      }
    }
    std::vector<size_t> still;
    for (size_t i : pending) {
      if (!out.blocks[i].has_value()) still.push_back(i);
    }
    pending = std::move(still);
  }
  if (!answered) {
    if (absl::Status st = impl_->NoneAnswered(nodes, asked, errors); !st.ok()) return st;
  }
  return out;
}

absl::StatusOr<uint32_t> ShardedClient::DoDeleteBlocks(uint64_t namespace_id,
                                                       absl::Span<const std::string> hashes,
                                                       const CallOptions& call,
                                                       const ChainContext& chain) const {
  auto snapshot = impl_->Snapshot();  // named members: lambdas below capture them
  std::vector<std::string>& nodes = snapshot.first;
  std::vector<std::shared_ptr<Client>>& clients = snapshot.second;
  absl::StatusOr<std::vector<std::vector<size_t>>> owners =
      OwnersOf(nodes, hashes, chain, impl_->options);
  if (!owners.ok()) return owners.status();
  std::vector<std::vector<std::string>> per_node(nodes.size());
  for (size_t i = 0; i < hashes.size(); ++i) {
    for (size_t k : (*owners)[i]) per_node[k].push_back(hashes[i]);
  }
  std::vector<absl::StatusOr<uint32_t>> results =
      RunAll<absl::StatusOr<uint32_t>>(nodes.size(), [&](size_t k) -> absl::StatusOr<uint32_t> {
        if (per_node[k].empty()) return 0u;
        return impl_->OnNode<uint32_t>(nodes[k], *clients[k], namespace_id, [&](const Client& c) {
          return c.DeleteBlocks(namespace_id, per_node[k], call);
        });
      });
  uint32_t total = 0;
  std::vector<std::string> asked;
  std::vector<absl::Status> errors;
  for (size_t k = 0; k < nodes.size(); ++k) {
    if (per_node[k].empty()) continue;
    if (!results[k].ok() && !IsNodeFailure(results[k].status())) return results[k].status();
    asked.push_back(nodes[k]);
    errors.push_back(results[k].status());
    if (results[k].ok()) total += *results[k];
  }
  if (absl::Status st = impl_->NoneAnswered(nodes, asked, errors); !st.ok()) return st;
  return total;
}

absl::StatusOr<uint64_t> ShardedClient::DoDropNamespace(uint64_t namespace_id,
                                                        const CallOptions& call) const {
  auto snapshot = impl_->Snapshot();  // named members: lambdas below capture them
  std::vector<std::string>& nodes = snapshot.first;
  std::vector<std::shared_ptr<Client>>& clients = snapshot.second;
  std::vector<absl::StatusOr<uint64_t>> results =
      RunAll<absl::StatusOr<uint64_t>>(nodes.size(), [&](size_t k) {
        return impl_->OnNode<uint64_t>(nodes[k], *clients[k], std::nullopt, [&](const Client& c) {
          return c.DropNamespace(namespace_id, call);
        });
      });
  uint64_t total = 0;
  std::vector<absl::Status> errors;
  for (const auto& r : results) {
    if (!r.ok() && !IsNodeFailure(r.status())) return r.status();
    errors.push_back(r.status());
    if (r.ok()) total += *r;
  }
  if (absl::Status st = impl_->NoneAnswered(nodes, nodes, errors); !st.ok()) return st;
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->namespaces.erase(namespace_id);
  return total;
}

std::vector<std::pair<std::string, absl::StatusOr<ServerStats>>> ShardedClient::NodeStats(
    const CallOptions& call) const {
  auto snapshot = impl_->Snapshot();  // named members: lambdas below capture them
  std::vector<std::string>& nodes = snapshot.first;
  std::vector<std::shared_ptr<Client>>& clients = snapshot.second;
  std::vector<absl::StatusOr<ServerStats>> results =
      RunAll<absl::StatusOr<ServerStats>>(nodes.size(), [&](size_t k) {
        return impl_->OnNode<ServerStats>(nodes[k], *clients[k], std::nullopt,
                                          [&](const Client& c) { return c.Stats(call); });
      });
  std::vector<std::pair<std::string, absl::StatusOr<ServerStats>>> out;
  for (size_t k = 0; k < nodes.size(); ++k) out.emplace_back(nodes[k], std::move(results[k]));
  return out;
}

absl::StatusOr<ServerStats> ShardedClient::DoStats(const CallOptions& call) const {
  std::vector<std::pair<std::string, absl::StatusOr<ServerStats>>> per = NodeStats(call);
  ServerStats out;
  std::vector<std::string> nodes;
  std::vector<absl::Status> errors;
  std::vector<std::string> backends, durabilities, versions;
  auto add_distinct = [](std::vector<std::string>* v, const std::string& s) {
    if (std::find(v->begin(), v->end(), s) == v->end()) v->push_back(s);
  };
  std::map<uint64_t, size_t> ns_index;
  for (auto& [node, r] : per) {
    nodes.push_back(node);
    errors.push_back(r.status());
    if (!r.ok()) {
      if (!IsNodeFailure(r.status())) return r.status();
      out.unanswered_nodes.emplace_back(node, r.status());
      continue;
    }
    out.capacity_bytes += r->capacity_bytes;
    out.used_bytes += r->used_bytes;
    out.stored_bytes += r->stored_bytes;
    out.blocks += r->blocks;
    out.logical_bytes += r->logical_bytes;
    out.evicted_blocks += r->evicted_blocks;
    out.checksum_failures += r->checksum_failures;
    add_distinct(&backends, r->codec_backend);
    add_distinct(&durabilities, r->durability);
    add_distinct(&versions, r->version);
    for (const NamespaceStats& ns : r->namespaces) {
      auto [it, inserted] = ns_index.emplace(ns.namespace_id, out.namespaces.size());
      if (inserted) {
        out.namespaces.push_back(ns);
        continue;
      }
      NamespaceStats& m = out.namespaces[it->second];
      m.blocks += ns.blocks;
      m.stored_bytes += ns.stored_bytes;
      m.logical_bytes += ns.logical_bytes;
    }
  }
  if (absl::Status st = impl_->NoneAnswered(nodes, nodes, errors); !st.ok()) return st;
  out.codec_backend = absl::StrJoin(backends, ",");
  out.durability = absl::StrJoin(durabilities, ",");
  out.version = absl::StrJoin(versions, ",");
  return out;
}

}  // namespace turbokv::client
