// ClusterQueries: three members, each holding the items of the Kafka partitions it owns
// (partition p on member p % 3), answer every read exactly as one store holding everything
// does: the same entries, groups and page tokens for every sort operator, both directions and
// several page sizes, sharded views and aggregates included. Members 1 and 2 are real gRPC
// servers answering the local-only marker; a member down or silent fails the call UNAVAILABLE
// naming it, within the deadline.
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "cdcview/v1/view_service.grpc.pb.h"
#include "daemon/apply/applier.h"
#include "daemon/config/config.h"
#include "daemon/log/log.h"
#include "daemon/metrics/metrics.h"
#include "daemon/server/cluster_peers.h"
#include "daemon/server/cluster_queries.h"
#include "daemon/server/h2_read_server.h"
#include "daemon/server/read_consistency.h"
#include "daemon/server/view_reader.h"
#include "daemon/server/view_service.h"
#include "daemon/state/catalog.h"
#include "daemon/state/published_state.h"
#include "daemon/store/store.h"
#include "gtest/gtest.h"
#include "tests/fakes/fake_dead_letter_sink.h"
#include "tests/fakes/forwarding_queries.h"
#include "tests/fakes/records.h"
#include "tests/fakes/temp_dir.h"
#include "tests/fakes/test_store.h"

