// The partition each stored item records, and Applier::ApplyAssignment: a cluster member that
// starts with another assignment than its store holds drops the items (with their view entries,
// aggregate contributions and tombstones) and positions of the partitions it no longer owns.
// Each resized store is compared whole with a store that only ever applied the kept partitions.
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "daemon/apply/applier.h"
#include "daemon/config/config.h"
#include "daemon/log/log.h"
#include "daemon/metrics/assignment_probe.h"
#include "daemon/metrics/metrics.h"
#include "daemon/state/catalog.h"
#include "daemon/store/change_log.h"
#include "daemon/store/meta_keys.h"
#include "daemon/store/store.h"
#include "daemon/store/stored_item.h"
#include "gtest/gtest.h"
#include "index_builders/aggregate.h"
#include "index_builders/number.h"
#include "tests/fakes/fake_dead_letter_sink.h"
#include "tests/fakes/records.h"
#include "tests/fakes/temp_dir.h"

namespace cdcview {
namespace {

using test::N;
using test::S;

constexpr char kYaml[] = R"(
sources:
  - name: orders
    table: T
    kafka: { brokers: "127.0.0.1:9", topics: [orders], group: g }
tables:
  - name: T
    key: { partition: PK }
    views:
      - name: ByGroup
        partition_key: { attribute: grp, type: S }
        sort_key: { attribute: amount, type: N }
        projection: ALL
    aggregates:
      - name: PerGroup
        group_by: { attribute: grp }
        measures: [count, {sum: amount}, {min: amount}, {max: amount}]
)";

constexpr int64_t kNowMs = 1'700'000'000'000;

ClusterConfig Cluster(uint32_t members, uint32_t ordinal) {
  ClusterConfig cluster;
  cluster.members = members;
  cluster.ordinal = ordinal;
  return cluster;
}

// Per partition p of topic "orders": two items that stay, in a group of their own and in one
// every partition shares, and one that is removed again (a tombstone).
std::vector<std::vector<SourceRecord>> Events(const TableKeySpec& key, const std::set<int>& partitions) {
  std::vector<SourceRecord> inserts, removes;
  for (int p : partitions) {
    const std::string partition = absl::StrCat("orders/", p);
    auto at = [&](int64_t offset) {
      return test::At(absl::StrCat(offset + 1)).Partition(partition).Locator(absl::StrCat(partition, "@", offset));
    };
    const Item own{{"PK", S(absl::StrCat("p", p, "-own"))}, {"grp", S(absl::StrCat("G", p))},
                   {"amount", N(absl::StrCat(p * 10 + 1))}};
    const Item shared{{"PK", S(absl::StrCat("p", p, "-shared"))}, {"grp", S("ALL")},
                      {"amount", N(absl::StrCat(p, ".5"))}};
    const Item gone{{"PK", S(absl::StrCat("p", p, "-gone"))}, {"grp", S("ALL")}, {"amount", N("1000")}};
    inserts.push_back(test::Insert(key, own, at(0)));
    inserts.push_back(test::Insert(key, shared, at(1)));
    inserts.push_back(test::Insert(key, gone, at(2)));
    removes.push_back(test::Remove(key, gone, at(3)));
  }
  for (std::vector<SourceRecord>* batch : {&inserts, &removes}) {
    for (SourceRecord& r : *batch) r.offset = std::stoll(r.next_position) - 1;
  }
  return {inserts, removes};
}

class AssignmentChangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetLogLevel(LogLevel::kWarning);
    auto config = ParseConfig(kYaml, "test.yaml");
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = *std::move(config);
    config_.storage.map_size = 16 << 20;
  }
  void TearDown() override { Close(); }

  // Opens the store in `name` as a start does: Recover, then the views' first build.
  void Open(const std::string& name = "store") {
    Close();
    config_.storage.path = dir_.Sub(name);
    auto store = Store::Open(config_.storage, config_.tables);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    catalog_ = std::make_unique<Catalog>(config_, store_->max_key_size());
    metrics_ = MetricsRegistry::Create();
    probe_ = std::make_unique<AssignmentProbe>(*metrics_);
    published_ = std::make_unique<PublishedState>(*catalog_, [] { return kNowMs; });
    applier_ = std::make_unique<Applier>(*catalog_, store_.get(), nullptr,
                                         std::vector<DeadLetterSink*>{&sink_}, published_.get());
    ASSERT_TRUE(applier_->Recover().ok());
  }

  // Open, then ApplyAssignment for `cluster` (and the views' first build).
  absl::StatusOr<Applier::AssignmentChange> Start(const ClusterConfig& cluster,
                                                  Applier::AssignmentOptions options = {},
                                                  const std::string& name = "store") {
    Open(name);
    options.probe = probe_.get();
    auto change = applier_->ApplyAssignment(cluster, options);
    if (change.ok()) {
      if (absl::Status s = applier_->RebuildViews(); !s.ok()) return s;
    }
    return change;
  }

  void Close() {
    applier_.reset();
    published_.reset();
    probe_.reset();
    metrics_.reset();
    catalog_.reset();
    store_.reset();
  }

  void Apply(const std::set<int>& partitions) {
    for (std::vector<SourceRecord>& batch : Events(config_.tables[0].key, partitions)) {
      ASSERT_TRUE(applier_->ApplyBatch(&batch).ok());
    }
  }

  // Every database the table's items reach, described: items with the partition that wrote
  // them, the tombstone index, the view, the aggregate's groups and min/max multisets, the
  // stored positions.
  std::map<std::string, std::vector<std::string>> Dump() const {
    std::map<std::string, std::vector<std::string>> out;
    auto txn = store_->BeginRead();
    EXPECT_TRUE(txn.ok()) << txn.status();
    if (!txn.ok()) return out;
    std::map<uint32_t, std::string> partitions;
    auto walk = [&](MDB_dbi dbi, const std::function<std::string(std::string_view, std::string_view)>& describe,
                    const std::string& name) {
      out[name];  // present even when empty
      auto cursor = (*txn)->OpenCursor(dbi);
      for (bool ok = cursor->SeekFirst(); ok; ok = cursor->Next()) {
        out[name].push_back(describe(cursor->key(), cursor->value()));
      }
      EXPECT_TRUE(cursor->status().ok()) << cursor->status();
    };
    auto meta = (*txn)->OpenCursor(store_->meta());
    for (bool ok = meta->Seek(kPartitionIdPrefix); ok && meta->key().starts_with(kPartitionIdPrefix);
         ok = meta->Next()) {
      partitions[std::stoul(std::string(meta->value()))] =
          std::string(meta->key().substr(kPartitionIdPrefix.size()));
    }
    for (bool ok = meta->Seek(kPositionPrefix); ok && meta->key().starts_with(kPositionPrefix);
         ok = meta->Next()) {
      out["positions"].push_back(std::string(meta->key()) + "=" + std::string(meta->value()));
    }
    walk(store_->items("T"), [&](std::string_view key, std::string_view value) {
      absl::StatusOr<StoredItem> item = DecodeStoredItem(value);
      if (!item.ok()) return item.status().ToString();
      const std::string from = partitions.count(item->partition) ? partitions[item->partition] : "?";
      return absl::StrCat("[", test::DescribeKey(key), "] ",
                          item->tombstone ? "tombstone" : test::DescribeValue(item->image), " from ", from);
    }, "items");
    walk(store_->tombstones("T"), [](std::string_view key, std::string_view value) {
      return absl::StrCat(TombstoneIndexTime(key) - kNowMs, " ", test::DescribeKey(value));
    }, "tombstones");
    walk(store_->view("ByGroup"), [](std::string_view key, std::string_view value) {
      return test::DescribeEntry(key, value);
    }, "view ByGroup");
    const AggregateSpec& spec = config_.tables[0].aggregates[0];
    walk(store_->aggregate("PerGroup"), [&](std::string_view key, std::string_view value) {
      absl::StatusOr<AggregateState> state = DecodeAggregateState(value, spec.measures.size());
      if (!state.ok()) return state.status().ToString();
      std::string text = absl::StrCat(DescribeGroupKey(spec, key), ": ", state->members, " members");
      for (const AggregateState::Measure& m : state->measures) {
        absl::StrAppend(&text, ", ", m.count, "/", CanonicalText(m.sum));
      }
      return text;
    }, "agg PerGroup");
    walk(store_->aggregate_extremes("PerGroup"), [](std::string_view key, std::string_view value) {
      return absl::CHexEscape(std::string(key)) + "=" + absl::CHexEscape(std::string(value));
    }, "aggm PerGroup");
    return out;
  }

  // What a member that only ever read `partitions` holds: a store of its own in `name`.
  std::map<std::string, std::vector<std::string>> Reference(const std::set<int>& partitions) {
    Open("reference-" + absl::StrCat(partitions.size(), "-", *partitions.begin()));
    EXPECT_TRUE(applier_->RebuildViews().ok());
    Apply(partitions);
    std::map<std::string, std::vector<std::string>> dump = Dump();
    Close();
    return dump;
  }

  std::string Meta(std::string_view key) const {
    auto txn = store_->BeginRead();
    EXPECT_TRUE(txn.ok());
    auto value = (*txn)->Get(store_->meta(), key);
    EXPECT_TRUE(value.ok());
    return value.ok() && *value ? std::string(**value) : "<none>";
  }

  // "<metric> <value>" for the two counters.
  std::vector<std::string> Counters() const {
    std::vector<std::string> out;
    std::istringstream text(metrics_->Render());
    for (std::string line; std::getline(text, line);) {
      if (line.starts_with("cdcview_cluster_")) out.push_back(line);
    }
    return out;
  }

  // "<sequence> del <view> [key] cause <source>/<partition>@<position>" of every delete in
  // the change log.
  std::vector<std::string> LoggedDeletes() const {
    std::vector<std::string> out;
    auto txn = store_->BeginRead();
    EXPECT_TRUE(txn.ok());
    ChangeLogReader reader(**txn, store_->changes());
    absl::StatusOr<bool> ok = reader.Seek(0);
    for (; ok.ok() && *ok; ok = reader.Next()) {
      const ChangeView& c = reader.change();
      if (c.op != ChangeOp::kDelete) continue;
      out.push_back(absl::StrCat(std::string(c.view), " [", test::DescribeKey(c.key), "] cause ",
                                 std::string(c.source), "/", std::string(c.partition), "@",
                                 std::string(c.position)));
    }
    EXPECT_TRUE(ok.ok()) << ok.status();
    return out;
  }

  test::TempDir dir_;
  Config config_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<MetricsRegistry> metrics_;
  std::unique_ptr<AssignmentProbe> probe_;
  FakeDeadLetterSink sink_;
  std::unique_ptr<PublishedState> published_;
  std::unique_ptr<Applier> applier_;
};

