// Write-sharded views: merged queries of a logical key checked against a brute-force answer
// (every shard's entries, filtered by the condition, sorted by remainder, paged) for every
// sort operator, both directions, several page sizes, 4 and 16 shards with uneven and empty
// shards; physical-key queries; page tokens across shardings; DescribeView's shard counts.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "daemon/apply/applier.h"
#include "daemon/config/config.h"
#include "daemon/log/log.h"
#include "daemon/server/view_reader.h"
#include "daemon/state/catalog.h"
#include "daemon/store/store.h"
#include "gtest/gtest.h"
#include "index_builders/key_codec.h"
#include "tests/fakes/fake_dead_letter_sink.h"
#include "tests/fakes/records.h"
#include "tests/fakes/temp_dir.h"
#include "tests/fakes/reader_fixture.h"
#include "tests/fakes/test_store.h"

namespace cdcview {
namespace {

using test::At;
using test::S;
using Strings = std::vector<std::string>;

constexpr char kConfigYaml[] = R"(
sources:
  - { name: s, table: App, file: { path: unused.ndjson } }
tables:
  - name: App
    key: { partition: PK, sort: SK }
    views:
      - name: V4
        partition_key: { attribute: GSI1PK, type: S }
        sort_key: { attribute: GSI1SK, type: S }
        shards: { count: 4 }
      - name: V16
        partition_key: { attribute: P16, type: S }
        sort_key: { attribute: GSI1SK, type: S }
        projection: KEYS_ONLY
        shards: { count: 16, suffix: "_{shard}" }
      - name: NoSort
        partition_key: { template: "T#{bucket}" }
        shards: { count: 3 }
)";

v1::AttributeValue PS(const std::string& s) {
  v1::AttributeValue v;
  v.set_s(s);
  return v;
}

// "physical pk|sort key|PK" per entry.
Strings Entries(const v1::QueryResponse& response) {
  Strings out;
  for (const v1::ViewEntry& e : response.entries()) {
    out.push_back(absl::StrCat(e.partition_key().s(), "|", absl::CEscape(e.sort_key().s()), "|",
                               e.item().attributes().at("PK").s()));
  }
  return out;
}

std::string Text(const absl::Status& status) {
  return absl::StrCat(absl::StatusCodeToString(status.code()), ": ", std::string(status.message()));
}

// What an item put into a view: its physical partition key, sort key and table key.
struct Row {
  std::string pk;
  std::string sk;
  std::string table_pk;

  // enc(sk)·enc(PK)·enc(SK): the order within a partition and across merged shards.
  std::string Remainder() const {
    std::string r;
    EncodeKeyComponent(S(sk), &r);
    EncodeKeyComponent(S(table_pk), &r);
    EncodeKeyComponent(S("X"), &r);
    return r;
  }
  std::string Text() const { return absl::StrCat(pk, "|", absl::CEscape(sk), "|", table_pk); }
};

// The sort conditions of the brute force, with the request that asks for them.
struct Cond {
  std::string name;
  v1::SortCondition::Op op = v1::SortCondition::OP_UNSPECIFIED;
  std::string a, b;

  bool Holds(const std::string& sk) const {
    switch (op) {
      case v1::SortCondition::EQ: return sk == a;
      case v1::SortCondition::LT: return sk < a;
      case v1::SortCondition::LE: return sk <= a;
      case v1::SortCondition::GT: return sk > a;
      case v1::SortCondition::GE: return sk >= a;
      case v1::SortCondition::BETWEEN: return a <= sk && sk <= b;
      case v1::SortCondition::BEGINS_WITH: return sk.starts_with(a);
      default: return true;
    }
  }
  void Apply(v1::QueryRequest* r) const {
    if (op == v1::SortCondition::OP_UNSPECIFIED) return;
    r->mutable_sort()->set_op(op);
    r->mutable_sort()->mutable_value()->set_s(a);
    if (op == v1::SortCondition::BETWEEN) r->mutable_sort()->mutable_value2()->set_s(b);
  }
};

const std::string kNul("ab\0z", 4);

std::vector<Cond> Conditions() {
  using Op = v1::SortCondition;
  return {
      {"none", v1::SortCondition::OP_UNSPECIFIED, "", ""},
      {"EQ b", Op::EQ, "b", ""},
      {"EQ ab", Op::EQ, "ab", ""},
      {"EQ missing", Op::EQ, "zz", ""},
      {"LT b", Op::LT, "b", ""},
      {"LE b", Op::LE, "b", ""},
      {"GT ab", Op::GT, "ab", ""},
      {"GE ab", Op::GE, "ab", ""},
      {"BETWEEN ab..ba", Op::BETWEEN, "ab", "ba"},
      {"BETWEEN b..b", Op::BETWEEN, "b", "b"},
      {"BEGINS_WITH ab", Op::BEGINS_WITH, "ab", ""},
      {"BEGINS_WITH a", Op::BEGINS_WITH, "a", ""},
      {"BEGINS_WITH q", Op::BEGINS_WITH, "q", ""},
  };
}

class ShardedViewTest : public test::ReaderFixture {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(OpenReader(kConfigYaml));
    ASSERT_TRUE(applier_->RebuildViews().ok());
  }

