#include "daemon/app/cpu_budget.h"

#include <sched.h>

#include "gtest/gtest.h"

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

// The calling thread's affinity is what the process has when it sizes its pools at start.
TEST(CpuBudgetTest, UsableCpusFollowsTheAffinityMask) {
  cpu_set_t before;
  ASSERT_EQ(sched_getaffinity(0, sizeof before, &before), 0);
  const uint32_t all = UsableCpus();
  EXPECT_GE(all, 1u);
  EXPECT_LE(all, static_cast<uint32_t>(CPU_COUNT(&before)));
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
