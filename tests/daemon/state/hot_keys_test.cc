#include "daemon/state/hot_keys.h"

#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "daemon/config/config.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "index_builders/key_codec.h"
#include "tests/fakes/records.h"

namespace cdcview {
namespace {

using test::B;
using test::N;
using test::S;

std::string Enc(const AttributeValue& v) {
  std::string out;
  EncodeKeyComponent(v, &out);
  return out;
}

TEST(FirstKeyComponentSizeTest, FindsTheEndOfEveryKeyType) {
  for (const AttributeValue& first :
       {S("DAY#1"), S(std::string("a\0b", 3)), S(""), B(std::string("\0\xFF", 2)), N("0"),
        N("-12.5"), N("123456789012345678901234567890")}) {
    const std::string key = Enc(first) + Enc(S("rest")) + Enc(N("7"));
    EXPECT_EQ(FirstKeyComponentSize(key), Enc(first).size()) << test::Describe(first);
  }
  EXPECT_EQ(FirstKeyComponentSize(""), 0u);
  EXPECT_EQ(FirstKeyComponentSize(std::string("\x03" "abc", 4)), 0u);  // no terminator
}

constexpr char kConfigYaml[] = R"(
sources:
  - { name: s, table: T, file: { path: x } }
tables:
  - name: T
    key: { partition: PK }
    views:
      - { name: V1, partition_key: { attribute: a, type: S } }
      - { name: V2, partition_key: { attribute: b, type: N } }
)";

Config ParsedConfig() {
  auto config = ParseConfig(kConfigYaml, "t.yaml");
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *std::move(config) : Config();
}

class HotKeyTrackerTest : public ::testing::Test {
 protected:
  Config config_ = ParsedConfig();
  Catalog catalog_{config_, 511};
  HotKeyTracker tracker_{catalog_};
};

TEST_F(HotKeyTrackerTest, CountsEachViewsPartitionKeysAndTheTablesKeys) {
  using Op = IndexMutation::Op;
  std::vector<IndexMutation> mutations = {
      {Op::kPut, 0, Enc(S("x")) + Enc(S("pk1")), "v"},
      {Op::kDelete, 0, Enc(S("x")) + Enc(S("pk2")), ""},
      {Op::kPut, 0, Enc(S("y")) + Enc(S("pk3")), "v"},
      {Op::kPut, 1, Enc(N("5")) + Enc(S("pk1")), "v"},
  };
  std::vector<std::pair<size_t, std::string>> table_keys = {
      {0, Enc(S("pk1"))}, {0, Enc(S("pk2"))}, {0, Enc(S("pk1"))}};
  tracker_.RecordBatch(mutations, table_keys, 1000);

  HeavyHittersReport v1 = tracker_.ViewReport(0, 10, 3000);
  ASSERT_EQ(v1.keys.size(), 2u);
  EXPECT_EQ(v1.keys[0].key, Enc(S("x")));  // a put and a delete
  EXPECT_EQ(v1.keys[0].count, 2u);
  EXPECT_EQ(v1.keys[1].key, Enc(S("y")));
  EXPECT_EQ(v1.total, 3u);
  EXPECT_DOUBLE_EQ(v1.span_seconds, 2.0);
  HeavyHittersReport v2 = tracker_.ViewReport(1, 10, 3000);
  ASSERT_EQ(v2.keys.size(), 1u);
  EXPECT_EQ(v2.keys[0].key, Enc(N("5")));
  HeavyHittersReport t = tracker_.TableReport(0, 1, 3000);
  ASSERT_EQ(t.keys.size(), 1u);
  EXPECT_EQ(t.keys[0].key, Enc(S("pk1")));
  EXPECT_EQ(t.keys[0].count, 2u);
  EXPECT_EQ(t.total, 3u);
}

TEST_F(HotKeyTrackerTest, TheWholeRunKeepsWhatTheRecentWindowsForgot) {
  using Op = IndexMutation::Op;
  const std::vector<std::pair<size_t, std::string>> table_keys = {{0, Enc(S("pk1"))}};
  tracker_.RecordBatch({{Op::kPut, 0, Enc(S("x")) + Enc(S("pk1")), "v"}}, table_keys, 1000);
  tracker_.RecordBatch({{Op::kPut, 0, Enc(S("x")) + Enc(S("pk1")), "v"},
                       {Op::kPut, 0, Enc(S("y")) + Enc(S("pk2")), "v"}},
                      table_keys, 61000);
  // Three windows (60 s each) later, the recent report is empty; the whole run is not.
  const int64_t later = 241000;
  EXPECT_TRUE(tracker_.ViewReport(0, 10, later).keys.empty());
  EXPECT_TRUE(tracker_.TableReport(0, 10, later).keys.empty());
  HeavyHittersReport run = tracker_.ViewReport(0, 10, later, /*whole_run=*/true);
  ASSERT_EQ(run.keys.size(), 2u);
  EXPECT_EQ(run.keys[0].key, Enc(S("x")));
  EXPECT_EQ(run.keys[0].count, 2u);
  EXPECT_EQ(run.keys[0].error, 0u);
  EXPECT_EQ(run.keys[1].key, Enc(S("y")));
  EXPECT_EQ(run.total, 3u);
  EXPECT_DOUBLE_EQ(run.span_seconds, 240.0);  // since the first write
  HeavyHittersReport table = tracker_.TableReport(0, 10, later, /*whole_run=*/true);
  ASSERT_EQ(table.keys.size(), 1u);
  EXPECT_EQ(table.keys[0].count, 2u);
  EXPECT_DOUBLE_EQ(table.span_seconds, 240.0);
}

// The writer must never wait for a reader: a report held open (by the test hook, in the middle
// of building it) while the writer records a batch must not delay that batch.
TEST_F(HotKeyTrackerTest, AReportInProgressDoesNotHoldUpRecordBatch) {
  using Op = IndexMutation::Op;
  tracker_.RecordBatch({{Op::kPut, 0, Enc(S("x")) + Enc(S("pk1")), "v"}}, {}, 1000);
  absl::Notification report_started;
  absl::Notification batch_recorded;
  bool recorded_while_report_open = false;
  tracker_.SetReportHookForTest([&] {
    report_started.Notify();
    // Holds the report open until the batch is recorded, or long enough to tell it never was.
    recorded_while_report_open = batch_recorded.WaitForNotificationWithTimeout(absl::Seconds(2));
  });
  HeavyHittersReport open_report;
  std::thread reader([&] { open_report = tracker_.ViewReport(0, 10, 3000); });
  report_started.WaitForNotification();
  tracker_.RecordBatch({{Op::kPut, 0, Enc(S("y")) + Enc(S("pk2")), "v"}}, {}, 2000);
  batch_recorded.Notify();
  reader.join();
  tracker_.SetReportHookForTest(nullptr);

  EXPECT_TRUE(recorded_while_report_open);
  // The open report is of the batches recorded when it began; the next one sees both.
  ASSERT_EQ(open_report.keys.size(), 1u);
  EXPECT_EQ(open_report.keys[0].key, Enc(S("x")));
  HeavyHittersReport next = tracker_.ViewReport(0, 10, 3000);
  ASSERT_EQ(next.keys.size(), 2u);
  EXPECT_EQ(next.keys[0].key, Enc(S("x")));
  EXPECT_EQ(next.keys[1].key, Enc(S("y")));
  EXPECT_EQ(next.total, 2u);
}

}  // namespace
}  // namespace cdcview