  void Put(Item item) {
    std::vector<SourceRecord> batch = {
        test::Insert(config_.tables[0].key, item, At(absl::StrCat(++position_)))};
    ASSERT_TRUE(applier_->ApplyBatch(&batch).ok());
  }

  // 41 items of logical key DAY#one (V4: shards 0, 1, 3 hold 23, 6, 12; shard 2 is empty) and
  // HOT (V16: shard i*i mod 13, so 13..15 are empty and the rest uneven), with sort keys that
  // repeat across shards (ties go by table key) and nest as prefixes; plus neighbours that
  // a merge must not pick up.
  void PutItems() {
    const Strings sort_keys = {"a", "ab", "abc", kNul, "b", "ba", "bb", "c"};
    for (int i = 0; i < 41; ++i) {
      const int shard4 = i % 7 == 0 ? 1 : (i % 3 == 0 ? 3 : 0);
      const int shard16 = (i * i) % 13;
      const std::string pk = absl::StrCat("I#", (i * 919) % 1000);  // distinct, scrambled
      const std::string sk = sort_keys[(i * 5) % sort_keys.size()];
      Row r4{absl::StrCat("DAY#one#", shard4), sk, pk};
      Row r16{absl::StrCat("HOT_", shard16), sk, pk};
      Put({{"PK", S(pk)}, {"SK", S("X")}, {"GSI1PK", S(r4.pk)}, {"P16", S(r16.pk)},
           {"GSI1SK", S(sk)}});
      v4_.push_back(r4);
      v16_.push_back(r16);
    }
    // Not DAY#one's shards: another logical key sharing its text as a prefix, the bare logical
    // key, a shard number beyond the count and a shard number with a leading zero.
    int n = 0;
    for (const char* pk : {"DAY#onex#0", "DAY#one", "DAY#one#4", "DAY#one#01", "DAY#two#3"}) {
      Put({{"PK", S(absl::StrCat("N#", n++))}, {"SK", S("X")}, {"GSI1PK", S(pk)},
           {"P16", S(absl::StrCat("HOT_", pk))}, {"GSI1SK", S("b")}});
    }
  }

  // The brute-force answer: rows of `logical`'s shards matching `cond`, in remainder order.
  static Strings Expected(const std::vector<Row>& rows, const ShardSpec& shards,
                          const std::string& logical, const Cond& cond, bool backward) {
    std::vector<const Row*> hits;
    for (const Row& r : rows) {
      bool in_shard = false;
      for (uint32_t s = 0; s < shards.count; ++s) {
        in_shard |= r.pk == shards.PhysicalKey(logical, s);
      }
      if (in_shard && cond.Holds(r.sk)) hits.push_back(&r);
    }
    std::sort(hits.begin(), hits.end(),
              [](const Row* x, const Row* y) { return x->Remainder() < y->Remainder(); });
    if (backward) std::reverse(hits.begin(), hits.end());
    Strings out;
    for (const Row* r : hits) out.push_back(r->Text());
    return out;
  }

