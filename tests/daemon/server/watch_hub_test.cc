// WatchHub::Run against a real store and writer, through a fake stream: a snapshot read in
// chunks stays exact while the writer commits between them, streams beyond max_streams are
// refused, and a stream whose client reads nothing is ended with a status saying why.
#include "daemon/server/watch.h"

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "tests/fakes/reader_fixture.h"
#include "tests/fakes/records.h"

namespace cdcview {
namespace {

using test::At;
using test::S;
using Strings = std::vector<std::string>;

constexpr char kConfigYaml[] = R"(
sources:
  - name: src
    table: App
    file: { path: unused.ndjson }
tables:
  - name: App
    key: { partition: PK }
    views:
      - name: ByG
        partition_key: { attribute: g, type: S }
        sort_key: { attribute: PK, type: S }
        projection: ALL
      - name: ByH
        partition_key: { attribute: h, type: S }
)";

// "entry A=1", "PUT A=2" / "DELETE A" (with " @" when it carries a position), "done @".
std::string Describe(const v1::WatchEvent& e) {
  auto item = [](const v1::ViewEntry& entry) {
    const auto& a = entry.item().attributes();
    return a.at("PK").s() + (a.contains("v") ? "=" + a.at("v").s() : "");
  };
  const std::string at = e.position().empty() ? "" : " @";
  switch (e.event_case()) {
    case v1::WatchEvent::kSnapshotEntry: return "entry " + item(e.snapshot_entry()) + at;
    case v1::WatchEvent::kChange:
      return (e.change().op() == v1::EntryChange::PUT ? "PUT " : "DELETE ") +
             item(e.change().entry()) + at;
    case v1::WatchEvent::kSnapshotDone: return "done" + at;
    case v1::WatchEvent::kFellBehind: return "fell_behind" + at;
    case v1::WatchEvent::EVENT_NOT_SET: return "start" + at;
    default: return "?";
  }
}

v1::WatchRequest SnapshotOf(const std::string& view) {
  v1::WatchRequest r;
  r.set_view(view);
  r.set_snapshot(true);
  return r;
}

class WatchHubTest : public test::ReaderFixture {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(OpenReader(kConfigYaml));
    ASSERT_TRUE(applier_->RebuildViews().ok());
  }

  void Put(const std::string& pk, const std::string& v) {
    std::vector<SourceRecord> batch = {test::Insert(
        config_.tables[0].key, {{"PK", S(pk)}, {"g", S("G")}, {"v", S(v)}},
        At(absl::StrCat(++position_)))};
    ASSERT_TRUE(applier_->ApplyBatch(&batch).ok());
  }
  // An item of ByH only: a change in the log that ByG's watchers skip.
  void PutElsewhere(int n) {
    std::vector<SourceRecord> batch = {
        test::Insert(config_.tables[0].key, {{"PK", S(absl::StrCat("X#", n))}, {"h", S("1")}},
                     At(absl::StrCat(++position_)))};
    ASSERT_TRUE(applier_->ApplyBatch(&batch).ok());
  }
  void Delete(const std::string& pk) {
    std::vector<SourceRecord> batch = {
        test::Remove(config_.tables[0].key, {{"PK", S(pk)}}, At(absl::StrCat(++position_)))};
    ASSERT_TRUE(applier_->ApplyBatch(&batch).ok());
  }

  std::unique_ptr<WatchHub> Hub(const WatchConfig& config) {
    return std::make_unique<WatchHub>(*catalog_, *store_, *published_, *reader_, config, nullptr);
  }

  int position_ = 0;
};

// Chunks of one entry each (a 1-byte buffer). While the client receives B, the writer changes
// A and B (already sent) and D and E (not read yet): A's and B's changes come before
// snapshot_done without a position, D's and E's new states come as entries, and what the
// client holds at snapshot_done is the view at that position.
TEST_F(WatchHubTest, SnapshotReadInChunksIsExactWhileTheWriterCommits) {
  for (const char* pk : {"A", "B", "C", "D"}) Put(pk, "1");
  WatchConfig config;
  config.max_stream_buffer_bytes = 1;
  auto hub = Hub(config);
  Strings got;
  WatchStream stream{[&](const v1::WatchEvent& e) {
                       got.push_back(Describe(e));
                       if (got.back() == "entry B=1") {
                         Put("B", "2");
                         Delete("A");
                         Put("D", "2");
                         Put("E", "1");
                       }
                       return e.event_case() != v1::WatchEvent::kSnapshotDone;
                     },
                     [] { return false; }, [](const absl::Status&) {}};
  EXPECT_EQ(hub->Run(SnapshotOf("ByG"), stream),
            absl::CancelledError("the client cancelled the stream"));
  EXPECT_EQ(got, (Strings{"entry A=1", "entry B=1", "PUT B=2", "DELETE A=1", "entry C=1",
                          "entry D=2", "entry E=1", "done @"}));
}

// A writer that commits before every step of the stream (here: whenever it looks at
// cancellation) never leaves it a step with nothing to read; the chunks go on all the same.
TEST_F(WatchHubTest, SnapshotGoesOnWhileTheWriterCommitsBeforeEveryStep) {
  for (const char* pk : {"A", "B", "C"}) Put(pk, "1");
  WatchConfig config;
  config.max_stream_buffer_bytes = 1;
  auto hub = Hub(config);
  Strings got;
  int steps = 0;
  WatchStream stream{[&](const v1::WatchEvent& e) {
                       got.push_back(Describe(e));
                       return e.event_case() != v1::WatchEvent::kSnapshotDone;
                     },
                     [&] {
                       PutElsewhere(steps);
                       return ++steps > 100;
                     },
                     [](const absl::Status&) {}};
  EXPECT_EQ(hub->Run(SnapshotOf("ByG"), stream),
            absl::CancelledError("the client cancelled the stream"));
  EXPECT_EQ(got, (Strings{"entry A=1", "entry B=1", "entry C=1", "done @"}));
}