TEST_F(AssignmentChangeTest, ItemsRecordThePartitionWhoseEventLastWroteThem) {
  Open();
  ASSERT_TRUE(applier_->RebuildViews().ok());
  const TableKeySpec& key = config_.tables[0].key;
  std::vector<SourceRecord> batch = {
      test::Insert(key, {{"PK", S("a")}, {"grp", S("G")}}, test::At("1").Partition("orders/1")),
      test::Insert(key, {{"PK", S("b")}, {"grp", S("G")}}, test::At("1").Partition("orders/4")),
      test::Modify(key, {{"PK", S("a")}, {"grp", S("H")}}, test::At("2").Partition("orders/4"))};
  ASSERT_TRUE(applier_->ApplyBatch(&batch).ok());
  EXPECT_EQ(Dump()["items"], (std::vector<std::string>{"[S:a] {PK=S:a, grp=S:H} from orders/orders/4",
                                                       "[S:b] {PK=S:b, grp=S:G} from orders/orders/4"}));
  // Ids survive a restart: partition 1 keeps its id and a new partition takes the next one.
  Open();
  batch = {test::Insert(key, {{"PK", S("c")}, {"grp", S("G")}}, test::At("2").Partition("orders/1")),
           test::Remove(key, {{"PK", S("b")}}, test::At("1").Partition("orders/0").Seq("5"))};
  ASSERT_TRUE(applier_->ApplyBatch(&batch).ok());
  EXPECT_EQ(Dump()["items"], (std::vector<std::string>{"[S:a] {PK=S:a, grp=S:H} from orders/orders/4",
                                                       "[S:b] tombstone from orders/orders/0",
                                                       "[S:c] {PK=S:c, grp=S:G} from orders/orders/1"}));
  EXPECT_EQ(Meta("partition/orders/orders/1"), "1");
  EXPECT_EQ(Meta("partition/orders/orders/4"), "2");
  EXPECT_EQ(Meta("partition/orders/orders/0"), "3");
}

