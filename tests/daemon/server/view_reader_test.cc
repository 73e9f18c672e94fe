#include "daemon/server/view_reader.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "daemon/apply/applier.h"
#include "daemon/config/config.h"
#include "daemon/log/log.h"
#include "daemon/server/read_consistency.h"
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
using test::N;
using test::S;
using Strings = std::vector<std::string>;

std::string Text(const absl::Status& status) { return std::string(status.message()); }

// The views of examples/cdcview.yaml plus ByStatus, a view without sort key.
constexpr char kConfigYaml[] = R"(
sources:
  - name: sample
    table: App
    file: { path: unused.ndjson }
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
        projection: { include: [status, total] }
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
      - name: ByStatus
        partition_key: { attribute: status, type: S }
        projection: KEYS_ONLY
)";

v1::AttributeValue PS(const std::string& s) {
  v1::AttributeValue v;
  v.set_s(s);
  return v;
}
v1::AttributeValue PN(const std::string& n) {
  v1::AttributeValue v;
  v.set_n(n);
  return v;
}

v1::QueryRequest Q(const std::string& view, v1::AttributeValue pk) {
  v1::QueryRequest r;
  r.set_view(view);
  *r.mutable_partition_key() = std::move(pk);
  return r;
}
v1::QueryRequest Q(const std::string& view, v1::AttributeValue pk, v1::SortCondition::Op op,
                   v1::AttributeValue value, v1::AttributeValue value2 = {}) {
  v1::QueryRequest r = Q(view, std::move(pk));
  r.mutable_sort()->set_op(op);
  *r.mutable_sort()->mutable_value() = std::move(value);
  if (value2.value_case() != v1::AttributeValue::VALUE_NOT_SET) {
    *r.mutable_sort()->mutable_value2() = std::move(value2);
  }
  return r;
}
v1::QueryRequest Backward(v1::QueryRequest r) {
  r.set_scan_backward(true);
  return r;
}

std::string Short(const v1::AttributeValue& v) {
  switch (v.value_case()) {
    case v1::AttributeValue::kS: return absl::CEscape(v.s());
    case v1::AttributeValue::kN: return v.n();
    default: return "?";
  }
}

// "sort key@PK" per entry ("PK" alone for views without sort key).
template <typename Response>
Strings Keys(const Response& response) {
  Strings out;
  for (const v1::ViewEntry& e : response.entries()) {
    std::string pk = Short(e.item().attributes().at("PK"));
    out.push_back(e.has_sort_key() ? Short(e.sort_key()) + "@" + pk : pk);
  }
  return out;
}

class ViewReaderTest : public test::ReaderFixture {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(OpenReader(kConfigYaml));
  }

  void Ready() { ASSERT_TRUE(applier_->RebuildViews().ok()); }

  void Put(Item item) {
    std::vector<SourceRecord> batch = {
        test::Insert(config_.tables[0].key, item, At(absl::StrCat(++position_)))};
    ASSERT_TRUE(applier_->ApplyBatch(&batch).ok());
  }
  void Delete(Item keys) {
    std::vector<SourceRecord> batch = {
        test::Remove(config_.tables[0].key, keys, At(absl::StrCat(++position_)))};
    ASSERT_TRUE(applier_->ApplyBatch(&batch).ok());
  }

  // GSI1 partition "G": a ab abc b ba c and "ab\0z"; partition "G\0x" and "H" hold one each.
  void PutGsi1() {
    int n = 0;
    for (const char* sk : {"c", "a", "ab", "ba", "abc", "b"}) {
      Put({{"PK", S(absl::StrCat("I#", n++))}, {"SK", S("X")}, {"GSI1PK", S("G")}, {"GSI1SK", S(sk)}});
    }
    Put({{"PK", S("I#nul")}, {"SK", S("X")}, {"GSI1PK", S("G")}, {"GSI1SK", S(std::string("ab\0z", 4))}});
    Put({{"PK", S("I#other")}, {"SK", S("X")}, {"GSI1PK", S(std::string("G\0x", 3))}, {"GSI1SK", S("a")}});
    Put({{"PK", S("I#h")}, {"SK", S("X")}, {"GSI1PK", S("H")}, {"GSI1SK", S("a")}});
  }

  // ByScore partition "chess": -10 -2.5 -1 0 0.5 1 1(.00) 2 10 100; "go" holds 5.
  void PutScores() {
    int n = 0;
    for (const char* score : {"100", "-1", "0.5", "-10", "2", "1", "0", "1.00", "10", "-2.5"}) {
      char pk[8];
      std::snprintf(pk, sizeof pk, "P#%02d", n++);
      Put({{"PK", S(pk)}, {"SK", S("G")}, {"board", S("chess")}, {"score", N(score)}});
    }
    Put({{"PK", S("P#go")}, {"SK", S("G")}, {"board", S("go")}, {"score", N("5")}});
  }

  absl::StatusOr<Strings> Run(const v1::QueryRequest& request) {
    auto response = reader_->Query(request);
    if (!response.ok()) return response.status();
    if (!response->next_page_token().empty()) {
      return absl::InternalError("unexpected next_page_token on a full answer");
    }
    return Keys(*response);
  }

  // Walks every page of `request` with `page` entries per page; checks the page shapes.
  Strings Paged(v1::QueryRequest request, uint32_t page) {
    Strings all;
    request.set_limit(page);
    for (int pages = 0; pages < 100; ++pages) {
      auto response = reader_->Query(request);
      EXPECT_TRUE(response.ok()) << response.status();
      if (!response.ok()) return all;
      Strings keys = Keys(*response);
      all.insert(all.end(), keys.begin(), keys.end());
      if (response->next_page_token().empty()) {
        EXPECT_LE(keys.size(), page);
        return all;
      }
      EXPECT_EQ(keys.size(), page) << "a page with a token is full";
      request.set_page_token(response->next_page_token());
    }
    ADD_FAILURE() << "paging did not end";
    return all;
  }

  int position_ = 0;
};