TEST_F(WatchHubTest, StreamsBeyondMaxStreamsAreRefused) {
  WatchConfig config;
  config.max_streams = 1;
  auto hub = Hub(config);
  std::atomic<bool> leave{false};
  absl::Notification first_sent;
  WatchStream open{[&](const v1::WatchEvent&) {
                     if (!first_sent.HasBeenNotified()) first_sent.Notify();
                     return true;
                   },
                   [&] { return leave.load(); }, [](const absl::Status&) {}};
  absl::Status first_status;
  std::thread first([&] { first_status = hub->Run(SnapshotOf("ByG"), open); });
  first_sent.WaitForNotification();  // snapshot_done: the first stream is open

  WatchStream never{[](const v1::WatchEvent&) {
                      ADD_FAILURE() << "a refused stream got an event";
                      return false;
                    },
                    [] { return false; }, [](const absl::Status&) {}};
  const absl::Status refused = absl::ResourceExhaustedError(
      "too many Watch streams: 1 are open (watch.max_streams); close one, retry later, or "
      "raise watch.max_streams");
  EXPECT_EQ(hub->Run(SnapshotOf("ByG"), never), refused);
  v1::WatchRequest unknown;
  unknown.set_view("Nope");
  EXPECT_EQ(hub->Run(unknown, never), refused);

  leave = true;
  first.join();
  EXPECT_EQ(first_status, absl::CancelledError("the client cancelled the stream"));
  // Its place is free again.
  EXPECT_EQ(hub->Run(unknown, never).code(), absl::StatusCode::kNotFound);
}

// The client reads nothing: the first Write blocks until the watchdog ends the stream, with
// the status the client receives naming the wait, the bytes waiting and both fields.
TEST_F(WatchHubTest, StalledStreamIsEndedWithAStatusSayingWhy) {
  for (const char* pk : {"A", "B", "C"}) Put(pk, "1");
  WatchConfig config;
  config.stalled_stream_timeout_ms = 100;
  auto hub = Hub(config);

  // What the stream would have been sent: the whole snapshot in one chunk.
  size_t bytes = 0;
  WatchStream reading{[&](const v1::WatchEvent& e) {
                        bytes += e.ByteSizeLong();
                        return e.event_case() != v1::WatchEvent::kSnapshotDone;
                      },
                      [] { return false; }, [](const absl::Status&) {}};
  ASSERT_EQ(hub->Run(SnapshotOf("ByG"), reading).code(), absl::StatusCode::kCancelled);

  absl::Notification ended;
  absl::Status sent_to_client;
  int writes = 0;
  WatchStream stalled{[&](const v1::WatchEvent&) {
                        ++writes;
                        ended.WaitForNotification();
                        return false;
                      },
                      [] { return false; },
                      [&](const absl::Status& s) {
                        sent_to_client = s;
                        ended.Notify();
                      }};
  const absl::Status status = hub->Run(SnapshotOf("ByG"), stalled);
  const absl::Status want = absl::ResourceExhaustedError(absl::StrCat(
      "watch stream cut off: the client read nothing for 100 ms "
      "(watch.stalled_stream_timeout_ms) while ",
      bytes,
      " bytes were waiting for it (watch.max_stream_buffer_bytes: 1048576); read faster, or "
      "watch again with snapshot (a snapshot cannot be resumed)"));
  EXPECT_EQ(sent_to_client, want);
  EXPECT_EQ(status, want);
  EXPECT_EQ(writes, 1);
}

// start_position: the stream's first event is its start position alone, before any change;
// resuming from it gives the changes after it, and it is the from_position itself.
TEST_F(WatchHubTest, StartPositionComesFirstAndResumesFromTheStart) {
  Put("A", "1");
  auto hub = Hub(WatchConfig{});
  v1::WatchRequest request;
  request.set_view("ByG");
  request.set_start_position(true);
  Strings got;
  std::string start;
  WatchStream stream{[&](const v1::WatchEvent& e) {
                       got.push_back(Describe(e));
                       if (got.size() == 1) {
                         start = e.position();
                         Put("B", "1");
                       }
                       return got.size() < 2;
                     },
                     // Without a start event nothing would come: give up rather than hang.
                     [give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5)] {
                       return std::chrono::steady_clock::now() > give_up;
                     },
                     [](const absl::Status&) {}};
  EXPECT_EQ(hub->Run(request, stream).code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(got, (Strings{"start @", "PUT B=1 @"}));

  got.clear();
  request.set_from_position(start);
  std::string resumed_start;
  WatchStream resumed{[&](const v1::WatchEvent& e) {
                        got.push_back(Describe(e));
                        if (got.size() == 1) resumed_start = e.position();
                        return got.size() < 2;
                      },
                      [] { return false; }, [](const absl::Status&) {}};
  EXPECT_EQ(hub->Run(request, resumed).code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(got, (Strings{"start @", "PUT B=1 @"}));
  EXPECT_EQ(resumed_start, start);

  // With a snapshot, snapshot_done is the first position.
  got.clear();
  request = SnapshotOf("ByG");
  request.set_start_position(true);
  WatchStream snapshot{[&](const v1::WatchEvent& e) {
                         got.push_back(Describe(e));
                         return e.event_case() != v1::WatchEvent::kSnapshotDone;
                       },
                       [] { return false; }, [](const absl::Status&) {}};
  EXPECT_EQ(hub->Run(request, snapshot).code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(got, (Strings{"entry A=1", "entry B=1", "done @"}));
}

}  // namespace
}  // namespace cdcview
