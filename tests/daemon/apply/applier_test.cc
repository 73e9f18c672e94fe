#include "daemon/apply/applier.h"
#include "daemon/apply/tombstone_compactor.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "daemon/config/config.h"
#include "daemon/log/log.h"
#include "daemon/metrics/metrics.h"
#include "daemon/state/catalog.h"
#include "daemon/store/change_log.h"
#include "daemon/store/meta_keys.h"
#include "daemon/store/store.h"
#include "daemon/store/stored_item.h"
#include "gtest/gtest.h"
#include "index_builders/item_codec.h"
#include "index_builders/key_codec.h"
#include "tests/fakes/fake_dead_letter_sink.h"
#include "tests/fakes/records.h"
#include "tests/fakes/temp_dir.h"

namespace cdcview {
namespace {

using test::At;
using test::DescribeEntry;
using test::DescribeKey;
using test::N;
using test::S;

constexpr uint64_t kMiB = 1 << 20;

std::string Text(const absl::Status& status) { return std::string(status.message()); }

// The tables and views of examples/cdcview.yaml; OpenOrders' projection is a parameter so a
// test can change the view's definition. Two sources feed the table.
constexpr char kConfigYaml[] = R"(
sources:
  - name: sample
    table: App
    file: { path: unused-sample.ndjson }
  - name: second
    table: App
    file: { path: unused-second.ndjson }
tables:
  - name: App
    key: { partition: PK, sort: SK }
    views:
      - name: GSI1
        partition_key: { attribute: GSI1PK, type: S }
        sort_key: { attribute: GSI1SK, type: S }
        projection: ALL
      - name: OpenOrders
        partition_key: { template: "OPEN" }
        sort_key: { attribute: open_since, type: S }
        projection: OPEN_ORDERS_PROJECTION
      - name: ByMember
        inverted: true
        projection: KEYS_ONLY
      - name: ByEntity
        rules:
          - when: { attribute: type, equals: order }
            partition_key: { template: "STATUS#{status}" }
            sort_key: { template: "{created_at}" }
          - when: { attribute: type, equals: user }
            partition_key: { template: "EMAIL#{email}" }
            sort_key: { attribute: PK, type: S }
      - name: ByLocation
        partition_key: { attribute: country, type: S }
        sort_key: { template: "{state}#{city}" }
      - name: ByScore
        partition_key: { attribute: board, type: S }
        sort_key: { attribute: score, type: N }
)";

constexpr char kIncludeStatusTotal[] = "{ include: [status, total] }";

Config MakeConfig(const std::string& open_orders_projection = kIncludeStatusTotal) {
  absl::StatusOr<Config> config = ParseConfig(
      absl::StrReplaceAll(kConfigYaml, {{"OPEN_ORDERS_PROJECTION", open_orders_projection}}),
      "test.yaml");
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *std::move(config) : Config();
}

const std::vector<std::string> kViews = {"GSI1",     "OpenOrders", "ByMember",
                                         "ByEntity", "ByLocation", "ByScore"};
enum GlobalView { kGsi1 = 0, kOpenOrders, kByMember, kByEntity, kByLocation, kByScore };

// ---- Items and what the views hold for them

Item Order1() {
  return {{"PK", S("CUST#1")},          {"SK", S("ORDER#1")},
          {"type", S("order")},         {"status", S("OPEN")},
          {"created_at", S("2024-05-01")}, {"open_since", S("2024-05-01")},
          {"total", N("25.50")},        {"GSI1PK", S("CUST#1")},
          {"GSI1SK", S("2024-05-01")}};
}
constexpr char kOrder1All[] =
    "{GSI1PK=S:CUST#1, GSI1SK=S:2024-05-01, PK=S:CUST#1, SK=S:ORDER#1, created_at=S:2024-05-01, "
    "open_since=S:2024-05-01, status=S:OPEN, total=N:25.5, type=S:order}";

Item User1() {
  return {{"PK", S("USER#u1")}, {"SK", S("PROFILE")},  {"type", S("user")},
          {"email", S("a@x.io")}, {"country", S("DE")}, {"state", S("BY")},
          {"city", S("Munich")},  {"board", S("chess")}, {"score", N("-7.5")}};
}
constexpr char kUser1All[] =
    "{PK=S:USER#u1, SK=S:PROFILE, board=S:chess, city=S:Munich, country=S:DE, email=S:a@x.io, "
    "score=N:-7.5, state=S:BY, type=S:user}";

using ViewContents = std::map<std::string, std::vector<std::string>>;

// What Order1 and User1 together put in the views.
ViewContents Order1AndUser1Views() {
  return {
      {"GSI1", {absl::StrCat("[S:CUST#1 | S:2024-05-01 | S:CUST#1 | S:ORDER#1] ", kOrder1All)}},
      {"OpenOrders",
       {"[S:OPEN | S:2024-05-01 | S:CUST#1 | S:ORDER#1] {PK=S:CUST#1, SK=S:ORDER#1, "
        "open_since=S:2024-05-01, status=S:OPEN, total=N:25.5}"}},
      {"ByMember",
       {"[S:ORDER#1 | S:CUST#1 | S:CUST#1 | S:ORDER#1] {PK=S:CUST#1, SK=S:ORDER#1}",
        "[S:PROFILE | S:USER#u1 | S:USER#u1 | S:PROFILE] {PK=S:USER#u1, SK=S:PROFILE}"}},
      {"ByEntity",
       {absl::StrCat("[S:EMAIL#a@x.io | S:USER#u1 | S:USER#u1 | S:PROFILE] ", kUser1All),
        absl::StrCat("[S:STATUS#OPEN | S:2024-05-01 | S:CUST#1 | S:ORDER#1] ", kOrder1All)}},
      {"ByLocation", {absl::StrCat("[S:DE | S:BY#Munich | S:USER#u1 | S:PROFILE] ", kUser1All)}},
      {"ByScore", {absl::StrCat("[S:chess | N:-7.5 | S:USER#u1 | S:PROFILE] ", kUser1All)}},
  };
}

// ---- Fixture: a store in a temp dir, the writer, a metrics registry and fake sinks

class ApplierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetLogLevel(LogLevel::kWarning);  // rebuild progress is info; rejections stay visible
    config_ = MakeConfig();
  }
  void TearDown() override { Close(); }

  // Opens the store and the writer; with `rebuild`, also Recover and RebuildViews (a fresh
  // store has every view new).
  absl::Status Open(uint64_t map_size = 64 * kMiB, uint64_t max_map_size = 256 * kMiB,
                    bool rebuild = true) {
    config_.storage.path = dir_.Sub(store_name_);
    config_.storage.map_size = map_size;
    config_.storage.max_map_size = max_map_size;
    auto store = Store::Open(config_.storage, config_.tables);
    if (!store.ok()) return store.status();
    store_ = *std::move(store);
    catalog_ = std::make_unique<Catalog>(config_, store_->max_key_size());
    auto metrics = MetricsRegistry::Start("");
    if (!metrics.ok()) return metrics.status();
    metrics_ = *std::move(metrics);
    probe_ = std::make_unique<ApplyProbe>(*metrics_, config_);
    published_ = std::make_unique<PublishedState>(*catalog_, [this] { return now_ms_; });
    applier_ = std::make_unique<Applier>(*catalog_, store_.get(), probe_.get(),
                                         std::vector<DeadLetterSink*>{&sample_sink_, &second_sink_},
                                         published_.get());
    if (!rebuild) return absl::OkStatus();
    if (absl::Status s = applier_->Recover(); !s.ok()) return s;
    return applier_->RebuildViews();
  }

  void Close() {
    applier_.reset();
    published_.reset();
    probe_.reset();
    metrics_.reset();
    catalog_.reset();
    store_.reset();
  }

  absl::Status Apply(std::vector<SourceRecord> batch) { return applier_->ApplyBatch(&batch); }

  const TableKeySpec& key() const { return config_.tables[0].key; }

  std::vector<std::string> Entries(const std::string& view) const {
    std::vector<std::string> out;
    auto txn = store_->BeginRead();
    EXPECT_TRUE(txn.ok()) << txn.status();
    if (!txn.ok()) return out;
    auto cursor = (*txn)->OpenCursor(store_->view(view));
    for (bool ok = cursor->SeekFirst(); ok; ok = cursor->Next()) {
      out.push_back(DescribeEntry(cursor->key(), cursor->value()));
    }
    return out;
  }

  // Every non-empty view.
  ViewContents Views() const {
    ViewContents out;
    for (const std::string& view : kViews) {
      std::vector<std::string> entries = Entries(view);
      if (!entries.empty()) out[view] = std::move(entries);
    }
    return out;
  }

  // "[pk | sk] live 100 {...}" or "[pk | sk] tombstone 200" per stored item, in key order.
  std::vector<std::string> StoredItems() const {
    std::vector<std::string> out;
    auto txn = store_->BeginRead();
    EXPECT_TRUE(txn.ok()) << txn.status();
    if (!txn.ok()) return out;
    auto cursor = (*txn)->OpenCursor(store_->items("App"));
    for (bool ok = cursor->SeekFirst(); ok; ok = cursor->Next()) {
      absl::StatusOr<StoredItem> item = DecodeStoredItem(cursor->value());
      if (!item.ok()) {
        out.push_back("<bad stored item: " + item.status().ToString() + ">");
        continue;
      }
      std::string line = "[" + DescribeKey(cursor->key()) + "] " +
                         (item->tombstone ? "tombstone " : "live ") + item->sequence_number;
      if (!item->tombstone) line += " " + test::DescribeValue(item->image);
      out.push_back(line);
    }
    return out;
  }

  // "<sequence> put|del <view> [key] {value}" per change log entry, oldest first; with
  // `causes`, "cause <source>/<partition>@<position>" in place of the value.
  std::vector<std::string> ChangeLog(bool causes = false) const {
    std::vector<std::string> out;
    auto txn = store_->BeginRead();
    EXPECT_TRUE(txn.ok()) << txn.status();
    if (!txn.ok()) return out;
    ChangeLogReader reader(**txn, store_->changes());
    absl::StatusOr<bool> ok = reader.Seek(0);
    for (; ok.ok() && *ok; ok = reader.Next()) {
      const ChangeView& c = reader.change();
      out.push_back(absl::StrCat(
          c.sequence, c.op == ChangeOp::kPut ? " put " : " del ", std::string(c.view), " [",
          DescribeKey(c.key), "] ",
          causes ? absl::StrCat("cause ", std::string(c.source), "/", std::string(c.partition),
                                "@", std::string(c.position))
                 : test::DescribeValue(c.value)));
    }
    EXPECT_TRUE(ok.ok()) << ok.status();
    return out;
  }

  // Reopens the store without write-back: LMDB alone must hold these views, items and
  // positions ("pos/" meta keys).
  void ExpectLmdbAloneHolds(const ViewContents& views, const std::vector<std::string>& items,
                            const std::vector<std::string>& positions) {
    Close();
    config_.storage.flush_interval_ms = 0;
    ASSERT_TRUE(Open().ok());
    EXPECT_EQ(views, Views());
    EXPECT_EQ(items, StoredItems());
    EXPECT_EQ(positions, Meta("pos/"));
  }

  // "key=value" of every meta entry that starts with `prefix`.
  std::vector<std::string> Meta(std::string_view prefix) const {
    std::vector<std::string> out;
    auto txn = store_->BeginRead();
    EXPECT_TRUE(txn.ok()) << txn.status();
    if (!txn.ok()) return out;
    auto cursor = (*txn)->OpenCursor(store_->meta());
    for (bool ok = cursor->Seek(prefix); ok && cursor->key().starts_with(prefix); ok = cursor->Next()) {
      out.push_back(std::string(cursor->key()) + "=" + std::string(cursor->value()));
    }
    return out;
  }

  // The exposition lines of one metric family (no comments), sorted.
  std::vector<std::string> MetricLines(std::string_view family) const {
    std::vector<std::string> out;
    std::istringstream text(metrics_->Render());
    for (std::string line; std::getline(text, line);) {
      if (line.starts_with(family) && line.size() > family.size() &&
          (line[family.size()] == '{' || line[family.size()] == ' ')) {
        out.emplace_back(line);
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  // Each of `want` is one of the `family` lines.
  void ExpectMetricLines(std::string_view family, std::initializer_list<const char*> want) const {
    const std::vector<std::string> lines = MetricLines(family);
    for (const char* line : want) {
      EXPECT_NE(std::find(lines.begin(), lines.end(), line), lines.end()) << line;
    }
  }

  std::vector<std::string> Positions() const {
    std::vector<std::string> out;
    for (const auto& [key, position] : published_->Snapshot()->positions) {
      out.push_back(key.first + "/" + key.second + "=" + position);
    }
    return out;
  }

  test::TempDir dir_;
  Config config_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<MetricsRegistry> metrics_;
  std::unique_ptr<ApplyProbe> probe_;
  FakeDeadLetterSink sample_sink_;
  FakeDeadLetterSink second_sink_;
  std::unique_ptr<PublishedState> published_;
  std::unique_ptr<Applier> applier_;
  int64_t now_ms_ = 1'700'000'000'000;
  std::string store_name_ = "store";  // Open's store, under dir_
};

// ---- Insert, modify, remove

TEST_F(ApplierTest, InsertModifyRemoveLeaveExactlyTheRightEntries) {
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(Apply({test::Insert(key(), Order1(), At("1")),
                     test::Insert(key(), User1(), At("2"))})
                  .ok());
  EXPECT_EQ(Views(), Order1AndUser1Views());

  // The order ships: it leaves OpenOrders, moves within ByEntity, is rewritten in GSI1.
  Item shipped = Order1();
  shipped["status"] = S("SHIPPED");
  shipped.erase("open_since");
  ASSERT_TRUE(Apply({test::Modify(key(), shipped, At("3"))}).ok());
  const std::string shipped_all =
      "{GSI1PK=S:CUST#1, GSI1SK=S:2024-05-01, PK=S:CUST#1, SK=S:ORDER#1, "
      "created_at=S:2024-05-01, status=S:SHIPPED, total=N:25.5, type=S:order}";
  ViewContents expected = Order1AndUser1Views();
  expected["GSI1"] = {"[S:CUST#1 | S:2024-05-01 | S:CUST#1 | S:ORDER#1] " + shipped_all};
  expected.erase("OpenOrders");
  expected["ByEntity"][1] = "[S:STATUS#SHIPPED | S:2024-05-01 | S:CUST#1 | S:ORDER#1] " + shipped_all;
  EXPECT_EQ(Views(), expected);

  // Removing the user takes all its entries; a REMOVE needs only the keys.
  ASSERT_TRUE(Apply({test::Remove(key(), {{"PK", S("USER#u1")}, {"SK", S("PROFILE")}},
                                  At("4"))})
                  .ok());
  EXPECT_EQ(Views(), (ViewContents{
                         {"GSI1", expected["GSI1"]},
                         {"ByMember",
                          {"[S:ORDER#1 | S:CUST#1 | S:CUST#1 | S:ORDER#1] {PK=S:CUST#1, SK=S:ORDER#1}"}},
                         {"ByEntity", {expected["ByEntity"][1]}},
                     }));
  // Without sequence numbers a removed item that existed keeps a tombstone with an empty one.
  EXPECT_EQ(StoredItems(),
            (std::vector<std::string>{"[S:CUST#1 | S:ORDER#1] live  " + shipped_all,
                                      "[S:USER#u1 | S:PROFILE] tombstone "}));
  SourceCounters c = published_->Counters(0);
  EXPECT_EQ(c.applied, 4u);
  EXPECT_EQ(c.skipped, 0u);
  EXPECT_EQ(c.rejected, 0u);
  EXPECT_EQ(published_->commit_count(), 3u);
}

TEST_F(ApplierTest, PositionsCommitWithTheBatchAndRecoverGivesThemBack) {
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(
      Apply({test::Insert(key(), Order1(), At("17").Partition("shard-0")),
             test::Insert(key(), User1(), At("5").Partition("shard-1")),
             test::Remove(key(), User1(), At("18").Partition("shard-0")),
             test::Insert(key(), User1(),
                          At("line 9").Source(1).Partition(""))})
          .ok());
  const std::vector<std::string> positions = {"sample/shard-0=18", "sample/shard-1=5",
                                              "second/=line 9"};
  EXPECT_EQ(Positions(), positions);
  EXPECT_EQ(Meta(kPositionPrefix),
            (std::vector<std::string>{"pos/sample/shard-0=18", "pos/sample/shard-1=5",
                                      "pos/second/=line 9"}));

  Close();
  ASSERT_TRUE(Open().ok());
  EXPECT_EQ(Positions(), positions);
  EXPECT_EQ(published_->PositionsOf(0),
            (std::map<std::string, std::string>{{"shard-0", "18"}, {"shard-1", "5"}}));
  EXPECT_EQ(published_->PositionsOf(1), (std::map<std::string, std::string>{{"", "line 9"}}));
  EXPECT_EQ(Views(), Order1AndUser1Views());
}

// GetStatus reads counters and positions from one published snapshot: a commit publishes
// both in a new snapshot and leaves the ones readers hold as they were.
TEST_F(ApplierTest, ACommitPublishesItsCountersAndPositionsInOneNewSnapshot) {
  ASSERT_TRUE(Open().ok());
  const std::shared_ptr<const CommitSnapshot> before = published_->Snapshot();
  ASSERT_TRUE(Apply({test::Insert(key(), Order1(), At("17").Partition("shard-0")),
                     test::Insert(key(), User1(), At("18").Partition("shard-0"))})
                  .ok());
  const std::shared_ptr<const CommitSnapshot> after = published_->Snapshot();
  EXPECT_EQ(before->number, 0u);
  EXPECT_EQ(before->counters[0].applied, 0u);
  EXPECT_TRUE(before->positions.empty());
  EXPECT_EQ(after->number, 1u);
  EXPECT_EQ(after->counters[0].applied, 2u);
  EXPECT_EQ(after->positions, (PositionMap{{{"sample", "shard-0"}, "18"}}));
  EXPECT_EQ(after->table_events, (std::vector<uint64_t>{2}));
  EXPECT_EQ(published_->commit_count(), 1u);
  EXPECT_EQ(Meta(kPositionPrefix), std::vector<std::string>{"pos/sample/shard-0=18"});
}

// ---- Sequence numbers: replays and old events

TEST_F(ApplierTest, ReplayingABatchChangesNothing) {
  ASSERT_TRUE(Open().ok());
  Item shipped = Order1();
  shipped["status"] = S("SHIPPED");
  const std::vector<SourceRecord> batch = {
      test::Insert(key(), Order1(), At("1").Seq("100")),
      test::Insert(key(), User1(), At("2").Seq("101")),
      test::Modify(key(), shipped, At("3").Seq("102")),
  };
  ASSERT_TRUE(Apply(batch).ok());
  const ViewContents views = Views();
  const std::vector<std::string> items = StoredItems();
  const std::vector<std::string> writes = MetricLines("cdcview_index_writes_total");
  EXPECT_EQ(published_->Counters(0).applied, 3u);

  ASSERT_TRUE(Apply(batch).ok());
  EXPECT_EQ(Views(), views);
  EXPECT_EQ(StoredItems(), items);
  EXPECT_EQ(MetricLines("cdcview_index_writes_total"), writes);
  SourceCounters c = published_->Counters(0);
  EXPECT_EQ(c.applied, 3u);
  EXPECT_EQ(c.skipped, 3u);
  EXPECT_EQ(MetricLines("cdcview_events_total"),
            (std::vector<std::string>{
                "cdcview_events_total{result=\"applied\",source=\"sample\"} 3",
                "cdcview_events_total{result=\"applied\",source=\"second\"} 0",
                "cdcview_events_total{result=\"rejected\",source=\"sample\"} 0",
                "cdcview_events_total{result=\"rejected\",source=\"second\"} 0",
                "cdcview_events_total{result=\"skipped\",source=\"sample\"} 3",
                "cdcview_events_total{result=\"skipped\",source=\"second\"} 0",
            }));
}

TEST_F(ApplierTest, OlderOrEqualSequenceNumbersAreSkippedNumerically) {
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(
      Apply({test::Insert(key(), Order1(), At("1").Seq("1000"))})
          .ok());
  const ViewContents before = Views();
  Item changed = Order1();
  changed["GSI1PK"] = S("CUST#OTHER");
  // "999" sorts after "1000" as text but is older as a number; "1000" is the same event.
  ASSERT_TRUE(
      Apply({test::Modify(key(), changed, At("2").Seq("999")),
             test::Modify(key(), changed, At("3").Seq("1000"))})
          .ok());
  EXPECT_EQ(Views(), before);
  EXPECT_EQ(published_->Counters(0).skipped, 2u);
  EXPECT_EQ(Positions(), (std::vector<std::string>{"sample/=3"}));  // skipping still advances

  ASSERT_TRUE(
      Apply({test::Modify(key(), changed, At("4").Seq("1001"))})
          .ok());
  EXPECT_EQ(Entries("GSI1"),
            (std::vector<std::string>{
                "[S:CUST#OTHER | S:2024-05-01 | S:CUST#1 | S:ORDER#1] "
                "{GSI1PK=S:CUST#OTHER, GSI1SK=S:2024-05-01, PK=S:CUST#1, SK=S:ORDER#1, "
                "created_at=S:2024-05-01, open_since=S:2024-05-01, status=S:OPEN, total=N:25.5, "
                "type=S:order}"}));
  EXPECT_EQ(published_->Counters(0).applied, 2u);
}

// Decoders refuse sequence numbers over 40 digits; a store written before they did may hold
// one. It orders nothing: the item's real changes apply over it instead of being skipped.
TEST_F(ApplierTest, AStoredSequenceNumberLongerThanAnyValidOneDoesNotSkipLaterChanges) {
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(Apply({test::Insert(key(), Order1(), At("1").Seq(std::string(1000, '9')))}).ok());
  Item changed = Order1();
  changed["GSI1PK"] = S("CUST#OTHER");
  ASSERT_TRUE(Apply({test::Modify(key(), changed, At("2").Seq("100000000000000000016"))}).ok());
  EXPECT_EQ(published_->Counters(0).skipped, 0u);
  EXPECT_EQ(published_->Counters(0).applied, 2u);
  ASSERT_EQ(StoredItems().size(), 1u);
  EXPECT_EQ(StoredItems()[0].rfind("[S:CUST#1 | S:ORDER#1] live 100000000000000000016 {GSI1PK=S:CUST#OTHER,", 0), 0u)
      << StoredItems()[0];
  // From there on, sequence numbers order as usual.
  ASSERT_TRUE(Apply({test::Modify(key(), Order1(), At("3").Seq("100000000000000000015"))}).ok());
  EXPECT_EQ(published_->Counters(0).skipped, 1u);
}

TEST_F(ApplierTest, RemoveLeavesATombstoneSoAReplayedInsertDoesNotResurrect) {
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(
      Apply({test::Insert(key(), User1(), At("1").Seq("100")),
             test::Remove(key(), User1(), At("2").Seq("200"))})
          .ok());
  EXPECT_EQ(Views(), ViewContents{});
  EXPECT_EQ(StoredItems(), (std::vector<std::string>{"[S:USER#u1 | S:PROFILE] tombstone 200"}));

  ASSERT_TRUE(
      Apply({test::Insert(key(), User1(), At("1").Seq("100"))})
          .ok());
  EXPECT_EQ(Views(), ViewContents{});
  EXPECT_EQ(published_->Counters(0).skipped, 1u);

  // A REMOVE of an item never seen still records its sequence number ...
  ASSERT_TRUE(
      Apply({test::Remove(key(), Order1(), At("3").Seq("50")),
             test::Insert(key(), Order1(), At("4").Seq("40"))})
          .ok());
  EXPECT_EQ(Views(), ViewContents{});
  // ... and one without a sequence number of an unknown item stores nothing.
  Item unknown = {{"PK", S("NOBODY")}, {"SK", S("X")}};
  ASSERT_TRUE(Apply({test::Remove(key(), unknown, At("5"))}).ok());
  EXPECT_EQ(StoredItems(), (std::vector<std::string>{"[S:CUST#1 | S:ORDER#1] tombstone 50",
                                                     "[S:USER#u1 | S:PROFILE] tombstone 200"}));

  // A newer INSERT brings the item back.
  ASSERT_TRUE(
      Apply({test::Insert(key(), User1(), At("6").Seq("300"))})
          .ok());
  EXPECT_EQ(Entries("ByScore"),
            (std::vector<std::string>{
                absl::StrCat("[S:chess | N:-7.5 | S:USER#u1 | S:PROFILE] ", kUser1All)}));
}

TEST_F(ApplierTest, EventsWithoutOldImageDeleteTheStoredImagesEntries) {
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(Apply({test::Insert(key(), Order1(), At("1"))}).ok());

  // NEW_IMAGE stream: no OldImage; the stored image says which entries to delete.
  Item moved = Order1();
  moved["GSI1PK"] = S("CUST#2");
  ASSERT_TRUE(Apply({test::Modify(key(), moved, At("2"))}).ok());
  std::vector<std::string> gsi1 = Entries("GSI1");
  ASSERT_EQ(gsi1.size(), 1u);
  EXPECT_TRUE(gsi1[0].starts_with("[S:CUST#2 | S:2024-05-01 | S:CUST#1 | S:ORDER#1] ")) << gsi1[0];

  // An OldImage that disagrees with the store is ignored: the stored image is the old image.
  Item again = Order1();
  again["GSI1PK"] = S("CUST#3");
  ASSERT_TRUE(Apply({test::Modify(key(), again, At("3"), /*old_image=*/Order1())})
                  .ok());
  gsi1 = Entries("GSI1");
  ASSERT_EQ(gsi1.size(), 1u);
  EXPECT_TRUE(gsi1[0].starts_with("[S:CUST#3 | S:2024-05-01 | S:CUST#1 | S:ORDER#1] ")) << gsi1[0];

  // An INSERT over a stored item (its REMOVE was never seen) replaces it the same way.
  ASSERT_TRUE(Apply({test::Insert(key(), Order1(), At("4"))}).ok());
  EXPECT_EQ(Views(), (ViewContents{{"GSI1", Order1AndUser1Views()["GSI1"]},
                                   {"OpenOrders", Order1AndUser1Views()["OpenOrders"]},
                                   {"ByMember", {Order1AndUser1Views()["ByMember"][0]}},
                                   {"ByEntity", {Order1AndUser1Views()["ByEntity"][1]}}}));
}

// ---- Rejections

TEST_F(ApplierTest, RejectedRecordsAreDeadLetteredCountedAndTheRestApplies) {
  ASSERT_TRUE(Open().ok());
  Item bad_type = {{"PK", N("1")}, {"SK", S("X")}};
  Item long_pk = {{"PK", S(std::string(2049, 'p'))}, {"SK", S("S")}};
  Item long_entry = {{"PK", S("CUST#9")},
                     {"SK", S("ORDER#9")},
                     {"GSI1PK", S(std::string(2049, 'g'))},
                     {"GSI1SK", S("s")}};
  SourceRecord conflicting = test::Insert(key(), Order1(), At("7").Locator("line 7"));
  conflicting.event->new_image->at("SK") = S("ORDER#2");
  SourceRecord no_image = test::Insert(key(), User1(), At("8").Locator("line 8"));
  no_image.event->new_image.reset();

  ASSERT_TRUE(
      Apply({test::Insert(key(), Order1(), At("1").Locator("line 1")),
             test::Rejected(absl::InvalidArgumentError("line 2: expected a JSON object"),
                            "malformed_json", At("2").Locator("line 2")),
             test::Insert(key(), bad_type, At("3").Locator("line 3")),
             test::Insert(key(), long_entry, At("4").Locator("line 4")),
             test::Insert(key(), long_pk,
                          At("5").Source(1).Locator("shard/1@5")),
             test::Insert(key(), User1(), At("6").Locator("line 6")),
             std::move(conflicting), std::move(no_image)})
          .ok());

  // The good records applied around the bad ones.
  EXPECT_EQ(Views(), Order1AndUser1Views());
  EXPECT_EQ(StoredItems().size(), 2u);

  std::vector<std::string> letters;
  for (const auto& l : sample_sink_.letters()) {
    letters.push_back(l.locator + " | " + l.raw + " | " + l.why.ToString());
  }
  EXPECT_EQ(letters,
            (std::vector<std::string>{
                "line 2 | raw line 2 | INVALID_ARGUMENT: line 2: expected a JSON object",
                "line 3 | raw line 3 | INVALID_ARGUMENT: line 3: table App: key attribute PK must "
                "be S, got N",
                "line 4 | raw line 4 | INVALID_ARGUMENT: line 4: view GSI1: partition key is 2049 "
                "bytes, over DynamoDB's limit of 2048 bytes",
                "line 7 | raw line 7 | INVALID_ARGUMENT: line 7: NewImage attribute SK differs from "
                "the record's Keys",
                "line 8 | raw line 8 | INVALID_ARGUMENT: line 8: INSERT event without a new image",
            }));
  ASSERT_EQ(second_sink_.letters().size(), 1u);
  EXPECT_EQ(second_sink_.letters()[0].why.ToString(),
            "INVALID_ARGUMENT: shard/1@5: table App: partition key PK is 2049 bytes, over "
            "DynamoDB's limit of 2048 bytes");

  // Positions advance past the rejections.
  EXPECT_EQ(Positions(), (std::vector<std::string>{"sample/=8", "second/=5"}));
  EXPECT_EQ(published_->Counters(0).applied, 2u);
  EXPECT_EQ(published_->Counters(0).rejected, 5u);
  EXPECT_EQ(published_->Counters(1).rejected, 1u);
  EXPECT_EQ(MetricLines("cdcview_rejected_events_total"),
            (std::vector<std::string>{
                "cdcview_rejected_events_total{reason=\"bad_key\",source=\"sample\"} 1",
                "cdcview_rejected_events_total{reason=\"bad_key\",source=\"second\"} 1",
                "cdcview_rejected_events_total{reason=\"bad_record\",source=\"sample\"} 2",
                "cdcview_rejected_events_total{reason=\"key_too_large\",source=\"sample\"} 1",
                "cdcview_rejected_events_total{reason=\"malformed_json\",source=\"sample\"} 1",
            }));
}

// Never a line per event: the first 5 rejections of a source per 10 s are logged in full, the
// rest once as a count when the interval ends.
TEST_F(ApplierTest, RejectionWarningsAreThrottledPerSourceAndSummarized) {
  ASSERT_TRUE(Open().ok());
  std::vector<SourceRecord> batch;
  for (int i = 1; i <= 50; ++i) {
    std::string line = absl::StrCat("line ", i);
    batch.push_back(test::Rejected(absl::InvalidArgumentError(line + ": malformed JSON"),
                                   "malformed_json", At(std::to_string(i)).Locator(line)));
  }
  batch.push_back(test::Rejected(absl::InvalidArgumentError("s@1: malformed JSON"),
                                 "malformed_json", At("1").Source(1).Locator("s@1")));
  testing::internal::CaptureStderr();
  ASSERT_TRUE(applier_->ApplyBatch(&batch).ok());
  applier_->LogThrottledSummaries();  // the interval has not ended: nothing yet
  now_ms_ += 10'000;
  applier_->LogThrottledSummaries();
  applier_->LogThrottledSummaries();  // once only
  std::vector<std::string> lines = absl::StrSplit(testing::internal::GetCapturedStderr(), '\n',
                                                  absl::SkipEmpty());
  for (std::string& line : lines) line = line.substr(25);  // the timestamp
  EXPECT_EQ(lines, (std::vector<std::string>{
                       "warning source sample: rejected line 1: malformed JSON",
                       "warning source sample: rejected line 2: malformed JSON",
                       "warning source sample: rejected line 3: malformed JSON",
                       "warning source sample: rejected line 4: malformed JSON",
                       "warning source sample: rejected line 5: malformed JSON",
                       "warning source second: rejected s@1: malformed JSON",
                       "warning source sample: 45 more rejected records in the last 10 s (see "
                       "the dead-letter file ./data/dead-letters/sample.ndjson and "
                       "cdcview_events_total{result=\"rejected\"})",
                   }));
  EXPECT_EQ(sample_sink_.letters().size(), 50u);  // every one dead-lettered all the same
  EXPECT_EQ(published_->Counters(0).rejected, 50u);
}

TEST_F(ApplierTest, AFailingDeadLetterSinkFailsTheBatchAndAppliesNothing) {
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(Apply({test::Insert(key(), Order1(), At("1"))}).ok());
  const ViewContents views = Views();
  const std::vector<std::string> items = StoredItems();
  const std::vector<std::string> meta = Meta("");
  const std::string events = absl::StrJoin(MetricLines("cdcview_events_total"), "\n");

  sample_sink_.FailWith(absl::UnavailableError("disk full"));
  Item shipped = Order1();
  shipped["status"] = S("SHIPPED");
  const std::vector<SourceRecord> batch = {
      test::Insert(key(), User1(), At("2").Locator("line 2")),
      test::Rejected(absl::InvalidArgumentError("line 3: bad"), "malformed_json",
                     At("3").Locator("line 3")),
      test::Modify(key(), shipped, At("4").Locator("line 4")),
  };
  absl::Status s = Apply(batch);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Text(s),
            "source sample: cannot write a dead letter, so the source does not advance past "
            "line 3: disk full");
  EXPECT_EQ(Views(), views);
  EXPECT_EQ(StoredItems(), items);
  EXPECT_EQ(Meta(""), meta);
  EXPECT_EQ(Positions(), (std::vector<std::string>{"sample/=1"}));
  EXPECT_EQ(published_->Counters(0).applied, 1u);
  EXPECT_EQ(published_->Counters(0).rejected, 0u);
  EXPECT_EQ(absl::StrJoin(MetricLines("cdcview_events_total"), "\n"), events);
  EXPECT_EQ(published_->commit_count(), 1u);

  // Once the sink works again the same batch applies.
  sample_sink_.FailWith(absl::OkStatus());
  ASSERT_TRUE(Apply(batch).ok());
  EXPECT_EQ(Positions(), (std::vector<std::string>{"sample/=4"}));
  EXPECT_EQ(sample_sink_.letters().size(), 1u);
  EXPECT_EQ(Entries("ByScore").size(), 1u);
}

TEST_F(ApplierTest, ARetriedBatchDoesNotRepeatItsDeadLetters) {
  ASSERT_TRUE(Open().ok());
  sample_sink_.FailAfter(1, absl::UnavailableError("disk full"));
  const std::vector<SourceRecord> batch = {
      test::Rejected(absl::InvalidArgumentError("line 1: bad"), "malformed_json",
                     At("1").Locator("line 1")),
      test::Insert(key(), User1(), At("2").Locator("line 2")),
      test::Rejected(absl::InvalidArgumentError("line 3: bad"), "malformed_json",
                     At("3").Locator("line 3")),
  };
  EXPECT_EQ(Apply(batch).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(published_->WriterError(0), "");  // only Run records the writer's error
  sample_sink_.FailWith(absl::OkStatus());
  ASSERT_TRUE(Apply(batch).ok());
  std::vector<std::string> locators;
  for (const auto& l : sample_sink_.letters()) locators.push_back(l.locator);
  EXPECT_EQ(locators, (std::vector<std::string>{"line 1", "line 3"}));
  EXPECT_EQ(sample_sink_.attempts(), 3);  // line 1, line 3 (failed), line 3; not line 1 again
  EXPECT_EQ(published_->Counters(0).rejected, 2u);
  EXPECT_EQ(Positions(), (std::vector<std::string>{"sample/=3"}));
}

// ---- The pipeline: Run's two stages, batch N+1 prepared while batch N commits

// `n` batches that change the same two items over and over (the order opens and ships, the
// user changes email and score, is removed and comes back), with sequence numbers, and one
// malformed record of source `second` each, whose dead letter the writer writes just before
// the commit.
std::vector<std::vector<SourceRecord>> ChurningBatches(const TableKeySpec& key, int n) {
  std::vector<std::vector<SourceRecord>> batches;
  int seq = 0;
  for (int b = 0; b < n; ++b) {
    std::vector<SourceRecord> batch;
    // Replayed first: the sequence number the batch before gave the order, so it is skipped
    // only if this batch reads the order as the batch before left it.
    if (b > 0) {
      batch.push_back(test::Insert(key, Order1(), At(absl::StrCat(seq)).Seq(absl::StrCat(seq - 1))));
    }
    Item order = Order1();
    order["total"] = N(absl::StrCat(b));
    if (b % 3 != 0) {
      order["status"] = S("SHIPPED");
      order.erase("open_since");
    }
    ++seq;
    batch.push_back(test::Modify(key, order, At(absl::StrCat(seq)).Seq(absl::StrCat(seq))));
    Item user = User1();
    user["email"] = S(absl::StrCat("u", b % 5, "@x.io"));
    user["score"] = N(absl::StrCat(b - 20));
    ++seq;
    batch.push_back(b % 4 == 3 ? test::Remove(key, user, At(absl::StrCat(seq)).Seq(absl::StrCat(seq)))
                               : test::Insert(key, user, At(absl::StrCat(seq)).Seq(absl::StrCat(seq))));
    batch.push_back(test::Rejected(absl::InvalidArgumentError(absl::StrCat("line ", b, ": bad")),
                                   "malformed_json",
                                   At(absl::StrCat("line ", b)).Source(1).Locator(absl::StrCat("line ", b))));
    batches.push_back(std::move(batch));
  }
  return batches;
}

// Applies `batches` through ApplyBatches, the next batch given as soon as asked for.
absl::Status ApplyPipelined(Applier& applier, std::vector<std::vector<SourceRecord>> batches) {
  size_t next = 0;
  return applier.ApplyBatches(
      [&](std::vector<SourceRecord>* out) {
        if (next == batches.size()) return false;
        *out = std::move(batches[next++]);
        return true;
      },
      Applier::OnFailure::kStop);
}

TEST_F(ApplierTest, PipelinedBatchesSeeTheItemsOfTheBatchBeforeEvenBeforeItCommits) {
  constexpr int kBatches = 24;
  // Each commit waits 20 ms in its dead letter, so the next batch (three events) is prepared
  // while the one before has not committed: its old images must come from that batch.
  second_sink_.DelayWrites(std::chrono::milliseconds(20));
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(ApplyPipelined(*applier_, ChurningBatches(key(), kBatches)).ok());
  const ViewContents pipelined = Views();
  const std::vector<std::string> items = StoredItems();
  const std::vector<std::string> positions = Positions();
  const SourceCounters counters = published_->Counters(0);
  EXPECT_EQ(published_->commit_count(), uint64_t{kBatches});
  EXPECT_EQ(second_sink_.letters().size(), size_t{kBatches});

  // The same batches one at a time on one thread.
  Close();
  store_name_ = "one-thread";
  second_sink_.DelayWrites(std::chrono::milliseconds(0));
  ASSERT_TRUE(Open().ok());
  for (std::vector<SourceRecord>& batch : ChurningBatches(key(), kBatches)) {
    ASSERT_TRUE(applier_->ApplyBatch(&batch).ok());
  }
  EXPECT_EQ(pipelined, Views());
  EXPECT_EQ(items, StoredItems());
  EXPECT_EQ(positions, Positions());
  EXPECT_EQ(counters.applied, published_->Counters(0).applied);
  EXPECT_EQ(counters.skipped, published_->Counters(0).skipped);

  // And what that is: batch 23 shipped the order (23 % 3 != 0) with total 23 and removed the
  // user (23 % 4 == 3); every replayed order was skipped.
  const std::string order =
      "{GSI1PK=S:CUST#1, GSI1SK=S:2024-05-01, PK=S:CUST#1, SK=S:ORDER#1, "
      "created_at=S:2024-05-01, status=S:SHIPPED, total=N:23, type=S:order}";
  EXPECT_EQ(pipelined,
            (ViewContents{
                {"GSI1", {"[S:CUST#1 | S:2024-05-01 | S:CUST#1 | S:ORDER#1] " + std::string(order)}},
                {"ByMember",
                 {"[S:ORDER#1 | S:CUST#1 | S:CUST#1 | S:ORDER#1] {PK=S:CUST#1, SK=S:ORDER#1}"}},
                {"ByEntity",
                 {"[S:STATUS#SHIPPED | S:2024-05-01 | S:CUST#1 | S:ORDER#1] " + std::string(order)}},
            }));
  EXPECT_EQ(items, (std::vector<std::string>{"[S:CUST#1 | S:ORDER#1] live 47 " + std::string(order),
                                             "[S:USER#u1 | S:PROFILE] tombstone 48"}));
  EXPECT_EQ(counters.applied, 2u * kBatches);
  EXPECT_EQ(counters.skipped, kBatches - 1u);
  EXPECT_EQ(positions, (std::vector<std::string>{"sample/=48", "second/=line 23"}));
}

TEST_F(ApplierTest, WriteBackShowsEachBatchBeforeItIsInLmdbAndEndsWithTheSameStore) {
  constexpr int kBatches = 12;  // fewer than Store::kFlushLayers: none is flushed early
  static_assert(kBatches < Store::kFlushLayers);
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(ApplyPipelined(*applier_, ChurningBatches(key(), kBatches)).ok());
  const ViewContents views = Views();
  const std::vector<std::string> items = StoredItems();
  const std::vector<std::string> positions = Meta("pos/");
  const std::vector<std::string> changes = ChangeLog();
  ASSERT_FALSE(views.empty());
  // Entries moved and removed: each delete in the log carries the value the entry held, the
  // one the last put of that entry logged.
  std::map<std::string, std::string> held;  // "<view> [key]" -> its value, as logged
  int deletes = 0;
  for (const std::string& c : changes) {
    const std::vector<std::string> parts = absl::StrSplit(c, absl::MaxSplits(' ', 2));
    ASSERT_EQ(parts.size(), 3u) << c;
    const size_t value_at = parts[2].find("] ");
    ASSERT_NE(value_at, std::string::npos) << c;
    const std::string entry = parts[2].substr(0, value_at + 1);
    const std::string value = parts[2].substr(value_at + 2);
    if (parts[1] == "put") {
      held[entry] = value;
      continue;
    }
    ++deletes;
    ASSERT_EQ(held.count(entry), 1u) << "a delete of an entry never put: " << c;
    EXPECT_EQ(value, held[entry]) << c;
    held.erase(entry);
  }
  ASSERT_GT(deletes, 0);

  // The same batches with write-back and no timed flush: every batch is a pending layer, and
  // reads (the preparer's among them) see exactly what committing each batch gave. Deletes
  // learn whether the entry is there from memory (WriteTxn::Remove): the log is the same.
  Close();
  store_name_ = "write-back";
  config_.storage.flush_interval_ms = 60000;
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(ApplyPipelined(*applier_, ChurningBatches(key(), kBatches)).ok());
  EXPECT_EQ(store_->pending_layers(), size_t{kBatches});
  EXPECT_EQ(published_->commit_count(), uint64_t{kBatches});
  EXPECT_EQ(views, Views());
  EXPECT_EQ(items, StoredItems());
  EXPECT_EQ(positions, Meta("pos/"));
  EXPECT_EQ(changes, ChangeLog());
  EXPECT_EQ(published_->WriterError(), "");

  ASSERT_TRUE(store_->Flush().ok());
  EXPECT_EQ(store_->pending_layers(), 0u);
  EXPECT_EQ(views, Views());
  EXPECT_EQ(changes, ChangeLog());
  ExpectLmdbAloneHolds(views, items, positions);

  // Once more, each batch flushed before the next: every entry a batch deletes is then in
  // LMDB alone, which the delete does not search.
  Close();
  store_name_ = "write-back-flushed";
  config_.storage.flush_interval_ms = 60000;
  ASSERT_TRUE(Open().ok());
  for (std::vector<SourceRecord>& batch : ChurningBatches(key(), kBatches)) {
    ASSERT_TRUE(ApplyPipelined(*applier_, {std::move(batch)}).ok());
    EXPECT_EQ(store_->pending_layers(), 1u);
    ASSERT_TRUE(store_->Flush().ok());
  }
  EXPECT_EQ(views, Views());
  EXPECT_EQ(items, StoredItems());
  EXPECT_EQ(changes, ChangeLog());

  ExpectLmdbAloneHolds(views, items, positions);
}

TEST_F(ApplierTest, WriteBackCommitsABacklogBatchToLmdbItselfWhereACommitIsCheap) {
  // With batch_size 3, a batch of three events is a layer; the two of 250 are larger than
  // batch_size, as what a writer behind its sources takes, and go to LMDB itself where the
  // last commit there cost at most 2 us an event: 500 us.
  config_.apply.batch_size = 3;
  std::vector<SourceRecord> small = ChurningBatches(key(), 1)[0];
  ASSERT_EQ(small.size(), 3u);
  std::vector<std::vector<SourceRecord>> large(2);
  for (int i = 0; i < 500; ++i) {
    Item user = User1();
    user["PK"] = S(absl::StrCat("USER#b", i));
    user["score"] = N(absl::StrCat(i));
    large[i / 250].push_back(
        test::Insert(key(), user, At(absl::StrCat(10 + i)).Seq(absl::StrCat(10 + i))));
  }
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(ApplyPipelined(*applier_, {small, large[0], large[1]}).ok());
  const ViewContents views = Views();
  const std::vector<std::string> items = StoredItems();
  const std::vector<std::string> positions = Meta("pos/");
  ASSERT_EQ(views.at("ByScore").size(), 501u);

  Close();
  store_name_ = "write-back";
  ASSERT_TRUE(Open().ok());  // the views are built without write-back
  Close();
  config_.storage.flush_interval_ms = 60000;
  ASSERT_TRUE(Open().ok());
  // Opening a built store commits nothing to go by: buffered until a commit says otherwise.
  EXPECT_EQ(store_->last_lmdb_commit(), std::nullopt);
  ASSERT_TRUE(ApplyPipelined(*applier_, {small}).ok());
  ASSERT_TRUE(ApplyPipelined(*applier_, {large[0]}).ok());
  EXPECT_EQ(store_->pending_layers(), 2u);
  store_->set_last_lmdb_commit(std::chrono::microseconds(501));  // a sync of 2.004 us an event
  ASSERT_TRUE(ApplyPipelined(*applier_, {large[1]}).ok());
  EXPECT_EQ(store_->pending_layers(), 3u);
  EXPECT_EQ(views, Views());

  // The same on a new store, and this time 2 us an event: the last large batch goes to LMDB,
  // the two layers before it first.
  Close();
  store_name_ = "write-back-2";
  config_.storage.flush_interval_ms = 0;
  ASSERT_TRUE(Open().ok());
  Close();
  config_.storage.flush_interval_ms = 60000;
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(ApplyPipelined(*applier_, {small, large[0]}).ok());
  EXPECT_EQ(store_->pending_layers(), 2u);
  store_->set_last_lmdb_commit(std::chrono::microseconds(500));
  ASSERT_TRUE(ApplyPipelined(*applier_, {large[1]}).ok());
  EXPECT_EQ(store_->pending_layers(), 0u);  // in LMDB, the layers before it first
  EXPECT_EQ(store_->pending_bytes(), 0u);
  EXPECT_TRUE(store_->last_lmdb_commit().has_value());  // this commit's own cost, measured
  EXPECT_EQ(published_->commit_count(), 3u);
  EXPECT_EQ(views, Views());
  EXPECT_EQ(items, StoredItems());
  EXPECT_EQ(positions, Meta("pos/"));

  ExpectLmdbAloneHolds(views, items, positions);  // all three batches
}

TEST_F(ApplierTest, PipelineStopsAtAFailingBatchUnderStopAndAppliesNothingAfter) {
  ASSERT_TRUE(Open().ok());
  second_sink_.FailAfter(2, absl::UnavailableError("disk full"));
  absl::Status s = ApplyPipelined(*applier_, ChurningBatches(key(), 6));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Text(s),
            "source second: cannot write a dead letter, so the source does not advance past "
            "line 2: disk full");
  EXPECT_EQ(published_->commit_count(), 2u);
  EXPECT_EQ(Positions(), (std::vector<std::string>{"sample/=4", "second/=line 1"}));
  EXPECT_EQ(published_->Counters(0).applied, 4u);
  // The failed batch and the one prepared after it were not applied: still in flight.
  EXPECT_TRUE(published_->HasUnapplied(0));
  EXPECT_TRUE(published_->HasUnapplied(1));
  EXPECT_EQ(published_->WriterError(), "");  // kStop returns the error instead

  // A new run starts from empty slots: given only the failed batch, it applies it, and the
  // batch the stopped run had prepared after it is no longer counted as in flight.
  second_sink_.FailWith(absl::OkStatus());
  std::vector<std::vector<SourceRecord>> again = ChurningBatches(key(), 3);
  ASSERT_TRUE(ApplyPipelined(*applier_, {again[2]}).ok());
  EXPECT_EQ(published_->commit_count(), 3u);
  EXPECT_EQ(Positions(), (std::vector<std::string>{"sample/=6", "second/=line 2"}));
  EXPECT_FALSE(published_->HasUnapplied(0));
  EXPECT_FALSE(published_->HasUnapplied(1));
  std::vector<std::string> locators;
  for (const auto& letter : second_sink_.letters()) locators.push_back(letter.locator);
  EXPECT_EQ(locators, (std::vector<std::string>{"line 0", "line 1", "line 2"}));
}

// The preparer's and the committer's errors are kept apart: one stage recovering does not
// hide the other one's failure (WriterError() drives the views' health).
TEST_F(ApplierTest, EachStageKeepsItsOwnWriterError) {
  ASSERT_TRUE(Open().ok());
  // A damaged stored item: preparing any event on it fails.
  const std::string damaged = catalog_->builder(0).PrimaryKey(User1());
  {
    auto txn = store_->BeginWrite();
    ASSERT_TRUE(txn.ok());
    ASSERT_TRUE((*txn)->Put(store_->items("App"), damaged, "not a stored item").ok());
    ASSERT_TRUE((*txn)->Commit().ok());
  }
  std::vector<std::vector<SourceRecord>> batches = ChurningBatches(key(), 2);
  batches[0].erase(batches[0].begin() + 1);  // batch 0: the order and its malformed record
  second_sink_.FailWith(absl::UnavailableError("disk full"));  // batch 0 cannot commit
  std::atomic<bool> stop{false};
  size_t next = 0;
  absl::Status result;
  std::thread writer([&] {
    result = applier_->ApplyBatches(
        [&](std::vector<SourceRecord>* out) {
          if (next == batches.size()) return false;
          *out = std::move(batches[next++]);
          return true;
        },
        Applier::OnFailure::kRetry, &stop);
  });
  // What `read` gives once it is `error`, or after 4 s. The stages fail on their own threads,
  // so each error is waited for, not assumed published with another.
  auto wait_for = [&](const std::string& error, auto read) {
    for (int i = 0; i < 400 && read() != error; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return read();
  };
  auto overall = [&] { return published_->WriterError(); };
  auto of_source_0 = [&] { return published_->WriterError(0); };
  const std::string commit_error =
      "source second: cannot write a dead letter, so the source does not advance past line 0: "
      "disk full";
  const std::string prepare_error =
      "items/App: a stored item is damaged (stored item has a bad flag byte); stop cdcviewd and "
      "restore the store from a backup, or delete it so that the sources replay into a new one";
  EXPECT_EQ(wait_for(commit_error, overall), commit_error);
  // The committer's error names source 1 only.
  EXPECT_EQ(wait_for(prepare_error, of_source_0), prepare_error);
  second_sink_.FailWith(absl::OkStatus());  // the committer recovers; the preparer does not
  EXPECT_EQ(wait_for(prepare_error, overall), prepare_error);
  EXPECT_EQ(published_->WriterError(1), prepare_error);
  EXPECT_EQ(published_->commit_count(), 1u);
  stop = true;
  writer.join();
  EXPECT_EQ(result.code(), absl::StatusCode::kCancelled);
}

// ---- MDB_MAP_FULL

// `n` orders with a 200-byte payload: about 0.5 KiB per item in items/App and in GSI1.
std::vector<SourceRecord> BigBatch(const TableKeySpec& key, int n) {
  std::vector<SourceRecord> batch;
  for (int i = 0; i < n; ++i) {
    char id[16];
    std::snprintf(id, sizeof id, "%05d", i);
    Item item = {{"PK", S(absl::StrCat("CUST#", id))},
                 {"SK", S(absl::StrCat("ORDER#", id))},
                 {"GSI1PK", S("ALL")},
                 {"GSI1SK", S(id)},
                 {"payload", S(std::string(200, 'x'))}};
    batch.push_back(test::Insert(key, item, At(absl::StrCat(i + 1))));
  }
  return batch;
}

TEST_F(ApplierTest, MapFullGrowsTheMapAndRetries) {
  ASSERT_TRUE(Open(1 * kMiB, 64 * kMiB).ok());
  ASSERT_TRUE(Apply(BigBatch(key(), 3000)).ok());
  EXPECT_GT(store_->map_size(), 1 * kMiB);
  EXPECT_EQ(Entries("GSI1").size(), 3000u);
  EXPECT_EQ(Entries("ByMember").size(), 3000u);
  EXPECT_EQ(StoredItems().size(), 3000u);
  EXPECT_EQ(Positions(), (std::vector<std::string>{"sample/=3000"}));
  EXPECT_EQ(published_->Counters(0).applied, 3000u);  // counted once, not once per attempt
  EXPECT_EQ(MetricLines("cdcview_lmdb_map_size_bytes"),
            (std::vector<std::string>{absl::StrCat("cdcview_lmdb_map_size_bytes ",
                                                   store_->map_size())}));
}

TEST_F(ApplierTest, MapFullAtTheMaximumFailsWithNothingApplied) {
  ASSERT_TRUE(Open(1 * kMiB, 1 * kMiB).ok());
  absl::Status s = Apply(BigBatch(key(), 3000));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Text(s),
            "the LMDB map is full at storage.max_map_size (1048576 bytes); raise "
            "storage.max_map_size or free disk space");
  EXPECT_EQ(Views(), ViewContents{});
  EXPECT_TRUE(StoredItems().empty());
  EXPECT_TRUE(Meta(kPositionPrefix).empty());
  EXPECT_TRUE(Positions().empty());
  EXPECT_EQ(published_->Counters(0).applied, 0u);
  EXPECT_EQ(published_->commit_count(), 0u);
  // A small batch still fits.
  ASSERT_TRUE(Apply({test::Insert(key(), Order1(), At("1"))}).ok());
  EXPECT_EQ(Positions(), (std::vector<std::string>{"sample/=1"}));
}

// ---- View rebuilds

TEST_F(ApplierTest, AChangedDefinitionIsRebuiltFromItems) {
  ASSERT_TRUE(Open().ok());
  Item closed = {{"PK", S("CUST#2")}, {"SK", S("ORDER#2")}, {"open_since", S("2023-01-01")},
                 {"status", S("OPEN")}};
  ASSERT_TRUE(Apply({test::Insert(key(), Order1(), At("1")),
                     test::Insert(key(), User1(), At("2")),
                     test::Insert(key(), closed, At("3")),
                     test::Remove(key(), closed, At("4"))})
                  .ok());
  EXPECT_EQ(Entries("OpenOrders").size(), 1u);
  Close();

  config_ = MakeConfig("KEYS_ONLY");
  ASSERT_TRUE(Open(64 * kMiB, 256 * kMiB, /*rebuild=*/false).ok());
  ASSERT_TRUE(applier_->Recover().ok());
  for (int v : {kGsi1, kByMember, kByEntity, kByLocation, kByScore}) {
    EXPECT_EQ(published_->GetViewState(v), ViewState::kReady) << kViews[v];
  }
  double progress = -1;
  EXPECT_EQ(published_->GetViewState(kOpenOrders, &progress), ViewState::kBuilding);
  EXPECT_EQ(progress, 0.0);
  EXPECT_TRUE(Entries("OpenOrders").empty());  // emptied, to be rebuilt
  const std::string fingerprint =
      config_.tables[0].views[kOpenOrders].Fingerprint(config_.tables[0].key);
  EXPECT_EQ(Meta("view/OpenOrders/"),
            (std::vector<std::string>{"view/OpenOrders/fingerprint=" + fingerprint,
                                      "view/OpenOrders/state=BUILDING"}));

  ASSERT_TRUE(applier_->RebuildViews().ok());
  EXPECT_EQ(published_->GetViewState(kOpenOrders, &progress), ViewState::kReady);
  EXPECT_EQ(progress, 1.0);
  ViewContents expected = Order1AndUser1Views();
  expected["OpenOrders"] = {
      "[S:OPEN | S:2024-05-01 | S:CUST#1 | S:ORDER#1] {PK=S:CUST#1, SK=S:ORDER#1, "
      "open_since=S:2024-05-01}"};
  EXPECT_EQ(Views(), expected);
  EXPECT_EQ(Meta("view/OpenOrders/"),
            (std::vector<std::string>{"view/OpenOrders/fingerprint=" + fingerprint,
                                      "view/OpenOrders/state=READY"}));

  // Nothing left to do on the next start.
  Close();
  ASSERT_TRUE(Open(64 * kMiB, 256 * kMiB, /*rebuild=*/false).ok());
  ASSERT_TRUE(applier_->Recover().ok());
  EXPECT_EQ(published_->GetViewState(kOpenOrders), ViewState::kReady);
  EXPECT_EQ(Views(), expected);
}

// 5000 orders with 900-byte payloads; every 7th has no open_since (not in OpenOrders), every
// 11th is removed again (a tombstone). Batches of 1000.
std::vector<std::vector<SourceRecord>> ManyOrders(const TableKeySpec& key) {
  std::vector<std::vector<SourceRecord>> batches(5);
  for (int i = 0; i < 5000; ++i) {
    char id[16];
    std::snprintf(id, sizeof id, "%05d", i);
    Item item = {{"PK", S(absl::StrCat("CUST#", id))},
                 {"SK", S("ORDER")},
                 {"status", S("OPEN")},
                 {"total", N(absl::StrCat(i))},
                 {"payload", S(std::string(900, 'x'))}};
    if (i % 7 != 0) item["open_since"] = S(absl::StrCat("2024-", id));
    std::vector<SourceRecord>& batch = batches[i / 1000];
    batch.push_back(test::Insert(key, item, At(absl::StrCat(i))));
    if (i % 11 == 0) batch.push_back(test::Remove(key, item, At(absl::StrCat(i))));
  }
  return batches;
}

TEST_F(ApplierTest, AnInterruptedRebuildResumesAndEndsExact) {
  // What OpenOrders with projection ALL must hold: built by the writer in a fresh store.
  std::vector<std::string> expected;
  uint64_t view_bytes = 0;
  {
    config_ = MakeConfig("ALL");
    ASSERT_TRUE(Open().ok());
    for (const auto& batch : ManyOrders(key())) ASSERT_TRUE(Apply(batch).ok());
    expected = Entries("OpenOrders");
    auto txn = store_->BeginRead();
    ASSERT_TRUE(txn.ok());
    view_bytes = (*txn)->Bytes(store_->view("OpenOrders"));
    txn->reset();
    Close();
    std::filesystem::remove_all(config_.storage.path);
  }
  ASSERT_EQ(expected.size(), 5000u - 715 - 455 + 65);  // minus every 7th, every 11th, plus both

  // The same items under the old definition (INCLUDE status, total).
  config_ = MakeConfig();
  ASSERT_TRUE(Open().ok());
  for (const auto& batch : ManyOrders(key())) ASSERT_TRUE(Apply(batch).ok());
  const uint64_t used = store_->map_used_bytes();
  Close();

  // New definition, and a map with room for about half the rebuilt view: the first chunk of
  // 2000 items (40% of them) fits, the rest does not, so the rebuild stops with the map full
  // part-way, its progress committed.
  config_ = MakeConfig("ALL");
  const uint64_t tight = used + (view_bytes / 2 + 4095) / 4096 * 4096;
  ASSERT_TRUE(Open(tight, tight, /*rebuild=*/false).ok());
  ASSERT_TRUE(applier_->Recover().ok());
  absl::Status s = applier_->RebuildViews();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(published_->GetViewState(kOpenOrders), ViewState::kBuilding);
  const std::vector<std::string> cursor = Meta("view/OpenOrders/build_cursor");
  ASSERT_EQ(cursor.size(), 1u);
  const std::string at = cursor[0].substr(cursor[0].find('=') + 1);
  const std::string described = DescribeKey(at);
  ASSERT_TRUE(described == "S:CUST#01999 | S:ORDER" || described == "S:CUST#03999 | S:ORDER")
      << described;
  // Exactly the entries of the items up to the cursor are in the view.
  const std::string last_pk = described.substr(2, 10);
  std::vector<std::string> partial = Entries("OpenOrders");
  size_t expected_partial = 0;
  for (const std::string& e : expected) {
    if (e.substr(e.find("S:CUST#") + 2, 10) <= last_pk) ++expected_partial;
  }
  EXPECT_EQ(partial.size(), expected_partial);

  // The stop flag: nothing more happens.
  std::atomic<bool> stop{true};
  s = applier_->RebuildViews(&stop);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(Text(s), "stopping");
  EXPECT_EQ(Meta("view/OpenOrders/build_cursor"), cursor);
  EXPECT_EQ(Entries("OpenOrders"), partial);
  Close();

  // Restart with room: Recover resumes (the partial view is kept) and the rebuild ends exact.
  ASSERT_TRUE(Open(64 * kMiB, 256 * kMiB, /*rebuild=*/false).ok());
  ASSERT_TRUE(applier_->Recover().ok());
  EXPECT_EQ(published_->GetViewState(kOpenOrders), ViewState::kBuilding);
  EXPECT_EQ(Entries("OpenOrders"), partial);
  ASSERT_TRUE(applier_->RebuildViews().ok());
  EXPECT_EQ(published_->GetViewState(kOpenOrders), ViewState::kReady);
  EXPECT_EQ(Entries("OpenOrders"), expected);
  EXPECT_TRUE(Meta("view/OpenOrders/build_cursor").empty());
  EXPECT_EQ(Meta("view/OpenOrders/state"),
            (std::vector<std::string>{"view/OpenOrders/state=READY"}));
  EXPECT_EQ(MetricLines("cdcview_view_build_progress_ratio{view=\"OpenOrders\"}"),
            (std::vector<std::string>{"cdcview_view_build_progress_ratio{view=\"OpenOrders\"} 1"}));
}

// ---- Metrics

TEST_F(ApplierTest, MetricsCountEventsWritesItemsRejectionsAndBatches) {
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(Apply({test::Insert(key(), Order1(), At("1").Seq("100")),
                     test::Insert(key(), User1(), At("2").Seq("101"))})
                  .ok());
  Item shipped = Order1();
  shipped["status"] = S("SHIPPED");
  shipped.erase("open_since");
  ASSERT_TRUE(
      Apply({test::Modify(key(), shipped, At("3").Seq("102")),
             test::Remove(key(), User1(), At("4").Seq("103")),
             test::Insert(key(), Order1(), At("5").Seq("100")),
             test::Rejected(absl::InvalidArgumentError("line 6: bad json"), "malformed_json",
                            At("6").Locator("line 6")),
             test::Insert(key(), {{"PK", S("X")}}, At("7").Source(1))})
          .ok());

  EXPECT_EQ(MetricLines("cdcview_events_total"),
            (std::vector<std::string>{
                "cdcview_events_total{result=\"applied\",source=\"sample\"} 4",
                "cdcview_events_total{result=\"applied\",source=\"second\"} 0",
                "cdcview_events_total{result=\"rejected\",source=\"sample\"} 1",
                "cdcview_events_total{result=\"rejected\",source=\"second\"} 1",
                "cdcview_events_total{result=\"skipped\",source=\"sample\"} 1",
                "cdcview_events_total{result=\"skipped\",source=\"second\"} 0",
            }));
  EXPECT_EQ(MetricLines("cdcview_index_writes_total"),
            (std::vector<std::string>{
                "cdcview_index_writes_total{op=\"delete\",view=\"ByEntity\"} 2",
                "cdcview_index_writes_total{op=\"delete\",view=\"ByLocation\"} 1",
                "cdcview_index_writes_total{op=\"delete\",view=\"ByMember\"} 1",
                "cdcview_index_writes_total{op=\"delete\",view=\"ByScore\"} 1",
                "cdcview_index_writes_total{op=\"delete\",view=\"GSI1\"} 0",
                "cdcview_index_writes_total{op=\"delete\",view=\"OpenOrders\"} 1",
                "cdcview_index_writes_total{op=\"put\",view=\"ByEntity\"} 3",
                "cdcview_index_writes_total{op=\"put\",view=\"ByLocation\"} 1",
                "cdcview_index_writes_total{op=\"put\",view=\"ByMember\"} 2",
                "cdcview_index_writes_total{op=\"put\",view=\"ByScore\"} 1",
                "cdcview_index_writes_total{op=\"put\",view=\"GSI1\"} 2",
                "cdcview_index_writes_total{op=\"put\",view=\"OpenOrders\"} 1",
            }));
  EXPECT_EQ(MetricLines("cdcview_view_items"),
            (std::vector<std::string>{
                "cdcview_view_items{view=\"ByEntity\"} 1",
                "cdcview_view_items{view=\"ByLocation\"} 0",
                "cdcview_view_items{view=\"ByMember\"} 1",
                "cdcview_view_items{view=\"ByScore\"} 0",
                "cdcview_view_items{view=\"GSI1\"} 1",
                "cdcview_view_items{view=\"OpenOrders\"} 0",
            }));
  EXPECT_EQ(MetricLines("cdcview_rejected_events_total"),
            (std::vector<std::string>{
                "cdcview_rejected_events_total{reason=\"bad_key\",source=\"second\"} 1",
                "cdcview_rejected_events_total{reason=\"malformed_json\",source=\"sample\"} 1",
            }));
  EXPECT_EQ(MetricLines("cdcview_apply_batch_size_count"),
            (std::vector<std::string>{"cdcview_apply_batch_size_count 2"}));
  EXPECT_EQ(MetricLines("cdcview_apply_batch_size_sum"),
            (std::vector<std::string>{"cdcview_apply_batch_size_sum 7"}));

  // Write amplification: (puts + deletes) / events applied to the table.
  EXPECT_EQ(published_->IndexWritesPerEvent(kGsi1), 0.5);
  EXPECT_EQ(published_->IndexWritesPerEvent(kByEntity), 1.25);
  EXPECT_EQ(published_->Counters(1).rejected, 1u);
}

TEST_F(ApplierTest, LagIsMeasuredAgainstTheInjectedClock) {
  ASSERT_TRUE(Open().ok());
  // Received: the first 0.5 s after its creation and 2 s before the commit; the second 1.1 s
  // after and 0.4 s before; the third has no creation time, only a receive time (0.09 s).
  ASSERT_TRUE(Apply({test::Insert(key(), Order1(),
                                  At("1").Created(now_ms_ - 2500).Received(now_ms_ - 2000)),
                     test::Insert(key(), User1(),
                                  At("2").Created(now_ms_ - 1500).Received(now_ms_ - 400)),
                     test::Modify(key(), Order1(), At("3").Received(now_ms_ - 90))})
                  .ok());
  EXPECT_EQ(published_->Counters(0).lag_seconds, 1.5);  // the newest event
  EXPECT_EQ(MetricLines("cdcview_source_lag_seconds"),
            (std::vector<std::string>{"cdcview_source_lag_seconds{source=\"sample\"} 1.5",
                                      "cdcview_source_lag_seconds{source=\"second\"} 0"}));
  EXPECT_EQ(MetricLines("cdcview_replication_lag_seconds_count"),
            (std::vector<std::string>{"cdcview_replication_lag_seconds_count 2"}));
  EXPECT_EQ(MetricLines("cdcview_replication_lag_seconds_sum"),
            (std::vector<std::string>{"cdcview_replication_lag_seconds_sum 4"}));
  // The two parts: before cdcviewd (events with both times) and cdcviewd's own.
  EXPECT_EQ(MetricLines("cdcview_arrival_lag_seconds_count"),
            (std::vector<std::string>{"cdcview_arrival_lag_seconds_count 2"}));
  EXPECT_EQ(MetricLines("cdcview_arrival_lag_seconds_sum"),
            (std::vector<std::string>{"cdcview_arrival_lag_seconds_sum 1.6"}));
  EXPECT_EQ(MetricLines("cdcview_apply_delay_seconds_count"),
            (std::vector<std::string>{"cdcview_apply_delay_seconds_count 3"}));
  EXPECT_EQ(MetricLines("cdcview_apply_delay_seconds_sum"),
            (std::vector<std::string>{"cdcview_apply_delay_seconds_sum 2.49"}));
  ExpectMetricLines("cdcview_apply_delay_seconds_bucket",
                    {"cdcview_apply_delay_seconds_bucket{le=\"0.075\"} 0",
                     "cdcview_apply_delay_seconds_bucket{le=\"0.1\"} 1",
                     "cdcview_apply_delay_seconds_bucket{le=\"0.25\"} 1",
                     "cdcview_apply_delay_seconds_bucket{le=\"0.5\"} 2",
                     "cdcview_apply_delay_seconds_bucket{le=\"2.5\"} 3"});
}

TEST_F(ApplierTest, EachCommittedBatchIsTimedInTheStagesItPassed) {
  // Every batch's dead letter takes 30 ms to write: the write stage holds it.
  second_sink_.DelayWrites(std::chrono::milliseconds(30));
  ASSERT_TRUE(Open().ok());
  auto stage = [&](std::string_view suffix) {
    std::vector<std::string> lines = MetricLines("cdcview_apply_stage_seconds_" + std::string(suffix));
    std::map<std::string, double> out;
    for (const std::string& line : lines) {
      const size_t open = line.find("stage=\""), close = line.find('"', open + 7);
      out[line.substr(open + 7, close - open - 7)] = std::stod(line.substr(line.rfind(' ') + 1));
    }
    return out;
  };
  // ApplyBatch passes through neither the queue nor the hand-off.
  std::vector<SourceRecord> one = {test::Insert(key(), Order1(), At("1"))};
  ASSERT_TRUE(applier_->ApplyBatch(&one).ok());
  EXPECT_EQ(stage("count"), (std::map<std::string, double>{
                                {"commit", 1}, {"handoff", 0}, {"prepare", 1}, {"queue", 0}, {"write", 1}}));

  // Three batches through both stages, their records received 0.5 to 2 s before the (fixed)
  // clock's now, one without a receive time: each batch's queue stage is its earliest
  // record's 2 s.
  std::vector<std::vector<SourceRecord>> batches = ChurningBatches(key(), 3);
  for (auto& batch : batches) {
    ASSERT_GE(batch.size(), 3u);
    for (size_t i = 0; i < batch.size(); ++i) {
      batch[i].received_ms = i == 0 ? 0 : now_ms_ - (i == 2 ? 2000 : 500);
    }
  }
  ASSERT_TRUE(ApplyPipelined(*applier_, std::move(batches)).ok());
  EXPECT_EQ(stage("count"), (std::map<std::string, double>{
                                {"commit", 4}, {"handoff", 3}, {"prepare", 4}, {"queue", 3}, {"write", 4}}));
  const std::map<std::string, double> sums = stage("sum");
  EXPECT_EQ(sums.at("queue"), 6.0);
  EXPECT_GE(sums.at("write"), 0.09);  // three dead letters of 30 ms
  // Hand-off and prepare: measured, not left at their clocks' zero (within 2.5 s).
  ExpectMetricLines("cdcview_apply_stage_seconds_bucket",
                    {"cdcview_apply_stage_seconds_bucket{stage=\"queue\",le=\"1\"} 0",
                     "cdcview_apply_stage_seconds_bucket{stage=\"queue\",le=\"2.5\"} 3",
                     "cdcview_apply_stage_seconds_bucket{stage=\"handoff\",le=\"2.5\"} 3",
                     "cdcview_apply_stage_seconds_bucket{stage=\"prepare\",le=\"2.5\"} 4",
                     "cdcview_apply_stage_seconds_bucket{stage=\"write\",le=\"0.025\"} 1"});
}

TEST(WriterLingerTest, AsLongAsTheLastCommitTookWithinOneMillisecondAndMaxDelay) {
  using std::chrono::microseconds;
  using std::chrono::milliseconds;
  ApplyConfig cfg;
  cfg.max_delay_ms = 20;
  EXPECT_EQ(WriterLinger(cfg, microseconds(200)), milliseconds(1));   // tmpfs: a fast commit
  EXPECT_EQ(WriterLinger(cfg, microseconds(7500)), microseconds(7500));
  EXPECT_EQ(WriterLinger(cfg, milliseconds(80)), milliseconds(20));  // a slow sync: the cap
  cfg.max_delay_ms = 0;  // no lingering at all, as configured
  EXPECT_EQ(WriterLinger(cfg, milliseconds(5)), microseconds(0));
}

TEST(CommitsDirectlyTest, OnlyABatchLargerThanBatchSizeWhereAnLmdbCommitCostsAtMostTwoMicrosecondsAnEvent) {
  using std::chrono::microseconds;
  ApplyConfig cfg;
  cfg.batch_size = 1024;
  EXPECT_FALSE(CommitsDirectly(cfg, 1024, microseconds(0)));  // not behind: a layer
  EXPECT_TRUE(CommitsDirectly(cfg, 1025, microseconds(0)));
  EXPECT_FALSE(CommitsDirectly(cfg, 8192, std::nullopt));  // no commit to go by yet
  EXPECT_TRUE(CommitsDirectly(cfg, 1025, microseconds(2050)));
  EXPECT_FALSE(CommitsDirectly(cfg, 1025, microseconds(2051)));
  EXPECT_TRUE(CommitsDirectly(cfg, 8192, microseconds(900)));      // tmpfs
  EXPECT_FALSE(CommitsDirectly(cfg, 8192, microseconds(750000)));  // a slow disk's sync
}

// ---- The change log's order

namespace {

Item Vote(const std::string& user, const std::string& day) {
  return {{"PK", S("VOTE#" + user)}, {"SK", S(day)}, {"GSI1PK", S("DAY#" + day)},
          {"GSI1SK", S(user)}};
}

}  // namespace

TEST_F(ApplierTest, TheChangeLogHoldsABatchsChangesInEventOrderNotKeyOrder) {
  ASSERT_TRUE(Open().ok());
  // Event order differs from GSI1's key order (cy, ann, bob), and the first vote is closed
  // (removed) after the others: the views are written in key order, the log keeps the events'.
  ASSERT_TRUE(Apply({test::Insert(key(), Vote("cy", "2025-03-01"), At("1")),
                     test::Insert(key(), Vote("ann", "2025-03-01"), At("2")),
                     test::Insert(key(), Vote("bob", "2025-03-01"), At("3")),
                     test::Remove(key(), Vote("cy", "2025-03-01"), At("4"))})
                  .ok());
  EXPECT_EQ(ChangeLog(/*causes=*/true), (std::vector<std::string>{
                     "1 put GSI1 [S:DAY#2025-03-01 | S:cy | S:VOTE#cy | S:2025-03-01] cause sample/@1",
                     "2 put ByMember [S:2025-03-01 | S:VOTE#cy | S:VOTE#cy | S:2025-03-01] cause sample/@1",
                     "3 put GSI1 [S:DAY#2025-03-01 | S:ann | S:VOTE#ann | S:2025-03-01] cause sample/@2",
                     "4 put ByMember [S:2025-03-01 | S:VOTE#ann | S:VOTE#ann | S:2025-03-01] cause sample/@2",
                     "5 put GSI1 [S:DAY#2025-03-01 | S:bob | S:VOTE#bob | S:2025-03-01] cause sample/@3",
                     "6 put ByMember [S:2025-03-01 | S:VOTE#bob | S:VOTE#bob | S:2025-03-01] cause sample/@3",
                     "7 del GSI1 [S:DAY#2025-03-01 | S:cy | S:VOTE#cy | S:2025-03-01] cause sample/@4",
                     "8 del ByMember [S:2025-03-01 | S:VOTE#cy | S:VOTE#cy | S:2025-03-01] cause sample/@4",
                 }));
}

// ---- Keys over LMDB's 511 bytes, up to DynamoDB's limits

TEST_F(ApplierTest, LongKeysAreAppliedInOrderAndTheirOldEntriesGoWhenTheyMoveOrAreRemoved) {
  ASSERT_TRUE(Open().ok());
  const std::string pk(2048, 'p');
  const std::string shared(600, 's');  // sort keys that differ only at the end
  auto order = [&](const std::string& sk_end, const std::string& gsi_sk) {
    return Item{{"PK", S(pk)}, {"SK", S(shared + sk_end)}, {"GSI1PK", S(std::string(2048, 'g'))},
                {"GSI1SK", S(gsi_sk)}};
  };
  // Sort keys from 601 to 1,024 bytes; a short one among them in GSI1.
  ASSERT_TRUE(Apply({test::Insert(key(), order("2", shared + "b"), At("1")),
                     test::Insert(key(), order("1" + std::string(423, 'z'), shared + "c"), At("2")),
                     test::Insert(key(), order("10", "a"), At("3")),
                     test::Insert(key(), order("3", shared + "a"), At("4"))})
                  .ok());
  // Per GSI1 entry: its sort key's length and last byte, then the item's sort key's end.
  auto keys = [&]() {
    std::vector<std::string> out;
    auto txn = store_->BeginRead();
    EXPECT_TRUE(txn.ok());
    if (!txn.ok()) return out;
    auto cursor = (*txn)->OpenCursor(store_->view("GSI1"));
    for (bool ok = cursor->SeekFirst(); ok; ok = cursor->Next()) {
      std::string_view in = cursor->key();
      std::vector<std::string> parts;
      while (!in.empty()) {
        auto part = DecodeKeyComponent(&in);
        EXPECT_TRUE(part.ok());
        if (!part.ok()) return out;
        parts.push_back(part->scalar());
      }
      EXPECT_EQ(parts.size(), 4u);
      if (parts.size() != 4) return out;
      out.push_back(absl::StrCat(parts[1].size(), parts[1].substr(parts[1].size() - 1), " ",
                                 parts[3].substr(parts[3].size() - 2)));
    }
    return out;
  };
  EXPECT_EQ(keys(), (std::vector<std::string>{"1a 10", "601a s3", "601b s2", "601c zz"}));
  std::vector<std::string> items = StoredItems();
  ASSERT_EQ(items.size(), 4u);
  EXPECT_EQ(items[0].substr(0, 7), "[S:pppp");
  // In key order: ...10 < ...1zzz < ...2 < ...3.
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string ends[] = {"10", "zz", "s2", "s3"};
    EXPECT_EQ(items[i].substr(items[i].find("] live") - 2, 2), ends[i]) << i;
  }
  // The item ending in 2 moves to the front of GSI1; the one ending in 3 goes.
  ASSERT_TRUE(Apply({test::Modify(key(), order("2", "0"), At("5")),
                     test::Remove(key(), order("3", shared + "a"), At("6"))})
                  .ok());
  EXPECT_EQ(keys(), (std::vector<std::string>{"10 s2", "1a 10", "601c zz"}));
  EXPECT_EQ(StoredItems().size(), 4u);  // the removed one as a tombstone
  EXPECT_EQ(Views()["GSI1"].size(), 3u);
}

