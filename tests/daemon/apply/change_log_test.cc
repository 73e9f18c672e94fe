// The change log the writer keeps for Watch: one change per view entry that changed, with the
// record that caused it, in the batch's transaction, stored in blocks; trimmed to
// watch.retain_changes; its sequence numbers continue across a restart.
#include "daemon/store/change_log.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/apply/applier.h"
#include "daemon/config/config.h"
#include "daemon/log/log.h"
#include "daemon/metrics/metrics.h"
#include "daemon/state/catalog.h"
#include "daemon/store/store.h"
#include "gtest/gtest.h"
#include "tests/fakes/fake_dead_letter_sink.h"
#include "tests/fakes/records.h"
#include "tests/fakes/temp_dir.h"

namespace cdcview {
namespace {

using test::At;
using test::N;
using test::S;

constexpr char kConfigYaml[] = R"(
sources:
  - name: sample
    table: App
    file: { path: unused-sample.ndjson }
  - name: second
    table: App
    file: { path: unused-second.ndjson }
watch: { retain_changes: RETAIN }
tables:
  - name: App
    key: { partition: PK, sort: SK }
    views:
      - name: GSI1
        partition_key: { attribute: GSI1PK, type: S }
        sort_key: { attribute: GSI1SK, type: S }
        projection: KEYS_ONLY
      - name: OpenOrders
        partition_key: { template: "OPEN" }
        sort_key: { attribute: open_since, type: S }
        projection: { include: [status, total] }
)";

Item Order(int n, bool open = true) {
  Item item = {{"PK", S(absl::StrCat("CUST#", n))}, {"SK", S("ORDER#1")},
               {"status", S(open ? "OPEN" : "SHIPPED")}, {"total", N(absl::StrCat(n))},
               {"GSI1PK", S(absl::StrCat("CUST#", n))}, {"GSI1SK", S("2024-05-01")}};
  if (open) item["open_since"] = S(absl::StrCat("2024-05-0", n));
  return item;
}

class ChangeLogTest : public ::testing::Test {
 protected:
  void SetUp() override { SetLogLevel(LogLevel::kWarning); }

  void Open(int retain) {
    std::string yaml = kConfigYaml;
    yaml.replace(yaml.find("RETAIN"), 6, std::to_string(retain));
    auto config = ParseConfig(yaml, "test.yaml");
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = *std::move(config);
    config_.storage.path = dir_.Sub("store");
    config_.storage.map_size = 16 << 20;
    auto store = Store::Open(config_.storage, config_.tables);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    catalog_ = std::make_unique<Catalog>(config_, store_->max_key_size());
    auto metrics = MetricsRegistry::Start("");
    ASSERT_TRUE(metrics.ok());
    metrics_ = *std::move(metrics);
    probe_ = std::make_unique<ApplyProbe>(*metrics_, config_);
    published_ = std::make_unique<PublishedState>(*catalog_);
    applier_ = std::make_unique<Applier>(*catalog_, store_.get(), probe_.get(),
                                         std::vector<DeadLetterSink*>{&sink_, &sink_},
                                         published_.get());
    ASSERT_TRUE(applier_->Recover().ok());
    ASSERT_TRUE(applier_->RebuildViews().ok());
  }

  void Close() {
    applier_.reset();
    probe_.reset();
    metrics_.reset();
    catalog_.reset();
    store_.reset();
  }

  void Apply(std::vector<SourceRecord> batch) {
    absl::Status s = applier_->ApplyBatch(&batch);
    ASSERT_TRUE(s.ok()) << s;
  }

  const TableKeySpec& key() const { return config_.tables[0].key; }

