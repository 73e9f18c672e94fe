#include "daemon/log/log_throttle.h"

#include <string>

#include "daemon/log/log.h"
#include "gtest/gtest.h"

namespace cdcview {
namespace {

TEST(LogThrottleTest, FirstBurstPerKeyAndIntervalThenOneCount) {
  int64_t now = 1000;
  LogThrottle throttle(3, 10000, [&] { return now; });
  int admitted = 0;
  for (int i = 0; i < 50; ++i) admitted += throttle.Admit("app") ? 1 : 0;
  EXPECT_EQ(admitted, 3);
  EXPECT_TRUE(throttle.Admit("other"));  // keys are counted apart
  now = 10999;  // the interval has not ended: nothing to summarize yet
  EXPECT_TRUE(throttle.TakeSummaries().empty());
  EXPECT_FALSE(throttle.Admit("app"));
  now = 11000;
  auto due = throttle.TakeSummaries();
  ASSERT_EQ(due.size(), 1u);  // "other" suppressed nothing
  EXPECT_EQ(due[0].key, "app");
  EXPECT_EQ(due[0].suppressed, 48u);
  EXPECT_EQ(due[0].interval_ms, 10000);
  EXPECT_TRUE(throttle.TakeSummaries().empty());
  // A new interval: the burst again.
  EXPECT_TRUE(throttle.Admit("app"));
  EXPECT_TRUE(throttle.Admit("app"));
  EXPECT_TRUE(throttle.Admit("app"));
  EXPECT_FALSE(throttle.Admit("app"));
  now = 21000;
  due = throttle.TakeSummaries();
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].suppressed, 1u);
}

TEST(LogThrottleTest, QuietIntervalsRestartTheBurst) {
  int64_t now = 0;
  LogThrottle throttle(1, 1000, [&] { return now; });
  EXPECT_TRUE(throttle.Admit("s"));
  EXPECT_FALSE(throttle.Admit("s"));
  now = 5000;  // the count is kept until taken, however late
  EXPECT_FALSE(throttle.Admit("s"));
  auto due = throttle.TakeSummaries();
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].suppressed, 2u);
  EXPECT_EQ(due[0].interval_ms, 5000);
  EXPECT_TRUE(throttle.Admit("s"));
  now = 7000;  // an interval with nothing suppressed restarts by itself
  EXPECT_TRUE(throttle.Admit("s"));
  EXPECT_TRUE(throttle.TakeSummaries().empty());
}

TEST(LogTest, JsonLinesEscapeTheMessage) {
  SetLogJson(true);
  testing::internal::CaptureStderr();
  LogWarning("source \"a\": line 3\tbad\nnext");
  std::string line = testing::internal::GetCapturedStderr();
  SetLogJson(false);
  // {"ts":"2024-01-02T03:04:05.678Z","level":"warning","msg":"..."}
  ASSERT_EQ(line.size(), 92u) << line;
  EXPECT_EQ(line.substr(0, 7), "{\"ts\":\"");
  EXPECT_EQ(line.substr(31), "\",\"level\":\"warning\",\"msg\":\"source \\\"a\\\": line 3\\tbad\\nnext\"}\n");
}

TEST(LogTest, LevelsBelowTheSetOneAreDropped) {
  SetLogLevel(LogLevel::kWarning);
  testing::internal::CaptureStderr();
  LogInfo("not shown");
  LogError("shown");
  std::string text = testing::internal::GetCapturedStderr();
  SetLogLevel(LogLevel::kInfo);
  EXPECT_EQ(text.find("not shown"), std::string::npos);
  EXPECT_EQ(text.substr(25), "error shown\n");
}

}  // namespace
}  // namespace cdcview
