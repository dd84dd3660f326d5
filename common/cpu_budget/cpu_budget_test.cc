#include "common/cpu_budget/cpu_budget.h"

#include <sched.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace kubetrain::cpu_budget {
namespace {

TEST(CpuBudgetTest, ParsesTheKernelsWords) {
  EXPECT_EQ(ParseCpuMax("150000 100000\n"), 1.5);
  EXPECT_EQ(ParseCpuMax("50000 100000"), 0.5);
  EXPECT_EQ(ParseCpuMax("200000"), 2.0);  // the period defaults to 100 ms
  EXPECT_EQ(ParseCpuMax("max 100000\n"), std::nullopt);
  EXPECT_EQ(ParseCpuMax(""), std::nullopt);
  EXPECT_EQ(ParseCpuMax("lots 100000"), std::nullopt);
  EXPECT_EQ(ParseCpuMax("100000 0"), std::nullopt);

  EXPECT_EQ(ParseCfsQuota("400000\n", "100000\n"), 4.0);
  EXPECT_EQ(ParseCfsQuota("-1\n", "100000\n"), std::nullopt);
  EXPECT_EQ(ParseCfsQuota("100000", "0"), std::nullopt);

  EXPECT_EQ(ParseMillicores("1500"), 1.5);
  EXPECT_EQ(ParseMillicores("0"), std::nullopt);  // no request
  EXPECT_EQ(ParseMillicores("2 CPUs"), std::nullopt);
}

TEST(CpuBudgetTest, TheLimitWinsThenTheRequestThenTheAffinity) {
  CpuBudget limited = ChooseCpuBudget(1.0, 4.0, 64);
  EXPECT_EQ(limited.threads, 1);
  EXPECT_EQ(limited.source, "cgroup CPU limit 1 CPU");

  CpuBudget fractional = ChooseCpuBudget(1.5, std::nullopt, 64);
  EXPECT_EQ(fractional.threads, 2);
  EXPECT_EQ(fractional.source, "cgroup CPU limit 1.5 CPUs");

  CpuBudget sliver = ChooseCpuBudget(0.1, std::nullopt, 64);
  EXPECT_EQ(sliver.threads, 1);

  CpuBudget requested = ChooseCpuBudget(std::nullopt, 4.0, 64);
  EXPECT_EQ(requested.threads, 4);
  EXPECT_EQ(requested.source, "CPU request 4 CPUs");

  CpuBudget pinned = ChooseCpuBudget(std::nullopt, std::nullopt, 3);
  EXPECT_EQ(pinned.threads, 3);
  EXPECT_EQ(pinned.source, "CPU affinity 3 CPUs");

  // Never more threads than CPUs to run them on.
  CpuBudget capped = ChooseCpuBudget(8.0, std::nullopt, 2);
  EXPECT_EQ(capped.threads, 2);
  EXPECT_EQ(capped.source, "cgroup CPU limit 8 CPUs, capped by CPU affinity 2 CPUs");
  EXPECT_EQ(ChooseCpuBudget(std::nullopt, 16.0, 4).threads, 4);
}

// A cgroup hierarchy laid out in a folder, as the kernel shows one.
class CgroupTreeTest : public ::testing::Test {
 protected:
  void Write(const std::string& relative, const std::string& text) {
    const std::filesystem::path path = std::filesystem::path(dir_.path()) / relative;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }
  std::optional<double> Limit() {
    return ReadCgroupCpuLimit(dir_.Path("proc-self-cgroup"), dir_.Path("sys-fs-cgroup"));
  }
  test_support::TempDir dir_{"cpu-budget"};
};

TEST_F(CgroupTreeTest, V2TakesTheLowestLimitOnTheWayToTheRoot) {
  Write("proc-self-cgroup", "0::/kubepods/pod1/ctr\n");
  Write("sys-fs-cgroup/cgroup.controllers", "cpuset cpu io memory pids\n");
  Write("sys-fs-cgroup/kubepods/cpu.max", "max 100000\n");
  Write("sys-fs-cgroup/kubepods/pod1/cpu.max", "250000 100000\n");
  Write("sys-fs-cgroup/kubepods/pod1/ctr/cpu.max", "max 100000\n");
  EXPECT_EQ(Limit(), 2.5);
  Write("sys-fs-cgroup/kubepods/pod1/ctr/cpu.max", "50000 100000\n");
  EXPECT_EQ(Limit(), 0.5);
}

TEST_F(CgroupTreeTest, V2InsideAContainerReadsItsOwnRoot) {
  // With a cgroup namespace the container's cgroup is "/" and is mounted
  // at the root.
  Write("proc-self-cgroup", "0::/\n");
  Write("sys-fs-cgroup/cgroup.controllers", "cpu memory\n");
  Write("sys-fs-cgroup/cpu.max", "400000 100000\n");
  EXPECT_EQ(Limit(), 4.0);
  // A path from another namespace's view, absent under this mount.
  Write("proc-self-cgroup", "0::/../../elsewhere\n");
  EXPECT_EQ(Limit(), 4.0);
}

TEST_F(CgroupTreeTest, V1ReadsTheCfsQuotaOfTheCpuController) {
  Write("proc-self-cgroup",
        "9:name=systemd:/\n4:memory:/job\n2:cpu,cpuacct:/kubepods/pod2\n0::/\n");
  Write("sys-fs-cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  Write("sys-fs-cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  Write("sys-fs-cgroup/cpu,cpuacct/kubepods/pod2/cpu.cfs_quota_us", "100000\n");
  Write("sys-fs-cgroup/cpu,cpuacct/kubepods/pod2/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(Limit(), 1.0);
}

TEST_F(CgroupTreeTest, NoLimitAnywhereIsNone) {
  Write("proc-self-cgroup", "1:cpu:/\n0::/\n");
  Write("sys-fs-cgroup/cpu/cpu.cfs_quota_us", "-1\n");
  Write("sys-fs-cgroup/cpu/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(Limit(), std::nullopt);
  EXPECT_EQ(ReadCgroupCpuLimit(dir_.Path("no-such-file"), dir_.Path("sys-fs-cgroup")),
            std::nullopt);
}

TEST(CpuBudgetTest, AThreadPinnedToOneCpuCountsOne) {
  int seen = 0;
  CpuBudget budget;
  std::thread pinned([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu() >= 0 ? sched_getcpu() : 0, &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
    seen = AffinityCpuCount();
    budget = DetectCpuBudget();
  });
  pinned.join();
  EXPECT_EQ(seen, 1);
  EXPECT_EQ(budget.threads, 1) << budget.source;
}

}  // namespace
TEST(ThreadsForTest, AFlagWinsAndEachChoiceIsWordedForTheStartUpLine) {
  const CpuBudget flagged = ThreadsFor(3);
  EXPECT_EQ(flagged.threads, 3);
  EXPECT_EQ(flagged.source, "--threads");
  EXPECT_EQ(DescribeThreads(flagged), "3 compute threads (--threads)");
  EXPECT_EQ(DescribeThreads({.threads = 1, .source = "cgroup CPU limit 1 CPU"}),
            "1 compute thread (cgroup CPU limit 1 CPU)");
  // No flag: what the machine allows, as DetectCpuBudget says.
  EXPECT_EQ(ThreadsFor(0).threads, DetectCpuBudget().threads);
}

}  // namespace kubetrain::cpu_budget
