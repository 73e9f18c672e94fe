#include "daemon/server/readiness.h"

#include <limits>

#include "gtest/gtest.h"

namespace cdcview {
namespace {

TEST(ReadinessTest, SourcesWithNothingLeftToReadCountAsNoLag) {
  EXPECT_EQ(EffectiveLagSeconds({"finished", 3600}), 0);
  EXPECT_EQ(EffectiveLagSeconds({"caught_up", 3600}), 0);
  EXPECT_EQ(EffectiveLagSeconds({"running", 12.5}), 12.5);
  EXPECT_EQ(EffectiveLagSeconds({"error", 0}), std::numeric_limits<double>::infinity());
}

TEST(ReadinessTest, LagGrowsSinceTheLastCommitUnlessTheSourceIsIdle) {
  // {state, lag at the last commit, seconds since it, records read but not applied}
  EXPECT_EQ(EffectiveLagSeconds({"running", 2, 30, false}), 32);
  EXPECT_EQ(EffectiveLagSeconds({"caught_up", 2, 30, false}), 0);
  EXPECT_EQ(EffectiveLagSeconds({"caught_up", 2, 30, true}), 32);
  EXPECT_EQ(EffectiveLagSeconds({"finished", 0, 7, true}), 7);
  EXPECT_EQ(EffectiveLagSeconds({"error", 0, 0, false}), std::numeric_limits<double>::infinity());
  EXPECT_FALSE(ViewCaughtUp(true, {{"running", 2, 60, false}}, 60));
}

TEST(ReadinessTest, ReadyViewWithinTheBoundIsCaughtUp) {
  EXPECT_TRUE(ViewCaughtUp(true, {{"running", 60}, {"finished", 9999}}, 60));
  EXPECT_TRUE(ViewCaughtUp(true, {}, 0));  // a table no source feeds never falls behind
  EXPECT_TRUE(ViewCaughtUp(true, {{"running", 0}}, 0));
}

TEST(ReadinessTest, BuildingLaggingOrFailedIsNotCaughtUp) {
  EXPECT_FALSE(ViewCaughtUp(false, {{"finished", 0}}, 60));
  EXPECT_FALSE(ViewCaughtUp(true, {{"running", 60.5}}, 60));
  EXPECT_FALSE(ViewCaughtUp(true, {{"finished", 0}, {"error", 0}}, 60));
}

TEST(ReadinessTest, HealthServiceNameOfAView) {
  EXPECT_EQ(ViewHealthServiceName("GSI1"), "cdcview.view.GSI1");
}

}  // namespace
}  // namespace cdcview