// ---- Items left out of a view for a key of the wrong type

TEST_F(ApplierTest, AKeyAttributeOfTheWrongTypeIsCountedPerViewInTheMetricAndForDescribeView) {
  ASSERT_TRUE(Open().ok());
  Item user = User1();
  user["score"] = S("high");  // ByScore sorts by N
  Item order = Order1();
  order["GSI1PK"] = N("1");   // GSI1 wants S
  Item rejected = Order1();
  rejected["SK"] = S("ORDER#2");
  rejected["GSI1PK"] = N("2");
  rejected["status"] = S(std::string(2048, 'x'));  // ByEntity's key too large: rejected whole
  ASSERT_TRUE(Apply({test::Insert(key(), user, At("1")), test::Insert(key(), order, At("2")),
                     test::Insert(key(), rejected, At("3"))})
                  .ok());
  user["city"] = S("Berlin");  // a second event of the same item, still without a number
  ASSERT_TRUE(Apply({test::Modify(key(), user, At("4"))}).ok());
  EXPECT_EQ(MetricLines("cdcview_view_skipped_total"),
            (std::vector<std::string>{
                "cdcview_view_skipped_total{reason=\"key_type_mismatch\",view=\"ByEntity\"} 0",
                "cdcview_view_skipped_total{reason=\"key_type_mismatch\",view=\"ByLocation\"} 0",
                "cdcview_view_skipped_total{reason=\"key_type_mismatch\",view=\"ByMember\"} 0",
                "cdcview_view_skipped_total{reason=\"key_type_mismatch\",view=\"ByScore\"} 2",
                "cdcview_view_skipped_total{reason=\"key_type_mismatch\",view=\"GSI1\"} 1",
                "cdcview_view_skipped_total{reason=\"key_type_mismatch\",view=\"OpenOrders\"} 0",
            }));
  EXPECT_EQ(published_->KeyTypeMismatches(kGsi1), 1u);
  EXPECT_EQ(published_->KeyTypeMismatches(kByScore), 2u);
  EXPECT_EQ(published_->KeyTypeMismatches(kOpenOrders), 0u);
  EXPECT_EQ(Entries("GSI1"), std::vector<std::string>{});
  EXPECT_EQ(published_->Counters(0).rejected, 1u);
}

