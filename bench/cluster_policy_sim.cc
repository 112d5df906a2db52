// turbokv-cluster-policy-sim: replays Mooncake-format traces (JSONL, hash_ids) through N nodes,
// each with its own eviction policy (the store's LRFU, or LRU) and total/N blocks of capacity
// (every block charges one), against one node of the total, and prints the hit ratios.
//
// Placement: each segment of S consecutive blocks on the highest-weight node of its first
// block's id (a rendezvous hash of this file's own, not the clients' weights: the same kind of
// spread). Calls as the server sees them from ShardedClient, per request: a Lookup on every
// node of its own blocks in chain order (each node touches its leading match, also past the
// chain's real match unless --no-touch-past-match), a GetBlocks of the chain's leading match, a
// PutBlocks per node of the rest (a block that does not fit refuses the node's rest); every
// call its own request number, parents only within a call (the server's ChainCursor), only the
// chain's last block last_in_call (the chain_continues hint; --no-hint: each node's
// last). Also prints, at the end of a run, the share of live blocks no Lookup can reach (a block
// before them in their chain is gone from its node), and each LRFU node's half-life / unseen
// age / half-life changes. --tuning says how the LRFU nodes tune: each its own way, following
// node 0 (what the sharded clients make servers do: docs/cluster.md, "One tuning for the
// cluster"), or following a one-node reference of the whole capacity; --lrfu-* set the policy's
// options as turbokv-policy-sim's do.
//
// A model for trying cluster ideas in seconds; the figures that count come from the cache replay
// benchmark against real servers (bench/cache_replay, docs/cluster.md).
//
//   build/bin/turbokv-cluster-policy-sim --trace t.jsonl --capacity 10,25 --segment-blocks 1,16
//   build/bin/turbokv-cluster-policy-sim --trace t.jsonl --capacity 10,25 --tuning leader
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "bench/lrfu_cli.h"
#include "bench/mooncake_trace.h"
#include "server/storage/eviction_policy.h"
#include "server/storage/eviction_replay.h"
#include "server/storage/lrfu_policy.h"

namespace {

using turbokv::bench::LoadTrace;
using turbokv::server::EvictionPolicy;
using turbokv::server::kNoSlot;
using turbokv::server::RequestInfo;
using turbokv::server::TraceRequest;

uint64_t Mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// One node: a policy and its slots.
struct Node {
  std::unique_ptr<EvictionPolicy> policy;
  uint64_t capacity = 0;  // blocks
  absl::flat_hash_map<uint64_t, uint32_t> slot_of;
  std::vector<uint64_t> id_of;
  std::vector<uint32_t> free_slots;

  bool Has(uint64_t id) const { return slot_of.contains(id); }
};

struct Options {
  size_t nodes = 1;
  size_t segment = 1;
  std::string policy = "lrfu";
  bool touch_past_match = true;      // a node's Lookup touches its whole leading match
  bool hint = true;                  // only the chain's last block is last_in_call
  bool parent_across_calls = false;  // a put's first block names the node's previous block
  // lrfu: "own" (each node tunes itself), "leader" (nodes 1.. follow node 0's tuning after each
  // request, as the sharded client makes them) or "reference" (every node follows a one-node
  // reference of the whole capacity run beside them: nodes that agreed on a global view).
  std::string tuning = "own";
  turbokv::server::LrfuOptions lrfu;
};

struct Result {
  double hit_ratio = 0;    // matched blocks / all chain blocks
  double unreachable = 0;  // share of the live blocks at the end that no Lookup can reach
  std::string tuning;      // lrfu: each node's half-life / unseen age / half-life changes
};

// `o.nodes` nodes of `total` blocks together, fed one request at a time.
class Cluster {
 public:
  Cluster(uint64_t total, const Options& o) : o_(o), nodes_(o.nodes) {
    for (Node& n : nodes_) {
      n.capacity = std::max<uint64_t>(1, total / o.nodes);
      if (o.policy == "lrfu") {
        turbokv::server::LrfuOptions lo = o.lrfu;
        lo.capacity_bytes = n.capacity;
        n.policy = std::make_unique<turbokv::server::LrfuPolicy>(lo);
      } else {
        n.policy = std::make_unique<turbokv::server::LruPolicy>();
      }
    }
  }

  // One request of the trace (its chain of block ids); returns its leading match in blocks.
  size_t Request(const std::vector<uint64_t>& ids);
  // Each lrfu node but `reference` itself takes `reference`'s half-life and unseen age.
  void FollowTuning(const turbokv::server::EvictionPolicy& reference);
  const turbokv::server::EvictionPolicy& Policy(size_t node) const { return *nodes_[node].policy; }
  const turbokv::server::LrfuPolicy* Lrfu(size_t node) const {
    return dynamic_cast<const turbokv::server::LrfuPolicy*>(nodes_[node].policy.get());
  }
  // Share of the live blocks that no Lookup can reach (a block before them in their chain is
  // gone from its node); `parent_id`: block id -> the id before it (0: a chain's head).
  double Unreachable(const absl::flat_hash_map<uint64_t, uint64_t>& parent_id) const;
  std::string Tuning() const;