TEST_F(AssignmentChangeTest, MemberZeroOfTwoBecomingMemberZeroOfThreeDropsPartitionsTwoAndFour) {
  const auto reference = Reference({0});
  auto change = Start(Cluster(2, 0));
  ASSERT_TRUE(change.ok()) << change.status();
  EXPECT_FALSE(change->changed);  // a new store
  Apply({0, 2, 4});
  EXPECT_EQ(Meta(kAssignmentKey), "2/0");

  change = Start(Cluster(3, 0));
  ASSERT_TRUE(change.ok()) << change.status();
  EXPECT_TRUE(change->changed);
  EXPECT_EQ(change->from, "member 0 of 2");
  EXPECT_EQ(change->to, "member 0 of 3");
  EXPECT_EQ(change->items_dropped, 6u);  // two live items and a tombstone per partition
  EXPECT_EQ(change->positions_dropped,
            (std::vector<std::string>{"orders/orders/2", "orders/orders/4"}));
  EXPECT_EQ(Meta(kAssignmentKey), "3/0");
  const auto dump = Dump();
  EXPECT_EQ(dump, reference);
  EXPECT_EQ(dump.at("positions"), (std::vector<std::string>{"pos/orders/orders/0=4"}));
  EXPECT_EQ(dump.at("view ByGroup"),
            (std::vector<std::string>{"[S:ALL | N:0.5 | S:p0-shared] {PK=S:p0-shared, amount=N:0.5, grp=S:ALL}",
                                      "[S:G0 | N:1 | S:p0-own] {PK=S:p0-own, amount=N:1, grp=S:G0}"}));
  EXPECT_EQ(dump.at("agg PerGroup"),
            (std::vector<std::string>{"group \"ALL\": 1 members, 0/0, 1/0.5, 1/0, 1/0",
                                      "group \"G0\": 1 members, 0/0, 1/1, 1/0, 1/0"}));
  EXPECT_EQ(Counters(), (std::vector<std::string>{"cdcview_cluster_assignment_changes_total 1",
                                                  "cdcview_cluster_items_dropped_total 6"}));
  // Watchers of the member see its entries go, caused by their partition.
  EXPECT_EQ(LoggedDeletes(),
            (std::vector<std::string>{"ByGroup [S:ALL | N:1000 | S:p0-gone] cause orders/orders/0@4",
                                      "ByGroup [S:ALL | N:1000 | S:p2-gone] cause orders/orders/2@4",
                                      "ByGroup [S:ALL | N:1000 | S:p4-gone] cause orders/orders/4@4",
                                      "ByGroup [S:G2 | N:21 | S:p2-own] cause orders/orders/2@",
                                      "ByGroup [S:ALL | N:2.5 | S:p2-shared] cause orders/orders/2@",
                                      "ByGroup [S:G4 | N:41 | S:p4-own] cause orders/orders/4@",
                                      "ByGroup [S:ALL | N:4.5 | S:p4-shared] cause orders/orders/4@"}));

  // A second start with the same assignment changes nothing.
  change = Start(Cluster(3, 0));
  ASSERT_TRUE(change.ok()) << change.status();
  EXPECT_FALSE(change->changed);
  EXPECT_EQ(change->items_dropped, 0u);
  EXPECT_EQ(Dump(), reference);
  EXPECT_EQ(Counters(), (std::vector<std::string>{"cdcview_cluster_assignment_changes_total 0",
                                                  "cdcview_cluster_items_dropped_total 0"}));
}