absl::StatusOr<Strings> Ok(Strings s) { return s; }

// ---- Sort conditions, S sort keys

TEST_F(ViewReaderTest, StringSortConditions) {
  Ready();
  PutGsi1();
  const std::string nul = "ab\\000z";
  using Op = v1::SortCondition;
  struct Case {
    v1::QueryRequest request;
    Strings want;
  };
  const std::vector<Case> cases = {
      {Q("GSI1", PS("G")), {"a@I#1", "ab@I#2", nul + "@I#nul", "abc@I#4", "b@I#5", "ba@I#3", "c@I#0"}},
      {Q("GSI1", PS("G"), Op::EQ, PS("ab")), {"ab@I#2"}},
      {Q("GSI1", PS("G"), Op::EQ, PS("aa")), {}},
      {Q("GSI1", PS("G"), Op::LT, PS("ab")), {"a@I#1"}},
      {Q("GSI1", PS("G"), Op::LT, PS("abb")), {"a@I#1", "ab@I#2", nul + "@I#nul"}},
      {Q("GSI1", PS("G"), Op::LE, PS("ab")), {"a@I#1", "ab@I#2"}},
      {Q("GSI1", PS("G"), Op::LE, PS("abb")), {"a@I#1", "ab@I#2", nul + "@I#nul"}},
      {Q("GSI1", PS("G"), Op::GT, PS("ab")), {nul + "@I#nul", "abc@I#4", "b@I#5", "ba@I#3", "c@I#0"}},
      {Q("GSI1", PS("G"), Op::GT, PS("bz")), {"c@I#0"}},
      {Q("GSI1", PS("G"), Op::GE, PS("ab")),
       {"ab@I#2", nul + "@I#nul", "abc@I#4", "b@I#5", "ba@I#3", "c@I#0"}},
      {Q("GSI1", PS("G"), Op::GE, PS("bb")), {"c@I#0"}},
      {Q("GSI1", PS("G"), Op::GE, PS("d")), {}},
      {Q("GSI1", PS("G"), Op::BETWEEN, PS("ab"), PS("b")), {"ab@I#2", nul + "@I#nul", "abc@I#4", "b@I#5"}},
      {Q("GSI1", PS("G"), Op::BETWEEN, PS("aa"), PS("bb")),
       {"ab@I#2", nul + "@I#nul", "abc@I#4", "b@I#5", "ba@I#3"}},
      {Q("GSI1", PS("G"), Op::BETWEEN, PS("c"), PS("c")), {"c@I#0"}},
      {Q("GSI1", PS("G"), Op::BEGINS_WITH, PS("ab")), {"ab@I#2", nul + "@I#nul", "abc@I#4"}},
      {Q("GSI1", PS("G"), Op::BEGINS_WITH, PS(std::string("ab\0", 3))), {nul + "@I#nul"}},
      {Q("GSI1", PS("G"), Op::BEGINS_WITH, PS("b")), {"b@I#5", "ba@I#3"}},
      {Q("GSI1", PS("G"), Op::BEGINS_WITH, PS("z")), {}},
      // Partitions are exact: "G\0x" and "H" do not leak into "G" and back.
      {Q("GSI1", PS(std::string("G\0x", 3))), {"a@I#other"}},
      {Q("GSI1", PS("H")), {"a@I#h"}},
      {Q("GSI1", PS("F")), {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.request.ShortDebugString());
    EXPECT_EQ(Run(c.request), Ok(c.want));
    Strings reversed(c.want.rbegin(), c.want.rend());
    EXPECT_EQ(Run(Backward(c.request)), Ok(reversed));
  }
}

// ---- Sort conditions, N sort keys

TEST_F(ViewReaderTest, NumberSortConditions) {
  Ready();
  PutScores();
  using Op = v1::SortCondition;
  struct Case {
    v1::QueryRequest request;
    Strings want;
  };
  const Strings all = {"-10@P#03", "-2.5@P#09", "-1@P#01", "0@P#06", "0.5@P#02",
                       "1@P#05",   "1@P#07",    "2@P#04",  "10@P#08", "100@P#00"};
  auto range = [&](size_t from, size_t to) { return Strings(all.begin() + from, all.begin() + to); };
  const v1::AttributeValue chess = PS("chess");
  const std::vector<Case> cases = {
      {Q("ByScore", chess), all},
      {Q("ByScore", PS("go")), {"5@P#go"}},
      {Q("ByScore", chess, Op::EQ, PN("0.5")), {"0.5@P#02"}},
      {Q("ByScore", chess, Op::EQ, PN("1.0")), {"1@P#05", "1@P#07"}},  // numeric, not textual
      {Q("ByScore", chess, Op::EQ, PN("0")), {"0@P#06"}},
      {Q("ByScore", chess, Op::EQ, PN("3")), {}},
      {Q("ByScore", chess, Op::LT, PN("0.5")), range(0, 4)},
      {Q("ByScore", chess, Op::LT, PN("0.75")), range(0, 5)},
      {Q("ByScore", chess, Op::LT, PN("-10")), {}},
      {Q("ByScore", chess, Op::LE, PN("0.5")), range(0, 5)},
      {Q("ByScore", chess, Op::LE, PN("1")), range(0, 7)},
      {Q("ByScore", chess, Op::LE, PN("-11")), {}},
      {Q("ByScore", chess, Op::GT, PN("-1")), range(3, 10)},
      {Q("ByScore", chess, Op::GT, PN("-1.5")), range(2, 10)},
      {Q("ByScore", chess, Op::GT, PN("1")), range(7, 10)},
      {Q("ByScore", chess, Op::GT, PN("100")), {}},
      {Q("ByScore", chess, Op::GE, PN("-1")), range(2, 10)},
      {Q("ByScore", chess, Op::GE, PN("9.99")), range(8, 10)},
      {Q("ByScore", chess, Op::GE, PN("-1e3")), all},
      {Q("ByScore", chess, Op::BETWEEN, PN("-2.5"), PN("1")), range(1, 7)},
      {Q("ByScore", chess, Op::BETWEEN, PN("-3"), PN("1.5")), range(1, 7)},
      {Q("ByScore", chess, Op::BETWEEN, PN("0"), PN("0")), {"0@P#06"}},
      {Q("ByScore", chess, Op::BETWEEN, PN("3"), PN("9")), {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.request.ShortDebugString());
    EXPECT_EQ(Run(c.request), Ok(c.want));
    Strings reversed(c.want.rbegin(), c.want.rend());
    EXPECT_EQ(Run(Backward(c.request)), Ok(reversed));
  }
}

TEST_F(ViewReaderTest, BeginsWithOnACompositeSortKey) {
  Ready();
  int n = 0;
  for (const auto& [state, city] : std::vector<std::pair<std::string, std::string>>{
           {"TX", "Austin"}, {"CA", "SF"}, {"NY", "NYC"}, {"CAX", "Z"}, {"CA", "LA"}}) {
    Put({{"PK", S(absl::StrCat("L#", n++))}, {"SK", S("X")}, {"country", S("US")},
         {"state", S(state)}, {"city", S(city)}});
  }
  Put({{"PK", S("L#de")}, {"SK", S("X")}, {"country", S("DE")}, {"state", S("CA")},
       {"city", S("X")}});
  using Op = v1::SortCondition;
  EXPECT_EQ(Run(Q("ByLocation", PS("US"), Op::BEGINS_WITH, PS("CA#"))),
            Ok({"CA#LA@L#4", "CA#SF@L#1"}));
  EXPECT_EQ(Run(Q("ByLocation", PS("US"), Op::BEGINS_WITH, PS("CA"))),
            Ok({"CA#LA@L#4", "CA#SF@L#1", "CAX#Z@L#3"}));
  EXPECT_EQ(Run(Q("ByLocation", PS("US"), Op::BEGINS_WITH, PS("CA#S"))), Ok({"CA#SF@L#1"}));
  EXPECT_EQ(Run(Backward(Q("ByLocation", PS("US"), Op::BEGINS_WITH, PS("CA")))),
            Ok({"CAX#Z@L#3", "CA#SF@L#1", "CA#LA@L#4"}));
  EXPECT_EQ(Run(Q("ByLocation", PS("US"), Op::BEGINS_WITH, PS("N"))), Ok({"NY#NYC@L#2"}));
  EXPECT_EQ(Run(Q("ByLocation", PS("US"), Op::BEGINS_WITH, PS("W"))), Ok({}));
  EXPECT_EQ(Run(Q("ByLocation", PS("DE"), Op::BEGINS_WITH, PS("CA#"))), Ok({"CA#X@L#de"}));
}

// ---- Paging

TEST_F(ViewReaderTest, PagesConcatenateToTheFullAnswer) {
  Ready();
  PutScores();
  PutGsi1();
  using Op = v1::SortCondition;
  const std::vector<v1::QueryRequest> requests = {
      Q("ByScore", PS("chess")),
      Q("ByScore", PS("chess"), Op::GE, PN("-1")),
      Q("ByScore", PS("chess"), Op::BETWEEN, PN("-2.5"), PN("2")),
      Q("ByScore", PS("go")),
      Q("ByScore", PS("none")),
      Q("GSI1", PS("G")),
      Q("GSI1", PS("G"), Op::LE, PS("ab")),
      Q("GSI1", PS("G"), Op::BEGINS_WITH, PS("ab")),
  };
  for (const v1::QueryRequest& base : requests) {
    for (bool backward : {false, true}) {
      v1::QueryRequest request = base;
      request.set_scan_backward(backward);
      absl::StatusOr<Strings> full = Run(request);
      ASSERT_TRUE(full.ok()) << full.status();
      for (uint32_t page = 1; page <= 5; ++page) {
        SCOPED_TRACE(absl::StrCat(request.ShortDebugString(), " page ", page));
        EXPECT_EQ(Paged(request, page), *full);
      }
    }
  }
}

TEST_F(ViewReaderTest, LastPageHasNoTokenAndLimitIsCapped) {
  Ready();
  PutScores();
  v1::QueryRequest request = Q("ByScore", PS("chess"));
  request.set_limit(10);  // exactly all of them: no further page
  auto response = reader_->Query(request);
  ASSERT_TRUE(response.ok());
  EXPECT_EQ(response->entries_size(), 10);
  EXPECT_TRUE(response->next_page_token().empty());
  request.set_limit(9);
  response = reader_->Query(request);
  ASSERT_TRUE(response.ok());
  EXPECT_EQ(response->entries_size(), 9);
  EXPECT_FALSE(response->next_page_token().empty());

  // The server's page size bounds both limit 0 and larger limits.
  ViewReader small(*catalog_, *store_, *published_, /*max_page_size=*/3);
  for (uint32_t limit : {0u, 4u, 1000u}) {
    request.set_limit(limit);
    response = small.Query(request);
    ASSERT_TRUE(response.ok());
    EXPECT_EQ(Keys(*response), (Strings{"-10@P#03", "-2.5@P#09", "-1@P#01"})) << limit;
    EXPECT_FALSE(response->next_page_token().empty());
  }
}

// max_bytes ends a page after the entry whose stored bytes reach it: entries of about 1,000
// bytes under max_bytes 2,500 come three to a page; 1 gives one entry a page; every page but
// the last carries a token, and the pages concatenate to the whole answer.
TEST_F(ViewReaderTest, MaxBytesEndsAPageAfterTheEntryThatReachesIt) {
  Ready();
  for (const char* sk : {"a", "b", "c", "d", "e"}) {
    Put({{"PK", S(absl::StrCat("M#", sk))}, {"SK", S("X")}, {"GSI1PK", S("M")}, {"GSI1SK", S(sk)},
         {"blob", S(std::string(1000, 'x'))}});
  }
  auto pages = [&](auto request, uint32_t max_bytes, auto call) {
    std::vector<Strings> out;
    request.set_max_bytes(max_bytes);
    for (int i = 0; i < 10; ++i) {
      auto response = call(request);
      EXPECT_TRUE(response.ok()) << response.status();
      if (!response.ok()) break;
      out.push_back(Keys(*response));
      if (response->next_page_token().empty()) break;
      request.set_page_token(response->next_page_token());
    }
    return out;
  };
  auto query = [&](const v1::QueryRequest& r) { return reader_->Query(r); };
  EXPECT_EQ(pages(Q("GSI1", PS("M")), 2500, query),
            (std::vector<Strings>{{"a@M#a", "b@M#b", "c@M#c"}, {"d@M#d", "e@M#e"}}));
  EXPECT_EQ(pages(Backward(Q("GSI1", PS("M"))), 2500, query),
            (std::vector<Strings>{{"e@M#e", "d@M#d", "c@M#c"}, {"b@M#b", "a@M#a"}}));
  EXPECT_EQ(pages(Q("GSI1", PS("M")), 1, query),
            (std::vector<Strings>{{"a@M#a"}, {"b@M#b"}, {"c@M#c"}, {"d@M#d"}, {"e@M#e"}}));
  // With a limit, whichever comes first ends the page.
  v1::QueryRequest two = Q("GSI1", PS("M"));
  two.set_limit(2);
  EXPECT_EQ(pages(two, 2500, query),
            (std::vector<Strings>{{"a@M#a", "b@M#b"}, {"c@M#c", "d@M#d"}, {"e@M#e"}}));
  // 0: no bound.
  EXPECT_EQ(pages(Q("GSI1", PS("M")), 0, query),
            (std::vector<Strings>{{"a@M#a", "b@M#b", "c@M#c", "d@M#d", "e@M#e"}}));
  v1::ScanRequest scan;
  scan.set_view("GSI1");
  EXPECT_EQ(pages(scan, 2500, [&](const v1::ScanRequest& r) { return reader_->Scan(r); }),
            (std::vector<Strings>{{"a@M#a", "b@M#b", "c@M#c"}, {"d@M#d", "e@M#e"}}));
}

TEST_F(ViewReaderTest, ScanPagesThroughTheWholeView) {
  Ready();
  PutScores();
  v1::ScanRequest request;
  request.set_view("ByScore");
  auto full = reader_->Scan(request);
  ASSERT_TRUE(full.ok());
  const Strings all = {"-10@P#03", "-2.5@P#09", "-1@P#01", "0@P#06",  "0.5@P#02", "1@P#05",
                       "1@P#07",   "2@P#04",    "10@P#08", "100@P#00", "5@P#go"};
  EXPECT_EQ(Keys(*full), all);
  EXPECT_TRUE(full->next_page_token().empty());
  for (uint32_t page = 1; page <= 5; ++page) {
    Strings walked;
    request.set_limit(page);
    request.clear_page_token();
    for (int i = 0; i < 100; ++i) {
      auto response = reader_->Scan(request);
      ASSERT_TRUE(response.ok()) << response.status();
      Strings keys = Keys(*response);
      walked.insert(walked.end(), keys.begin(), keys.end());
      if (response->next_page_token().empty()) break;
      EXPECT_EQ(keys.size(), page);
      request.set_page_token(response->next_page_token());
    }
    EXPECT_EQ(walked, all) << page;
  }
  // Views without sort key have entries without sort_key.
  request.set_view("ByStatus");
  request.set_limit(0);
  request.clear_page_token();
  Put({{"PK", S("O#1")}, {"SK", S("X")}, {"status", S("OPEN")}});
  auto status = reader_->Scan(request);
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->entries_size(), 1);
  EXPECT_FALSE(status->entries(0).has_sort_key());
  EXPECT_EQ(status->entries(0).partition_key().s(), "OPEN");
  EXPECT_EQ(Keys(*status), (Strings{"O#1"}));
}

// ---- Page tokens

TEST_F(ViewReaderTest, PageTokensAreCheckedWithExactMessages) {
  Ready();
  PutScores();
  v1::QueryRequest request = Q("ByScore", PS("chess"));
  request.set_limit(2);
  auto first = reader_->Query(request);
  ASSERT_TRUE(first.ok());
  const std::string token = first->next_page_token();
  ASSERT_FALSE(token.empty());

  auto fails = [&](v1::QueryRequest r) -> std::string {
    auto response = reader_->Query(r);
    if (response.ok()) return "<ok>";
    return absl::StrCat(absl::StatusCodeToString(response.status().code()), ": ",
                        Text(response.status()));
  };
  const std::string malformed =
      "INVALID_ARGUMENT: page_token is malformed; pass next_page_token from the previous "
      "response unchanged";
  for (std::string bad : {std::string("x"), std::string("garbage-garbage"), token.substr(1),
                          token.substr(0, token.size() - 1), token + "x"}) {
    v1::QueryRequest r = request;
    r.set_page_token(bad);
    EXPECT_EQ(fails(r), malformed) << absl::CEscape(bad);
  }
  std::string flipped = token;
  flipped[flipped.size() / 2] ^= 0x01;
  request.set_page_token(flipped);
  EXPECT_EQ(fails(request), malformed);

  v1::QueryRequest other_pk = Q("ByScore", PS("go"));
  other_pk.set_page_token(token);
  EXPECT_EQ(fails(other_pk),
            "INVALID_ARGUMENT: page_token belongs to another partition key; start again without "
            "a token");

  v1::QueryRequest backward = Backward(Q("ByScore", PS("chess")));
  backward.set_page_token(token);
  EXPECT_EQ(fails(backward),
            "INVALID_ARGUMENT: page_token was issued for the other direction; keep scan_backward "
            "as in the first request");

  const std::string other_definition =
      "INVALID_ARGUMENT: page_token was issued for another definition of this view; start again "
      "without a token";
  v1::QueryRequest other_view = Q("GSI1", PS("chess"));
  other_view.set_page_token(token);
  EXPECT_EQ(fails(other_view), other_definition);
  // A token that names a key but another fingerprint (the view was redefined since).
  v1::QueryRequest redefined = Q("ByScore", PS("chess"));
  std::string key;
  EncodeKeyComponent(S("chess"), &key);
  redefined.set_page_token(EncodePageToken("0123456789abcdef", false, key));
  EXPECT_EQ(fails(redefined), other_definition);

  // The token resumes strictly after the last entry returned.
  request.set_page_token(token);
  auto second = reader_->Query(request);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(Keys(*second), (Strings{"-1@P#01", "0@P#06"}));

  // A Scan token is not a Query token of another view either.
  v1::ScanRequest scan;
  scan.set_view("GSI1");
  scan.set_page_token(token);
  auto scanned = reader_->Scan(scan);
  ASSERT_FALSE(scanned.ok());
  EXPECT_EQ(absl::StrCat("INVALID_ARGUMENT: ", Text(scanned.status())), other_definition);
}

TEST(PageTokenTest, RoundTripsAndRejectsAnEmptyKey) {
  const std::string key("k\0ey", 4);
  auto decoded = DecodePageToken(EncodePageToken("fp", true, key), "fp", true);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, key);
  auto empty = DecodePageToken(EncodePageToken("fp", false, ""), "fp", false);
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
}