  // Every page of `request` with `page` entries per page (0: the server's page size); checks
  // that every page but the last is full and that only pages followed by more carry a token.
  Strings Paged(const ViewReader& reader, v1::QueryRequest request, uint32_t page,
                size_t expected_total) {
    Strings all;
    request.set_limit(page);
    const size_t per_page = page == 0 ? 1000 : page;
    const size_t want_pages = std::max<size_t>(1, (expected_total + per_page - 1) / per_page);
    for (size_t pages = 1; pages <= want_pages + 1; ++pages) {
      auto response = reader.Query(request);
      EXPECT_TRUE(response.ok()) << response.status();
      if (!response.ok()) return all;
      Strings got = Entries(*response);
      all.insert(all.end(), got.begin(), got.end());
      if (response->next_page_token().empty()) {
        EXPECT_EQ(pages, want_pages) << "pages";
        return all;
      }
      EXPECT_EQ(got.size(), per_page) << "a page with a token is full";
      request.set_page_token(response->next_page_token());
    }
    ADD_FAILURE() << "paging did not end after " << want_pages + 1 << " pages";
    return all;
  }

  void CheckEveryCondition(const std::string& view, const std::vector<Row>& rows,
                           const std::string& logical) {
    const ShardSpec& shards = catalog_->FindView(view)->spec->shards;
    for (const Cond& cond : Conditions()) {
      for (bool backward : {false, true}) {
        const Strings want = Expected(rows, shards, logical, cond, backward);
        for (uint32_t page : {1u, 2u, 3u, 7u, 0u}) {
          SCOPED_TRACE(absl::StrCat(view, " ", cond.name, backward ? " backward" : " forward",
                                    " page ", page));
          v1::QueryRequest request;
          request.set_view(view);
          *request.mutable_partition_key() = PS(logical);
          request.set_scan_backward(backward);
          cond.Apply(&request);
          EXPECT_EQ(Paged(*reader_, request, page, want.size()), want);
        }
      }
    }
  }

  v1::QueryRequest Request(const std::string& view, const std::string& pk, uint32_t limit,
                           bool backward = false) {
    v1::QueryRequest r;
    r.set_view(view);
    *r.mutable_partition_key() = PS(pk);
    r.set_limit(limit);
    r.set_scan_backward(backward);
    return r;
  }

  // A reader over the same store whose config gives V4 another sharding (count 0: none).
  std::unique_ptr<ViewReader> ReaderWithV4Shards(uint32_t count, std::string suffix) {
    other_config_ = std::make_unique<Config>(config_);
    other_config_->tables[0].views[0].shards = ShardSpec{count, std::move(suffix)};
    other_catalog_ = std::make_unique<Catalog>(*other_config_, store_->max_key_size());
    return std::make_unique<ViewReader>(*other_catalog_, *store_, *published_);
  }

  std::unique_ptr<Config> other_config_;
  std::unique_ptr<Catalog> other_catalog_;
  int position_ = 0;
  std::vector<Row> v4_, v16_;
};

TEST_F(ShardedViewTest, FourShardsMergeExactlyForEveryConditionDirectionAndPageSize) {
  PutItems();
  CheckEveryCondition("V4", v4_, "DAY#one");
}

TEST_F(ShardedViewTest, SixteenShardsMergeExactlyForEveryConditionDirectionAndPageSize) {
  PutItems();
  CheckEveryCondition("V16", v16_, "HOT");
}

// A merged page ends by max_bytes as a single partition's does: max_bytes 1 gives one entry a
// page, and the pages, forward and backward, are the whole merged answer.
TEST_F(ShardedViewTest, MaxBytesEndsAMergedPageAfterTheEntryThatReachesIt) {
  PutItems();
  const ShardSpec& shards = catalog_->FindView("V16")->spec->shards;
  for (bool backward : {false, true}) {
    v1::QueryRequest request = Request("V16", "HOT", 0, backward);
    request.set_max_bytes(1);
    Strings all;
    for (int i = 0; i < 100; ++i) {
      auto response = reader_->Query(request);
      ASSERT_TRUE(response.ok()) << response.status();
      ASSERT_EQ(response->entries_size(), 1);
      all.push_back(Entries(*response)[0]);
      if (response->next_page_token().empty()) break;
      request.set_page_token(response->next_page_token());
    }
    EXPECT_EQ(all, Expected(v16_, shards, "HOT", Cond{"none", v1::SortCondition::OP_UNSPECIFIED,
                                                      "", ""}, backward));
  }
}