namespace cdcview {
namespace {

using test::At;
using test::N;
using test::S;
using Strings = std::vector<std::string>;
using Clock = std::chrono::steady_clock;

constexpr char kConfigYaml[] = R"(
sources:
  - name: orders
    table: App
    kafka: { brokers: "127.0.0.1:9", topics: [orders], group: g }
tables:
  - name: App
    key: { partition: PK, sort: SK }
    views:
      - name: ByCustomer
        partition_key: { attribute: customer, type: S }
        sort_key: { attribute: day, type: S }
      - name: ByScore
        partition_key: { attribute: customer, type: S }
        sort_key: { attribute: score, type: N }
        projection: KEYS_ONLY
      - name: Sharded
        partition_key: { attribute: bucket, type: S }
        sort_key: { attribute: day, type: S }
        shards: { count: 4, suffix: "#{shard}" }
      - name: NoSort
        partition_key: { attribute: customer, type: S }
    aggregates:
      - name: totals
        group_by: { attribute: status }
        measures: [count, {sum: total}, {min: total}, {max: total}, {avg: total}]
      - name: counters
        group_by: { attribute: counter }
        strip_shard_suffix: "#{shard}"
        measures: [count, {sum: total}, {avg: total}]
)";

constexpr uint32_t kMembers = 3;
constexpr int kPartitions = 6;

// One store with its catalog, writer and reader: a member (items of its partitions) or the
// standalone reference (every item).
struct Node {
  Config config;
  std::unique_ptr<Store> store;
  std::unique_ptr<Catalog> catalog;
  std::unique_ptr<PublishedState> published;
  FakeDeadLetterSink sink;
  std::unique_ptr<Applier> applier;
  std::unique_ptr<ViewReader> reader;
  uint64_t offset = 0;
};

void OpenNode(const std::string& dir, std::optional<uint32_t> ordinal, Node* node) {
  ASSERT_EQ(test::OpenTestStore(kConfigYaml, dir, &node->config, &node->store), absl::OkStatus());
  if (ordinal) node->config.cluster = ClusterConfig{kMembers, *ordinal, {}};
  node->catalog = std::make_unique<Catalog>(node->config, node->store->max_key_size());
  node->published = std::make_unique<PublishedState>(*node->catalog, [] { return int64_t{0}; });
  node->applier = std::make_unique<Applier>(
      *node->catalog, node->store.get(), nullptr,
      std::vector<DeadLetterSink*>(node->config.sources.size(), &node->sink),
      node->published.get());
  node->reader = std::make_unique<ViewReader>(*node->catalog, *node->store, *node->published,
                                              1000, /*member_parts=*/ordinal.has_value());
  ASSERT_TRUE(node->applier->Recover().ok());
  ASSERT_TRUE(node->applier->RebuildViews().ok());
}

void PutOn(Node* node, int partition, const Item& item) {
  std::vector<SourceRecord> batch = {test::Insert(
      node->config.tables[0].key, item,
      At(absl::StrCat(++node->offset)).Partition(absl::StrCat("orders/", partition)))};
  ASSERT_TRUE(node->applier->ApplyBatch(&batch).ok());
}

v1::AttributeValue PS(const std::string& s) {
  v1::AttributeValue v;
  v.set_s(s);
  return v;
}

std::string Text(const absl::Status& status) {
  return absl::StrCat(absl::StatusCodeToString(status.code()), ": ", std::string(status.message()));
}

// A page as comparable text: every entry in full, then the token's bytes.
template <typename Response>
std::string PageText(const Response& r) {
  std::string out;
  for (const auto& e : r.entries()) absl::StrAppend(&out, e.ShortDebugString(), "\n");
  absl::StrAppend(&out, "token ", absl::CEscape(r.next_page_token()));
  return out;
}

// A member's port whose Scan takes longer than any caller waits.
class SlowScan : public test::ForwardingQueries {
 public:
  using ForwardingQueries::ForwardingQueries;
  absl::StatusOr<v1::ScanResponse> Scan(const v1::ScanRequest& r, Deadline d) const override {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    return inner_.Scan(r, d);
  }
};

class ClusterQueriesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetLogLevel(LogLevel::kWarning);
    ASSERT_NO_FATAL_FAILURE(OpenNode(dir_.Sub("all"), std::nullopt, &all_));
    for (uint32_t m = 0; m < kMembers; ++m) {
      members_.push_back(std::make_unique<Node>());
      ASSERT_NO_FATAL_FAILURE(OpenNode(dir_.Sub(absl::StrCat("m", m)), m, members_.back().get()));
    }
    ASSERT_NO_FATAL_FAILURE(PutItems());
    cluster_.members = kMembers;
    cluster_.ordinal = 0;
    cluster_.peers.push_back("127.0.0.1:1");  // this member's own: never called
    for (uint32_t m = 1; m < kMembers; ++m) {
      // Without the marker a member's port answers from the reference store, so a test sees
      // which one answered.
      auto server = ViewServer::Start("127.0.0.1:0", *all_.reader, nullptr, nullptr,
                                      ServerConfig{}, nullptr, nullptr, MainPortSecurity{},
                                      members_[m]->reader.get());
      ASSERT_TRUE(server.ok()) << server.status();
      (*server)->SetServing(true);
      cluster_.peers.push_back(absl::StrCat("127.0.0.1:", (*server)->port()));
      servers_.push_back(std::move(*server));
    }
    metrics_ = MetricsRegistry::Create();
    Connect(cluster_);
  }

  void Connect(const ClusterConfig& cluster) {
    queries_.reset();
    peers_ = std::make_unique<ClusterPeers>(cluster, ServerConfig{}, &metrics_->registry());
    queries_ = std::make_unique<ClusterQueries>(*members_[0]->reader, *peers_, members_[0]->config);
  }

  // Member 2's port served through SlowScan, the cluster connected with it there (its address
  // in slow_address_): the port, null if it did not start.
  std::unique_ptr<ViewServer> ServeSlowMember() {
    slow_ = std::make_unique<SlowScan>(*members_[2]->reader);
    auto server = ViewServer::Start("127.0.0.1:0", *slow_, nullptr, nullptr, ServerConfig{},
                                    nullptr, nullptr, MainPortSecurity{}, slow_.get());
    EXPECT_TRUE(server.ok()) << server.status();
    if (!server.ok()) return nullptr;
    ClusterConfig cluster = cluster_;
    cluster.peers[2] = slow_address_ = absl::StrCat("127.0.0.1:", (*server)->port());
    Connect(cluster);
    return *std::move(server);
  }

  // Puts `item` in the partition `seed` picks, on its owner and on the reference store.
  void Put(int seed, const Item& item) {
    const int partition = seed % kPartitions;
    ASSERT_NO_FATAL_FAILURE(PutOn(&all_, partition, item));
    ASSERT_NO_FATAL_FAILURE(PutOn(members_[partition % kMembers].get(), partition, item));
  }

  // 150 items over 6 partitions: three customers, sort keys that repeat (ties go by table
  // key) and nest as prefixes, negative and fractional scores, a sharded bucket whose shards
  // are spread over every member, order totals and a sharded counter.
  void PutItems() {
    const Strings days = {"2025-01", "2025-01-01", "2025-02", "2025-02", "2025-03", "a",
                          std::string("a\0b", 3)};
    const Strings scores = {"-7.5", "0", "3", "3", "12.25", "-0.001", "1e3"};
    const Strings statuses = {"OPEN", "SHIPPED", "DONE", "LOST"};
    for (int i = 0; i < 150; ++i) {
      Item item = {{"PK", S(absl::StrCat("O#", (i * 37) % 1000))},
                   {"SK", S(i % 5 == 0 ? "A" : "B")},
                   {"customer", S(absl::StrCat("C", i % 3))},
                   {"day", S(days[(i * 3) % days.size()])},
                   {"score", N(scores[(i * 5) % scores.size()])},
                   {"bucket", S(absl::StrCat("DAY#", i % 4))},
                   {"counter", S(absl::StrCat("likes#", i % 7))},
                   {"total", N(absl::StrCat((i * 13) % 50, ".", i % 10))}};
      if (i % 11 != 0) item["status"] = S(statuses[i % statuses.size()]);
      ASSERT_NO_FATAL_FAILURE(Put(i * 7 + 1, item));
    }
  }

  // Every page of `request` from `reader`, as text.
  template <typename Request, typename Read>
  Strings Pages(Request request, Read read) {
    Strings pages;
    for (int n = 0; n < 400; ++n) {
      auto response = read(request);
      if (!response.ok()) {
        pages.push_back(Text(response.status()));
        return pages;
      }
      pages.push_back(PageText(*response));
      if (response->next_page_token().empty()) return pages;
      request.set_page_token(response->next_page_token());
    }
    ADD_FAILURE() << "paging did not end";
    return pages;
  }

  void ExpectSameQuery(const v1::QueryRequest& request) {
    const Strings want =
        Pages(request, [&](const v1::QueryRequest& r) { return all_.reader->Query(r); });
    const Strings got =
        Pages(request, [&](const v1::QueryRequest& r) { return queries_->Query(r); });
    EXPECT_EQ(got, want);
    EXPECT_GT(want.size(), 0u);
  }

  test::TempDir dir_;
  Node all_;
  std::vector<std::unique_ptr<Node>> members_;
  std::vector<std::unique_ptr<ViewServer>> servers_;
  ClusterConfig cluster_;
  std::unique_ptr<MetricsRegistry> metrics_;
  std::unique_ptr<ClusterPeers> peers_;
  std::unique_ptr<ClusterQueries> queries_;
  std::unique_ptr<SlowScan> slow_;  // ServeSlowMember's
  std::string slow_address_;
};