// ---- Errors

TEST_F(ViewReaderTest, BadRequestsGetExactErrors) {
  Ready();
  using Op = v1::SortCondition;
  auto error = [&](const v1::QueryRequest& r) -> std::string {
    auto response = reader_->Query(r);
    if (response.ok()) return "<ok>";
    return absl::StrCat(absl::StatusCodeToString(response.status().code()), ": ",
                        Text(response.status()));
  };
  EXPECT_EQ(error(Q("Nope", PS("x"))),
            "NOT_FOUND: view \"Nope\" does not exist (views: GSI1, OpenOrders, ByMember, "
            "ByEntity, ByLocation, ByScore, ByStatus)");
  v1::QueryRequest no_pk;
  no_pk.set_view("GSI1");
  EXPECT_EQ(error(no_pk), "INVALID_ARGUMENT: partition_key is required");
  EXPECT_EQ(error(Q("GSI1", PN("1"))),
            "INVALID_ARGUMENT: partition_key: view GSI1 has a S partition key, got N");
  EXPECT_EQ(error(Q("GSI1", PN("1e999"))),
            "INVALID_ARGUMENT: partition_key: number \"1e999\" is out of DynamoDB's range "
            "(magnitude 1e-130 to 1e126)");
  EXPECT_EQ(error(Q("ByScore", PS("chess"), Op::GT, PS("1"))),
            "INVALID_ARGUMENT: sort.value: view ByScore has a N sort key, got S");
  EXPECT_EQ(error(Q("GSI1", PS("G"), Op::EQ, PN("1"))),
            "INVALID_ARGUMENT: sort.value: view GSI1 has a S sort key, got N");
  EXPECT_EQ(error(Q("GSI1", PS("G"), Op::EQ, v1::AttributeValue())),
            "INVALID_ARGUMENT: sort.value is required");
  EXPECT_EQ(error(Q("ByScore", PS("chess"), Op::BEGINS_WITH, PN("1"))),
            "INVALID_ARGUMENT: sort: begins_with needs an S or B sort key; view ByScore sorts by N");
  EXPECT_EQ(error(Q("ByScore", PS("chess"), Op::BETWEEN, PN("2"), PN("1"))),
            "INVALID_ARGUMENT: sort: BETWEEN bounds are in the wrong order; value must be <= "
            "value2");
  EXPECT_EQ(error(Q("ByScore", PS("chess"), Op::BETWEEN, PN("1"))),
            "INVALID_ARGUMENT: sort.value2 is required");
  EXPECT_EQ(error(Q("ByScore", PS("chess"), Op::BETWEEN, PN("1"), PS("2"))),
            "INVALID_ARGUMENT: sort.value2: view ByScore has a N sort key, got S");
  EXPECT_EQ(error(Q("ByStatus", PS("OPEN"), Op::EQ, PS("x"))),
            "INVALID_ARGUMENT: sort: view ByStatus has no sort key; drop the sort condition");
  // OP_UNSPECIFIED means no condition, also on a view without sort key.
  v1::QueryRequest unspecified = Q("ByStatus", PS("OPEN"));
  unspecified.mutable_sort();
  EXPECT_EQ(error(unspecified), "<ok>");

  v1::ScanRequest scan;
  scan.set_view("Nope");
  EXPECT_EQ(reader_->Scan(scan).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ViewReaderTest, ViewsBeingBuiltAreUnavailable) {
  // SetUp ran Recover on a fresh store: every view is new, so BUILDING until RebuildViews.
  auto response = reader_->Query(Q("GSI1", PS("G")));
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Text(response.status()),
            "view GSI1 is being rebuilt (0% done); retry when DescribeView says READY");
  v1::ScanRequest scan;
  scan.set_view("ByScore");
  EXPECT_EQ(reader_->Scan(scan).status().code(), absl::StatusCode::kUnavailable);
  auto described = reader_->DescribeView("GSI1");
  ASSERT_TRUE(described.ok());
  EXPECT_EQ(described->state(), v1::ViewDescription::BUILDING);
  EXPECT_EQ(described->build_progress(), 0.0);

  Ready();
  EXPECT_TRUE(reader_->Query(Q("GSI1", PS("G"))).ok());
  described = reader_->DescribeView("GSI1");
  ASSERT_TRUE(described.ok());
  EXPECT_EQ(described->state(), v1::ViewDescription::READY);
  EXPECT_EQ(described->build_progress(), 1.0);
}

