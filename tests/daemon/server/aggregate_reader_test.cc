// Aggregates end to end below gRPC: the writer maintains them (Applier), ViewReader answers
// GetAggregate / ListAggregates. Exact contents after fixed scenarios, and after random
// workloads against a brute-force recomputation from the items store.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "daemon/apply/applier.h"
#include "daemon/config/config.h"
#include "daemon/log/log.h"
#include "daemon/metrics/metrics.h"
#include "daemon/server/view_reader.h"
#include "daemon/state/catalog.h"
#include "daemon/store/store.h"
#include "daemon/store/stored_item.h"
#include "gtest/gtest.h"
#include "index_builders/item_codec.h"
#include "index_builders/key_codec.h"
#include "index_builders/number.h"
#include "tests/fakes/fake_dead_letter_sink.h"
#include "tests/fakes/records.h"
#include "tests/fakes/temp_dir.h"

namespace cdcview {
namespace {

using test::At;
using test::N;
using test::S;
using Strings = std::vector<std::string>;

// TOTALS_FILTER lets a test change the `totals` definition (and so force a rebuild).
constexpr char kConfigYaml[] = R"(
sources:
  - name: s
    table: App
    file: { path: unused.ndjson }
tables:
  - name: App
    key: { partition: PK, sort: SK }
    aggregates:
      - name: totals
        filter: TOTALS_FILTER
        group_by: { attribute: status }
        measures: [count, {sum: total}, {min: total}, {max: total}, {avg: total}]
      - name: likes
        filter: { attribute: SK, equals: COUNTER }
        group_by: { attribute: PK }
        strip_shard_suffix: "#{shard}"
        measures: [count, {sum: count}]
      - name: votes
        group_by: { template: "{GSI1PK}" }
        strip_shard_suffix: "#{shard}"
        measures: [count]
)";
constexpr char kOrdersOnly[] = "{ attribute: type, equals: order }";

std::string Value(const v1::AttributeValue& v) {
  switch (v.value_case()) {
    case v1::AttributeValue::kS: return v.s();
    case v1::AttributeValue::kN: return v.n();
    case v1::AttributeValue::VALUE_NOT_SET: return "unset";
    default: return "?";
  }
}

template <typename Measures>
std::string DescribeMeasures(const Measures& measures) {
  Strings parts;
  for (const v1::MeasureValue& m : measures) {
    parts.push_back(absl::StrCat(m.name(), "=", m.has_value() ? Value(m.value()) : "unset"));
  }
  return absl::StrJoin(parts, " ");
}

// "GROUP members=N count=.. sum(total)=.. ..." and one "  SHARD ..." line per shard.
Strings Describe(const v1::AggregateGroup& g) {
  Strings lines = {absl::StrCat(Value(g.group()), " members=", g.members(), " ",
                                DescribeMeasures(g.measures()))};
  for (const auto& shard : g.shards()) {
    lines.push_back(absl::StrCat("  ", Value(shard.group()), " members=", shard.members(), " ",
                                 DescribeMeasures(shard.measures())));
  }
  return lines;
}

class AggregateReaderTest : public ::testing::Test {
 protected:
  void SetUp() override { SetLogLevel(LogLevel::kWarning); }
  void TearDown() override { Close(); }

  void Open(const std::string& totals_filter = kOrdersOnly, bool rebuild = true) {
    absl::StatusOr<Config> config =
        ParseConfig(absl::StrReplaceAll(kConfigYaml, {{"TOTALS_FILTER", totals_filter}}), "test.yaml");
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = *std::move(config);
    config_.storage.path = dir_.Sub("store");
    config_.storage.map_size = 64 << 20;
    auto store = Store::Open(config_.storage, config_.tables);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    catalog_ = std::make_unique<Catalog>(config_, store_->max_key_size());
    auto metrics = MetricsRegistry::Start("");
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    metrics_ = *std::move(metrics);
    probe_ = std::make_unique<ApplyProbe>(*metrics_, config_);
    published_ = std::make_unique<PublishedState>(*catalog_, [] { return 0; });
    applier_ = std::make_unique<Applier>(*catalog_, store_.get(), probe_.get(),
                                         std::vector<DeadLetterSink*>{&sink_}, published_.get());
    reader_ = std::make_unique<ViewReader>(*catalog_, *store_, *published_);
    ASSERT_TRUE(applier_->Recover().ok());
    if (rebuild) {
      ASSERT_TRUE(applier_->RebuildViews().ok());
    }
  }

  void Close() {
    reader_.reset();
    applier_.reset();
    published_.reset();
    probe_.reset();
    metrics_.reset();
    catalog_.reset();
    store_.reset();
  }

  const TableKeySpec& key() const { return config_.tables[0].key; }