// ---- Tombstone compaction

class TombstoneTest : public ApplierTest {
 protected:
  // Horizons of 100 s (sample) and 50 s (second): the table keeps tombstones 100 s.
  void SetUp() override {
    ApplierTest::SetUp();
    config_.sources[0].file.tombstone_horizon_seconds = 100;
    config_.sources[1].file.tombstone_horizon_seconds = 50;
  }

  TombstoneCompactor Compactor() {
    return TombstoneCompactor(config_, store_.get(), probe_.get(), [this] { return now_ms_; });
  }

  static Item Key(int i) { return {{"PK", S(absl::StrCat("K#", i))}, {"SK", S("X")}}; }

  // "[pk | sk] <time>" per tombstone in items/App, in key order ("-" for no time).
  std::vector<std::string> TombstoneTimes() const {
    std::vector<std::string> out;
    auto txn = store_->BeginRead();
    if (!txn.ok()) return {txn.status().ToString()};
    auto cursor = (*txn)->OpenCursor(store_->items("App"));
    for (bool ok = cursor->SeekFirst(); ok; ok = cursor->Next()) {
      absl::StatusOr<StoredItem> item = DecodeStoredItem(cursor->value());
      if (!item.ok() || !item->tombstone) continue;
      out.push_back(absl::StrCat(
          "[", DescribeKey(cursor->key()), "] ",
          item->removed_ms == StoredItem::kNoTime ? "-" : absl::StrCat(item->removed_ms - kT0)));
    }
    return out;
  }