// ---- GetItem

TEST_F(ViewReaderTest, GetItemFoundNotFoundAndTombstone) {
  Ready();
  Put({{"PK", S("A")}, {"SK", S("1")}, {"n", N("1.50")}});
  Put({{"PK", S("B")}, {"SK", S("1")}});
  Delete({{"PK", S("B")}, {"SK", S("1")}});

  auto get = [&](Item key) {
    v1::GetItemRequest request;
    request.set_table("App");
    for (const auto& [name, value] : key) {
      v1::AttributeValue v;
      if (value.type() == AttrType::kS) v.set_s(value.scalar());
      if (value.type() == AttrType::kN) v.set_n(value.scalar());
      (*request.mutable_key()->mutable_attributes())[name] = v;
    }
    return reader_->GetItem(request);
  };
  auto found = get({{"PK", S("A")}, {"SK", S("1")}});
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_TRUE(found->found());
  EXPECT_EQ(found->item().attributes_size(), 3);
  EXPECT_EQ(found->item().attributes().at("n").n(), "1.5");
  EXPECT_EQ(found->item().attributes().at("PK").s(), "A");

  auto missing = get({{"PK", S("Z")}, {"SK", S("1")}});
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->found());
  EXPECT_FALSE(missing->has_item());

  auto removed = get({{"PK", S("B")}, {"SK", S("1")}});
  ASSERT_TRUE(removed.ok());
  EXPECT_FALSE(removed->found());
  EXPECT_FALSE(removed->has_item());

  auto wrong_type = get({{"PK", N("1")}, {"SK", S("1")}});
  EXPECT_EQ(wrong_type.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Text(wrong_type.status()), "key: table App: key attribute PK must be S, got N");
  auto no_sort = get({{"PK", S("A")}});
  EXPECT_EQ(no_sort.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Text(no_sort.status()), "key: table App: key attribute SK is missing");
  v1::GetItemRequest unset;
  unset.set_table("App");
  (*unset.mutable_key()->mutable_attributes())["PK"];
  (*unset.mutable_key()->mutable_attributes())["SK"].set_s("1");
  auto unset_value = reader_->GetItem(unset);
  EXPECT_EQ(unset_value.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Text(unset_value.status()),
            "key.PK: no value set (set one of s, n, b, bool, null, m, l, ss, ns, bs)");

  v1::GetItemRequest unknown;
  unknown.set_table("Nope");
  auto not_found = reader_->GetItem(unknown);
  EXPECT_EQ(not_found.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Text(not_found.status()), "table \"Nope\" does not exist (tables: App)");
}