// The brute force is itself checked once by hand: the first entries of the merge, with
// equal sort keys from different shards ordered by table key.
TEST_F(ShardedViewTest, MergeOrderIsSortKeyThenTableKeyAcrossShards) {
  PutItems();
  auto response = reader_->Query(Request("V4", "DAY#one", 8));
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(Entries(*response),
            (Strings{"DAY#one#1|a|I#0", "DAY#one#0|a|I#352", "DAY#one#0|a|I#408",
                     "DAY#one#3|a|I#56", "DAY#one#0|a|I#704", "DAY#one#0|a|I#760",
                     "DAY#one#1|ab|I#299", "DAY#one#0|ab|I#3"}));
  EXPECT_FALSE(response->next_page_token().empty());
}

TEST_F(ShardedViewTest, ALogicalKeyWithNoEntriesIsEmptyWithoutToken) {
  PutItems();
  for (bool backward : {false, true}) {
    auto response = reader_->Query(Request("V4", "DAY#three", 5, backward));
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(response->entries_size(), 0);
    EXPECT_TRUE(response->next_page_token().empty());
  }
}

TEST_F(ShardedViewTest, APhysicalKeyQueriesThatPartitionOnly) {
  PutItems();
  std::vector<Row> rows;
  for (const Row& r : v4_) {
    if (r.pk == "DAY#one#3") rows.push_back(r);
  }
  std::sort(rows.begin(), rows.end(),
            [](const Row& x, const Row& y) { return x.Remainder() < y.Remainder(); });
  Strings want;
  for (const Row& r : rows) want.push_back(r.Text());
  ASSERT_EQ(want.size(), 12u);
  EXPECT_EQ(Paged(*reader_, Request("V4", "DAY#one#3", 0), 4, want.size()), want);

  // Keys that are not physical keys of V4 are logical: DAY#one#4 has no shards of its own.
  auto beyond = reader_->Query(Request("V4", "DAY#one#4", 0));
  ASSERT_TRUE(beyond.ok());
  EXPECT_EQ(beyond->entries_size(), 0);

  // A single-partition token is no merged token, and the other way round.
  auto physical = reader_->Query(Request("V4", "DAY#one#3", 2));
  ASSERT_TRUE(physical.ok());
  v1::QueryRequest merged = Request("V4", "DAY#one", 2);
  merged.set_page_token(physical->next_page_token());
  EXPECT_EQ(Text(reader_->Query(merged).status()),
            "INVALID_ARGUMENT: page_token was issued for a query of one partition, not for this "
            "merged query of 4 shards with suffix \"#{shard}\"; start again without a token");
  auto logical = reader_->Query(Request("V4", "DAY#one", 2));
  ASSERT_TRUE(logical.ok());
  v1::QueryRequest single = Request("V4", "DAY#one#3", 2);
  single.set_page_token(logical->next_page_token());
  EXPECT_EQ(Text(reader_->Query(single).status()),
            "INVALID_ARGUMENT: page_token was issued for a merged query of a sharded partition "
            "key (4 shards with suffix \"#{shard}\"), not for this query; start again without a "
            "token");
}

// Whether a key is physical is decided by its text alone: X#1 is shard 1 of X, never the
// logical key of X#1#0..3.
TEST_F(ShardedViewTest, AKeyEndingInTheSuffixIsPhysical) {
  Put({{"PK", S("A")}, {"SK", S("X")}, {"GSI1PK", S("X#1")}, {"GSI1SK", S("a")}});
  Put({{"PK", S("B")}, {"SK", S("X")}, {"GSI1PK", S("X#1#0")}, {"GSI1SK", S("b")}});
  auto one = reader_->Query(Request("V4", "X#1", 0));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(Entries(*one), (Strings{"X#1|a|A"}));
  auto logical = reader_->Query(Request("V4", "X", 0));
  ASSERT_TRUE(logical.ok()) << logical.status();
  EXPECT_EQ(Entries(*logical), (Strings{"X#1|a|A"}));
}