  // "seq view op [entry] {value} <- source/partition@position" per logged change, from the
  // change numbered `from` (or the oldest) on.
  std::vector<std::string> Log(uint64_t from = 0) const {
    std::vector<std::string> out;
    auto txn = store_->BeginRead();
    EXPECT_TRUE(txn.ok());
    ChangeLogReader reader(**txn, store_->changes());
    absl::StatusOr<bool> ok = reader.Seek(from);
    for (; ok.ok() && *ok; ok = reader.Next()) {
      const ChangeView& c = reader.change();
      out.push_back(absl::StrCat(c.sequence, " ", std::string(c.view), " ",
                                 c.op == ChangeOp::kPut ? "PUT " : "DELETE ",
                                 test::DescribeEntry(c.key, c.value), " <- ",
                                 std::string(c.source), "/", std::string(c.partition), "@",
                                 std::string(c.position)));
    }
    if (!ok.ok()) out.push_back(ok.status().ToString());
    return out;
  }

  // The log's LMDB entries (blocks).
  uint64_t Blocks() const {
    auto txn = store_->BeginRead();
    EXPECT_TRUE(txn.ok());
    return (*txn)->Entries(store_->changes());
  }

  std::string MetricLine(const std::string& name) const {
    std::string text = metrics_->Render();
    size_t at = text.find("\n" + name + " ");
    if (at == std::string::npos) return "<no " + name + ">";
    return text.substr(at + 1, text.find('\n', at + 1) - at - 1);
  }

  test::TempDir dir_;
  FakeDeadLetterSink sink_;
  Config config_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<MetricsRegistry> metrics_;
  std::unique_ptr<ApplyProbe> probe_;
  std::unique_ptr<PublishedState> published_;
  std::unique_ptr<Applier> applier_;
};

TEST_F(ChangeLogTest, EveryEntryChangeIsLoggedWithTheRecordThatCausedIt) {
  Open(100);
  Apply({test::Insert(key(), Order(1), At("40:2").Partition("p0")),
         test::Insert(key(), Order(2), At("7").Source(1).Partition("p1"))});
  // The order ships: its OpenOrders entry leaves (logged with its last value), GSI1's
  // KEYS_ONLY entry is unchanged (nothing logged).
  Apply({test::Modify(key(), Order(1, false), At("80:3").Partition("p0"))});
  // A no-op MODIFY changes no entry and logs nothing.
  Apply({test::Modify(key(), Order(2), At("8").Source(1).Partition("p1"))});
  // In event order: each event's changes, view by view, then the next event's.
  EXPECT_EQ(Log(), (std::vector<std::string>{
      "1 GSI1 PUT [S:CUST#1 | S:2024-05-01 | S:CUST#1 | S:ORDER#1] {GSI1PK=S:CUST#1, "
      "GSI1SK=S:2024-05-01, PK=S:CUST#1, SK=S:ORDER#1} <- sample/p0@40:2",
      "2 OpenOrders PUT [S:OPEN | S:2024-05-01 | S:CUST#1 | S:ORDER#1] {PK=S:CUST#1, "
      "SK=S:ORDER#1, open_since=S:2024-05-01, status=S:OPEN, total=N:1} <- sample/p0@40:2",
      "3 GSI1 PUT [S:CUST#2 | S:2024-05-01 | S:CUST#2 | S:ORDER#1] {GSI1PK=S:CUST#2, "
      "GSI1SK=S:2024-05-01, PK=S:CUST#2, SK=S:ORDER#1} <- second/p1@7",
      "4 OpenOrders PUT [S:OPEN | S:2024-05-02 | S:CUST#2 | S:ORDER#1] {PK=S:CUST#2, "
      "SK=S:ORDER#1, open_since=S:2024-05-02, status=S:OPEN, total=N:2} <- second/p1@7",
      "5 OpenOrders DELETE [S:OPEN | S:2024-05-01 | S:CUST#1 | S:ORDER#1] {PK=S:CUST#1, "
      "SK=S:ORDER#1, open_since=S:2024-05-01, status=S:OPEN, total=N:1} <- sample/p0@80:3",
  }));
  EXPECT_EQ(MetricLine("cdcview_change_log_entries"), "cdcview_change_log_entries 5");
}

TEST_F(ChangeLogTest, TrimmedToTheNewestRetainChangesInTheSameTransaction) {
  Open(3);
  for (int n = 1; n <= 4; ++n) {
    Apply({test::Insert(key(), Order(n), At(absl::StrCat(n)))});  // 2 changes each
  }
  std::vector<std::string> log = Log();
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[0].substr(0, 12), "6 OpenOrders");  // order 3's OpenOrders entry
  EXPECT_EQ(log[1].substr(0, 6), "7 GSI1");
  EXPECT_EQ(log[2].substr(0, 12), "8 OpenOrders");
  EXPECT_EQ(MetricLine("cdcview_change_log_entries"), "cdcview_change_log_entries 3");

