#include "daemon/state/published_state.h"

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "daemon/config/config.h"
#include "daemon/state/catalog.h"
#include "gtest/gtest.h"

namespace cdcview {
namespace {

using std::chrono::milliseconds;

class PublishedStateTest : public ::testing::Test {
 protected:
  PublishedStateTest() {
    config_.sources.resize(2);
    config_.sources[0].name = "a";
    config_.sources[0].table = "T";
    config_.sources[1].name = "a-b";
    config_.sources[1].table = "T";
    config_.tables.resize(1);
    config_.tables[0].name = "T";
    catalog_ = std::make_unique<Catalog>(config_, 1024);
    published_ = std::make_unique<PublishedState>(*catalog_, [this] { return now_ms_; });
  }

  // Publishes the next commit with source `source` at `partition`=`position` and `applied`
  // more events.
  void Commit(size_t source, std::string partition, std::string position, uint64_t applied) {
    std::shared_ptr<CommitSnapshot> next = published_->NextSnapshot();
    next->positions[{config_.sources[source].name, std::move(partition)}] = std::move(position);
    next->counters[source].applied += applied;
    published_->Publish(std::move(next));
  }

  int64_t now_ms_ = 5000;
  Config config_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<PublishedState> published_;
};

// The store lists positions by key "pos/<source>/<partition>"; "a-b/" sorts before "a/".
TEST_F(PublishedStateTest, PositionsListInTheStoresKeyOrder) {
  Commit(0, "x", "1", 1);
  Commit(1, "", "2", 1);
  Commit(0, "", "3", 1);
  std::vector<std::string> listed;
  for (const auto& [key, position] : published_->Snapshot()->positions) {
    listed.push_back("pos/" + key.first + "/" + key.second);
  }
  EXPECT_EQ(listed, (std::vector<std::string>{"pos/a-b/", "pos/a/", "pos/a/x"}));
  EXPECT_EQ(published_->PositionOf(0, "x"), "1");
  EXPECT_EQ(published_->PositionOf(0, ""), "3");
  EXPECT_EQ(published_->PositionOf(1, "x"), "");
  EXPECT_EQ(published_->PositionsOf(0), (std::map<std::string, std::string>{{"", "3"}, {"x", "1"}}));
}

TEST_F(PublishedStateTest, ASnapshotStaysAsItWasLoaded) {
  EXPECT_EQ(published_->Counters(0).last_commit_ms, 5000);
  Commit(0, "", "1", 4);
  const std::shared_ptr<const CommitSnapshot> held = published_->Snapshot();
  Commit(0, "", "2", 3);
  EXPECT_EQ(held->number, 1u);
  EXPECT_EQ(held->counters[0].applied, 4u);
  EXPECT_EQ(held->positions.at({"a", ""}), "1");
  EXPECT_EQ(published_->Snapshot()->number, 2u);
  EXPECT_EQ(published_->Counters(0).applied, 7u);
  EXPECT_EQ(published_->commit_count(), 2u);
}

TEST_F(PublishedStateTest, ReplacingPositionsCountsNoCommit) {
  published_->ReplacePositions({{{"gone", "p"}, "9"}, {{"a", ""}, "4"}});
  EXPECT_EQ(published_->commit_count(), 0u);
  EXPECT_EQ(published_->Snapshot()->number, 0u);
  EXPECT_EQ(published_->PositionOf(0, ""), "4");
  EXPECT_FALSE(published_->WaitForCommitAfter(0, std::chrono::steady_clock::now()));
}

TEST_F(PublishedStateTest, WaitForCommitAfterWakesOnAPublishedCommit) {
  EXPECT_FALSE(
      published_->WaitForCommitAfter(0, std::chrono::steady_clock::now() + milliseconds(20)));
  std::thread committer([this] {
    std::this_thread::sleep_for(milliseconds(50));
    Commit(0, "", "1", 1);
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(published_->WaitForCommitAfter(0, start + std::chrono::seconds(30)));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  committer.join();
  EXPECT_TRUE(published_->WaitForCommitAfter(0, std::chrono::steady_clock::now()));
}

TEST_F(PublishedStateTest, WaitForCommitAfterEndsWhenTheWriterStops) {
  Commit(0, "", "1", 1);
  EXPECT_FALSE(published_->writer_stopped());
  std::thread stopper([this] {
    std::this_thread::sleep_for(milliseconds(50));
    published_->SetWriterStopped();
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(published_->WaitForCommitAfter(1, start + std::chrono::seconds(60)));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  stopper.join();
  EXPECT_TRUE(published_->writer_stopped());
  // A commit already past `since` is still reported.
  EXPECT_TRUE(published_->WaitForCommitAfter(0, std::chrono::steady_clock::now() + std::chrono::seconds(60)));
}

TEST_F(PublishedStateTest, UnappliedRecordsAreQueuedOrInFlight) {
  EXPECT_FALSE(published_->HasUnapplied(0));
  published_->CountInFlight(0, 3);
  EXPECT_TRUE(published_->HasUnapplied(0));
  EXPECT_FALSE(published_->HasUnapplied(1));
  published_->CountInFlight(0, -3);
  EXPECT_FALSE(published_->HasUnapplied(0));
  published_->WatchQueue([](size_t source) { return source == 1 ? size_t{2} : size_t{0}; });
  EXPECT_FALSE(published_->HasUnapplied(0));
  EXPECT_TRUE(published_->HasUnapplied(1));
}

TEST_F(PublishedStateTest, WriterErrorsConcernTheirSourceAndFlushErrorsAll) {
  EXPECT_EQ(published_->WriterError(), "");
  published_->SetCommitError("dead letter of a failed", 0);
  EXPECT_EQ(published_->WriterError(), "dead letter of a failed");
  EXPECT_EQ(published_->WriterError(0), "dead letter of a failed");
  EXPECT_EQ(published_->WriterError(1), "");
  published_->SetPrepareError("cannot read the store");
  EXPECT_EQ(published_->WriterError(1), "cannot read the store");
  published_->SetCommitError("", -1);
  published_->SetPrepareError("");
  std::string flush_error = "disk full";
  published_->SetFlushError([&flush_error] { return flush_error; });
  EXPECT_EQ(published_->WriterError(1), "disk full");
  flush_error.clear();
  EXPECT_EQ(published_->WriterError(), "");
}

TEST_F(PublishedStateTest, AStoreErrorStaysAndComesBeforeEveryOtherWriterError) {
  EXPECT_EQ(published_->StoreError(), "");
  published_->SetCommitError("dead letter of a failed", 0);
  published_->SetStoreError("the writer stopped: the store is damaged");
  EXPECT_EQ(published_->StoreError(), "the writer stopped: the store is damaged");
  // It concerns every source: nothing is applied any more.
  EXPECT_EQ(published_->WriterError(), "the writer stopped: the store is damaged");
  EXPECT_EQ(published_->WriterError(0), "the writer stopped: the store is damaged");
  EXPECT_EQ(published_->WriterError(1), "the writer stopped: the store is damaged");
  published_->SetCommitError("", -1);  // a stage clearing its own error leaves it
  EXPECT_EQ(published_->WriterError(1), "the writer stopped: the store is damaged");
}

TEST_F(PublishedStateTest, SourcesReportTheHealthTheyRegistered) {
  EXPECT_FALSE(published_->SourceHealthOf(0).has_value());
  EXPECT_EQ(published_->SourceKind(0), "");
  published_->RegisterSource(0, "kafka", [] {
    return SourceHealth{SourceState::kError, "broker down", 0};
  });
  ASSERT_TRUE(published_->SourceHealthOf(0).has_value());
  EXPECT_EQ(published_->SourceHealthOf(0)->state, SourceState::kError);
  EXPECT_EQ(published_->SourceHealthOf(0)->error, "broker down");
  EXPECT_EQ(published_->SourceKind(0), "kafka");
}

TEST(SourceStateTest, NamesAreTheWireNames) {
  EXPECT_EQ(SourceStateName(SourceState::kStarting), "starting");
  EXPECT_EQ(SourceStateName(SourceState::kRunning), "running");
  EXPECT_EQ(SourceStateName(SourceState::kBackfilling), "backfilling");
  EXPECT_EQ(SourceStateName(SourceState::kCaughtUp), "caught_up");
  EXPECT_EQ(SourceStateName(SourceState::kFinished), "finished");
  EXPECT_EQ(SourceStateName(SourceState::kError), "error");
  EXPECT_EQ(SourceStateName(SourceState::kStopped), "stopped");
}

}  // namespace
}  // namespace cdcview
