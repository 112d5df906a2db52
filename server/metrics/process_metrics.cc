#include "server/metrics/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace turbokv::server {
namespace {

prometheus::MetricFamily Family(const char* name, const char* help, prometheus::MetricType type,
                                double value) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  prometheus::ClientMetric m;
  if (type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(std::move(m));
  return f;
}

// Seconds since the epoch at boot (the `btime` line of /proc/stat), or -1.
double BootTime() {
  std::ifstream in("/proc/stat");
  std::string key;
  while (in >> key) {
    if (key == "btime") {
      double t = -1;
      in >> t;
      return t;
    }
    in.ignore(1 << 20, '\n');
  }
  return -1;
}

int CountOpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n - 1;  // the directory stream's own descriptor
}

}  // namespace

std::vector<prometheus::MetricFamily> ProcessMetrics::Collect() const {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> out;
  {
    prometheus::MetricFamily f;
    f.name = "turbokv_build_info";
    f.help = "Build of this server (value 1): version, CPU codec path, CUDA backend built";
    f.type = MetricType::Gauge;
    prometheus::ClientMetric m;
    m.label = {{"codec_isa", build_.codec_isa},
               {"cuda", build_.cuda ? "true" : "false"},
               {"version", build_.version}};
    m.gauge.value = 1;
    f.metric.push_back(std::move(m));
    out.push_back(std::move(f));
  }

  // /proc/self/stat: the fields after the parenthesized command name (which may hold spaces).
  std::ifstream in("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return out;
  std::istringstream fields(stat.substr(close + 2));
  // Field 3 (state) is the first after the name; we need 14 utime, 15 stime, 20 num_threads,
  // 22 starttime, 23 vsize, 24 rss (man 5 proc).
  std::vector<std::string> f;
  for (std::string s; fields >> s;) f.push_back(s);
  if (f.size() < 22) return out;
  auto field = [&f](int n) { return std::stod(f[n - 3]); };
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  out.push_back(Family("process_cpu_seconds_total", "Total user and system CPU time, seconds",
                       MetricType::Counter, (field(14) + field(15)) / ticks));
  out.push_back(Family("process_resident_memory_bytes", "Resident memory size, bytes",
                       MetricType::Gauge, field(24) * page));
  out.push_back(Family("process_virtual_memory_bytes", "Virtual memory size, bytes",
                       MetricType::Gauge, field(23)));
  out.push_back(
      Family("process_threads", "OS threads of the process", MetricType::Gauge, field(20)));
  if (const double boot = BootTime(); boot >= 0) {
    out.push_back(Family("process_start_time_seconds",
                         "Start time of the process since the Unix epoch, seconds",
                         MetricType::Gauge, boot + field(22) / ticks));
  }
  if (const int fds = CountOpenFds(); fds >= 0) {
    out.push_back(Family("process_open_fds", "Open file descriptors", MetricType::Gauge, fds));
  }
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0) {
    out.push_back(Family("process_max_fds", "Limit on open file descriptors", MetricType::Gauge,
                         static_cast<double>(lim.rlim_cur)));
  }
  return out;
}

}  // namespace turbokv::server