struct Cond {
  std::string name;
  v1::SortCondition::Op op;
  v1::AttributeValue a, b;
};

std::vector<Cond> StringConditions() {
  using Op = v1::SortCondition;
  return {{"none", Op::OP_UNSPECIFIED, {}, {}},
          {"EQ", Op::EQ, PS("2025-02"), {}},
          {"LT", Op::LT, PS("2025-02"), {}},
          {"LE", Op::LE, PS("2025-02"), {}},
          {"GT", Op::GT, PS("2025-01"), {}},
          {"GE", Op::GE, PS("2025-01"), {}},
          {"BETWEEN", Op::BETWEEN, PS("2025-01-01"), PS("2025-03")},
          {"BEGINS_WITH 2025-0", Op::BEGINS_WITH, PS("2025-0"), {}},
          {"BEGINS_WITH a", Op::BEGINS_WITH, PS("a"), {}}};
}

std::vector<Cond> NumberConditions() {
  using Op = v1::SortCondition;
  auto n = [](const char* text) {
    v1::AttributeValue v;
    v.set_n(text);
    return v;
  };
  return {{"none", Op::OP_UNSPECIFIED, {}, {}}, {"EQ", Op::EQ, n("3"), {}},
          {"LT", Op::LT, n("3"), {}},           {"LE", Op::LE, n("3"), {}},
          {"GT", Op::GT, n("0"), {}},           {"GE", Op::GE, n("-0.001"), {}},
          {"BETWEEN", Op::BETWEEN, n("-7.5"), n("12.25")}};
}

