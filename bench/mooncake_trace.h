// Reading a Mooncake-format request trace (JSONL) for the in-process policy simulators
// (turbokv-policy-sim, turbokv-cluster-policy-sim).
#ifndef TURBOKV_BENCH_MOONCAKE_TRACE_H_
#define TURBOKV_BENCH_MOONCAKE_TRACE_H_

#include <string>
#include <vector>

#include "server/storage/eviction_replay.h"

namespace turbokv::bench {

// Reads a Mooncake-format JSONL trace: one request per line, {"timestamp": ms, "hash_ids":
// [block ids of its prefix chain]} (other fields ignored; blank lines skipped). Prints the file
// and line and exits with status 2 on an unreadable file or a malformed line.
std::vector<server::TraceRequest> LoadTrace(const std::string& path);

}  // namespace turbokv::bench

#endif  // TURBOKV_BENCH_MOONCAKE_TRACE_H_
