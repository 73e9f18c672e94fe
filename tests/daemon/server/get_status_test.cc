// GetStatus while the writer commits: every answer's counters and positions describe the same
// commits (one published snapshot), and it reports the sources' health as registered.
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/server/view_reader.h"
#include "daemon/state/published_state.h"
#include "gtest/gtest.h"
#include "tests/fakes/fake_source_health.h"
#include "tests/fakes/reader_fixture.h"
#include "tests/fakes/records.h"

namespace cdcview {
namespace {

using test::At;
using test::S;

constexpr char kConfigYaml[] = R"(
sources:
  - name: a
    table: App
    file: { path: a.ndjson }
  - name: b
    table: App
    file: { path: b.ndjson }
tables:
  - name: App
    key: { partition: PK }
    views:
      - name: ByDay
        partition_key: { attribute: day, type: S }
)";

class GetStatusTest : public test::ReaderFixture {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(OpenReader(kConfigYaml, [] { return int64_t{0}; }, {&a_, &b_}));
    ASSERT_TRUE(applier_->RebuildViews().ok());
  }

  // A batch of `n` events of `source`, the k-th event of that source at position "k": a
  // source's position then equals the number of its events applied.
  std::vector<SourceRecord> Batch(uint32_t source, int n) {
    std::vector<SourceRecord> batch;
    for (int i = 0; i < n; ++i) {
      const uint64_t k = ++events_[source];
      batch.push_back(test::Insert(config_.tables[0].key,
                                   {{"PK", S(absl::StrCat(source, "-", k))}, {"day", S("D")}},
                                   At(absl::StrCat(k)).Source(source)));
    }
    return batch;
  }

  test::FakeSourceHealth a_{SourceState::kRunning, "file"};
  test::FakeSourceHealth b_{SourceState::kCaughtUp, "file"};
  uint64_t events_[2] = {0, 0};
};

// Without one snapshot, a reader could take positions from after a commit and counters from
// before it (or the reverse); the position of each source is its count of events here.
TEST_F(GetStatusTest, CountersAndPositionsAgreeWhileBatchesCommit) {
  constexpr int kBatches = 300;
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int b = 0; b < kBatches; ++b) {
      std::vector<SourceRecord> batch = Batch(b % 2, 1 + b % 5);
      ASSERT_TRUE(applier_->ApplyBatch(&batch).ok());
    }
    done = true;
  });
  std::vector<std::thread> readers;
  std::atomic<int> total{0};
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      int seen = 0;
      while (!done.load() || seen == 0) {
        const v1::StatusResponse status = reader_->GetStatus();
        ++seen;
        for (const v1::SourceStatus& s : status.sources()) {
          uint64_t position = 0;
          if (s.positions_size() == 1) {
            EXPECT_TRUE(absl::SimpleAtoi(s.positions(0).position(), &position));
          }
          EXPECT_LE(s.positions_size(), 1);
          EXPECT_EQ(s.events_applied(), position) << s.ShortDebugString();
        }
      }
      total += seen;
    });
  }
  writer.join();
  for (std::thread& t : readers) t.join();
  EXPECT_GT(total.load(), 0);

  const v1::StatusResponse last = reader_->GetStatus();
  ASSERT_EQ(last.sources_size(), 2);
  EXPECT_EQ(last.sources(0).events_applied(), events_[0]);
  EXPECT_EQ(last.sources(1).events_applied(), events_[1]);
  EXPECT_EQ(last.applied().entries_size(), 2);
}

TEST_F(GetStatusTest, ReportsEachSourcesRegisteredHealth) {
  a_.Set(SourceState::kBackfilling, "", 0.25);
  b_.Set(SourceState::kError, "cannot open b.ndjson: No such file or directory");
  const v1::StatusResponse status = reader_->GetStatus();
  ASSERT_EQ(status.sources_size(), 2);
  // A backfilling source's lag is unknown and a failed one is never fresh (readiness's rule).
  EXPECT_EQ(status.sources(0).ShortDebugString(),
            "name: \"a\" kind: \"file\" table: \"App\" state: \"backfilling\" lag_seconds: inf "
            "progress: 0.25");
  EXPECT_EQ(status.sources(1).ShortDebugString(),
            "name: \"b\" kind: \"file\" table: \"App\" state: \"error\" error: \"cannot open "
            "b.ndjson: No such file or directory\" lag_seconds: inf");
}

// A cluster member's own part of a read (member_parts) is refused while a source of the table
// backfills: the merged answer would miss what its partitions hold. Its plain reads answer.
TEST_F(GetStatusTest, AMemberRefusesItsPartWhileASourceOfTheTableBackfills) {
  ViewReader member(*catalog_, *store_, *published_, 1000, /*member_parts=*/true);
  v1::QueryRequest query;
  query.set_view("ByDay");
  query.mutable_partition_key()->set_s("D");
  v1::GetItemRequest get;
  get.set_table("App");
  (*get.mutable_key()->mutable_attributes())["PK"].set_s("0-1");
  ASSERT_TRUE(member.Query(query).ok());
  ASSERT_TRUE(member.GetItem(get).ok());

  a_.Set(SourceState::kBackfilling, "", 0.25);
  const std::string refused =
      "source a is backfilling the partitions this member owns (25% read); the cluster answers "
      "once every member has caught up";
  EXPECT_EQ(member.Query(query).status(), absl::UnavailableError(refused));
  EXPECT_EQ(member.GetItem(get).status(), absl::UnavailableError(refused));
  EXPECT_TRUE(reader_->Query(query).ok());  // a standalone daemon's view answers, BACKFILLING

  a_.Set(SourceState::kCaughtUp);
  EXPECT_TRUE(member.Query(query).ok());
}

}  // namespace
}  // namespace cdcview