TEST_F(ClusterQueriesTest, QueriesEqualOneStoreForEveryOperatorDirectionAndPageSize) {
  struct Case {
    std::string view;
    Strings keys;
    std::vector<Cond> conditions;
  };
  const std::vector<Case> cases = {
      {"ByCustomer", {"C0", "C1", "C2", "C9"}, StringConditions()},
      {"ByScore", {"C0", "C2"}, NumberConditions()},
      // The logical key (every shard, merged across shards and members at once) and one
      // physical key.
      {"Sharded", {"DAY", "DAY#2"}, StringConditions()},
      {"NoSort", {"C1"}, {{"none", v1::SortCondition::OP_UNSPECIFIED, {}, {}}}}};
  for (const Case& c : cases) {
    for (const std::string& key : c.keys) {
      for (const Cond& cond : c.conditions) {
        for (bool backward : {false, true}) {
          for (uint32_t limit : {1u, 2u, 3u, 7u, 0u}) {
            SCOPED_TRACE(absl::StrCat(c.view, " ", key, " ", cond.name,
                                      backward ? " backward" : " forward", " limit ", limit));
            v1::QueryRequest request;
            request.set_view(c.view);
            *request.mutable_partition_key() = PS(key);
            request.set_scan_backward(backward);
            request.set_limit(limit);
            if (cond.op != v1::SortCondition::OP_UNSPECIFIED) {
              request.mutable_sort()->set_op(cond.op);
              *request.mutable_sort()->mutable_value() = cond.a;
              if (cond.op == v1::SortCondition::BETWEEN) {
                *request.mutable_sort()->mutable_value2() = cond.b;
              }
            }
            ExpectSameQuery(request);
          }
        }
      }
    }
  }
}

TEST_F(ClusterQueriesTest, TheShardedLogicalKeyMergesShardsOfEveryMember) {
  v1::QueryRequest request;
  request.set_view("Sharded");
  *request.mutable_partition_key() = PS("DAY");
  request.set_limit(1000);
  auto response = queries_->Query(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->entries_size(), 150);
  for (const auto& e : response->entries()) EXPECT_TRUE(e.key().empty());
}

TEST_F(ClusterQueriesTest, ScansEqualOneStore) {
  for (const char* view : {"ByCustomer", "ByScore", "Sharded", "NoSort"}) {
    for (uint32_t limit : {1u, 4u, 13u, 0u}) {
      SCOPED_TRACE(absl::StrCat(view, " limit ", limit));
      v1::ScanRequest request;
      request.set_view(view);
      request.set_limit(limit);
      const Strings want =
          Pages(request, [&](const v1::ScanRequest& r) { return all_.reader->Scan(r); });
      EXPECT_EQ(Pages(request, [&](const v1::ScanRequest& r) { return queries_->Scan(r); }),
                want);
      EXPECT_EQ(want.size(), limit == 0 ? 1u : (150 + limit - 1) / limit);
    }
  }
}

