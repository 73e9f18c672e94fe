// The writer's Kafka offset check: a record read again after a rebalance (its offset below the
// partition's stored next offset) is skipped, counted as skipped, and never moves the position
// back; a record with nothing to apply (a Debezium tombstone) only advances the position.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "daemon/apply/applier.h"
#include "daemon/config/config.h"
#include "daemon/log/log.h"
#include "daemon/state/catalog.h"
#include "daemon/store/store.h"
#include "gtest/gtest.h"
#include "tests/fakes/fake_dead_letter_sink.h"
#include "tests/fakes/records.h"
#include "tests/fakes/temp_dir.h"

namespace cdcview {
namespace {

using test::At;
using test::S;

constexpr char kYaml[] = R"(
sources:
  - name: orders
    table: T
    kafka: { brokers: "127.0.0.1:9", topics: [t], group: g }
tables:
  - name: T
    key: { partition: PK }
    views:
      - name: ByV
        partition_key: { attribute: v, type: S }
        projection: ALL
)";

class ApplierOffsetsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetLogLevel(LogLevel::kWarning);
    auto config = ParseConfig(kYaml, "test.yaml");
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = *std::move(config);
    config_.storage.path = dir_.Sub("store");
    config_.storage.map_size = 16 << 20;
    auto store = Store::Open(config_.storage, config_.tables);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    catalog_ = std::make_unique<Catalog>(config_, store_->max_key_size());
    published_ = std::make_unique<PublishedState>(*catalog_);
    applier_ = std::make_unique<Applier>(*catalog_, store_.get(), nullptr,
                                         std::vector<DeadLetterSink*>{&sink_}, published_.get());
    ASSERT_TRUE(applier_->Recover().ok());
    ASSERT_TRUE(applier_->RebuildViews().ok());
  }

  // Offset `offset` of partition t/0 setting item PK=`pk` to v=`v`.
  SourceRecord At(int64_t offset, const std::string& pk, const std::string& v) {
    SourceRecord r = test::Insert(config_.tables[0].key, Item{{"PK", S(pk)}, {"v", S(v)}},
                                  test::At(std::to_string(offset + 1)).Partition("t/0").Locator(
                                      "t/0@" + std::to_string(offset)));
    r.offset = offset;
    return r;
  }

  absl::Status Apply(std::vector<SourceRecord> batch) { return applier_->ApplyBatch(&batch); }

  test::TempDir dir_;
  Config config_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Catalog> catalog_;
  FakeDeadLetterSink sink_;
  std::unique_ptr<PublishedState> published_;
  std::unique_ptr<Applier> applier_;
};

TEST_F(ApplierOffsetsTest, RecordsReadAgainAreSkippedAndKeepThePosition) {
  ASSERT_TRUE(Apply({At(0, "a", "1"), At(1, "b", "1"), At(2, "a", "2")}).ok());
  EXPECT_EQ(published_->PositionsOf(0).at("t/0"), "3");
  EXPECT_EQ(published_->PositionOf(0, "t/0"), "3");
  EXPECT_EQ(published_->PositionOf(0, "t/1"), "");
  EXPECT_EQ(published_->PositionOf(0, "t"), "");  // a prefix of a partition is another one
  // Re-read from 1 after a rebalance, in a later batch and within the same batch.
  ASSERT_TRUE(Apply({At(1, "b", "stale"), At(2, "a", "stale"), At(3, "c", "1"), At(3, "c", "x")}).ok());
  EXPECT_EQ(published_->PositionsOf(0).at("t/0"), "4");
  SourceCounters counters = published_->Counters(0);
  EXPECT_EQ(counters.applied, 4u);
  EXPECT_EQ(counters.skipped, 3u);
  // The last records of a batch being stale does not move the position back.
  ASSERT_TRUE(Apply({At(2, "a", "stale")}).ok());
  EXPECT_EQ(published_->PositionsOf(0).at("t/0"), "4");
  ASSERT_TRUE(applier_->Recover().ok());  // what is stored, not only what is in memory
  EXPECT_EQ(published_->PositionsOf(0).at("t/0"), "4");
}

// In the pipeline the next batch is prepared before the one before commits: its records are
// stale against that batch's positions, not only the committed ones.
TEST_F(ApplierOffsetsTest, RecordsReadAgainInTheNextPipelinedBatchAreSkipped) {
  SourceRecord bad = test::Rejected(absl::InvalidArgumentError("t/0@3: malformed JSON: x"),
                                    "malformed_json", test::At("4").Partition("t/0").Locator("t/0@3"));
  bad.offset = 3;
  std::vector<std::vector<SourceRecord>> batches = {
      {At(0, "a", "1"), At(1, "b", "1"), At(2, "a", "2"), bad},
      // Read again from 1 after a rebalance, while the batch before waits for its commit.
      {At(1, "b", "stale"), At(2, "a", "stale"), bad, At(4, "c", "1")},
  };
  sink_.DelayWrites(std::chrono::milliseconds(50));  // the first commit waits in its dead letter
  size_t next = 0;
  ASSERT_TRUE(applier_
                  ->ApplyBatches(
                      [&](std::vector<SourceRecord>* out) {
                        if (next == batches.size()) return false;
                        *out = std::move(batches[next++]);
                        return true;
                      },
                      Applier::OnFailure::kStop)
                  .ok());
  EXPECT_EQ(published_->PositionOf(0, "t/0"), "5");
  SourceCounters counters = published_->Counters(0);
  EXPECT_EQ(counters.applied, 4u);
  EXPECT_EQ(counters.skipped, 3u);
  EXPECT_EQ(counters.rejected, 1u);
  EXPECT_EQ(sink_.letters().size(), 1u);
  auto txn = store_->BeginRead();
  ASSERT_TRUE(txn.ok());
  auto cursor = (*txn)->OpenCursor(store_->view("ByV"));
  std::vector<std::string> keys;
  for (bool ok = cursor->SeekFirst(); ok; ok = cursor->Next()) keys.push_back(test::DescribeKey(cursor->key()));
  EXPECT_EQ(keys, (std::vector<std::string>{"S:1 | S:b", "S:1 | S:c", "S:2 | S:a"}));
}

TEST_F(ApplierOffsetsTest, StaleRejectionsAreNotDeadLetteredTwice) {
  SourceRecord bad = test::Rejected(absl::InvalidArgumentError("t/0@0: malformed JSON: x"),
                                    "malformed_json", test::At("1").Partition("t/0").Locator("t/0@0"));
  bad.offset = 0;
  ASSERT_TRUE(Apply({bad}).ok());
  ASSERT_TRUE(Apply({bad}).ok());
  EXPECT_EQ(sink_.letters().size(), 1u);
  EXPECT_EQ(published_->Counters(0).rejected, 1u);
  EXPECT_EQ(published_->Counters(0).skipped, 1u);
}

TEST_F(ApplierOffsetsTest, NothingToApplyOnlyAdvancesThePosition) {
  SourceRecord tombstone = test::RecordAt(test::At("8").Partition("t/0").Locator("t/0@7"));
  tombstone.offset = 7;
  ASSERT_TRUE(Apply({tombstone}).ok());
  EXPECT_EQ(published_->PositionsOf(0).at("t/0"), "8");
  EXPECT_EQ(published_->Counters(0).skipped, 1u);
  EXPECT_EQ(published_->Counters(0).applied, 0u);
  EXPECT_TRUE(sink_.letters().empty());
}

}  // namespace
}  // namespace cdcview