// A name longer than any view or table can have is refused as malformed, not echoed; an
// unknown name just short of that is quoted in part.
TEST_F(ViewReaderTest, OverLongNamesAreInvalidAndLongUnknownNamesAreQuotedInPart) {
  Ready();
  auto error = [](const absl::Status& s) {
    return absl::StrCat(absl::StatusCodeToString(s.code()), ": ", Text(s));
  };
  const std::string views =
      "views: GSI1, OpenOrders, ByMember, ByEntity, ByLocation, ByScore, ByStatus";
  const std::string huge(70000, 'v');
  const std::string too_long =
      "INVALID_ARGUMENT: view name of 70000 bytes is longer than any view can have (at most "
      "1024 bytes); " + views;
  EXPECT_EQ(error(reader_->Query(Q(huge, PS("x"))).status()), too_long);
  v1::ScanRequest scan;
  scan.set_view(huge);
  EXPECT_EQ(error(reader_->Scan(scan).status()), too_long);
  EXPECT_EQ(error(reader_->DescribeView(huge).status()), too_long);
  v1::GetHotKeysRequest hot;
  hot.set_view(huge);
  EXPECT_EQ(error(reader_->GetHotKeys(hot).status()), too_long);
  EXPECT_EQ(error(reader_->Query(Q(std::string(1025, 'v'), PS("x"))).status()),
            "INVALID_ARGUMENT: view name of 1025 bytes is longer than any view can have (at most "
            "1024 bytes); " + views);
  EXPECT_EQ(error(reader_->Query(Q(std::string(1024, 'v'), PS("x"))).status()),
            absl::StrCat("NOT_FOUND: view \"", std::string(64, 'v'),
                         "...\" (1024 bytes) does not exist (", views, ")"));
  // 65 bytes are cut; a multi-byte character at the cut is left out whole.
  EXPECT_EQ(error(reader_->Query(Q(std::string(63, 'v') + "\xc3\xa6", PS("x"))).status()),
            absl::StrCat("NOT_FOUND: view \"", std::string(63, 'v'),
                         "...\" (65 bytes) does not exist (", views, ")"));

  v1::GetItemRequest item;
  item.set_table(huge);
  EXPECT_EQ(error(reader_->GetItem(item).status()),
            "INVALID_ARGUMENT: table name of 70000 bytes is longer than any table can have (at "
            "most 1024 bytes); tables: App");
  hot.set_table(huge);
  hot.clear_view();
  EXPECT_EQ(error(reader_->GetHotKeys(hot).status()),
            "INVALID_ARGUMENT: table name of 70000 bytes is longer than any table can have (at "
            "most 1024 bytes); tables: App");
  item.set_table(std::string(100, 't'));
  EXPECT_EQ(error(reader_->GetItem(item).status()),
            absl::StrCat("NOT_FOUND: table \"", std::string(64, 't'),
                         "...\" (100 bytes) does not exist (tables: App)"));
}