// Pages ended by max_bytes (each member's own, then the merge's cut at the member that ran out
// first) concatenate to the whole answer, for Query, a sharded logical key and Scan.
TEST_F(ClusterQueriesTest, PagesEndedByMaxBytesConcatenateToTheWholeAnswer) {
  auto entries = [](auto request, auto read) {
    Strings out;
    for (int n = 0; n < 1000; ++n) {
      auto response = read(request);
      EXPECT_TRUE(response.ok()) << response.status();
      if (!response.ok()) break;
      for (const v1::ViewEntry& e : response->entries()) {
        out.push_back(e.item().attributes().at("PK").s());  // an item's key: unique
      }
      // A member's page of max_bytes 1 is one entry: the merged page at most one per member.
      if (request.max_bytes() == 1) {
        EXPECT_LE(response->entries_size(), static_cast<int>(kMembers));
      }
      if (response->next_page_token().empty()) break;
      request.set_page_token(response->next_page_token());
    }
    return out;
  };
  for (uint32_t max_bytes : {1u, 300u}) {
    for (const auto& [view, key] : {std::pair{"ByCustomer", "C1"}, std::pair{"Sharded", "DAY"}}) {
      for (bool backward : {false, true}) {
        SCOPED_TRACE(absl::StrCat(view, " max_bytes ", max_bytes, backward ? " backward" : ""));
        v1::QueryRequest request;
        request.set_view(view);
        *request.mutable_partition_key() = PS(key);
        request.set_scan_backward(backward);
        const Strings want =
            entries(request, [&](const v1::QueryRequest& r) { return all_.reader->Query(r); });
        request.set_max_bytes(max_bytes);
        EXPECT_EQ(entries(request, [&](const v1::QueryRequest& r) { return queries_->Query(r); }),
                  want);
        EXPECT_GT(want.size(), 1u);
      }
    }
    v1::ScanRequest scan;
    scan.set_view("ByCustomer");
    const Strings want =
        entries(scan, [&](const v1::ScanRequest& r) { return all_.reader->Scan(r); });
    scan.set_max_bytes(max_bytes);
    EXPECT_EQ(entries(scan, [&](const v1::ScanRequest& r) { return queries_->Scan(r); }), want);
    EXPECT_EQ(want.size(), 150u);
  }
}

TEST_F(ClusterQueriesTest, GetItemFindsTheItemOnItsOwner) {
  for (int i : {0, 1, 2, 5, 149}) {
    v1::GetItemRequest request;
    request.set_table("App");
    (*request.mutable_key()->mutable_attributes())["PK"] = PS(absl::StrCat("O#", (i * 37) % 1000));
    (*request.mutable_key()->mutable_attributes())["SK"] = PS(i % 5 == 0 ? "A" : "B");
    auto want = all_.reader->GetItem(request);
    auto got = queries_->GetItem(request);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(got->found());
    EXPECT_EQ(got->item().ShortDebugString(), want->item().ShortDebugString());
  }
  v1::GetItemRequest missing;
  missing.set_table("App");
  (*missing.mutable_key()->mutable_attributes())["PK"] = PS("nope");
  (*missing.mutable_key()->mutable_attributes())["SK"] = PS("A");
  auto got = queries_->GetItem(missing);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->found());
  EXPECT_FALSE(got->has_item());
}

std::string GroupText(v1::AggregateGroup group) {
  group.clear_applied();
  return group.ShortDebugString();
}

TEST_F(ClusterQueriesTest, AggregatesMergePartialStatesExactly) {
  struct Ask {
    const char* aggregate;
    const char* group;
  };
  for (const Ask& ask : {Ask{"totals", "OPEN"}, Ask{"totals", "DONE"}, Ask{"totals", "none"},
                         Ask{"counters", "likes"}, Ask{"counters", "likes#3"}}) {
    SCOPED_TRACE(absl::StrCat(ask.aggregate, " ", ask.group));
    v1::GetAggregateRequest request;
    request.set_aggregate(ask.aggregate);
    *request.mutable_group() = PS(ask.group);
    auto want = all_.reader->GetAggregate(request);
    ASSERT_TRUE(want.ok()) << want.status();
    auto got = queries_->GetAggregate(request);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(GroupText(*got), GroupText(*want));
  }
  // The values themselves, not only their agreement: group OPEN holds items 0, 4, .. 148 less
  // the multiples of 11 (status unset).
  v1::GetAggregateRequest open;
  open.set_aggregate("totals");
  *open.mutable_group() = PS("OPEN");
  auto got = queries_->GetAggregate(open);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->members(), 34u);
  for (const auto& m : got->measures()) EXPECT_EQ(m.partial_sum(), "") << m.name();
  v1::GetAggregateRequest likes;
  likes.set_aggregate("counters");
  *likes.mutable_group() = PS("likes");
  got = queries_->GetAggregate(likes);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->members(), 150u);
  ASSERT_EQ(got->shards_size(), 7);
  EXPECT_EQ(got->shards(3).group().s(), "likes#3");
  EXPECT_EQ(got->shards(3).members(), 21u);
}