TEST_F(AssignmentChangeTest, AStandaloneBecomingMemberZeroOfThreeKeepsPartitionsZeroAndThree) {
  const auto reference = Reference({0, 3});
  ASSERT_TRUE(Start(ClusterConfig{}).ok());
  Apply({0, 1, 2, 3, 4, 5});
  auto change = Start(Cluster(3, 0));
  ASSERT_TRUE(change.ok()) << change.status();
  EXPECT_EQ(change->from, "standalone");
  EXPECT_EQ(change->items_dropped, 12u);
  EXPECT_EQ(Dump(), reference);
  EXPECT_EQ(Dump().at("positions"),
            (std::vector<std::string>{"pos/orders/orders/0=4", "pos/orders/orders/3=4"}));
}

// A kill between two batches of drops: the assignment is not stored yet, so the next start
// walks again and ends where an uninterrupted change would have.
TEST_F(AssignmentChangeTest, AChangeStoppedAfterOneBatchFinishesOnTheNextStart) {
  const auto reference = Reference({0, 3});
  ASSERT_TRUE(Start(ClusterConfig{}).ok());
  Apply({0, 1, 2, 3, 4, 5});
  Applier::AssignmentOptions options;
  options.batch_items = 2;
  int batches = 0;
  options.after_batch = [&batches] { return ++batches < 1; };
  auto change = Start(Cluster(3, 0), options);
  ASSERT_FALSE(change.ok());
  EXPECT_EQ(change.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(std::string(change.status().message()),
            "stopped while dropping the partitions this member no longer owns");
  EXPECT_EQ(batches, 1);
  EXPECT_EQ(Meta(kAssignmentKey), "1/0");  // still the standalone's
  EXPECT_EQ(Dump().at("items").size(), 18u - 2u);
  // The positions of what it drops went first: whatever it starts as next reads those
  // partitions again from their start rather than keep a position over dropped items.
  EXPECT_EQ(Dump().at("positions").size(), 2u);
  EXPECT_EQ(Counters(), (std::vector<std::string>{"cdcview_cluster_assignment_changes_total 0",
                                                  "cdcview_cluster_items_dropped_total 2"}));

  change = Start(Cluster(3, 0));
  ASSERT_TRUE(change.ok()) << change.status();
  EXPECT_TRUE(change->changed);
  EXPECT_EQ(change->items_dropped, 10u);
  EXPECT_EQ(Dump(), reference);
  EXPECT_EQ(Meta(kAssignmentKey), "3/0");
}

// A drop cut short, then the old assignment again (a resize rolled back): the partitions whose
// items were partly dropped have no position, so they are read again from their start.
TEST_F(AssignmentChangeTest, AChangeCutShortThenRolledBackLeavesNoPositionOverDroppedItems) {
  ASSERT_TRUE(Start(ClusterConfig{}).ok());
  Apply({0, 1, 2, 3, 4, 5});
  Applier::AssignmentOptions options;
  options.batch_items = 2;
  options.after_batch = [] { return false; };
  ASSERT_EQ(Start(Cluster(3, 0), options).status().code(), absl::StatusCode::kCancelled);
  auto change = Start(ClusterConfig{});
  ASSERT_TRUE(change.ok()) << change.status();
  EXPECT_FALSE(change->changed);  // the store still says standalone
  EXPECT_EQ(Meta(kAssignmentKey), "1/0");
  EXPECT_EQ(Dump().at("positions").size(), 2u);  // partitions 0 and 3 only
}

// Standalone again: nothing goes, and the partitions it never read have no position (the Kafka
// source reads them from the beginning).
TEST_F(AssignmentChangeTest, MemberOfThreeBecomingStandaloneDropsNothing) {
  ASSERT_TRUE(Start(Cluster(3, 1)).ok());
  Apply({1, 4});
  const auto before = Dump();
  auto change = Start(ClusterConfig{});
  ASSERT_TRUE(change.ok()) << change.status();
  EXPECT_TRUE(change->changed);
  EXPECT_EQ(change->to, "standalone");
  EXPECT_EQ(change->items_dropped, 0u);
  EXPECT_TRUE(change->positions_dropped.empty());
  EXPECT_EQ(Dump(), before);
  EXPECT_EQ(Meta(kAssignmentKey), "1/0");
  EXPECT_EQ(Counters(), (std::vector<std::string>{"cdcview_cluster_assignment_changes_total 1",
                                                  "cdcview_cluster_items_dropped_total 0"}));
  // And member 1 of 2 from there keeps 1 (and would read 3 and 5), drops 4.
  auto again = Start(Cluster(2, 1));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->items_dropped, 3u);
  EXPECT_EQ(again->positions_dropped, (std::vector<std::string>{"orders/orders/4"}));
}