  // "<time> [pk | sk]" per entry of tombstones/App, in index order (times relative to kT0).
  std::vector<std::string> TombstoneIndex() const {
    std::vector<std::string> out;
    auto txn = store_->BeginRead();
    if (!txn.ok()) return {txn.status().ToString()};
    auto cursor = (*txn)->OpenCursor(store_->tombstones("App"));
    for (bool ok = cursor->SeekFirst(); ok; ok = cursor->Next()) {
      EXPECT_EQ(cursor->key(), TombstoneIndexKey(TombstoneIndexTime(cursor->key()), cursor->value(),
                                                 store_->max_key_size()));
      out.push_back(absl::StrCat(TombstoneIndexTime(cursor->key()) - kT0, " [",
                                 DescribeKey(cursor->value()), "]"));
    }
    return out;
  }

  static constexpr int64_t kT0 = 1'700'000'000'000;
};

TEST(TombstoneTimeTest, TheEventsCreationTimeElseNowAndNeverLaterThanNow) {
  ChangeEvent event;
  EXPECT_EQ(TombstoneTime(event, 5000), 5000);  // no creation time: the apply time
  event.creation_time_ms = 4000;
  EXPECT_EQ(TombstoneTime(event, 5000), 4000);
  event.creation_time_ms = 6000;  // ahead of this clock
  EXPECT_EQ(TombstoneTime(event, 5000), 5000);
}