// ---- DescribeView and applied positions

TEST_F(ViewReaderTest, DescribeViewReportsCountsStateAndSchema) {
  Ready();
  PutScores();  // 11 events, one ByScore and one ByMember put each
  Put({{"PK", S("O#1")}, {"SK", S("X")}, {"status", S("OPEN")}, {"open_since", S("2024")}});

  auto score = reader_->DescribeView("ByScore");
  ASSERT_TRUE(score.ok());
  EXPECT_EQ(score->name(), "ByScore");
  EXPECT_EQ(score->table(), "App");
  EXPECT_EQ(score->state(), v1::ViewDescription::READY);
  EXPECT_EQ(score->build_progress(), 1.0);
  EXPECT_EQ(score->item_count(), 11u);
  EXPECT_EQ(score->bytes(), 4096u);
  EXPECT_EQ(score->index_writes_per_event(), 11.0 / 12.0);
  EXPECT_EQ(score->fingerprint(),
            config_.tables[0].views[5].Fingerprint(config_.tables[0].key));
  EXPECT_EQ(score->partition_key().ShortDebugString(), "attribute: \"board\" type: \"S\"");
  EXPECT_EQ(score->sort_key().ShortDebugString(), "attribute: \"score\" type: \"N\"");
  EXPECT_EQ(score->projection(), "ALL");
  EXPECT_EQ(score->rules(), 1u);
  EXPECT_FALSE(score->inverted());

  auto open = reader_->DescribeView("OpenOrders");
  ASSERT_TRUE(open.ok());
  EXPECT_EQ(open->item_count(), 1u);
  EXPECT_EQ(open->partition_key().ShortDebugString(), "template: \"OPEN\" type: \"S\"");
  EXPECT_EQ(open->projection(), "INCLUDE");
  EXPECT_EQ(std::vector<std::string>(open->include().begin(), open->include().end()),
            (std::vector<std::string>{"status", "total"}));
  EXPECT_EQ(open->index_writes_per_event(), 1.0 / 12.0);

  auto member = reader_->DescribeView("ByMember");
  ASSERT_TRUE(member.ok());
  EXPECT_EQ(member->item_count(), 12u);
  EXPECT_EQ(member->index_writes_per_event(), 1.0);
  EXPECT_TRUE(member->inverted());
  EXPECT_EQ(member->projection(), "KEYS_ONLY");
  EXPECT_EQ(member->partition_key().ShortDebugString(), "attribute: \"SK\" type: \"S\"");

  auto entity = reader_->DescribeView("ByEntity");
  ASSERT_TRUE(entity.ok());
  EXPECT_EQ(entity->rules(), 2u);
  EXPECT_EQ(entity->item_count(), 0u);
  EXPECT_EQ(entity->sort_key().ShortDebugString(), "template: \"{created_at}\" type: \"S\"");

  auto status = reader_->DescribeView("ByStatus");
  ASSERT_TRUE(status.ok());
  EXPECT_FALSE(status->has_sort_key());

  auto unknown = reader_->DescribeView("Nope");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Text(unknown.status()),
            "view \"Nope\" does not exist (views: GSI1, OpenOrders, ByMember, ByEntity, "
            "ByLocation, ByScore, ByStatus)");

  absl::StatusOr<v1::ListViewsResponse> listed = reader_->ListViews();
  ASSERT_TRUE(listed.ok()) << listed.status();
  const v1::ListViewsResponse& list = *listed;
  ASSERT_EQ(list.views_size(), 7);
  EXPECT_EQ(list.views(5).ShortDebugString(), score->ShortDebugString());
}