// A store written before items recorded their partition cannot tell whose its items are: they
// go, with every position of their table's sources, so the member reads its partitions again
// from the beginning.
TEST_F(AssignmentChangeTest, ItemsWithoutAPartitionAreDroppedAndTheirSourcesReadAgain) {
  ASSERT_TRUE(Start(ClusterConfig{}).ok());
  Apply({0, 1});
  {
    auto txn = store_->BeginWrite();
    ASSERT_TRUE(txn.ok());
    std::vector<std::pair<std::string, std::string>> legacy;
    auto cursor = (*txn)->OpenCursor(store_->items("T"));
    for (bool ok = cursor->SeekFirst(); ok; ok = cursor->Next()) {
      absl::StatusOr<StoredItem> item = DecodeStoredItem(cursor->value());
      ASSERT_TRUE(item.ok());
      legacy.emplace_back(cursor->key(),
                          item->tombstone ? EncodeTombstone(item->sequence_number, item->removed_ms)
                                          : EncodeStoredItem(false, item->sequence_number, item->image));
    }
    cursor.reset();
    for (const auto& [key, value] : legacy) ASSERT_TRUE((*txn)->Put(store_->items("T"), key, value).ok());
    ASSERT_TRUE((*txn)->Commit().ok());
  }
  auto change = Start(Cluster(3, 0));
  ASSERT_TRUE(change.ok()) << change.status();
  EXPECT_EQ(change->items_dropped, 6u);
  EXPECT_EQ(change->positions_dropped, (std::vector<std::string>{"orders/orders/0", "orders/orders/1"}));
  const auto dump = Dump();
  EXPECT_TRUE(dump.at("items").empty());
  EXPECT_TRUE(dump.at("tombstones").empty());
  EXPECT_TRUE(dump.at("view ByGroup").empty());
  EXPECT_TRUE(dump.at("agg PerGroup").empty());
  EXPECT_TRUE(dump.at("aggm PerGroup").empty());
  EXPECT_EQ(dump.count("positions"), 0u);
}

}  // namespace
}  // namespace cdcview