  // One batch with more changes than retained keeps its newest ones only.
  Apply({test::Insert(key(), Order(5), At("5")), test::Insert(key(), Order(6), At("6"))});
  log = Log();
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[0].substr(0, 13), "10 OpenOrders");  // order 5's
  EXPECT_EQ(log[1].substr(0, 7), "11 GSI1");         // order 6's
  EXPECT_EQ(log[2].substr(0, 13), "12 OpenOrders");
}

TEST_F(ChangeLogTest, SequenceNumbersContinueAfterARestart) {
  Open(2);
  Apply({test::Insert(key(), Order(1), At("1")), test::Insert(key(), Order(2), At("2"))});
  ASSERT_EQ(Log().size(), 2u);
  EXPECT_EQ(Log()[0].substr(0, 2), "3 ");
  Close();
  Open(2);
  EXPECT_EQ(MetricLine("cdcview_change_log_entries"), "cdcview_change_log_entries 2");
  Apply({test::Modify(key(), Order(2, false), At("3"))});  // OpenOrders delete only
  std::vector<std::string> log = Log();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0].substr(0, 12), "4 OpenOrders");
  EXPECT_EQ(log[1].substr(0, 19), "5 OpenOrders DELETE");
}

TEST_F(ChangeLogTest, ABatchsChangesShareBlocksAndAReaderStartsInsideOne) {
  Open(1000);
  std::vector<SourceRecord> batch;
  for (int n = 1; n <= 40; ++n) batch.push_back(test::Insert(key(), Order(n), At(absl::StrCat(n))));
  Apply(std::move(batch));  // 80 changes of about 100 bytes: a few blocks, not 80 entries
  Apply({test::Insert(key(), Order(41), At("41"))});  // a batch opens a block of its own
  std::vector<std::string> log = Log();
  ASSERT_EQ(log.size(), 82u);
  for (size_t i = 0; i < log.size(); ++i) {
    EXPECT_EQ(log[i].substr(0, log[i].find(' ')), absl::StrCat(i + 1)) << log[i];
  }
  const uint64_t blocks = Blocks();
  EXPECT_GE(blocks, 4u);
  EXPECT_LE(blocks, 8u);
  // Every start point, whether it opens a block or falls inside one, reads on to the end.
  for (uint64_t from = 1; from <= 82; ++from) {
    std::vector<std::string> tail = Log(from);
    ASSERT_EQ(tail.size(), 83 - from) << "from " << from;
    EXPECT_EQ(tail[0].substr(0, tail[0].find(' ')), absl::StrCat(from));
  }
  EXPECT_TRUE(Log(83).empty());
  {  // one reader, sought again backwards and forwards
    auto txn = store_->BeginRead();
    ASSERT_TRUE(txn.ok());
    ChangeLogReader reader(**txn, store_->changes());
    for (uint64_t from : {50u, 3u, 81u, 1u}) {
      auto ok = reader.Seek(from);
      ASSERT_TRUE(ok.ok() && *ok) << from << ": " << ok.status();
      EXPECT_EQ(reader.change().sequence, from);
      ASSERT_TRUE(*reader.Next());
      EXPECT_EQ(reader.change().sequence, from + 1);
    }
  }
  // Trimming cuts inside a block and keeps exactly the newest `retain` changes.
  Close();
  Open(10);
  Apply({test::Insert(key(), Order(42), At("42"))});  // 84 changes, 10 kept
  log = Log();
  ASSERT_EQ(log.size(), 10u);
  EXPECT_EQ(log[0].substr(0, 3), "75 ");
  EXPECT_EQ(log[9].substr(0, 3), "84 ");
  EXPECT_EQ(Log(60).size(), 10u);  // older than the log: starts at its oldest change
}

