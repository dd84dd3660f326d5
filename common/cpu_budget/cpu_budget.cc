#include "common/cpu_budget/cpu_budget.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace kubetrain::cpu_budget {
namespace {

std::string CpusText(double cpus) {
  return absl::StrFormat("%g %s", cpus, cpus == 1.0 ? "CPU" : "CPUs");
}

// Whole threads for a fractional budget: 1.5 CPUs keep 2 threads busy for
// three quarters of each period, which beats 1 thread all the time.
int WholeThreads(double cpus) { return std::max(1, static_cast<int>(std::ceil(cpus - 1e-9))); }

std::optional<std::string> ReadCgroupFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The lower of two limits, either of which may be absent.
std::optional<double> Lower(std::optional<double> a, std::optional<double> b) {
  if (!a) return b;
  if (!b) return a;
  return std::min(*a, *b);
}

// The lowest limit `read_limit` finds in `base` + `path` and each ancestor
// up to `base`. A path that is not under this mount (another cgroup
// namespace's view) leaves `base` alone to read.
template <typename ReadLimit>
std::optional<double> LowestOnTheWayUp(const std::string& base, std::string path,
                                       const ReadLimit& read_limit) {
  // "/../.." is where another namespace's cgroup lies: not under `base`.
  if (path.find("..") != std::string::npos) path.clear();
  std::optional<double> lowest = read_limit(base);
  for (; !path.empty() && path != "/"; path = path.substr(0, path.find_last_of('/'))) {
    lowest = Lower(lowest, read_limit(base + path));
  }
  return lowest;
}

}  // namespace

std::optional<double> ParseCpuMax(absl::string_view text) {
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::StripAsciiWhitespace(text), ' ', absl::SkipEmpty());
  if (fields.empty() || fields[0] == "max") return std::nullopt;
  int64_t quota = 0, period = 100000;
  if (!absl::SimpleAtoi(fields[0], &quota) || quota <= 0) return std::nullopt;
  if (fields.size() > 1 && (!absl::SimpleAtoi(fields[1], &period) || period <= 0)) {
    return std::nullopt;
  }
  return static_cast<double>(quota) / static_cast<double>(period);
}

std::optional<double> ParseCfsQuota(absl::string_view quota_text, absl::string_view period_text) {
  int64_t quota = 0, period = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(quota_text), &quota) || quota <= 0) {
    return std::nullopt;
  }
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(period_text), &period) || period <= 0) {
    return std::nullopt;
  }
  return static_cast<double>(quota) / static_cast<double>(period);
}

std::optional<double> ParseMillicores(absl::string_view text) {
  int64_t millicores = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &millicores) || millicores <= 0) {
    return std::nullopt;
  }
  return static_cast<double>(millicores) / 1000.0;
}

CpuBudget ChooseCpuBudget(std::optional<double> limit_cpus, std::optional<double> request_cpus,
                          int affinity_cpus) {
  affinity_cpus = std::max(1, affinity_cpus);
  CpuBudget budget;
  if (limit_cpus) {
    budget.threads = WholeThreads(*limit_cpus);
    budget.source = "cgroup CPU limit " + CpusText(*limit_cpus);
  } else if (request_cpus) {
    budget.threads = WholeThreads(*request_cpus);
    budget.source = "CPU request " + CpusText(*request_cpus);
  } else {
    budget.threads = affinity_cpus;
    budget.source = "CPU affinity " + CpusText(affinity_cpus);
    return budget;
  }
  if (budget.threads > affinity_cpus) {
    budget.threads = affinity_cpus;
    absl::StrAppend(&budget.source, ", capped by CPU affinity ", CpusText(affinity_cpus));
  }
  return budget;
}

std::optional<double> ReadCgroupCpuLimit(const std::string& proc_self_cgroup,
                                         const std::string& cgroup_root) {
  std::optional<std::string> membership = ReadCgroupFile(proc_self_cgroup);
  if (!membership) return std::nullopt;
  std::string v2_path, v1_cpu_path;
  bool has_v1_cpu = false;
  for (absl::string_view line : absl::StrSplit(*membership, '\n', absl::SkipEmpty())) {
    // "ID:CONTROLLERS:PATH"; the path may hold ':'.
    std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    if (parts[0] == "0" && parts[1].empty()) v2_path = std::string(parts[2]);
    for (absl::string_view controller : absl::StrSplit(parts[1], ',')) {
      if (controller == "cpu") {
        has_v1_cpu = true;
        v1_cpu_path = std::string(parts[2]);
      }
    }
  }
  std::optional<double> lowest;
  if (has_v1_cpu) {
    for (const char* mount : {"/cpu", "/cpu,cpuacct", "/cpuacct,cpu"}) {
      const std::string base = cgroup_root + mount;
      std::error_code error;
      if (!std::filesystem::is_directory(base, error)) continue;
      lowest = Lower(lowest, LowestOnTheWayUp(base, v1_cpu_path, [](const std::string& dir) {
                       std::optional<std::string> quota = ReadCgroupFile(dir + "/cpu.cfs_quota_us");
                       std::optional<std::string> period =
                           ReadCgroupFile(dir + "/cpu.cfs_period_us");
                       return quota && period ? ParseCfsQuota(*quota, *period) : std::nullopt;
                     }));
      break;
    }
  }
  // cgroup v2: the hierarchy at the root, or beside v1 at root/unified.
  for (const char* mount : {"", "/unified"}) {
    const std::string base = cgroup_root + mount;
    if (!ReadCgroupFile(base + "/cgroup.controllers")) continue;
    lowest = Lower(lowest, LowestOnTheWayUp(base, v2_path, [](const std::string& dir) {
                     std::optional<std::string> cpu_max = ReadCgroupFile(dir + "/cpu.max");
                     return cpu_max ? ParseCpuMax(*cpu_max) : std::nullopt;
                   }));
    break;
  }
  return lowest;
}

int AffinityCpuCount() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

CpuBudget DetectCpuBudget() {
  std::optional<double> request;
  if (const char* env = std::getenv(kCpuRequestEnv); env != nullptr) {
    request = ParseMillicores(env);
  }
  return ChooseCpuBudget(ReadCgroupCpuLimit(), request, AffinityCpuCount());
}

CpuBudget ThreadsFor(int flag_threads) {
  if (flag_threads > 0) return {.threads = flag_threads, .source = "--threads"};
  return DetectCpuBudget();
}

std::string DescribeThreads(const CpuBudget& budget) {
  return absl::StrCat(budget.threads,
                      budget.threads == 1 ? " compute thread (" : " compute threads (",
                      budget.source, ")");
}

}  // namespace kubetrain::cpu_budget
