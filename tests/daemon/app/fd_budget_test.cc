#include "daemon/app/fd_budget.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace cdcview {
namespace {

TEST(FdBudgetTest, RaisesTheSoftLimitToTheHardOne) {
  rlimit before{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &before), 0);
  rlimit lowered{64, before.rlim_max};
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);
  absl::StatusOr<FdLimit> limit = RaiseFdLimit();
  ASSERT_TRUE(limit.ok()) << limit.status();
  EXPECT_EQ(limit->soft_at_start, 64u);
  EXPECT_EQ(limit->hard, before.rlim_max);
  rlimit now{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &now), 0);
  EXPECT_EQ(limit->soft, now.rlim_cur);
  if (before.rlim_max != RLIM_INFINITY) {
    EXPECT_EQ(now.rlim_cur, before.rlim_max);
  }
  EXPECT_GT(now.rlim_cur, 64u);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &before), 0);
}

TEST(FdBudgetTest, CountsOpenDescriptors) {
  absl::StatusOr<uint64_t> before = CountOpenFds();
  ASSERT_TRUE(before.ok()) << before.status();
  int a = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int b = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  EXPECT_EQ(*CountOpenFds(), *before + 2);
  close(a);
  close(b);
  EXPECT_EQ(*CountOpenFds(), *before);
}

TEST(FdBudgetTest, BudgetIsTheLimitLessOpenAndReserve) {
  EXPECT_EQ(ConnectionBudget(1024, 40, 256), 728u);
  EXPECT_EQ(ConnectionBudget(1024, 768, 256), 0u);
  EXPECT_EQ(ConnectionBudget(1024, 900, 256), 0u);
}

TEST(FdBudgetTest, CapsFitTheBudgetInProportion) {
  EXPECT_EQ(ShareConnectionBudget(728, {500}), std::vector<uint32_t>{500});
  EXPECT_EQ(ShareConnectionBudget(728, {1000}), std::vector<uint32_t>{728});
  EXPECT_EQ(ShareConnectionBudget(2000, {1000, 1000}), (std::vector<uint32_t>{1000, 1000}));
  EXPECT_EQ(ShareConnectionBudget(728, {1000, 1000}), (std::vector<uint32_t>{364, 364}));
  EXPECT_EQ(ShareConnectionBudget(600, {1000, 500}), (std::vector<uint32_t>{400, 200}));
  EXPECT_EQ(ShareConnectionBudget(1, {1000, 1000}), (std::vector<uint32_t>{1, 1}));
}

}  // namespace
}  // namespace cdcview
