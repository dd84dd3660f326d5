#pragma once

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace kubetrain::cpu_budget {

// How many compute threads fit the container this process runs in.
//
// A pod that requests 4 CPUs on a 64-core node sees 64 cores
// (std::thread::hardware_concurrency), but the kernel lets it use 4: a
// pool of 64 threads would be throttled by its CPU quota, its threads
// descheduled in the middle of every parallel loop. The budget is, in
// order:
//   1. the cgroup's CPU limit: cgroup v2 cpu.max, or v1 cpu.cfs_quota_us
//      over cpu.cfs_period_us, the lowest on the way from this process's
//      cgroup to the root (a Kubernetes CPU limit);
//   2. else the CPU request the operator passes through the downward API
//      (kCpuRequestEnv, in millicores; a pod without a limit may still run
//      past its request, but its request is what the scheduler counted);
//   3. else the CPUs of this process's affinity mask (sched_getaffinity:
//      taskset, cpusets, a static CPU manager);
// rounded up to whole threads, and never more than the affinity mask holds.

// The environment variable the operator sets from the training container's
// resources.requests.cpu (downward API, divisor 1m): millicores.
inline constexpr char kCpuRequestEnv[] = "KUBETRAIN_CPU_REQUEST_MILLICORES";

struct CpuBudget {
  int threads = 1;
  // Where the number comes from, for the start-up line: "cgroup CPU limit
  // 1.5 CPUs", "CPU request 2 CPUs", "CPU affinity 8 CPUs".
  std::string source;
};

// ---- Pure ------------------------------------------------------------------

// CPUs allowed by a cgroup v2 cpu.max ("150000 100000" -> 1.5); nullopt for
// "max ..." (no limit) or text that is not a limit.
std::optional<double> ParseCpuMax(absl::string_view text);
// CPUs allowed by cgroup v1's cpu.cfs_quota_us and cpu.cfs_period_us
// ("150000", "100000" -> 1.5); nullopt for a quota of -1 (no limit).
std::optional<double> ParseCfsQuota(absl::string_view quota, absl::string_view period);
// CPUs of a millicore count ("1500" -> 1.5); nullopt for "0" (no request:
// the downward API's value then) or text that is not a count.
std::optional<double> ParseMillicores(absl::string_view text);

// The budget of the three sources above; `affinity_cpus` >= 1.
CpuBudget ChooseCpuBudget(std::optional<double> limit_cpus, std::optional<double> request_cpus,
                          int affinity_cpus);

// ---- I/O -------------------------------------------------------------------

// The lowest CPU limit of this process's cgroup and its ancestors, read
// from `proc_self_cgroup` and the hierarchy mounted at `cgroup_root`
// (v2 there, or v1's cpu controller in a folder of it); nullopt when none
// is set or nothing can be read.
std::optional<double> ReadCgroupCpuLimit(const std::string& proc_self_cgroup = "/proc/self/cgroup",
                                         const std::string& cgroup_root = "/sys/fs/cgroup");
// CPUs in the calling thread's affinity mask (at least 1).
int AffinityCpuCount();
// ChooseCpuBudget of what this process can read now.
CpuBudget DetectCpuBudget();
// The threads a run uses: `flag_threads` when the user gave a number (> 0;
// source "--threads"), else DetectCpuBudget().
CpuBudget ThreadsFor(int flag_threads);

// "1 compute thread (cgroup CPU limit 1 CPU)", "4 compute threads (--threads)":
// the start-up line's words.
std::string DescribeThreads(const CpuBudget& budget);

}  // namespace kubetrain::cpu_budget