  // The exposition lines of metric `name` (without HELP/TYPE).
  Strings MetricLines(const std::string& name) const {
    Strings lines;
    for (absl::string_view line : absl::StrSplit(metrics_->Render(), '\n')) {
      if (absl::StartsWith(line, name + "{")) lines.emplace_back(line);
    }
    return lines;
  }

  void Apply(std::vector<SourceRecord> batch) {
    absl::Status s = applier_->ApplyBatch(&batch);
    ASSERT_TRUE(s.ok()) << s;
  }
  SourceRecord Put(const Item& item) { return test::Insert(key(), item, Next()); }
  SourceRecord Delete(const Item& item) { return test::Remove(key(), item, Next()); }
  At Next() {
    ++position_;
    return At(absl::StrCat(position_)).Seq(absl::StrCat(100000 + position_));
  }

  absl::StatusOr<Strings> Get(const std::string& aggregate, const std::string& group) {
    v1::GetAggregateRequest request;
    request.set_aggregate(aggregate);
    request.mutable_group()->set_s(group);
    auto response = reader_->GetAggregate(request);
    if (!response.ok()) return response.status();
    return Describe(*response);
  }

  // Every group, page by page (`page` groups per page), checking page shapes.
  Strings List(const std::string& aggregate, uint32_t page = 0, const std::string& prefix = "") {
    v1::ListAggregatesRequest request;
    request.set_aggregate(aggregate);
    request.set_limit(page);
    if (!prefix.empty()) request.mutable_prefix()->set_s(prefix);
    Strings all;
    for (int pages = 0; pages < 1000; ++pages) {
      auto response = reader_->ListAggregates(request);
      EXPECT_TRUE(response.ok()) << response.status();
      if (!response.ok()) return all;
      for (const v1::AggregateGroup& g : response->groups()) {
        EXPECT_FALSE(g.has_applied());
        Strings lines = Describe(g);
        all.insert(all.end(), lines.begin(), lines.end());
      }
      if (response->next_page_token().empty()) return all;
      EXPECT_EQ(static_cast<uint32_t>(response->groups_size()), page) << "a page with a token is full";
      request.set_page_token(response->next_page_token());
    }
    ADD_FAILURE() << "too many pages";
    return all;
  }

  // Raw contents of agg/<name> and aggm/<name>, to compare states byte for byte.
  Strings Dump(const std::string& aggregate) const {
    Strings out;
    auto txn = store_->BeginRead();
    for (MDB_dbi dbi : {store_->aggregate(aggregate), store_->aggregate_extremes(aggregate)}) {
      auto cursor = (*txn)->OpenCursor(dbi);
      for (bool ok = cursor->SeekFirst(); ok; ok = cursor->Next()) {
        out.push_back(absl::StrCat(absl::CHexEscape(std::string(cursor->key())), " -> ",
                                   absl::CHexEscape(std::string(cursor->value()))));
      }
      out.push_back("--");
    }
    return out;
  }

  // Brute force: the `totals` groups recomputed from every live item in items/App.
  Strings ExpectedTotals(bool orders_only = true) const {
    struct Group {
      uint64_t members = 0, numbers = 0;
      Decimal sum;
      std::optional<Decimal> min, max;
    };
    std::map<std::string, Group> groups;
    auto txn = store_->BeginRead();
    auto cursor = (*txn)->OpenCursor(store_->items("App"));
    for (bool ok = cursor->SeekFirst(); ok; ok = cursor->Next()) {
      auto stored = DecodeStoredItem(cursor->value());
      if (stored->tombstone) continue;
      Item item = *DecodeItem(stored->image);
      auto type = item.find("type");
      if (orders_only && (type == item.end() || type->second != S("order"))) continue;
      auto status = item.find("status");
      if (status == item.end() || status->second.type() != AttrType::kS) continue;
      Group& g = groups[status->second.scalar()];
      ++g.members;
      auto total = item.find("total");
      if (total == item.end() || total->second.type() != AttrType::kN) continue;
      Decimal d = *ParseDecimal(total->second.scalar());
      ++g.numbers;
      g.sum = AddDecimal(g.sum, d);
      if (!g.min || CompareDecimal(d, *g.min) < 0) g.min = d;
      if (!g.max || CompareDecimal(d, *g.max) > 0) g.max = d;
    }
    Strings out;
    for (const auto& [name, g] : groups) {
      auto text = [](const std::optional<Decimal>& d) { return d ? CanonicalText(*d) : "unset"; };
      out.push_back(absl::StrCat(
          name, " members=", g.members, " count=", g.members, " sum(total)=",
          g.numbers ? CanonicalText(g.sum) : "unset", " min(total)=", text(g.min),
          " max(total)=", text(g.max),
          " avg(total)=", g.numbers ? CanonicalText(DivideDecimal(g.sum, g.numbers)) : "unset"));
    }
    return out;
  }