TEST_F(ShardedViewTest, ViewsWithoutSortKeyMergeByTableKey) {
  int n = 0;
  for (const char* bucket : {"x#2", "x#0", "x#2", "x#1", "x#0", "y#0"}) {
    // PK order differs from put order and from shard order.
    Put({{"PK", S(absl::StrCat("K", (n * 7) % 10))}, {"SK", S("X")},
         {"bucket", S(bucket)}});
    ++n;
  }
  auto response = reader_->Query(Request("NoSort", "T#x", 0));
  ASSERT_TRUE(response.ok()) << response.status();
  Strings pks;
  for (const v1::ViewEntry& e : response->entries()) {
    pks.push_back(absl::StrCat(e.partition_key().s(), "/", e.item().attributes().at("PK").s()));
  }
  EXPECT_EQ(pks, (Strings{"T#x#2/K0", "T#x#1/K1", "T#x#2/K4", "T#x#0/K7", "T#x#0/K8"}));
  EXPECT_FALSE(response->entries(0).has_sort_key());
}

TEST_F(ShardedViewTest, TokensAreBoundToShardingDirectionAndLogicalKey) {
  PutItems();
  v1::QueryRequest request = Request("V4", "DAY#one", 3);
  auto first = reader_->Query(request);
  ASSERT_TRUE(first.ok());
  const std::string token = first->next_page_token();
  ASSERT_FALSE(token.empty());

  auto with_token = [&](const ViewReader& reader, v1::QueryRequest r) {
    r.set_page_token(token);
    auto response = reader.Query(r);
    return response.ok() ? std::string("<ok>") : Text(response.status());
  };
  // The sharding changed (the view is not rebuilt for that, so the fingerprint is the same).
  EXPECT_EQ(with_token(*ReaderWithV4Shards(8, "#{shard}"), request),
            "INVALID_ARGUMENT: page_token was issued when this view had 4 shards with suffix "
            "\"#{shard}\"; it now has 8 shards with suffix \"#{shard}\"; start again without a "
            "token");
  EXPECT_EQ(with_token(*ReaderWithV4Shards(4, "-{shard}"), request),
            "INVALID_ARGUMENT: page_token was issued when this view had 4 shards with suffix "
            "\"#{shard}\"; it now has 4 shards with suffix \"-{shard}\"; start again without a "
            "token");
  EXPECT_EQ(with_token(*ReaderWithV4Shards(0, ""), request),
            "INVALID_ARGUMENT: page_token was issued for a merged query of a sharded partition "
            "key (4 shards with suffix \"#{shard}\"), not for this query; start again without a "
            "token");
  EXPECT_EQ(with_token(*reader_, Request("V4", "DAY#two", 3)),
            "INVALID_ARGUMENT: page_token belongs to another partition key; start again without a "
            "token");
  EXPECT_EQ(with_token(*reader_, Request("V4", "DAY#one", 3, true)),
            "INVALID_ARGUMENT: page_token was issued for the other direction; keep scan_backward "
            "as in the first request");
  EXPECT_EQ(with_token(*reader_, Request("V16", "DAY#one", 3)),
            "INVALID_ARGUMENT: page_token was issued for another definition of this view; start "
            "again without a token");
  std::string damaged = token;
  damaged[damaged.size() / 2] ^= 0x20;
  v1::QueryRequest r = request;
  r.set_page_token(damaged);
  EXPECT_EQ(Text(reader_->Query(r).status()),
            "INVALID_ARGUMENT: page_token is malformed; pass next_page_token from the previous "
            "response unchanged");
  // A reader with the same sharding resumes it.
  EXPECT_EQ(with_token(*ReaderWithV4Shards(4, "#{shard}"), request), "<ok>");
}

TEST(MergedPageTokenTest, RoundTripsAndRejectsMalformedOnes) {
  const ShardSpec shards{4, "#{shard}"};
  const std::string remainder("\x03" "b\0\xFF" "c", 5);
  const std::string token = EncodeMergedPageToken("fp", true, shards, "L", remainder);
  auto decoded = DecodeMergedPageToken(token, "fp", true, shards, "L");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, remainder);
  for (std::string bad : {token.substr(1), token.substr(0, token.size() - 1), token + "x",
                          EncodeMergedPageToken("fp", true, shards, "L", "")}) {
    EXPECT_EQ(DecodeMergedPageToken(bad, "fp", true, shards, "L").status().message(),
              "page_token is malformed; pass next_page_token from the previous response "
              "unchanged")
        << absl::CEscape(bad);
  }
}