TEST_F(ClusterQueriesTest, ListAggregatesPagesEqualOneStore) {
  for (const char* aggregate : {"totals", "counters"}) {
    for (uint32_t limit : {1u, 2u, 3u, 0u}) {
      SCOPED_TRACE(absl::StrCat(aggregate, " limit ", limit));
      v1::ListAggregatesRequest request;
      request.set_aggregate(aggregate);
      request.set_limit(limit);
      auto text = [](const absl::StatusOr<v1::ListAggregatesResponse>& r) {
        if (!r.ok()) return Text(r.status());
        std::string out;
        for (const auto& g : r->groups()) absl::StrAppend(&out, GroupText(g), "\n");
        return absl::StrCat(out, "token ", absl::CEscape(r->next_page_token()));
      };
      Strings want, got;
      v1::ListAggregatesRequest a = request, b = request;
      for (int n = 0; n < 20; ++n) {
        auto w = all_.reader->ListAggregates(a);
        auto g = queries_->ListAggregates(b);
        want.push_back(text(w));
        got.push_back(text(g));
        if (!w.ok() || !g.ok() || w->next_page_token().empty()) break;
        a.set_page_token(w->next_page_token());
        b.set_page_token(g->next_page_token());
      }
      EXPECT_EQ(got, want);
    }
  }
}

TEST_F(ClusterQueriesTest, AnswersCarryEveryMembersPositions) {
  v1::ScanRequest request;
  request.set_view("NoSort");
  auto got = queries_->Scan(request);
  ASSERT_TRUE(got.ok()) << got.status();
  auto want = all_.reader->Scan(request);
  Strings partitions;
  for (const auto& e : got->applied().entries()) {
    partitions.push_back(absl::StrCat(e.source(), " ", e.partition()));
  }
  EXPECT_EQ(partitions, (Strings{"orders orders/0", "orders orders/1", "orders orders/2",
                                 "orders orders/3", "orders orders/4", "orders orders/5"}));
  EXPECT_EQ(got->applied().token(), EncodePositionToken(got->applied()));
  // A cluster token waits on every member for the partitions it owns, and is reached.
  v1::QueryRequest query;
  query.set_view("NoSort");
  *query.mutable_partition_key() = PS("C0");
  *query.mutable_consistency()->mutable_min_position() = got->applied().token();
  auto waited = queries_->Query(query, Clock::now() + std::chrono::seconds(5));
  EXPECT_TRUE(waited.ok()) << waited.status();
}

TEST(MergeAppliedTest, EachPartitionOnceFromItsOwner) {
  auto applied = [](std::vector<std::pair<std::string, std::string>> entries) {
    v1::AppliedPosition a;
    for (auto& [partition, position] : entries) {
      auto* e = a.add_entries();
      e->set_source("orders");
      e->set_partition(partition);
      e->set_position(position);
    }
    return a;
  };
  // Member 0 still has partition 4's old position (from before a resize); member 1 owns it.
  const v1::AppliedPosition m0 = applied({{"orders/0", "10"}, {"orders/4", "2"}});
  const v1::AppliedPosition m1 = applied({{"orders/1", "11"}, {"orders/4", "9"}});
  const v1::AppliedPosition m2 = applied({{"orders/2", "12"}});
  v1::AppliedPosition merged = MergeApplied({&m0, &m1, &m2}, ClusterConfig{3, 0, {}});
  v1::AppliedPosition want = applied(
      {{"orders/0", "10"}, {"orders/1", "11"}, {"orders/2", "12"}, {"orders/4", "9"}});
  want.set_token(EncodePositionToken(want));
  EXPECT_EQ(merged.ShortDebugString(), want.ShortDebugString());
  EXPECT_EQ(merged.token(), EncodePositionToken(merged));
}

