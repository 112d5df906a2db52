// How many CPUs this process may use, for sizing worker pools.
#ifndef TURBOKV_COMMON_CPU_COUNT_H_
#define TURBOKV_COMMON_CPU_COUNT_H_

namespace turbokv {

// CPUs this process may use: its CPU affinity mask (sched_getaffinity), capped by the cgroup
// CPU quota (cgroup v2 cpu.max, or v1 cpu.cfs_quota_us / cpu.cfs_period_us), rounded up. >= 1.
// Reads /sys on every call: call it at start-up, not per request. Thread-safe.
int AvailableCpus();

}  // namespace turbokv

#endif  // TURBOKV_COMMON_CPU_COUNT_H_