// The entries of `applied`; its token must encode exactly them (read_consistency_test.cc
// checks the token's format).
std::string EntriesText(const v1::AppliedPosition& applied) {
  v1::AppliedPosition entries = applied;
  entries.clear_token();
  EXPECT_EQ(applied.token(), EncodePositionToken(entries));
  return entries.ShortDebugString();
}

TEST_F(ViewReaderTest, ResponsesCarryTheCommittedPosition) {
  Ready();
  std::vector<SourceRecord> batch = {
      test::Insert(config_.tables[0].key,
                   {{"PK", S("P")}, {"SK", S("G")}, {"board", S("b")}, {"score", N("1")}},
                   At("line 7").Partition("")),
  };
  ASSERT_TRUE(applier_->ApplyBatch(&batch).ok());
  auto query = reader_->Query(Q("ByScore", PS("b")));
  ASSERT_TRUE(query.ok());
  // proto3 text omits the empty partition.
  EXPECT_EQ(EntriesText(query->applied()), "entries { source: \"sample\" position: \"line 7\" }");
  v1::ScanRequest scan;
  scan.set_view("ByScore");
  auto scanned = reader_->Scan(scan);
  ASSERT_TRUE(scanned.ok());
  EXPECT_EQ(scanned->applied().ShortDebugString(), query->applied().ShortDebugString());
  v1::GetItemRequest get;
  get.set_table("App");
  (*get.mutable_key()->mutable_attributes())["PK"] = PS("P");
  (*get.mutable_key()->mutable_attributes())["SK"] = PS("G");
  auto item = reader_->GetItem(get);
  ASSERT_TRUE(item.ok());
  EXPECT_TRUE(item->found());
  EXPECT_EQ(item->applied().ShortDebugString(), query->applied().ShortDebugString());

  // Every partition's position, as the store has it.
  batch = {test::Insert(config_.tables[0].key, {{"PK", S("Q")}, {"SK", S("G")}},
                        At("42").Partition("shard-1"))};
  ASSERT_TRUE(applier_->ApplyBatch(&batch).ok());
  query = reader_->Query(Q("ByScore", PS("b")));
  ASSERT_TRUE(query.ok());
  EXPECT_EQ(EntriesText(query->applied()),
            "entries { source: \"sample\" position: \"line 7\" } "
            "entries { source: \"sample\" partition: \"shard-1\" position: \"42\" }");
  v1::StatusResponse st = reader_->GetStatus();
  EXPECT_EQ(st.applied().ShortDebugString(), query->applied().ShortDebugString());
  ASSERT_EQ(st.sources_size(), 1);
  EXPECT_EQ(st.sources(0).events_applied(), 2u);
}

}  // namespace
}  // namespace cdcview