TEST_F(TombstoneTest, ExactlyTheTombstonesPastTheHorizonAreCompacted) {
  ASSERT_TRUE(Open().ok());
  std::vector<SourceRecord> batch;
  for (int i = 0; i < 6; ++i) batch.push_back(test::Insert(key(), Key(i), At("1").Seq("100")));
  ASSERT_TRUE(Apply(std::move(batch)).ok());
  now_ms_ = kT0 + 160'000;
  // Removal times: 200 s and exactly 100 s before the clock reaches kT0 + 200 s, 1 ms less,
  // the apply time (no creation time), a creation time ahead of the clock (the apply time),
  // and one from the second source, whose 50 s horizon does not shorten the table's.
  ASSERT_TRUE(Apply({test::Remove(key(), Key(0), At("2").Seq("200").Created(kT0)),
                     test::Remove(key(), Key(1), At("3").Seq("200").Created(kT0 + 100'000)),
                     test::Remove(key(), Key(2), At("4").Seq("200").Created(kT0 + 100'001)),
                     test::Remove(key(), Key(3), At("5").Seq("200")),
                     test::Remove(key(), Key(4), At("6").Seq("200").Created(kT0 + 9'000'000)),
                     test::Remove(key(), Key(5), At("7").Seq("200").Created(kT0 + 150'000).Source(1))})
                  .ok());
  const std::vector<std::string> all = {"[S:K#0 | S:X] 0",      "[S:K#1 | S:X] 100000",
                                        "[S:K#2 | S:X] 100001", "[S:K#3 | S:X] 160000",
                                        "[S:K#4 | S:X] 160000", "[S:K#5 | S:X] 150000"};
  EXPECT_EQ(TombstoneTimes(), all);
  EXPECT_EQ(TombstoneIndex(), (std::vector<std::string>{
                                  "0 [S:K#0 | S:X]", "100000 [S:K#1 | S:X]", "100001 [S:K#2 | S:X]",
                                  "150000 [S:K#5 | S:X]", "160000 [S:K#3 | S:X]",
                                  "160000 [S:K#4 | S:X]"}));

  TombstoneCompactor compactor = Compactor();
  now_ms_ = kT0 + 99'999;  // nothing is 100 s old yet
  EXPECT_EQ(*compactor.Step(), 0u);
  EXPECT_EQ(TombstoneTimes(), all);
  EXPECT_EQ(MetricLines("cdcview_tombstones"),
            (std::vector<std::string>{"cdcview_tombstones{table=\"App\"} 6"}));

  now_ms_ = kT0 + 200'000;
  EXPECT_TRUE(compactor.Due());
  EXPECT_EQ(*compactor.Step(), 2u);
  EXPECT_EQ(TombstoneTimes(), (std::vector<std::string>{"[S:K#2 | S:X] 100001", "[S:K#3 | S:X] 160000",
                                                        "[S:K#4 | S:X] 160000", "[S:K#5 | S:X] 150000"}));
  EXPECT_EQ(TombstoneIndex(),
            (std::vector<std::string>{"100001 [S:K#2 | S:X]", "150000 [S:K#5 | S:X]",
                                      "160000 [S:K#3 | S:X]", "160000 [S:K#4 | S:X]"}));
  EXPECT_EQ(MetricLines("cdcview_tombstones"),
            (std::vector<std::string>{"cdcview_tombstones{table=\"App\"} 4"}));
  EXPECT_EQ(MetricLines("cdcview_tombstones_compacted_total"),
            (std::vector<std::string>{"cdcview_tombstones_compacted_total{table=\"App\"} 2"}));
  EXPECT_EQ(MetricLines("cdcview_tombstone_compaction_step_seconds_count"),
            (std::vector<std::string>{"cdcview_tombstone_compaction_step_seconds_count 1"}));

  // The next look is a second later.
  EXPECT_FALSE(compactor.Due());
  now_ms_ = kT0 + 200'999;
  EXPECT_EQ(*compactor.Step(), 0u);
  now_ms_ = kT0 + 201'000;
  EXPECT_EQ(*compactor.Step(), 1u);  // K#2; K#5 is kept for the table's 100 s
  now_ms_ = kT0 + 260'000;
  EXPECT_EQ(*compactor.Step(), 3u);
  EXPECT_EQ(TombstoneTimes(), std::vector<std::string>{});
  EXPECT_EQ(TombstoneIndex(), std::vector<std::string>{});
  EXPECT_EQ(MetricLines("cdcview_tombstones_compacted_total"),
            (std::vector<std::string>{"cdcview_tombstones_compacted_total{table=\"App\"} 6"}));
  EXPECT_EQ(MetricLines("cdcview_tombstones"),
            (std::vector<std::string>{"cdcview_tombstones{table=\"App\"} 0"}));
  EXPECT_EQ(Views(), ViewContents{});
}

TEST_F(TombstoneTest, AStepDropsAtMostTheConfiguredNumberAndBatchesCommitBetweenSteps) {
  config_.apply.tombstone_compaction_step = 3;
  ASSERT_TRUE(Open().ok());
  std::vector<SourceRecord> batch;
  for (int i = 0; i < 10; ++i) batch.push_back(test::Remove(key(), Key(i), At("1").Seq("100")));
  ASSERT_TRUE(Apply(std::move(batch)).ok());
  EXPECT_EQ(TombstoneIndex().size(), 10u);

  TombstoneCompactor compactor = Compactor();
  now_ms_ = kT0 + 100'000;
  EXPECT_EQ(*compactor.Step(), 3u);
  EXPECT_TRUE(compactor.Due());  // more past the horizon: the next step is due at once
  // A batch between two steps: a new tombstone, and an older change of a compacted item.
  ASSERT_TRUE(Apply({test::Remove(key(), Key(20), At("2").Seq("100")),
                     test::Insert(key(), Key(0), At("3").Seq("50"))})
                  .ok());
  EXPECT_EQ(*compactor.Step(), 3u);
  EXPECT_EQ(*compactor.Step(), 3u);
  EXPECT_EQ(*compactor.Step(), 1u);
  EXPECT_FALSE(compactor.Due());
  EXPECT_EQ(TombstoneIndex(), (std::vector<std::string>{"100000 [S:K#20 | S:X]"}));
  EXPECT_EQ(TombstoneTimes(), (std::vector<std::string>{"[S:K#20 | S:X] 100000"}));
  EXPECT_EQ(MetricLines("cdcview_tombstone_compaction_step_seconds_count"),
            (std::vector<std::string>{"cdcview_tombstone_compaction_step_seconds_count 4"}));
  // K#0's tombstone was gone: the older INSERT applied (past the horizon, the source can no
  // longer deliver one, which is what the horizon promises).
  EXPECT_EQ(StoredItems().front(), "[S:K#0 | S:X] live 50 {PK=S:K#0, SK=S:X}");
}

TEST_F(TombstoneTest, AReplayFromWithinTheHorizonIsSkippedExactlyOnce) {
  ASSERT_TRUE(Open().ok());
  Item modified = User1();
  modified["score"] = N("12");
  auto history = [&] {
    return std::vector<SourceRecord>{test::Insert(key(), User1(), At("1").Seq("100").Created(kT0)),
                                     test::Modify(key(), modified, At("2").Seq("200").Created(kT0)),
                                     test::Remove(key(), User1(), At("3").Seq("300").Created(kT0))};
  };
  ASSERT_TRUE(Apply(history()).ok());
  const std::vector<std::string> items = StoredItems();
  EXPECT_EQ(items, (std::vector<std::string>{"[S:USER#u1 | S:PROFILE] tombstone 300"}));
  const std::vector<std::string> changes = ChangeLog();

  TombstoneCompactor compactor = Compactor();
  now_ms_ = kT0 + 99'999;
  EXPECT_EQ(*compactor.Step(), 0u);
  // The source delivers the item's history again (a restart from an older position).
  ASSERT_TRUE(Apply(history()).ok());
  EXPECT_EQ(published_->Counters(0).skipped, 3u);
  EXPECT_EQ(published_->Counters(0).applied, 3u);
  EXPECT_EQ(Views(), ViewContents{});
  EXPECT_EQ(StoredItems(), items);
  EXPECT_EQ(ChangeLog(), changes);
}

TEST_F(TombstoneTest, ANewerWriteReplacesTheIndexEntryOfTheTombstoneItOverwrites) {
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(Apply({test::Remove(key(), Key(1), At("1").Seq("100"))}).ok());
  EXPECT_EQ(TombstoneIndex(), (std::vector<std::string>{"0 [S:K#1 | S:X]"}));
  now_ms_ = kT0 + 5;
  ASSERT_TRUE(Apply({test::Insert(key(), Key(1), At("2").Seq("200"))}).ok());
  EXPECT_EQ(TombstoneIndex(), std::vector<std::string>{});
  now_ms_ = kT0 + 7;
  ASSERT_TRUE(Apply({test::Remove(key(), Key(1), At("3").Seq("300"))}).ok());
  EXPECT_EQ(TombstoneIndex(), (std::vector<std::string>{"7 [S:K#1 | S:X]"}));
  // Within one batch: the entry of the tombstone stored before it goes, the last one's stays.
  now_ms_ = kT0 + 9;
  ASSERT_TRUE(Apply({test::Insert(key(), Key(1), At("4").Seq("400")),
                     test::Remove(key(), Key(1), At("5").Seq("500").Created(kT0 + 8)),
                     test::Insert(key(), Key(1), At("6").Seq("600")),
                     test::Remove(key(), Key(1), At("7").Seq("700"))})
                  .ok());
  EXPECT_EQ(TombstoneIndex(), (std::vector<std::string>{"9 [S:K#1 | S:X]"}));
  EXPECT_EQ(TombstoneTimes(), (std::vector<std::string>{"[S:K#1 | S:X] 9"}));
  // The same with the pipeline: the batch before may not have committed yet.
  now_ms_ = kT0 + 11;
  std::vector<std::vector<SourceRecord>> batches = {
      {test::Insert(key(), Key(1), At("8").Seq("800"))},
      {test::Remove(key(), Key(1), At("9").Seq("900"))},
      {test::Insert(key(), Key(1), At("10").Seq("1000")), test::Remove(key(), Key(2), At("11").Seq("1"))}};
  ASSERT_TRUE(ApplyPipelined(*applier_, std::move(batches)).ok());
  EXPECT_EQ(TombstoneIndex(), (std::vector<std::string>{"11 [S:K#2 | S:X]"}));
}

TEST_F(TombstoneTest, TombstonesStoredWithoutATimeGetTheTimeOfTheFirstOpen) {
  ASSERT_TRUE(Open().ok());
  // What a cdcviewd that kept tombstones forever left: a tombstone without a time, no index
  // entry, no meta key.
  {
    auto txn = store_->BeginWrite();
    ASSERT_TRUE(txn.ok());
    ASSERT_TRUE((*txn)->Put(store_->items("App"), catalog_->builder(0).PrimaryKey(Key(1)),
                            EncodeStoredItem(true, "100", "")).ok());
    ASSERT_TRUE((*txn)->Put(store_->items("App"), catalog_->builder(0).PrimaryKey(Key(2)),
                            EncodeStoredItem(false, "100", EncodeItem(Key(2)))).ok());
    ASSERT_TRUE((*txn)->Delete(store_->meta(), "tombstones/App/timed").ok());
    ASSERT_TRUE((*txn)->Commit().ok());
  }
  EXPECT_EQ(TombstoneTimes(), (std::vector<std::string>{"[S:K#1 | S:X] -"}));
  Close();
  now_ms_ = kT0 + 42;
  ASSERT_TRUE(Open().ok());
  EXPECT_EQ(TombstoneTimes(), (std::vector<std::string>{"[S:K#1 | S:X] 42"}));
  EXPECT_EQ(TombstoneIndex(), (std::vector<std::string>{"42 [S:K#1 | S:X]"}));
  EXPECT_EQ(Meta("tombstones/"), (std::vector<std::string>{"tombstones/App/timed=1"}));
  // Still within the horizon, a replayed older INSERT is skipped ...
  ASSERT_TRUE(Apply({test::Insert(key(), Key(1), At("1").Seq("50"))}).ok());
  EXPECT_EQ(published_->Counters(0).skipped, 1u);
  // ... and 100 s after that open it is compacted.
  TombstoneCompactor compactor = Compactor();
  now_ms_ = kT0 + 100'042;
  EXPECT_EQ(*compactor.Step(), 1u);
  EXPECT_EQ(StoredItems(), (std::vector<std::string>{"[S:K#2 | S:X] live 100 {PK=S:K#2, SK=S:X}"}));
}

TEST_F(TombstoneTest, TheWriterCompactsBetweenItsBatches) {
  config_.apply.tombstone_compaction_step = 2;
  ASSERT_TRUE(Open().ok());
  std::vector<SourceRecord> removes;
  for (int i = 0; i < 4; ++i) removes.push_back(test::Remove(key(), Key(i), At("1").Seq("100")));
  ASSERT_TRUE(Apply(std::move(removes)).ok());
  now_ms_ = kT0 + 100'000;
  std::vector<std::vector<SourceRecord>> batches = {
      {test::Insert(key(), Key(10), At("2").Seq("100"))},
      {test::Insert(key(), Key(11), At("3").Seq("100"))}};
  ASSERT_TRUE(ApplyPipelined(*applier_, std::move(batches)).ok());
  // At most 2 tombstones a step: one step after the first batch, and one more (while the
  // writer waits for the second batch, or after it) for the other two.
  EXPECT_EQ(TombstoneIndex(), std::vector<std::string>{});
  EXPECT_EQ(MetricLines("cdcview_tombstones_compacted_total"),
            (std::vector<std::string>{"cdcview_tombstones_compacted_total{table=\"App\"} 4"}));
  EXPECT_EQ(MetricLines("cdcview_tombstone_compaction_step_seconds_count"),
            (std::vector<std::string>{"cdcview_tombstone_compaction_step_seconds_count 2"}));
  EXPECT_EQ(Entries("ByMember").size(), 2u);
}

TEST_F(TombstoneTest, WithWriteBackAStepIsALayerThatTheFlushWritesToLmdb) {
  config_.storage.flush_interval_ms = 60000;  // no flush but the ones asked for
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(Apply({test::Remove(key(), Key(1), At("1").Seq("100")),
                     test::Remove(key(), Key(2), At("2").Seq("100").Created(kT0 - 1))})
                  .ok());
  TombstoneCompactor compactor = Compactor();
  now_ms_ = kT0 + 99'999;
  EXPECT_EQ(*compactor.Step(), 1u);
  EXPECT_EQ(TombstoneTimes(), (std::vector<std::string>{"[S:K#1 | S:X] 0"}));  // through the layers
  EXPECT_EQ(TombstoneIndex(), (std::vector<std::string>{"0 [S:K#1 | S:X]"}));
  ASSERT_TRUE(store_->Flush().ok());
  ExpectLmdbAloneHolds({}, {"[S:K#1 | S:X] tombstone 100"}, {"pos/sample/=2"});
  EXPECT_EQ(TombstoneIndex(), (std::vector<std::string>{"0 [S:K#1 | S:X]"}));
}

}  // namespace
}  // namespace cdcview
