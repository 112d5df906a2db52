// turbokv-policy-sim: replays Mooncake-format request traces (JSONL: timestamp, hash_ids) through
// the store's eviction policies in-process, and prints per capacity the hit ratio of a policy,
// of LRU and of Belady (the offline optimum) from the same run, with the ratios between them.
//
//   build/bin/turbokv-policy-sim --trace ../shared/data/traces/mooncake_synthetic_trace.jsonl
//   build/bin/turbokv-policy-sim --trace a.jsonl --trace b.jsonl --capacity 5,10,25,50 --json x
//
// Capacity points are percentages of the trace's distinct blocks; every block charges the same
// (--block-charge bytes), so capacity is counted in blocks. The replay is
// server/storage/eviction_replay.h's (Lookup, GetBlocks, PutBlocks per request).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "bench/lrfu_cli.h"
#include "bench/mooncake_trace.h"
#include "nlohmann/json.hpp"
#include "server/storage/eviction_policy.h"
#include "server/storage/eviction_replay.h"
#include "server/storage/lrfu_policy.h"

namespace {

using turbokv::bench::LoadTrace;
using turbokv::server::TraceRequest;

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Replays Mooncake-format traces through the eviction policies in-process",
               "turbokv-policy-sim"};
  std::vector<std::string> traces;
  std::vector<double> capacities = {5, 10, 25, 50};
  std::string policy_name = "lrfu";
  uint32_t block_charge = 1;
  bool no_parent_across_calls = false;
  bool calls_apart = false;
  bool no_get_hits = false;
  std::string json_out;
  turbokv::server::LrfuOptions lrfu_options;
  app.add_option("--trace", traces, "Mooncake-format JSONL trace (repeatable)")->required();
  app.add_option("--capacity", capacities, "capacities, % of the distinct blocks")
      ->delimiter(',')
      ->check(CLI::Range(0.001, 1000.0));
  app.add_option("--policy", policy_name, "policy compared with LRU and Belady: lrfu, lru");
  app.add_option("--block-charge", block_charge, "bytes every block charges")
      ->check(CLI::Range(1u, 1u << 30));
  app.add_flag("--no-parent-across-calls", no_parent_across_calls,
               "the first block a request puts after a Lookup match has no parent");
  app.add_flag("--calls-apart", calls_apart,
               "Lookup, GetBlocks and PutBlocks carry request numbers of their own");
  app.add_flag("--no-get-hits", no_get_hits, "GetBlocks does not report hits again");
  app.add_option("--json", json_out, "also write the figures as JSON here");
  turbokv::bench::AddLrfuOptions(app, &lrfu_options);
  CLI11_PARSE(app, argc, argv);
  if (absl::Status valid = lrfu_options.Validate(); !valid.ok()) {
    std::fprintf(stderr, "%s\n", valid.ToString().c_str());
    return 2;
  }

  nlohmann::json report = nlohmann::json::array();
  for (const std::string& path : traces) {
    auto t0 = std::chrono::steady_clock::now();
    const std::vector<TraceRequest> trace = LoadTrace(path);
    const size_t distinct = turbokv::server::DistinctBlocks(trace);
    size_t refs = 0;
    for (const TraceRequest& r : trace) refs += r.blocks.size();
    const double infinite = turbokv::server::InfiniteCacheHitRatio(trace);
    std::printf(
        "%s: %zu requests, %zu distinct blocks, %zu block references, infinite-cache "
        "hit ratio %.1f%% (loaded in %.2f s)\n",
        path.c_str(), trace.size(), distinct, refs, 100 * infinite, Seconds(t0));
    std::printf("%9s %9s %8s %8s %8s %8s %9s %9s %9s %8s %9s\n", "capacity", "blocks", "policy",
                "LRU", "Belady", "/LRU", "/Belady", "LRU/Bel.", "B/block", "h/age", "seconds");
    nlohmann::json points = nlohmann::json::array();
    for (double percent : capacities) {
      turbokv::server::ReplayOptions options;
      const auto blocks = static_cast<uint64_t>(percent / 100.0 * static_cast<double>(distinct));
      options.capacity_bytes = std::max<uint64_t>(1, blocks) * block_charge;
      options.block_charge = block_charge;
      options.parent_across_calls = !no_parent_across_calls;
      options.number_calls_apart = calls_apart;
      options.get_reports_hits = !no_get_hits;

      std::unique_ptr<turbokv::server::EvictionPolicy> policy;
      if (policy_name == "lrfu") {
        turbokv::server::LrfuOptions o = lrfu_options;
        o.capacity_bytes = options.capacity_bytes;
        policy = std::make_unique<turbokv::server::LrfuPolicy>(o);
      } else {
        auto made = turbokv::server::MakeEvictionPolicy(policy_name, options.capacity_bytes);
        if (!made.ok()) {
          std::fprintf(stderr, "%s\n", made.status().ToString().c_str());
          return 2;
        }
        policy = std::move(*made);
      }
      t0 = std::chrono::steady_clock::now();
      const turbokv::server::ReplayResult mine = turbokv::server::Replay(trace, *policy, options);
      const double seconds = Seconds(t0);
      turbokv::server::LruPolicy lru_policy;
      const turbokv::server::ReplayResult lru = turbokv::server::Replay(trace, lru_policy, options);
      const turbokv::server::ReplayResult belady = turbokv::server::ReplayBelady(trace, options);
      const double bytes_per_block =
          policy->blocks() == 0
              ? 0.0
              : static_cast<double>(policy->MemoryBytes()) / static_cast<double>(policy->blocks());
      const auto* lrfu = dynamic_cast<const turbokv::server::LrfuPolicy*>(policy.get());
      const double half_life = lrfu != nullptr ? lrfu->half_life() : 0.0;
      const double unseen_age = lrfu != nullptr ? lrfu->unseen_age() : 0.0;
      std::printf("%8.1f%% %9llu %7.1f%% %7.1f%% %7.1f%% %8.3f %9.3f %9.3f %9.1f %8s %9.3f\n",
                  percent, static_cast<unsigned long long>(blocks), 100 * mine.hit_ratio(),
                  100 * lru.hit_ratio(), 100 * belady.hit_ratio(),
                  mine.hit_ratio() / lru.hit_ratio(), mine.hit_ratio() / belady.hit_ratio(),
                  lru.hit_ratio() / belady.hit_ratio(), bytes_per_block,
                  lrfu != nullptr ? absl::StrFormat("%g/%.2g", half_life, unseen_age).c_str() : "-",
                  seconds);
      points.push_back({{"capacity_percent", percent},
                        {"capacity_blocks", blocks},
                        {"policy", policy_name},
                        {"policy_hit_ratio", mine.hit_ratio()},
                        {"lru_hit_ratio", lru.hit_ratio()},
                        {"belady_hit_ratio", belady.hit_ratio()},
                        {"policy_memory_bytes_per_block", bytes_per_block},
                        {"policy_seconds", seconds},
                        {"final_half_life", half_life},
                        {"final_unseen_age", unseen_age}});
    }
    report.push_back({{"trace", path},
                      {"requests", trace.size()},
                      {"distinct_blocks", distinct},
                      {"block_references", refs},
                      {"infinite_hit_ratio", infinite},
                      {"points", points}});
  }
  if (!json_out.empty()) {
    std::ofstream out(json_out);
    out << report.dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", json_out.c_str());
      return 2;
    }
  }
  return 0;
}
