// The standard Prometheus process metrics (the names every Prometheus client library exports:
// https://prometheus.io/docs/instrumenting/writing_clientlibs/#process-metrics) and the
// server's build info. prometheus-cpp 1.0 has no process collector, hence this small one.
//
//   process_cpu_seconds_total       user + system CPU time, seconds
//   process_resident_memory_bytes   resident set size
//   process_virtual_memory_bytes    virtual memory size
//   process_start_time_seconds      start time, seconds since the Unix epoch
//   process_open_fds / process_max_fds
//   process_threads                 OS threads of the process
//   turbokv_build_info{version, codec_isa, cuda}   value 1
//
// Read from /proc/self on every scrape (Linux only; elsewhere the process_* families are
// empty). Thread safety: Collect() may run concurrently with itself.
#ifndef TURBOKV_SERVER_METRICS_PROCESS_METRICS_H_
#define TURBOKV_SERVER_METRICS_PROCESS_METRICS_H_

#include <string>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace turbokv::server {

struct BuildInfo {
  std::string version;    // "0.1.0"
  std::string codec_isa;  // CPU codec path picked at run time: "avx512", "avx2", "scalar"
  bool cuda = false;      // built with the CUDA backend
};

class ProcessMetrics : public prometheus::Collectable {
 public:
  explicit ProcessMetrics(BuildInfo build) : build_(std::move(build)) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const BuildInfo build_;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_METRICS_PROCESS_METRICS_H_