  Config config_;
  test::TempDir dir_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<MetricsRegistry> metrics_;
  std::unique_ptr<ApplyProbe> probe_;
  std::unique_ptr<PublishedState> published_;
  std::unique_ptr<Applier> applier_;
  std::unique_ptr<ViewReader> reader_;
  FakeDeadLetterSink sink_;
  int position_ = 0;
};

Item Order(const std::string& id, const std::string& status, std::optional<std::string> total) {
  Item item{{"PK", S("CUST#1")}, {"SK", S("ORDER#" + id)}, {"type", S("order")}, {"status", S(status)}};
  if (total) item["total"] = N(*total);
  return item;
}

TEST_F(AggregateReaderTest, OrderTotalsPerStatusAreExact) {
  Open();
  Apply({Put(Order("1", "OPEN", "0.1")), Put(Order("2", "OPEN", "0.2")),
         Put(Order("3", "SHIPPED", "99999999999999999999999999999999999999")),
         Put(Order("4", "SHIPPED", "1")), Put(Order("5", "OPEN", std::nullopt)),
         // Not an order: filtered out.
         Put({{"PK", S("USER#1")}, {"SK", S("PROFILE")}, {"status", S("OPEN")}, {"total", N("5")}})});
  EXPECT_EQ(*Get("totals", "OPEN"),
            Strings{"OPEN members=3 count=3 sum(total)=0.3 min(total)=0.1 max(total)=0.2 "
                    "avg(total)=0.15"});
  // The sum outgrows 38 digits and stays exact; the average is rounded to 38 digits.
  EXPECT_EQ(List("totals"),
            (Strings{"OPEN members=3 count=3 sum(total)=0.3 min(total)=0.1 max(total)=0.2 avg(total)=0.15",
                     "SHIPPED members=2 count=2 sum(total)=100000000000000000000000000000000000000 "
                     "min(total)=1 max(total)=99999999999999999999999999999999999999 "
                     "avg(total)=50000000000000000000000000000000000000"}));
  EXPECT_EQ(List("totals"), ExpectedTotals());
}

TEST_F(AggregateReaderTest, MinAndMaxStayRightWhenTheCurrentExtremeIsRemoved) {
  Open();
  Apply({Put(Order("1", "OPEN", "5")), Put(Order("2", "OPEN", "-3")), Put(Order("3", "OPEN", "12")),
         Put(Order("4", "OPEN", "12"))});
  EXPECT_EQ(*Get("totals", "OPEN"),
            Strings{"OPEN members=4 count=4 sum(total)=26 min(total)=-3 max(total)=12 avg(total)=6.5"});
  Apply({Delete(Order("2", "OPEN", "-3")), Delete(Order("3", "OPEN", "12"))});
  // 12 was there twice: one copy is left.
  EXPECT_EQ(*Get("totals", "OPEN"),
            Strings{"OPEN members=2 count=2 sum(total)=17 min(total)=5 max(total)=12 avg(total)=8.5"});
  // Moving the max to another group and lowering the min by an update.
  Apply({Put(Order("4", "SHIPPED", "12")), Put(Order("1", "OPEN", "4.99"))});
  EXPECT_EQ(*Get("totals", "OPEN"),
            Strings{"OPEN members=1 count=1 sum(total)=4.99 min(total)=4.99 max(total)=4.99 "
                    "avg(total)=4.99"});
  EXPECT_EQ(List("totals"), ExpectedTotals());
}

TEST_F(AggregateReaderTest, GroupsWithoutMembersDisappear) {
  Open();
  Apply({Put(Order("1", "OPEN", "5")), Put(Order("2", "CLOSED", "1"))});
  Apply({Delete(Order("1", "OPEN", "5"))});
  EXPECT_EQ(List("totals"),
            Strings{"CLOSED members=1 count=1 sum(total)=1 min(total)=1 max(total)=1 avg(total)=1"});
  // No record of OPEN is left, in either database.
  Apply({Delete(Order("2", "CLOSED", "1"))});
  EXPECT_EQ(Dump("totals"), (Strings{"--", "--"}));
  EXPECT_EQ(*Get("totals", "OPEN"),
            Strings{"OPEN members=0 count=0 sum(total)=unset min(total)=unset max(total)=unset "
                    "avg(total)=unset"});
  EXPECT_EQ(List("totals"), Strings{});
}

TEST_F(AggregateReaderTest, ShardedCounterMergesIntoOneGroupWithABreakdown) {
  Open();
  std::vector<SourceRecord> batch;
  const char* counts[] = {"10", "0", "7.5", "2"};
  for (int shard = 0; shard < 4; ++shard) {
    batch.push_back(Put({{"PK", S(absl::StrCat("COUNTER#likes#", shard))}, {"SK", S("COUNTER")},
                         {"count", N(counts[shard])}}));
  }
  batch.push_back(Put({{"PK", S("COUNTER#views#0")}, {"SK", S("COUNTER")}, {"count", N("1")}}));
  Apply(std::move(batch));
  EXPECT_EQ(*Get("likes", "COUNTER#likes"),
            (Strings{"COUNTER#likes members=4 count=4 sum(count)=19.5",
                     "  COUNTER#likes#0 members=1 count=1 sum(count)=10",
                     "  COUNTER#likes#1 members=1 count=1 sum(count)=0",
                     "  COUNTER#likes#2 members=1 count=1 sum(count)=7.5",
                     "  COUNTER#likes#3 members=1 count=1 sum(count)=2"}));
  // Incrementing one shard's counter retracts its old value.
  Apply({Put({{"PK", S("COUNTER#likes#2")}, {"SK", S("COUNTER")}, {"count", N("8.5")}})});
  EXPECT_EQ((*Get("likes", "COUNTER#likes"))[0], "COUNTER#likes members=4 count=4 sum(count)=20.5");
  EXPECT_EQ(List("likes"),
            (Strings{"COUNTER#likes members=4 count=4 sum(count)=20.5",
                     "  COUNTER#likes#0 members=1 count=1 sum(count)=10",
                     "  COUNTER#likes#1 members=1 count=1 sum(count)=0",
                     "  COUNTER#likes#2 members=1 count=1 sum(count)=8.5",
                     "  COUNTER#likes#3 members=1 count=1 sum(count)=2",
                     "COUNTER#views members=1 count=1 sum(count)=1",
                     "  COUNTER#views#0 members=1 count=1 sum(count)=1"}));
  // A physical key without the suffix is its own shard of the logical group.
  Apply({Put({{"PK", S("COUNTER#likes")}, {"SK", S("COUNTER")}, {"count", N("100")}})});
  EXPECT_EQ(*Get("likes", "COUNTER#likes"),
            (Strings{"COUNTER#likes members=5 count=5 sum(count)=120.5",
                     "  COUNTER#likes members=1 count=1 sum(count)=100",
                     "  COUNTER#likes#0 members=1 count=1 sum(count)=10",
                     "  COUNTER#likes#1 members=1 count=1 sum(count)=0",
                     "  COUNTER#likes#2 members=1 count=1 sum(count)=8.5",
                     "  COUNTER#likes#3 members=1 count=1 sum(count)=2"}));
}

TEST_F(AggregateReaderTest, ListAggregatesPagesAndPrefixes) {
  Open();
  std::vector<SourceRecord> batch;
  for (const char* day : {"2025-03-02", "2025-03-01", "2025-02-28"}) {
    for (int vote = 0; vote < 3; ++vote) {
      batch.push_back(Put({{"PK", S(absl::StrCat("VOTE#", day, "#", vote))}, {"SK", S("V")},
                           {"GSI1PK", S(absl::StrCat("DAY#", day, "#", vote % 2))}}));
    }
  }
  Apply(std::move(batch));
  const Strings all = {"DAY#2025-02-28 members=3 count=3", "  DAY#2025-02-28#0 members=2 count=2",
                       "  DAY#2025-02-28#1 members=1 count=1", "DAY#2025-03-01 members=3 count=3",
                       "  DAY#2025-03-01#0 members=2 count=2", "  DAY#2025-03-01#1 members=1 count=1",
                       "DAY#2025-03-02 members=3 count=3", "  DAY#2025-03-02#0 members=2 count=2",
                       "  DAY#2025-03-02#1 members=1 count=1"};
  EXPECT_EQ(List("votes"), all);
  for (uint32_t page : {1u, 2u, 3u, 4u}) EXPECT_EQ(List("votes", page), all) << page;
  EXPECT_EQ(List("votes", 1, "DAY#2025-03"), Strings(all.begin() + 3, all.end()));
  EXPECT_EQ(List("votes", 0, "DAY#2025-03-01"), Strings(all.begin() + 3, all.begin() + 6));
  EXPECT_EQ(List("votes", 0, "NIGHT"), Strings{});

  v1::ListAggregatesRequest request;
  request.set_aggregate("votes");
  request.set_page_token("garbage");
  const std::string wrong_token =
      "page_token is not a ListAggregates token of aggregate votes as it is defined now "
      "(malformed, from another query, or issued before the aggregate changed); pass "
      "next_page_token from the previous ListAggregates response unchanged, or start again "
      "without a token";
  EXPECT_EQ(reader_->ListAggregates(request).status().message(), wrong_token);
  // A token of another aggregate is refused in the same words, not as a view's.
  v1::ListAggregatesRequest likes;
  likes.set_aggregate("likes");
  likes.set_limit(1);
  Apply({Put({{"PK", S("COUNTER#a#0")}, {"SK", S("COUNTER")}}),
         Put({{"PK", S("COUNTER#b#0")}, {"SK", S("COUNTER")}})});
  auto page = reader_->ListAggregates(likes);
  ASSERT_TRUE(page.ok());
  ASSERT_FALSE(page->next_page_token().empty());
  request.set_page_token(page->next_page_token());
  EXPECT_EQ(reader_->ListAggregates(request).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(reader_->ListAggregates(request).status().message(), wrong_token);
}

// A physical key of a sharded aggregate answers that one shard (as views accept physical
// partition keys); it used to answer "members 0".
TEST_F(AggregateReaderTest, PhysicalGroupKeyAnswersThatShard) {
  Open();
  Apply({Put({{"PK", S("COUNTER#likes#0")}, {"SK", S("COUNTER")}, {"count", N("10")}}),
         Put({{"PK", S("COUNTER#likes#3")}, {"SK", S("COUNTER")}, {"count", N("2")}}),
         Put({{"PK", S("COUNTER#likes")}, {"SK", S("COUNTER")}, {"count", N("100")}})});
  EXPECT_EQ(*Get("likes", "COUNTER#likes#3"), Strings{"COUNTER#likes#3 members=1 count=1 sum(count)=2"});
  EXPECT_EQ(*Get("likes", "COUNTER#likes#0"), Strings{"COUNTER#likes#0 members=1 count=1 sum(count)=10"});
  EXPECT_EQ(*Get("likes", "COUNTER#likes#7"),
            Strings{"COUNTER#likes#7 members=0 count=0 sum(count)=unset"});
  // The logical group still merges all three.
  EXPECT_EQ((*Get("likes", "COUNTER#likes"))[0], "COUNTER#likes members=3 count=3 sum(count)=112");
}

// The per-shard breakdown is bounded: the totals count every physical group, the answer
// lists the first 1,000 and says how many it left out.
TEST_F(AggregateReaderTest, ShardBreakdownIsCappedAndSaysSo) {
  Open();
  std::vector<SourceRecord> batch;
  for (int shard = 0; shard < 1002; ++shard) {
    batch.push_back(Put({{"PK", S(absl::StrCat("COUNTER#big#", shard))}, {"SK", S("COUNTER")},
                         {"count", N("1")}}));
  }
  Apply(std::move(batch));
  v1::GetAggregateRequest request;
  request.set_aggregate("likes");
  request.mutable_group()->set_s("COUNTER#big");
  auto response = reader_->GetAggregate(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->members(), 1002u);
  EXPECT_EQ(response->measures(1).value().n(), "1002");
  EXPECT_EQ(response->shards_size(), 1000);
  EXPECT_EQ(response->shards_omitted(), 2u);
  EXPECT_EQ(response->shards(999).group().s(), "COUNTER#big#999");
}

// A broken invariant (the stored state contradicts the items) used to be retried forever
// (DATA_LOSS) or abort the process (a count at 0). Now the aggregate is emptied and rebuilt,
// the batch commits, and the metric counts it.
TEST_F(AggregateReaderTest, InconsistentStateIsRebuiltFromTheItems) {
  Open();
  Apply({Put(Order("1", "OPEN", "5")), Put(Order("2", "OPEN", "7")),
         Put({{"PK", S("COUNTER#x#0")}, {"SK", S("COUNTER")}, {"count", N("1")}})});
  const Strings likes = Dump("likes");
  const auto corrupt = [&](const std::string& value) {
    std::string group;
    EncodeKeyComponent(S("OPEN"), &group);
    auto txn = store_->BeginWrite();
    ASSERT_TRUE(txn.ok());
    ASSERT_TRUE((*txn)->Put(store_->aggregate("totals"), group, value).ok());
    ASSERT_TRUE((*txn)->Commit().ok());
  };
  // One member where there are two: the second retraction finds the group empty.
  AggregateState one;
  one.members = 1;
  one.measures.resize(5);
  corrupt(EncodeAggregateState(one));
  Apply({Delete(Order("1", "OPEN", "5")), Put(Order("3", "SHIPPED", "1"))});
  EXPECT_EQ(published_->GetAggregateState(0), ViewState::kBuilding);
  EXPECT_EQ(Get("totals", "OPEN").status().message(),
            "aggregate totals is being rebuilt (0% done); retry in a moment");
  EXPECT_EQ(MetricLines("cdcview_aggregate_inconsistencies_total"),
            (Strings{"cdcview_aggregate_inconsistencies_total{aggregate=\"votes\"} 0",
                     "cdcview_aggregate_inconsistencies_total{aggregate=\"likes\"} 0",
                     "cdcview_aggregate_inconsistencies_total{aggregate=\"totals\"} 1"}));
  EXPECT_EQ(Dump("likes"), likes);  // other aggregates are untouched
  ASSERT_TRUE(applier_->RebuildViews().ok());
  EXPECT_EQ(List("totals"),
            (Strings{"OPEN members=1 count=1 sum(total)=7 min(total)=7 max(total)=7 avg(total)=7",
                     "SHIPPED members=1 count=1 sum(total)=1 min(total)=1 max(total)=1 avg(total)=1"}));
  EXPECT_EQ(List("totals"), ExpectedTotals());

  // A state that does not decode: the same.
  corrupt("\x05");
  Apply({Delete(Order("2", "OPEN", "7"))});
  EXPECT_EQ(published_->GetAggregateState(0), ViewState::kBuilding);
  ASSERT_TRUE(applier_->RebuildViews().ok());
  EXPECT_EQ(List("totals"), ExpectedTotals());
  EXPECT_EQ(MetricLines("cdcview_aggregate_inconsistencies_total")[2],
            "cdcview_aggregate_inconsistencies_total{aggregate=\"totals\"} 2");
}

// A group key at exactly the store's limit with a 38-digit min/max value fits; one byte more
// rejects the event. The limit used to forget the N tag byte: a key one byte over passed the
// check, then the store refused the 512-byte min/max key and the batch failed forever.
TEST_F(AggregateReaderTest, GroupKeyAtTheStoreLimitWithTheLongestNumber) {
  Open();
  const std::string longest = "-9999999999999999999999999999999999999.9";
  // enc(S) = tag + bytes + terminator: 487 bytes, + measure byte + 23 = 511.
  Apply({Put(Order("1", std::string(485, 'x'), longest))});
  EXPECT_EQ(*Get("totals", std::string(485, 'x')),
            Strings{absl::StrCat(std::string(485, 'x'), " members=1 count=1 sum(total)=", longest,
                                 " min(total)=", longest, " max(total)=", longest,
                                 " avg(total)=", longest)});
  Apply({Put(Order("2", std::string(486, 'x'), longest))});
  ASSERT_EQ(sink_.letters().size(), 1u);
  EXPECT_EQ(sink_.letters()[0].why.message(),
            "line 1: aggregate totals: group key is 488 bytes, over the 487 bytes the store's key "
            "limit leaves for it");
}

TEST_F(AggregateReaderTest, ErrorsNameWhatIsWrong) {
  Open();
  EXPECT_EQ(Get("nope", "x").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Get("nope", "x").status().message(),
            "aggregate \"nope\" does not exist (aggregates: totals, likes, votes)");
  EXPECT_EQ(Get(std::string(70000, 'a'), "x").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Get(std::string(70000, 'a'), "x").status().message(),
            "aggregate name of 70000 bytes is longer than any aggregate can have (at most 1024 "
            "bytes); aggregates: totals, likes, votes");
  v1::ListAggregatesRequest list;
  list.set_aggregate(std::string(70000, 'a'));
  EXPECT_EQ(reader_->ListAggregates(list).status().message(),
            "aggregate name of 70000 bytes is longer than any aggregate can have (at most 1024 "
            "bytes); aggregates: totals, likes, votes");
  EXPECT_EQ(Get(std::string(100, 'a'), "x").status().message(),
            absl::StrCat("aggregate \"", std::string(64, 'a'),
                         "...\" (100 bytes) does not exist (aggregates: totals, likes, votes)"));
  v1::GetAggregateRequest request;
  request.set_aggregate("totals");
  request.mutable_group()->set_n("1");
  EXPECT_EQ(reader_->GetAggregate(request).status().message(),
            "group: aggregate totals groups by S, got N");
  request.clear_group();
  EXPECT_EQ(reader_->GetAggregate(request).status().message(), "group is required");
}

TEST_F(AggregateReaderTest, AnswersCarryTheAppliedPosition) {
  Open();
  Apply({Put(Order("1", "OPEN", "5"))});
  v1::GetAggregateRequest request;
  request.set_aggregate("totals");
  request.mutable_group()->set_s("OPEN");
  auto response = reader_->GetAggregate(request);
  ASSERT_TRUE(response.ok());
  ASSERT_EQ(response->applied().entries_size(), 1);
  EXPECT_EQ(response->applied().entries(0).source(), "s");
  EXPECT_EQ(response->applied().entries(0).position(), "1");
}

TEST_F(AggregateReaderTest, ReplayedBatchChangesNothing) {
  Open();
  std::vector<SourceRecord> batch = {Put(Order("1", "OPEN", "5")), Put(Order("2", "OPEN", "7")),
                                     Put(Order("1", "SHIPPED", "5")), Delete(Order("2", "OPEN", "7"))};
  Apply(batch);
  const Strings state = Dump("totals");
  // A crash before the source learnt of the commit: the same records are delivered again.
  Apply(batch);
  EXPECT_EQ(Dump("totals"), state);
  Close();
  Open();
  Apply(batch);
  EXPECT_EQ(Dump("totals"), state);
  EXPECT_EQ(List("totals"), ExpectedTotals());
}

// Kafka records carry no sequence numbers: offsets below the stored next offset are what
// keeps a partition read again after a rebalance from counting its records twice.
TEST_F(AggregateReaderTest, KafkaRecordsReadAgainChangeNothing) {
  Open();
  std::vector<SourceRecord> batch;
  int64_t offset = 0;
  auto kafka = [&](SourceRecord record) {
    record.partition = "orders/0";
    record.offset = offset++;
    record.next_position = absl::StrCat(offset);
    record.event->sequence_number.clear();
    return record;
  };
  batch.push_back(kafka(Put(Order("1", "OPEN", "5"))));
  batch.push_back(kafka(Put(Order("2", "OPEN", "7"))));
  batch.push_back(kafka(Put(Order("1", "SHIPPED", "5"))));
  Apply(batch);
  const Strings state = Dump("totals");
  EXPECT_EQ(List("totals"),
            (Strings{"OPEN members=1 count=1 sum(total)=7 min(total)=7 max(total)=7 avg(total)=7",
                     "SHIPPED members=1 count=1 sum(total)=5 min(total)=5 max(total)=5 avg(total)=5"}));
  Apply(batch);
  EXPECT_EQ(Dump("totals"), state);
  // After a restart too (the stored offsets are the truth).
  Close();
  Open();
  Apply(batch);
  EXPECT_EQ(Dump("totals"), state);
}

TEST_F(AggregateReaderTest, WhileRebuildingAnswersUnavailable) {
  Open(kOrdersOnly, /*rebuild=*/false);
  EXPECT_EQ(Get("totals", "OPEN").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Get("totals", "OPEN").status().message(),
            "aggregate totals is being rebuilt (0% done); retry in a moment");
  // Events applied before the rebuild reaches their items are counted once, by the rebuild.
  Apply({Put(Order("1", "OPEN", "5")), Put(Order("2", "OPEN", "7"))});
  ASSERT_TRUE(applier_->RebuildViews().ok());
  EXPECT_EQ(*Get("totals", "OPEN"),
            Strings{"OPEN members=2 count=2 sum(total)=12 min(total)=5 max(total)=7 avg(total)=6"});
}

// Events applied while a rebuild is interrupted half-way: items the rebuild counted already are
// maintained by the events, later ones are counted by the rest of the rebuild; never twice.
TEST_F(AggregateReaderTest, EventsDuringAnInterruptedRebuildAreCountedOnce) {
  Open();
  constexpr int kItems = 20000;  // ten rebuild chunks
  auto order = [](int i, const std::string& status, const std::string& total) {
    char id[16];
    std::snprintf(id, sizeof id, "%06d", i);
    return Order(id, status, total);
  };
  for (int first = 0; first < kItems; first += 1000) {
    std::vector<SourceRecord> batch;
    for (int i = first; i < first + 1000; ++i) {
      batch.push_back(Put(order(i, i % 2 ? "OPEN" : "SHIPPED", absl::StrCat(i % 97, ".5"))));
    }
    Apply(std::move(batch));
  }
  Close();
  Open("{ attribute: type, exists: true }", /*rebuild=*/false);
  std::atomic<bool> stop{false};
  std::thread stopper([&] {
    double progress = 0;
    while (published_->GetAggregateState(0, &progress) != ViewState::kReady && progress == 0) {
      std::this_thread::yield();
    }
    stop = true;
  });
  EXPECT_TRUE(absl::IsCancelled(applier_->RebuildViews(&stop)));
  stopper.join();
  double progress = 0;
  ASSERT_EQ(published_->GetAggregateState(0, &progress), ViewState::kBuilding);
  ASSERT_GT(progress, 0.0);
  ASSERT_LT(progress, 0.95);
  // Changes at both ends of the key range: before and after the rebuild's cursor.
  std::vector<SourceRecord> batch;
  for (int i : {0, 1, 2, kItems - 3, kItems - 2, kItems - 1}) {
    batch.push_back(Put(order(i, "CLOSED", "1000")));
  }
  batch.push_back(Delete(order(3, "", "0")));
  batch.push_back(Delete(order(kItems - 4, "", "0")));
  batch.push_back(Put(order(kItems + 1, "CLOSED", "-1")));
  Apply(std::move(batch));
  ASSERT_TRUE(applier_->RebuildViews().ok());
  EXPECT_EQ(List("totals"), ExpectedTotals(/*orders_only=*/false));
  EXPECT_EQ(*Get("totals", "CLOSED"),
            Strings{"CLOSED members=7 count=7 sum(total)=5999 min(total)=-1 max(total)=1000 "
                    "avg(total)=857"});
}

// A random workload on a few groups: inserts, updates moving items between groups and
// changing totals (or dropping them), deletes (often of the current min or max) and
// re-inserts; checked against the brute force after every batch.
TEST_F(AggregateReaderTest, RandomWorkloadMatchesBruteForce) {
  Open();
  std::mt19937 rng(5);
  const char* statuses[] = {"OPEN", "SHIPPED", "CLOSED"};
  const char* totals[] = {"0.1", "0.2", "-5", "12.75", "1e30", "-1e-20", "7", "7", "3.3333"};
  std::map<std::string, Item> live;
  for (int step = 0; step < 300; ++step) {
    std::vector<SourceRecord> batch;
    const int events = 1 + static_cast<int>(rng() % 6);
    for (int e = 0; e < events; ++e) {
      const std::string id = absl::StrCat(rng() % 25);
      const int what = static_cast<int>(rng() % 10);
      if (what < 3 && live.count(id)) {
        batch.push_back(Delete(live[id]));
        live.erase(id);
        continue;
      }
      std::optional<std::string> total;
      if (rng() % 8 != 0) total = totals[rng() % std::size(totals)];
      Item item = Order(id, statuses[rng() % 3], total);
      if (rng() % 10 == 0) item["type"] = S("draft");  // leaves the filter
      batch.push_back(Put(item));
      live[id] = item;
    }
    Apply(std::move(batch));
    ASSERT_EQ(List("totals"), ExpectedTotals()) << "after step " << step;
    // Removing the extreme of a group deliberately.
    if (step % 10 == 0 && !live.empty()) {
      auto extreme = std::max_element(live.begin(), live.end(), [](const auto& a, const auto& b) {
        auto ta = a.second.find("total"), tb = b.second.find("total");
        if (ta == a.second.end() || tb == b.second.end()) return tb != b.second.end();
        return CompareDecimal(*ParseDecimal(ta->second.scalar()), *ParseDecimal(tb->second.scalar())) < 0;
      });
      Apply({Delete(extreme->second)});
      live.erase(extreme);
      ASSERT_EQ(List("totals"), ExpectedTotals()) << "after removing the max at step " << step;
    }
  }
  for (const std::string group : {"OPEN", "SHIPPED", "CLOSED"}) {
    auto got = Get("totals", group);
    ASSERT_TRUE(got.ok());
    Strings expected = ExpectedTotals();
    auto it = std::find_if(expected.begin(), expected.end(),
                           [&](const std::string& line) { return line.starts_with(group + " "); });
    const std::string empty = group + " members=0 count=0 sum(total)=unset min(total)=unset "
                                      "max(total)=unset avg(total)=unset";
    EXPECT_EQ(*got, Strings{it != expected.end() ? *it : empty});
  }

  // Rebuilding from the items (definition changed, then changed back) gives byte for byte
  // the state incremental maintenance built.
  const Strings incremental = Dump("totals");
  Close();
  Open("{ attribute: type, exists: true }");
  EXPECT_EQ(List("totals"), ExpectedTotals(/*orders_only=*/false));
  Close();
  Open();
  EXPECT_EQ(Dump("totals"), incremental);
}

TEST_F(AggregateReaderTest, RemovedAggregatesAreDroppedAtOpen) {
  Open();
  Apply({Put(Order("1", "OPEN", "5"))});
  Close();
  absl::StatusOr<Config> config = ParseConfig(
      "tables:\n  - name: App\n    key: { partition: PK, sort: SK }\n", "t.yaml");
  ASSERT_TRUE(config.ok());
  config->storage.path = dir_.Sub("store");
  config->storage.map_size = 64 << 20;
  auto store = Store::Open(config->storage, config->tables);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->dropped_aggregates(), (Strings{"likes", "totals", "votes"}));
  auto txn = (*store)->BeginRead();
  auto cursor = (*txn)->OpenCursor((*store)->meta());
  for (bool ok = cursor->SeekFirst(); ok; ok = cursor->Next()) {
    EXPECT_FALSE(cursor->key().starts_with("agg/")) << cursor->key();
  }
}

}  // namespace
}  // namespace cdcview
