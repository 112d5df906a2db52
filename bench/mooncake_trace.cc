#include "bench/mooncake_trace.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <utility>

#include "nlohmann/json.hpp"

namespace turbokv::bench {

std::vector<server::TraceRequest> LoadTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "cannot open %s\n", path.c_str());
    std::exit(2);
  }
  std::vector<server::TraceRequest> trace;
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("hash_ids") ||
        !j["hash_ids"].is_array()) {
      std::fprintf(stderr, "%s:%zu: not a request with hash_ids\n", path.c_str(), line_no);
      std::exit(2);
    }
    server::TraceRequest r;
    if (j.contains("timestamp") && j["timestamp"].is_number()) {
      r.timestamp_ms = j["timestamp"].get<int64_t>();
    }
    for (const nlohmann::json& id : j["hash_ids"]) {
      if (!id.is_number_unsigned() && !id.is_number_integer()) {
        std::fprintf(stderr, "%s:%zu: a hash id is not an integer\n", path.c_str(), line_no);
        std::exit(2);
      }
      r.blocks.push_back(id.get<uint64_t>());
    }
    trace.push_back(std::move(r));
  }
  return trace;
}

}  // namespace turbokv::bench