TEST_F(ShardedViewTest, DescribeViewCountsEntriesPerShardAndSkew) {
  auto empty = reader_->DescribeView("V4");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->shard_count(), 4u);
  EXPECT_EQ(empty->shard_suffix(), "#{shard}");
  EXPECT_EQ(std::vector<uint64_t>(empty->shard_item_counts().begin(),
                                  empty->shard_item_counts().end()),
            (std::vector<uint64_t>{0, 0, 0, 0}));
  EXPECT_EQ(empty->shard_skew(), 1.0);

  PutItems();
  auto v4 = reader_->DescribeView("V4");
  ASSERT_TRUE(v4.ok());
  // DAY#one: 23, 6, 0, 12; DAY#two#3 adds one to shard 3; DAY#onex#0 one to shard 0. DAY#one,
  // DAY#one#4 and DAY#one#01 are no physical keys and count nowhere.
  EXPECT_EQ(std::vector<uint64_t>(v4->shard_item_counts().begin(), v4->shard_item_counts().end()),
            (std::vector<uint64_t>{24, 6, 0, 13}));
  EXPECT_EQ(v4->item_count(), 46u);
  EXPECT_EQ(v4->shard_skew(), 24.0 / (43.0 / 4));

  auto v16 = reader_->DescribeView("V16");
  ASSERT_TRUE(v16.ok());
  std::vector<uint64_t> want(16, 0);
  for (int i = 0; i < 41; ++i) ++want[(i * i) % 13];
  EXPECT_EQ(std::vector<uint64_t>(v16->shard_item_counts().begin(),
                                  v16->shard_item_counts().end()),
            want);
  EXPECT_EQ(v16->shard_suffix(), "_{shard}");
  const uint64_t largest = *std::max_element(want.begin(), want.end());
  EXPECT_EQ(v16->shard_skew(), static_cast<double>(largest) / (41.0 / 16));

  // Unsharded views report no sharding.
  auto plain = ReaderWithV4Shards(0, "")->DescribeView("V4");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->shard_count(), 0u);
  EXPECT_EQ(plain->shard_item_counts_size(), 0);
  EXPECT_EQ(plain->shard_skew(), 0.0);
}

TEST_F(ShardedViewTest, ListViewsLeavesTheShardWalkToDescribeView) {
  PutItems();
  auto listed = reader_->ListViews();
  ASSERT_TRUE(listed.ok()) << listed.status();
  const v1::ViewDescription* v4 = nullptr;
  for (const v1::ViewDescription& d : listed->views()) {
    if (d.name() == "V4") v4 = &d;
  }
  ASSERT_NE(v4, nullptr);
  EXPECT_EQ(v4->shard_count(), 4u);
  EXPECT_EQ(v4->shard_suffix(), "#{shard}");
  EXPECT_EQ(v4->item_count(), 46u);
  EXPECT_EQ(v4->shard_item_counts_size(), 0);
  EXPECT_EQ(v4->shard_skew(), 0.0);
  EXPECT_EQ(reader_->DescribeView("V4")->shard_item_counts_size(), 4);
}

TEST_F(ShardedViewTest, EvenShardsHaveSkewOne) {
  for (int i = 0; i < 8; ++i) {
    Put({{"PK", S(absl::StrCat("E", i))}, {"SK", S("X")},
         {"GSI1PK", S(absl::StrCat("EVEN#", i % 4))}, {"GSI1SK", S("s")}});
  }
  auto v4 = reader_->DescribeView("V4");
  ASSERT_TRUE(v4.ok());
  EXPECT_EQ(std::vector<uint64_t>(v4->shard_item_counts().begin(), v4->shard_item_counts().end()),
            (std::vector<uint64_t>{2, 2, 2, 2}));
  EXPECT_EQ(v4->shard_skew(), 1.0);
}

}  // namespace
}  // namespace cdcview