TEST_F(ChangeLogTest, AChangeLargerThanABlockIsABlockOfItsOwn) {
  Open(100);
  Item big = Order(1);
  big["status"] = S(std::string(kChangeBlockBytes, 's'));  // in OpenOrders' projection
  Apply({test::Insert(key(), Order(2), At("1")), test::Insert(key(), big, At("2")),
         test::Insert(key(), Order(3), At("3"))});
  // In view and key order: GSI1 CUST#1..3 (1-3), OpenOrders 2024-05-01 (big, 4), 02, 03.
  std::vector<std::string> log = Log();
  ASSERT_EQ(log.size(), 6u);
  EXPECT_NE(log[3].find(std::string(kChangeBlockBytes, 's')), std::string::npos);
  EXPECT_EQ(log[3].substr(0, 13), "4 OpenOrders ");
  EXPECT_EQ(Blocks(), 3u);  // [1 2 3] [4] [5 6]
  EXPECT_EQ(Log(4).size(), 3u);
  EXPECT_EQ(Log(5).size(), 2u);
}

TEST_F(ChangeLogTest, AStoreWithOneEntryPerChangeReadsAndContinues) {
  // Before blocks, each change was its own entry: the same bytes as a one-change block.
  Open(100);
  {
    auto txn = store_->BeginWrite();
    ASSERT_TRUE(txn.ok());
    for (uint64_t seq = 7; seq <= 9; ++seq) {
      std::string value;
      AppendChange("GSI1", ChangeOp::kPut, "k", "v", "sample", "", absl::StrCat(seq), &value);
      ASSERT_TRUE((*txn)->Put(store_->changes(), ChangeKey(seq), value).ok());
    }
    ASSERT_TRUE((*txn)->Commit().ok());
  }
  Close();
  Open(100);
  EXPECT_EQ(MetricLine("cdcview_change_log_entries"), "cdcview_change_log_entries 3");
  Apply({test::Insert(key(), Order(1), At("1"))});
  std::vector<std::string> log = Log(9);
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[0].substr(0, 11), "9 GSI1 PUT ");  // (its entry bytes are made up)
  EXPECT_TRUE(log[0].ends_with(" <- sample/@9")) << log[0];
  EXPECT_EQ(log[1].substr(0, 8), "10 GSI1 ");
  EXPECT_EQ(log[2].substr(0, 14), "11 OpenOrders ");
}

TEST(ChangeLogCodecTest, DamagedEntriesAreDataLoss) {
  std::string block;
  AppendChange("V", ChangeOp::kPut, "k", "v", "s", "p", "1", &block);
  AppendChange("V", ChangeOp::kDelete, "k", "v", "s", "p", "2", &block);
  std::string_view rest = block;
  auto first = PopChange(&rest, 258);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->sequence, 258u);
  EXPECT_EQ(first->position, "1");
  auto second = PopChange(&rest, 259);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->op, ChangeOp::kDelete);
  EXPECT_TRUE(rest.empty());
  EXPECT_EQ(ChangeKey(258), std::string("\0\0\0\0\0\0\x01\x02", 8));
  EXPECT_EQ(*ChangeSequence(ChangeKey(258)), 258u);
  rest = std::string_view(block).substr(0, block.size() / 2 - 1);
  EXPECT_EQ(PopChange(&rest, 1).status(),
            absl::DataLossError("change log entry is damaged (truncated field)"));
  rest = "\x07";
  EXPECT_EQ(PopChange(&rest, 1).status(),
            absl::DataLossError("change log entry is damaged (bad op byte)"));
  EXPECT_EQ(ChangeSequence("short").status(),
            absl::DataLossError("change log entry is damaged (bad key)"));
}

}  // namespace
}  // namespace cdcview
