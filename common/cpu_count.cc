#include "common/cpu_count.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

namespace turbokv {

int AvailableCpus() {
  int cpus = static_cast<int>(std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = CPU_COUNT(&set);
  double quota_cpus = 0;  // 0 = no quota
  {
    std::ifstream v2("/sys/fs/cgroup/cpu.max");  // "max 100000" or "150000 100000"
    std::string quota;
    double period = 0;
    if (v2 >> quota >> period && quota != "max" && period > 0) {
      quota_cpus = std::strtod(quota.c_str(), nullptr) / period;
    }
  }
  if (quota_cpus == 0) {
    std::ifstream q("/sys/fs/cgroup/cpu/cpu.cfs_quota_us");
    std::ifstream p("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
    double quota = 0, period = 0;
    if (q >> quota && p >> period && quota > 0 && period > 0) quota_cpus = quota / period;
  }
  if (quota_cpus > 0) cpus = std::min(cpus, static_cast<int>(std::ceil(quota_cpus)));
  return std::max(1, cpus);
}

}  // namespace turbokv