TEST_F(ClusterQueriesTest, AMemberDownFailsTheCallUnavailableNamingIt) {
  const std::string address = cluster_.peers[2];
  servers_[1]->Shutdown(0);
  v1::QueryRequest request;
  request.set_view("ByCustomer");
  *request.mutable_partition_key() = PS("C0");
  const auto start = Clock::now();
  auto got = queries_->Query(request, start + std::chrono::seconds(3));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(4));
  ASSERT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
  const std::string message(got.status().message());
  const std::string prefix = absl::StrCat("cluster member 2 (", address, ") did not answer: ");
  const std::string suffix = "; every member is needed for a whole answer: retry when it is back";
  EXPECT_TRUE(message.starts_with(prefix)) << message;
  EXPECT_TRUE(message.ends_with(suffix)) << message;
  EXPECT_GT(message.size(), prefix.size() + suffix.size()) << message;
  const std::string metrics = metrics_->Render();
  EXPECT_NE(metrics.find("cdcview_cluster_fanout_errors_total{code=\"UNAVAILABLE\",peer=\"2\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("cdcview_cluster_fanout_seconds_count{peer=\"1\"} 1"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("cdcview_cluster_members 3"), std::string::npos) << metrics;
}

TEST_F(ClusterQueriesTest, AMemberThatDoesNotAnswerInTimeFailsTheCallAtTheDeadline) {
  std::unique_ptr<ViewServer> server = ServeSlowMember();
  ASSERT_NE(server, nullptr);
  v1::ScanRequest request;
  request.set_view("NoSort");
  const auto start = Clock::now();
  auto got = queries_->Scan(request, start + std::chrono::milliseconds(700));
  const auto took = Clock::now() - start;
  EXPECT_GE(took, std::chrono::milliseconds(650));
  EXPECT_LT(took, std::chrono::milliseconds(1400));
  EXPECT_EQ(Text(got.status()),
            absl::StrCat("UNAVAILABLE: cluster member 2 (", slow_address_,
                         ") did not answer: Deadline Exceeded; every member is needed for a "
                         "whole answer: retry when it is back"));
  const std::string metrics = metrics_->Render();
  EXPECT_NE(
      metrics.find("cdcview_cluster_fanout_errors_total{code=\"DEADLINE_EXCEEDED\",peer=\"2\"} 1"),
      std::string::npos)
      << metrics;
  server->Shutdown(0);
}

// A member that stops does not wait for its peers: a read waiting for one (here a Scan the
// peer takes 1.5 s to answer, with a minute to go) answers UNAVAILABLE once Stop is called.
TEST_F(ClusterQueriesTest, AStoppingMemberDoesNotWaitForItsPeers) {
  std::unique_ptr<ViewServer> server = ServeSlowMember();
  ASSERT_NE(server, nullptr);
  v1::ScanRequest request;
  request.set_view("NoSort");
  std::thread stopper([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    peers_->Stop();
  });
  const auto start = Clock::now();
  auto got = queries_->Scan(request, start + std::chrono::seconds(60));
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(1400));
  stopper.join();
  EXPECT_EQ(Text(got.status()),
            absl::StrCat("UNAVAILABLE: cluster member 2 (", slow_address_,
                         ") was not waited for because cdcviewd is shutting down and applies "
                         "nothing more; retry against another replica or after its restart"));
  server->Shutdown(0);
}

TEST_F(ClusterQueriesTest, ErrorsOfTheRequestPassThrough) {
  v1::QueryRequest request;
  request.set_view("Nope");
  *request.mutable_partition_key() = PS("C0");
  EXPECT_EQ(Text(queries_->Query(request).status()), Text(all_.reader->Query(request).status()));
  request.set_view("ByCustomer");
  request.set_page_token("garbage");
  EXPECT_EQ(Text(queries_->Query(request).status()),
            "INVALID_ARGUMENT: page_token is malformed; pass next_page_token from the previous "
            "response unchanged");
}

