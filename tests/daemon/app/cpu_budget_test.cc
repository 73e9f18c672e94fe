#include "daemon/app/cpu_budget.h"

#include <sched.h>

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"

namespace cdcview {
namespace {

TEST(CpuBudgetTest, CgroupV2QuotaIsRoundedUpToWholeCpus) {
  EXPECT_EQ(QuotaCpusV2("100000 100000\n"), 1u);
  EXPECT_EQ(QuotaCpusV2("150000 100000\n"), 2u);
  EXPECT_EQ(QuotaCpusV2("50000 100000"), 1u);
  EXPECT_EQ(QuotaCpusV2("400000 100000"), 4u);
  EXPECT_EQ(QuotaCpusV2("max 100000\n"), std::nullopt);
  EXPECT_EQ(QuotaCpusV2(""), std::nullopt);
  EXPECT_EQ(QuotaCpusV2("100000"), std::nullopt);
  EXPECT_EQ(QuotaCpusV2("0 100000"), std::nullopt);
  EXPECT_EQ(QuotaCpusV2("100000 0"), std::nullopt);
  EXPECT_EQ(QuotaCpusV2("1 2 3"), std::nullopt);
}

TEST(CpuBudgetTest, CgroupV1QuotaIsRoundedUpToWholeCpus) {
  EXPECT_EQ(QuotaCpusV1("200000\n", "100000\n"), 2u);
  EXPECT_EQ(QuotaCpusV1("250000", "100000"), 3u);
  EXPECT_EQ(QuotaCpusV1("-1\n", "100000\n"), std::nullopt);
  EXPECT_EQ(QuotaCpusV1("", ""), std::nullopt);
  EXPECT_EQ(QuotaCpusV1("100000", "x"), std::nullopt);
}

// A cgroup tree under a temporary root, as /sys/fs/cgroup would hold it.
class CgroupTreeTest : public ::testing::Test {
 protected:
  void Write(const std::string& relative, const std::string& text) {
    const std::filesystem::path path = dir_.Sub(relative);
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }
  const std::string& root() const { return dir_.path(); }

 private:
  test::TempDir dir_;
};

TEST_F(CgroupTreeTest, V2TakesTheLowestQuotaOfTheGroupAndItsAncestors) {
  Write("cpu.max", "max 100000\n");
  Write("kubepods/cpu.max", "800000 100000\n");
  Write("kubepods/pod1/cpu.max", "150000 100000\n");  // the pod's limit: 1.5 CPUs
  Write("kubepods/pod1/app/cpu.max", "max 100000\n");  // the container's: none
  EXPECT_EQ(QuotaCpusFromCgroups("0::/kubepods/pod1/app\n", root()), 2u);
  EXPECT_EQ(QuotaCpusFromCgroups("0::/kubepods\n", root()), 8u);
  EXPECT_EQ(QuotaCpusFromCgroups("0::/\n", root()), std::nullopt);  // the root: "max"
  EXPECT_EQ(QuotaCpusFromCgroups("0::/elsewhere/app\n", root()), std::nullopt);  // no files
  EXPECT_EQ(QuotaCpusFromCgroups("", root()), std::nullopt);
}

TEST_F(CgroupTreeTest, V1ReadsTheHierarchyThatHoldsTheCpuController) {
  Write("cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  Write("cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  Write("cpu,cpuacct/docker/c1/cpu.cfs_quota_us", "300000\n");
  Write("cpu,cpuacct/docker/c1/cpu.cfs_period_us", "100000\n");
  Write("memory/docker/c1/cpu.cfs_quota_us", "100000\n");  // not the cpu hierarchy
  Write("memory/docker/c1/cpu.cfs_period_us", "100000\n");
  const std::string hybrid =
      "12:memory:/docker/c1\n"
      "4:cpu,cpuacct:/docker/c1\n"
      "1:name=systemd:/docker/c1\n"
      "0::/docker/c1\n";  // hybrid: a v2 line without cpu.max beside it
  EXPECT_EQ(QuotaCpusFromCgroups(hybrid, root()), 3u);
  EXPECT_EQ(QuotaCpusFromCgroups("4:cpu,cpuacct:/\n", root()), std::nullopt);  // -1
}

// Inside a v1 container without a cgroup namespace, /proc/self/cgroup names the host's path
// while the container's own group is mounted at the hierarchy's root: the walk reaches it.
TEST_F(CgroupTreeTest, V1ContainerSeesItsQuotaAtTheHierarchysRoot) {
  Write("cpu/cpu.cfs_quota_us", "50000\n");
  Write("cpu/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(QuotaCpusFromCgroups("3:cpu:/kubepods/burstable/pod9/c2\n", root()), 1u);
}

// The calling thread's affinity is what the process has when it sizes its pools at start.
TEST(CpuBudgetTest, UsableCpusFollowsTheAffinityMask) {
  cpu_set_t before;
  ASSERT_EQ(sched_getaffinity(0, sizeof before, &before), 0);
  EXPECT_LE(UsableCpus(), static_cast<uint32_t>(CPU_COUNT(&before)));
  int first = 0;
  while (!CPU_ISSET(first, &before)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  EXPECT_EQ(UsableCpus(), 1u);
  ASSERT_EQ(sched_setaffinity(0, sizeof before, &before), 0);
}

}  // namespace
}  // namespace cdcview
