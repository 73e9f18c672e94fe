#include "daemon/app/ingestion_log.h"

#include "gtest/gtest.h"

namespace cdcview {
namespace {

TEST(IngestionLineTest, CountsSinceTheLastLineTotalsAndLag) {
  SourceProgress running{SourceState::kRunning, 0.4, 0, false, true};
  EXPECT_EQ(IngestionLine("app", running, {3014, 0, 0}, {3134, 0, 3}, 30),
            "source app (running): +120 applied, +0 skipped, +3 rejected in the last 30 s; "
            "totals 3134 applied, 0 skipped, 3 rejected; lag 0.4 s");
  SourceProgress idle{SourceState::kCaughtUp, 12, 40, false, true};
  EXPECT_EQ(IngestionLine("app", idle, {3134, 0, 3}, {3134, 2, 3}, 30),
            "source app (caught_up): +0 applied, +2 skipped, +0 rejected in the last 30 s; "
            "totals 3134 applied, 2 skipped, 3 rejected; lag 0.0 s");
}

TEST(IngestionLineTest, UnknownAndFailedLag) {
  SourceProgress scanning{SourceState::kBackfilling, 0, 0, false, true};
  EXPECT_EQ(IngestionLine("ddb", scanning, {}, {500, 0, 0}, 30),
            "source ddb (backfilling): +500 applied, +0 skipped, +0 rejected in the last 30 s; "
            "totals 500 applied, 0 skipped, 0 rejected; lag unknown (source is backfilling (a "
            "snapshot scan))");
  SourceProgress failed{SourceState::kError, 0, 0, false, true};
  EXPECT_EQ(IngestionLine("k", failed, {7, 0, 0}, {7, 0, 0}, 10),
            "source k (error): +0 applied, +0 skipped, +0 rejected in the last 10 s; totals 7 "
            "applied, 0 skipped, 0 rejected; failed (see GetStatus)");
}

}  // namespace
}  // namespace cdcview