TEST(ClusterPeersTest, PeerErrorKeepsAPeersOwnAnswer) {
  ClusterPeers peers(ClusterConfig{2, 0, {"a:1", "b:2"}}, ServerConfig{}, nullptr);
  EXPECT_EQ(Text(peers.PeerError(1, grpc::Status(grpc::StatusCode::NOT_FOUND, "view x"))),
            "NOT_FOUND: view x");
  const std::string waited = absl::StrCat("view V: ", ViewQueries::kNotAppliedInTime, ": at 3");
  EXPECT_EQ(Text(peers.PeerError(1, grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, waited))),
            absl::StrCat("DEADLINE_EXCEEDED: ", waited));
  EXPECT_EQ(Text(peers.PeerError(1, grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                                 "Deadline Exceeded"))),
            "UNAVAILABLE: cluster member 1 (b:2) did not answer: Deadline Exceeded; every member "
            "is needed for a whole answer: retry when it is back");
  EXPECT_EQ(Text(peers.PeerError(1, grpc::Status(grpc::StatusCode::UNAVAILABLE, "refused"))),
            "UNAVAILABLE: cluster member 1 (b:2) did not answer: refused; every member is "
            "needed for a whole answer: retry when it is back");
  EXPECT_EQ(peers.stub(0), nullptr);
  EXPECT_NE(peers.stub(1), nullptr);
}

// The marker picks the member's own reader on both ports; without it the port's ViewQueries
// answers (here the reference store, in a daemon ClusterQueries).
TEST_F(ClusterQueriesTest, TheLocalOnlyMarkerAnswersFromTheMembersOwnStore) {
  auto fast = H2ReadServer::Start("127.0.0.1:0", *all_.reader, nullptr, "server.grpc",
                                  ServerConfig{}, nullptr, {}, members_[1]->reader.get());
  ASSERT_TRUE(fast.ok()) << fast.status();
  for (const std::string& address :
       {cluster_.peers[1], absl::StrCat("127.0.0.1:", (*fast)->port())}) {
    SCOPED_TRACE(address);
    auto stub = v1::ViewService::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    v1::ScanRequest request;
    request.set_view("NoSort");
    v1::ScanResponse whole, own;
    grpc::ClientContext plain;
    ASSERT_TRUE(stub->Scan(&plain, request, &whole).ok());
    grpc::ClientContext marked;
    marked.AddMetadata(kLocalOnlyMetadata, "1");
    ASSERT_TRUE(stub->Scan(&marked, request, &own).ok());
    EXPECT_EQ(whole.entries_size(), 150);
    EXPECT_EQ(whole.entries(0).key(), "");
    // Member 1 owns partitions 1 and 4: the items with seed i * 7 + 1 in them.
    int owned = 0;
    for (int i = 0; i < 150; ++i) owned += ((i * 7 + 1) % kPartitions) % kMembers == 1;
    EXPECT_EQ(own.entries_size(), owned);
    EXPECT_NE(own.entries(0).key(), "");
  }
  (*fast)->Shutdown(0);
}

TEST(ClusterConsistencyTest, AMemberWaitsOnlyForThePartitionsItOwns) {
  absl::StatusOr<Config> config = ParseConfig(kConfigYaml, "t.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  config->cluster = ClusterConfig{3, 1, {}};
  v1::ReadConsistency consistency;
  for (int p = 0; p < kPartitions; ++p) {
    v1::KafkaOffset* k = consistency.add_min_kafka_offsets();
    k->set_topic("orders");
    k->set_partition(p);
    k->set_offset(40 + p);
  }
  v1::AppliedPosition token;
  for (int p = 0; p < kPartitions; ++p) {
    auto* e = token.add_entries();
    e->set_source("orders");
    e->set_partition(absl::StrCat("orders/", p));
    e->set_position(absl::StrCat(10 + p));
  }
  consistency.set_min_position(EncodePositionToken(token));
  auto requirements = RequirementsFor(consistency, *config, 0);
  ASSERT_TRUE(requirements.ok()) << requirements.status();
  Strings got;
  for (const auto& r : *requirements) got.push_back(absl::StrCat(r.partition, " ", r.position));
  EXPECT_EQ(got, (Strings{"orders/1 11", "orders/4 14", "orders/1 42", "orders/4 45"}));
  config->cluster = ClusterConfig{};
  requirements = RequirementsFor(consistency, *config, 0);
  ASSERT_TRUE(requirements.ok());
  EXPECT_EQ(requirements->size(), 12u);
}

}  // namespace
}  // namespace cdcview