 private:
  const Options o_;
  std::vector<Node> nodes_;
  uint64_t call_ = 0;
  std::vector<size_t> owner_;
  std::vector<uint32_t> victims_;
};

size_t Cluster::Request(const std::vector<uint64_t>& ids) {
  owner_.resize(ids.size());
  for (size_t j = 0; j < ids.size(); ++j) {
    const uint64_t head = ids[j / o_.segment * o_.segment];
    size_t best = 0;
    uint64_t best_w = 0;
    for (size_t n = 0; n < o_.nodes; ++n) {
      const uint64_t w = Mix(head * 0x100000001b3ULL + n);
      if (n == 0 || w > best_w) best = n, best_w = w;
    }
    owner_[j] = best;
  }
  size_t m = 0;
  while (m < ids.size() && nodes_[owner_[m]].Has(ids[m])) ++m;
  // Lookup: each node its leading match of its own blocks, one call each.
  for (size_t n = 0; n < o_.nodes; ++n) {
    RequestInfo info;
    info.request = ++call_;
    uint32_t parent = kNoSlot;
    for (size_t j = 0; j < ids.size(); ++j) {
      if (owner_[j] != n) continue;
      if (!o_.touch_past_match && j >= m) break;
      auto it = nodes_[n].slot_of.find(ids[j]);
      if (it == nodes_[n].slot_of.end()) break;
      nodes_[n].policy->OnHit(it->second, parent, ids[j] + 1, /*charge=*/1, info);
      parent = it->second;
    }
  }
  // GetBlocks of the match, then PutBlocks of the rest, per node.
  for (size_t n = 0; n < o_.nodes; ++n) {
    Node& node = nodes_[n];
    RequestInfo info;
    info.request = ++call_;
    uint32_t parent = kNoSlot;
    for (size_t j = 0; j < m; ++j) {
      if (owner_[j] != n) continue;
      const uint32_t s = node.slot_of.at(ids[j]);
      node.policy->OnHit(s, parent, ids[j] + 1, /*charge=*/1, info);
      parent = s;
    }
    info.request = ++call_;
    if (!o_.parent_across_calls) parent = kNoSlot;
    absl::flat_hash_set<uint32_t> own;
    size_t last_here = ids.size();
    for (size_t j = m; j < ids.size(); ++j) {
      if (owner_[j] == n) last_here = j;
    }
    for (size_t j = m; j < ids.size(); ++j) {
      if (owner_[j] != n) continue;
      info.last_in_call = o_.hint ? j + 1 == ids.size() : j == last_here;
      if (auto it = node.slot_of.find(ids[j]); it != node.slot_of.end()) {
        node.policy->OnHit(it->second, parent, ids[j] + 1, /*charge=*/1, info);
        own.insert(it->second);
        parent = it->second;
        continue;
      }
      if (node.policy->charged_bytes() + 1 > node.capacity) {
        victims_.clear();
        node.policy->SelectVictims(
            node.policy->charged_bytes() + 1 - node.capacity, std::nullopt,
            [&own](uint32_t s) { return !own.contains(s); }, [](uint32_t) { return 1u; },
            &victims_);
        for (uint32_t v : victims_) {
          node.policy->OnErase(v, node.id_of[v] + 1, /*charge=*/1,
                               turbokv::server::EraseReason::kEvicted);
          node.slot_of.erase(node.id_of[v]);
          node.free_slots.push_back(v);
        }
        if (node.policy->charged_bytes() + 1 > node.capacity) break;  // refused: the rest too
      }
      uint32_t slot;
      if (!node.free_slots.empty()) {
        slot = node.free_slots.back();
        node.free_slots.pop_back();
      } else {
        slot = static_cast<uint32_t>(node.id_of.size());
        node.id_of.push_back(0);
      }
      node.id_of[slot] = ids[j];
      node.slot_of.emplace(ids[j], slot);
      node.policy->OnInsert(slot, parent, ids[j] + 1, 1, 0, info);
      own.insert(slot);
      parent = slot;
    }
  }
  return m;
}

void Cluster::FollowTuning(const turbokv::server::EvictionPolicy& reference) {
  const std::optional<turbokv::server::PolicyTuning> tuning = reference.tuning();
  if (!tuning.has_value()) return;
  for (Node& n : nodes_) {
    if (n.policy.get() != &reference) n.policy->FollowTuning(*tuning);
  }
}

double Cluster::Unreachable(const absl::flat_hash_map<uint64_t, uint64_t>& parent_id) const {
  size_t live = 0, unreachable = 0;
  for (const Node& node : nodes_) {
    for (const auto& [id, slot] : node.slot_of) {
      ++live;
      for (uint64_t p = parent_id.at(id); p != 0; p = parent_id.at(p)) {
        bool here = false;
        for (const Node& other : nodes_) here = here || other.Has(p);
        if (!here) {
          ++unreachable;
          break;
        }
      }
    }
  }
  return live == 0 ? 0.0 : static_cast<double>(unreachable) / static_cast<double>(live);
}

std::string Cluster::Tuning() const {
  std::string out;
  for (size_t n = 0; n < nodes_.size(); ++n) {
    if (const turbokv::server::LrfuPolicy* lrfu = Lrfu(n)) {
      absl::StrAppendFormat(&out, "%s%g/%.2f/%d", out.empty() ? "" : " ", lrfu->half_life(),
                            lrfu->unseen_age(), lrfu->half_life_changes());
    }
  }
  return out;
}

// The trace over `o.nodes` nodes of `total` blocks together.
Result Run(const std::vector<TraceRequest>& trace, uint64_t total, const Options& o) {
  Cluster cluster(total, o);
  std::optional<Cluster> reference;
  if (o.tuning == "reference" && o.nodes > 1) {
    Options one = o;
    one.nodes = 1;
    one.tuning = "own";
    reference.emplace(total, one);
  }
  uint64_t hits = 0, refs = 0;
  absl::flat_hash_map<uint64_t, uint64_t> parent_id;  // block id -> the id before it (0: head)
  for (const TraceRequest& req : trace) {
    const std::vector<uint64_t>& ids = req.blocks;
    for (size_t j = 0; j < ids.size(); ++j) parent_id.emplace(ids[j], j == 0 ? 0 : ids[j - 1]);
    if (reference.has_value()) {
      reference->Request(ids);
      cluster.FollowTuning(reference->Policy(0));
    }
    hits += cluster.Request(ids);
    refs += ids.size();
    if (o.tuning == "leader") cluster.FollowTuning(cluster.Policy(0));
  }
  Result r;
  r.hit_ratio = refs == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(refs);
  r.unreachable = cluster.Unreachable(parent_id);
  r.tuning = cluster.Tuning();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Replays a trace through N nodes of an eviction policy",
               "turbokv-cluster-policy-sim"};
  std::vector<std::string> traces;
  std::vector<double> capacities = {10, 25};
  std::vector<size_t> node_counts = {3};
  std::vector<size_t> segments = {1};
  Options o;
  bool no_touch_past_match = false, no_hint = false;
  app.add_option("--trace", traces, "Mooncake-format JSONL trace (repeatable)")->required();
  app.add_option("--capacity", capacities, "% of the distinct blocks")
      ->delimiter(',')
      ->check(CLI::Range(0.001, 1000.0));
  app.add_option("--nodes", node_counts, "node counts compared with one node")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024));
  app.add_option("--segment-blocks", segments, "segment lengths (blocks)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--policy", o.policy, "lrfu or lru")->check(CLI::IsMember({"lrfu", "lru"}));
  app.add_flag("--no-touch-past-match", no_touch_past_match,
               "a node's Lookup touches only blocks of the chain's real match");
  app.add_flag("--no-hint", no_hint, "each node's last block of a put is last_in_call");
  app.add_flag("--parent-across-calls", o.parent_across_calls,
               "a put's first block names the node's last matched block as its parent");
  app.add_option("--tuning", o.tuning,
                 "lrfu: own (each node tunes itself), leader (the others follow node 0's half-life "
                 "and unseen age after each request, as the sharded client makes them) or "
                 "reference (every node follows a one-node reference of the whole capacity)")
      ->check(CLI::IsMember({"own", "leader", "reference"}));
  turbokv::bench::AddLrfuOptions(app, &o.lrfu);
  CLI11_PARSE(app, argc, argv);
  if (absl::Status valid = o.lrfu.Validate(); !valid.ok()) {
    std::fprintf(stderr, "%s\n", valid.ToString().c_str());
    return 2;
  }
  o.touch_past_match = !no_touch_past_match;
  o.hint = !no_hint;
  for (const std::string& path : traces) {
    const std::vector<TraceRequest> trace = LoadTrace(path);
    const size_t distinct = turbokv::server::DistinctBlocks(trace);
    for (double percent : capacities) {
      const auto total = static_cast<uint64_t>(percent / 100.0 * static_cast<double>(distinct));
      Options one = o;
      one.nodes = 1;
      const Result base = Run(trace, total, one);
      std::printf("%s %g%% %s: 1 node %.4f%s%s\n", path.c_str(), percent, o.policy.c_str(),
                  base.hit_ratio, base.tuning.empty() ? "" : ", h/age/changes ",
                  base.tuning.c_str());
      for (size_t n : node_counts) {
        for (size_t s : segments) {
          Options c = o;
          c.nodes = n;
          c.segment = s;
          const Result r = Run(trace, total, c);
          std::printf("  %zu nodes S=%zu: %.4f (%.3fx), %.1f%% of live blocks unreachable%s%s\n", n,
                      s, r.hit_ratio, r.hit_ratio / base.hit_ratio, 100 * r.unreachable,
                      r.tuning.empty() ? "" : ", h/age/changes ", r.tuning.c_str());
        }
      }
      std::fflush(stdout);
    }
  }
  return 0;
}
