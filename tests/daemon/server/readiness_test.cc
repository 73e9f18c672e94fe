#include "daemon/server/readiness.h"

#include <limits>

#include "gtest/gtest.h"

namespace cdcview {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

TEST(ReadinessTest, SourcesWithNothingLeftToReadCountAsNoLag) {
  EXPECT_EQ(EffectiveLagSeconds({SourceState::kFinished, 3600}), 0);
  EXPECT_EQ(EffectiveLagSeconds({SourceState::kCaughtUp, 3600}), 0);
  EXPECT_EQ(EffectiveLagSeconds({SourceState::kRunning, 12.5, 0, false, true}), 12.5);
  EXPECT_EQ(EffectiveLagSeconds({SourceState::kError, 0}), kInfinity);
}

TEST(ReadinessTest, LagGrowsSinceTheLastCommitUnlessTheSourceIsIdle) {
  // {state, lag at the last commit, seconds since it, records read but not applied,
  //  committed since start}
  EXPECT_EQ(EffectiveLagSeconds({SourceState::kRunning, 2, 30, false, true}), 32);
  EXPECT_EQ(EffectiveLagSeconds({SourceState::kCaughtUp, 2, 30, false, true}), 0);
  EXPECT_EQ(EffectiveLagSeconds({SourceState::kCaughtUp, 2, 30, true, true}), 32);
  EXPECT_EQ(EffectiveLagSeconds({SourceState::kFinished, 0, 7, true, true}), 7);
  EXPECT_EQ(EffectiveLagSeconds({SourceState::kError, 0, 0, false, true}), kInfinity);
  EXPECT_FALSE(ViewCaughtUp(true, {{SourceState::kRunning, 2, 60, false, true}}, 60));
}

TEST(ReadinessTest, ReadyViewWithinTheBoundIsCaughtUp) {
  EXPECT_TRUE(ViewCaughtUp(true, {{SourceState::kRunning, 60, 0, false, true}, {SourceState::kFinished, 9999}}, 60));
  EXPECT_TRUE(ViewCaughtUp(true, {}, 0));  // a table no source feeds never falls behind
  EXPECT_TRUE(ViewCaughtUp(true, {{SourceState::kRunning, 0, 0, false, true}}, 0));
}

TEST(ReadinessTest, BuildingLaggingOrFailedIsNotCaughtUp) {
  EXPECT_FALSE(ViewCaughtUp(false, {{SourceState::kFinished, 0}}, 60));
  EXPECT_FALSE(ViewCaughtUp(true, {{SourceState::kRunning, 60.5, 0, false, true}}, 60));
  EXPECT_FALSE(ViewCaughtUp(true, {{SourceState::kFinished, 0}, {SourceState::kError, 0}}, 60));
}

// Seen with a DynamoDB snapshot: Scan items carry no creation time, so the batches' lag reads 0
// and the view used to turn SERVING at 3 % of the scan.
TEST(ReadinessTest, BackfillingIsNeverCaughtUpWhateverItsBatchesLag) {
  const SourceProgress scanning{SourceState::kBackfilling, 0, 0, false, true};
  EXPECT_EQ(EffectiveLagSeconds(scanning), kInfinity);
  EXPECT_EQ(UnknownLagReason(scanning), "is backfilling (a snapshot scan)");
  EXPECT_FALSE(ViewCaughtUp(true, {scanning}, 60));
  EXPECT_FALSE(ViewCaughtUp(true, {{SourceState::kFinished, 0}, scanning}, 3600));
  const SourceProgress starting{SourceState::kStarting, 0, 0, false, false};
  EXPECT_EQ(EffectiveLagSeconds(starting), kInfinity);
  EXPECT_EQ(UnknownLagReason(starting), "is starting");
}

// Until its first commit a source's lag is 0 and its last commit is the start time: both say
// nothing about a source with records to read (a Kafka group still joining, a backlog).
TEST(ReadinessTest, ASourceWithDataIsNotCaughtUpBeforeItsFirstCommit) {
  const SourceProgress fresh{SourceState::kRunning, 0, 0.5, false, false};
  EXPECT_EQ(EffectiveLagSeconds(fresh), kInfinity);
  EXPECT_EQ(UnknownLagReason(fresh), "has applied no batch since the daemon started");
  EXPECT_FALSE(ViewCaughtUp(true, {fresh}, 60));
  // Read to the end but not applied yet: the same.
  EXPECT_EQ(EffectiveLagSeconds({SourceState::kCaughtUp, 0, 0.5, true, false}), kInfinity);
  // Nothing to read and nothing read: idle, so caught up without any commit.
  EXPECT_EQ(EffectiveLagSeconds({SourceState::kCaughtUp, 0, 0.5, false, false}), 0);
  EXPECT_EQ(EffectiveLagSeconds({SourceState::kFinished, 0, 0.5, false, false}), 0);
  EXPECT_EQ(UnknownLagReason({SourceState::kCaughtUp, 0, 0.5, false, false}), "");
  EXPECT_TRUE(ViewCaughtUp(true, {{SourceState::kCaughtUp, 0, 0.5, false, false}}, 0));
  // After the first commit the measured lag counts.
  const SourceProgress applied{SourceState::kRunning, 1.5, 0.5, false, true};
  EXPECT_EQ(EffectiveLagSeconds(applied), 2);
  EXPECT_EQ(UnknownLagReason(applied), "");
  EXPECT_TRUE(ViewCaughtUp(true, {applied}, 2));
  EXPECT_FALSE(ViewCaughtUp(true, {applied}, 1));
}

TEST(ReadinessTest, HealthServiceNameOfAView) {
  EXPECT_EQ(ViewHealthServiceName("GSI1"), "cdcview.view.GSI1");
}

}  // namespace
}  // namespace cdcview
