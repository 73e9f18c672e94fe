#include "daemon/dynamodb/api.h"

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/decode/base64.h"
#include "daemon/security/token_store.h"
#include "daemon/server/read_consistency.h"
#include "gtest/gtest.h"
#include "simdjson.h"
#include "tests/fakes/forwarding_queries.h"
#include "tests/fakes/reader_fixture.h"
#include "tests/fakes/records.h"

namespace cdcview::dynamodb {
namespace {

using test::At;
using test::N;
using test::S;
using Strings = std::vector<std::string>;

// App is fed by a Kafka topic (the positions the consistency headers name) and, under the name
// prod-app, by a DynamoDB stream; its views cover each kind of index key and projection.
constexpr char kConfigYaml[] = R"(
sources:
  - name: orders
    table: App
    kafka: { brokers: "127.0.0.1:9", topics: [orders], group: g }
  - name: stream
    table: App
    dynamodb: { table_name: prod-app, region: eu-west-1 }
  - name: other
    table: Other
    file: { path: other.ndjson }
tables:
  - name: App
    key: { partition: PK, sort: SK }
    views:
      - name: GSI1
        partition_key: { attribute: GSI1PK, type: S }
        sort_key: { attribute: GSI1SK, type: S }
        projection: ALL
      - name: ByScore
        partition_key: { attribute: board, type: S }
        sort_key: { attribute: score, type: N }
        projection: { include: [player] }
      - name: ByStatus
        partition_key: { attribute: status, type: S }
        projection: KEYS_ONLY
      - name: ByEntity
        projection: KEYS_ONLY
        rules:
          - when: { attribute: type, equals: order }
            partition_key: { template: "STATUS#{status}" }
            sort_key: { template: "{created_at}" }
      - name: ByDay
        partition_key: { attribute: day, type: S }
        sort_key: { attribute: at, type: S }
        shards: { count: 2, suffix: "#{shard}" }
  - name: Other
    key: { partition: { attribute: id, type: N } }
)";

constexpr double kCreated = 1700000000.5;

class DynamoDbApiTest : public test::ReaderFixture {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(OpenReader(kConfigYaml));
    api_ = std::make_unique<DynamoDbApi>(*catalog_, *reader_, kCreated);
  }

  void Ready() { ASSERT_TRUE(applier_->RebuildViews().ok()); }

  void Put(Item item, size_t table = 0) {
    ++offset_;
    std::vector<SourceRecord> batch = {test::Insert(
        config_.tables[table].key, item,
        table == 0 ? At(absl::StrCat(offset_)).Source(0).Partition("orders/0")
                   : At(absl::StrCat(offset_)).Source(2))};
    ASSERT_TRUE(applier_->ApplyBatch(&batch).ok());
  }

  // GSI1 partition "G": GSI1SK a ab abc b ba c (PK I#1 I#2 I#4 I#5 I#3 I#0), n = 0..5;
  // partition "H" holds one.
  void PutGsi1() {
    int n = 0;
    for (const char* sk : {"c", "a", "ab", "ba", "abc", "b"}) {
      Put({{"PK", S(absl::StrCat("I#", n))},
           {"SK", S("X")},
           {"GSI1PK", S("G")},
           {"GSI1SK", S(sk)},
           {"n", N(absl::StrCat(n))}});
      ++n;
    }
    Put({{"PK", S("I#h")}, {"SK", S("X")}, {"GSI1PK", S("H")}, {"GSI1SK", S("a")}});
  }

  ApiResponse Call(std::string_view op, std::string_view body, ApiRequest request = {}) {
    target_ = absl::StrCat("DynamoDB_20120810.", std::string(op));
    request.target = target_;
    request.body = body;
    return api_->Handle(request);
  }
  // The body of a successful answer.
  std::string Ok(std::string_view op, std::string_view body, ApiRequest request = {}) {
    ApiResponse r = Call(op, body, request);
    EXPECT_EQ(r.http_status, 200) << r.body;
    EXPECT_EQ(r.error_type, "");
    EXPECT_EQ(r.operation, std::string(op));
    return r.body;
  }
  // "<status> <body>" of an answer, for errors.
  std::string Err(std::string_view op, std::string_view body, ApiRequest request = {}) {
    ApiResponse r = Call(op, body, request);
    return absl::StrCat(r.http_status, " ", r.body);
  }

  std::unique_ptr<DynamoDbApi> api_;
  std::string target_;
  int offset_ = 0;
};

std::string Validation(const std::string& message) {
  return absl::StrCat(R"(400 {"__type":"com.amazonaws.dynamodb.v20120810#ValidationException","message":")",
                      message, R"("})");
}

// ---- Reading answers

simdjson::dom::element Parse(simdjson::dom::parser& parser, const std::string& body) {
  simdjson::dom::element root;
  EXPECT_EQ(parser.parse(body).get(root), simdjson::SUCCESS) << body;
  return root;
}

// Items[i][attribute] (its S or N text) of an answer, in order.
Strings Column(const std::string& body, const char* attribute) {
  simdjson::dom::parser parser;
  Strings out;
  simdjson::dom::array items;
  if (Parse(parser, body)["Items"].get(items) != simdjson::SUCCESS) return {"<no Items>"};
  for (simdjson::dom::element item : items) {
    simdjson::dom::object value;
    if (item[attribute].get(value) != simdjson::SUCCESS) {
      out.push_back("-");
      continue;
    }
    for (auto field : value) out.push_back(std::string(std::string_view(field.value)));
  }
  return out;
}

// LastEvaluatedKey's JSON, "" when absent.
std::string LastKey(const std::string& body) {
  simdjson::dom::parser parser;
  simdjson::dom::element key;
  if (Parse(parser, body)["LastEvaluatedKey"].get(key) != simdjson::SUCCESS) return "";
  return simdjson::minify(key);
}

uint64_t Number(const std::string& body, const char* member) {
  simdjson::dom::parser parser;
  uint64_t n = 0;
  EXPECT_EQ(Parse(parser, body)[member].get(n), simdjson::SUCCESS) << body;
  return n;
}

// A Query body on GSI1 partition G with legacy KeyConditions (`sort`: the GSI1SK condition,
// "" for none) and more members.
std::string Legacy(const std::string& sort, const std::string& more = "") {
  return absl::StrCat(
      R"({"TableName":"App","IndexName":"GSI1","KeyConditions":{"GSI1PK":{"ComparisonOperator":"EQ","AttributeValueList":[{"S":"G"}]})",
      sort.empty() ? "" : absl::StrCat(R"(,"GSI1SK":)", sort), "}", more, "}");
}

std::string Expression(const std::string& condition, const std::string& values,
                       const std::string& more = "") {
  return absl::StrCat(R"({"TableName":"App","IndexName":"GSI1","KeyConditionExpression":")",
                      condition, R"(","ExpressionAttributeValues":{)", values, "}", more, "}");
}

// ---- Query

TEST_F(DynamoDbApiTest, QueryAnswersDynamoDbsShape) {
  Ready();
  PutGsi1();
  EXPECT_EQ(Ok("Query", Expression("GSI1PK = :p AND GSI1SK = :s",
                                   R"(":p":{"S":"G"},":s":{"S":"ab"})")),
            R"({"Items":[{"GSI1PK":{"S":"G"},"GSI1SK":{"S":"ab"},"PK":{"S":"I#2"},"SK":{"S":"X"},"n":{"N":"2"}}],"Count":1,"ScannedCount":1})");
  EXPECT_EQ(Ok("Query", Expression("GSI1PK = :p", R"(":p":{"S":"nothing"})")),
            R"({"Items":[],"Count":0,"ScannedCount":0})");
}

TEST_F(DynamoDbApiTest, QueryEveryKeyConditionOperator) {
  Ready();
  PutGsi1();
  auto sks = [&](const std::string& condition, const std::string& values) {
    return Column(Ok("Query", Expression(condition, values)), "GSI1SK");
  };
  const std::string p = R"(":p":{"S":"G"})";
  EXPECT_EQ(sks("GSI1PK = :p", p), (Strings{"a", "ab", "abc", "b", "ba", "c"}));
  EXPECT_EQ(sks("GSI1PK = :p AND GSI1SK = :s", p + R"(,":s":{"S":"b"})"), (Strings{"b"}));
  EXPECT_EQ(sks("GSI1PK = :p AND GSI1SK < :s", p + R"(,":s":{"S":"b"})"),
            (Strings{"a", "ab", "abc"}));
  EXPECT_EQ(sks("GSI1PK = :p AND GSI1SK <= :s", p + R"(,":s":{"S":"b"})"),
            (Strings{"a", "ab", "abc", "b"}));
  EXPECT_EQ(sks("GSI1PK = :p AND GSI1SK > :s", p + R"(,":s":{"S":"b"})"), (Strings{"ba", "c"}));
  EXPECT_EQ(sks("GSI1PK = :p AND GSI1SK >= :s", p + R"(,":s":{"S":"b"})"),
            (Strings{"b", "ba", "c"}));
  EXPECT_EQ(sks("GSI1PK = :p AND GSI1SK BETWEEN :s AND :t",
                p + R"(,":s":{"S":"ab"},":t":{"S":"b"})"),
            (Strings{"ab", "abc", "b"}));
  EXPECT_EQ(sks("GSI1PK = :p AND begins_with(GSI1SK, :s)", p + R"(,":s":{"S":"ab"})"),
            (Strings{"ab", "abc"}));
  // Names by placeholder, either order, parentheses as boto3 writes them.
  EXPECT_EQ(Column(Ok("Query", Expression("(#s >= :s AND #p = :p)", p + R"(,":s":{"S":"ba"})",
                                          R"(,"ExpressionAttributeNames":{"#p":"GSI1PK","#s":"GSI1SK"})")),
                   "GSI1SK"),
            (Strings{"ba", "c"}));
}

TEST_F(DynamoDbApiTest, QueryLegacyKeyConditions) {
  Ready();
  PutGsi1();
  auto sks = [&](const std::string& sort) { return Column(Ok("Query", Legacy(sort)), "GSI1SK"); };
  EXPECT_EQ(sks(""), (Strings{"a", "ab", "abc", "b", "ba", "c"}));
  EXPECT_EQ(sks(R"({"ComparisonOperator":"EQ","AttributeValueList":[{"S":"b"}]})"),
            (Strings{"b"}));
  EXPECT_EQ(sks(R"({"ComparisonOperator":"LT","AttributeValueList":[{"S":"b"}]})"),
            (Strings{"a", "ab", "abc"}));
  EXPECT_EQ(sks(R"({"ComparisonOperator":"LE","AttributeValueList":[{"S":"b"}]})"),
            (Strings{"a", "ab", "abc", "b"}));
  EXPECT_EQ(sks(R"({"ComparisonOperator":"GT","AttributeValueList":[{"S":"b"}]})"),
            (Strings{"ba", "c"}));
  EXPECT_EQ(sks(R"({"ComparisonOperator":"GE","AttributeValueList":[{"S":"b"}]})"),
            (Strings{"b", "ba", "c"}));
  EXPECT_EQ(sks(R"({"ComparisonOperator":"BETWEEN","AttributeValueList":[{"S":"ab"},{"S":"b"}]})"),
            (Strings{"ab", "abc", "b"}));
  EXPECT_EQ(sks(R"({"ComparisonOperator":"BEGINS_WITH","AttributeValueList":[{"S":"ab"}]})"),
            (Strings{"ab", "abc"}));
  EXPECT_EQ(Err("Query", Legacy(R"({"ComparisonOperator":"NE","AttributeValueList":[{"S":"b"}]})")),
            Validation("Attempted conditional constraint is not an indexable operation"));
  EXPECT_EQ(Err("Query", Legacy(R"({"ComparisonOperator":"BETWEEN","AttributeValueList":[{"S":"b"}]})")),
            Validation("One or more parameter values were invalid: Invalid number of argument(s) "
                       "for the BETWEEN ComparisonOperator"));
  EXPECT_EQ(Err("Query", Legacy(R"({"ComparisonOperator":"XX","AttributeValueList":[{"S":"b"}]})")),
            Validation("1 validation error detected: Value 'XX' at "
                       "'keyConditions.GSI1SK.member.comparisonOperator' failed to satisfy "
                       "constraint: Member must satisfy enum value set: [IN, NULL, BETWEEN, LT, "
                       "NOT_CONTAINS, EQ, GT, NOT_NULL, NE, LE, BEGINS_WITH, GE, CONTAINS]"));
}

TEST_F(DynamoDbApiTest, QueryBackwardAndSelectCount) {
  Ready();
  PutGsi1();
  EXPECT_EQ(Column(Ok("Query", Legacy("", R"(,"ScanIndexForward":false)")), "GSI1SK"),
            (Strings{"c", "ba", "b", "abc", "ab", "a"}));
  EXPECT_EQ(Ok("Query", Legacy("", R"(,"Select":"COUNT")")), R"({"Count":6,"ScannedCount":6})");
  EXPECT_EQ(Ok("Query", Legacy("", R"(,"Select":"COUNT","Limit":4)")),
            R"({"Count":4,"ScannedCount":4,"LastEvaluatedKey":{"GSI1PK":{"S":"G"},"GSI1SK":{"S":"b"},"PK":{"S":"I#5"},"SK":{"S":"X"}}})");
}

TEST_F(DynamoDbApiTest, QueryFilterCountsBeforeAndAfter) {
  Ready();
  PutGsi1();
  // Limit counts evaluated items: 4 read (a ab abc b = n 1 2 4 5), those with n >= 2 kept.
  const std::string body = Ok(
      "Query", Expression("GSI1PK = :p", R"(":p":{"S":"G"},":n":{"N":"2"})",
                          R"(,"FilterExpression":"n >= :n","Limit":4)"));
  EXPECT_EQ(Column(body, "GSI1SK"), (Strings{"ab", "abc", "b"}));
  EXPECT_EQ(Number(body, "Count"), 3u);
  EXPECT_EQ(Number(body, "ScannedCount"), 4u);
  EXPECT_EQ(LastKey(body),
            R"({"GSI1PK":{"S":"G"},"GSI1SK":{"S":"b"},"PK":{"S":"I#5"},"SK":{"S":"X"}})");
  EXPECT_EQ(Ok("Query", Expression("GSI1PK = :p", R"(":p":{"S":"G"},":n":{"N":"3"})",
                                   R"(,"FilterExpression":"n = :n","Select":"COUNT")")),
            R"({"Count":1,"ScannedCount":6})");
}

TEST_F(DynamoDbApiTest, QueryProjections) {
  Ready();
  PutGsi1();
  EXPECT_EQ(Ok("Query", Expression("GSI1PK = :p AND GSI1SK = :s",
                                   R"(":p":{"S":"G"},":s":{"S":"ab"})",
                                   R"(,"ProjectionExpression":"PK, #n","ExpressionAttributeNames":{"#n":"n"})")),
            R"({"Items":[{"PK":{"S":"I#2"},"n":{"N":"2"}}],"Count":1,"ScannedCount":1})");
  EXPECT_EQ(Ok("Query", Legacy(R"({"ComparisonOperator":"EQ","AttributeValueList":[{"S":"ab"}]})",
                               R"(,"AttributesToGet":["n","nope"])")),
            R"({"Items":[{"n":{"N":"2"}}],"Count":1,"ScannedCount":1})");
  EXPECT_EQ(Err("Query", Legacy("", R"(,"Select":"SPECIFIC_ATTRIBUTES")")),
            Validation("Must specify the AttributesToGet or ProjectionExpression when choosing "
                       "to get SPECIFIC_ATTRIBUTES"));
  EXPECT_EQ(Err("Query", Expression("GSI1PK = :p", R"(":p":{"S":"G"})",
                                    R"(,"ProjectionExpression":"PK","Select":"COUNT")")),
            Validation("1 validation error detected: Cannot specify the ProjectionExpression "
                       "when choosing to get only the Count"));
  EXPECT_EQ(Err("Scan", R"({"TableName":"App","IndexName":"GSI1","ProjectionExpression":"PK",)"
                        R"("Select":"COUNT"})"),
            Validation("Cannot specify the ProjectionExpression when choosing to get only the "
                       "Count"));
}

// KEYS_ONLY and INCLUDE views answer what DynamoDB's index holds: the table key, the index
// key (cdcview_pk / cdcview_sk for template keys) and the included attributes.
TEST_F(DynamoDbApiTest, IndexItemsHoldTheProjection) {
  Ready();
  Put({{"PK", S("O#1")}, {"SK", S("X")}, {"type", S("order")}, {"status", S("open")},
       {"created_at", S("2025-01-02")}, {"board", S("chess")}, {"score", N("7")},
       {"player", S("ann")}, {"secret", S("s")}});
  EXPECT_EQ(Ok("Query", R"({"TableName":"App","IndexName":"ByStatus","KeyConditionExpression":"#s = :s","ExpressionAttributeNames":{"#s":"status"},"ExpressionAttributeValues":{":s":{"S":"open"}}})"),
            R"({"Items":[{"PK":{"S":"O#1"},"SK":{"S":"X"},"status":{"S":"open"}}],"Count":1,"ScannedCount":1})");
  EXPECT_EQ(Ok("Query", R"({"TableName":"App","IndexName":"ByEntity","KeyConditions":{"cdcview_pk":{"ComparisonOperator":"EQ","AttributeValueList":[{"S":"STATUS#open"}]}}})"),
            R"({"Items":[{"PK":{"S":"O#1"},"SK":{"S":"X"},"cdcview_pk":{"S":"STATUS#open"},"cdcview_sk":{"S":"2025-01-02"}}],"Count":1,"ScannedCount":1})");
  EXPECT_EQ(Ok("Query", R"({"TableName":"App","IndexName":"ByScore","KeyConditions":{"board":{"ComparisonOperator":"EQ","AttributeValueList":[{"S":"chess"}]},"score":{"ComparisonOperator":"GT","AttributeValueList":[{"N":"6.5"}]}}})"),
            R"({"Items":[{"PK":{"S":"O#1"},"SK":{"S":"X"},"board":{"S":"chess"},"player":{"S":"ann"},"score":{"N":"7"}}],"Count":1,"ScannedCount":1})");
  EXPECT_EQ(Ok("Query", R"({"TableName":"App","IndexName":"ByScore","ProjectionExpression":"player, score","KeyConditions":{"board":{"ComparisonOperator":"EQ","AttributeValueList":[{"S":"chess"}]}}})"),
            R"({"Items":[{"player":{"S":"ann"},"score":{"N":"7"}}],"Count":1,"ScannedCount":1})");
  EXPECT_EQ(Err("Scan", R"({"TableName":"App","IndexName":"ByScore","ProjectionExpression":"player, secret.x, extra, secret.y"})"),
            Validation("One or more parameter values were invalid: Global secondary index ByScore "
                       "does not project [secret, extra]"));
  EXPECT_EQ(Err("Query", R"({"TableName":"App","IndexName":"ByStatus","Select":"ALL_ATTRIBUTES","KeyConditions":{"status":{"ComparisonOperator":"EQ","AttributeValueList":[{"S":"open"}]}}})"),
            Validation("One or more parameter values were invalid: Select type ALL_ATTRIBUTES is "
                       "not supported for global secondary index ByStatus because its projection "
                       "type is not ALL"));
}

TEST_F(DynamoDbApiTest, QueryPagesBothWays) {
  Ready();
  PutGsi1();
  const std::string head =
      R"({"TableName":"App","IndexName":"GSI1","KeyConditions":{"GSI1PK":{"ComparisonOperator":"EQ","AttributeValueList":[{"S":"G"}]}})";
  std::vector<Strings> forward;
  std::string start;
  for (int i = 0; i < 10; ++i) {
    const std::string body = Ok("Query", absl::StrCat(head, R"(,"Limit":2)",
                                                      start.empty() ? "" : R"(,"ExclusiveStartKey":)" + start, "}"));
    forward.push_back(Column(body, "GSI1SK"));
    start = LastKey(body);
    if (i == 0) {
      EXPECT_EQ(start, R"({"GSI1PK":{"S":"G"},"GSI1SK":{"S":"ab"},"PK":{"S":"I#2"},"SK":{"S":"X"}})");
    }
    if (start.empty()) break;
  }
  // No LastEvaluatedKey at the exact end: ViewQueries tells whether another entry follows.
  EXPECT_EQ(forward, (std::vector<Strings>{{"a", "ab"}, {"abc", "b"}, {"ba", "c"}}));

  std::vector<Strings> backward;
  start.clear();
  for (int i = 0; i < 10; ++i) {
    const std::string body =
        Ok("Query", absl::StrCat(head, R"(,"Limit":4,"ScanIndexForward":false)",
                                 start.empty() ? "" : R"(,"ExclusiveStartKey":)" + start, "}"));
    backward.push_back(Column(body, "GSI1SK"));
    start = LastKey(body);
    if (start.empty()) break;
  }
  EXPECT_EQ(backward, (std::vector<Strings>{{"c", "ba", "b", "abc"}, {"ab", "a"}}));
}

TEST_F(DynamoDbApiTest, QueryStopsAtOneMegabyte) {
  Ready();
  // 300,000-byte values: the fourth item takes the page over 1 MB and ends it.
  for (int i = 0; i < 5; ++i) {
    Put({{"PK", S(absl::StrCat("B#", i))}, {"SK", S("X")}, {"GSI1PK", S("BIG")},
         {"GSI1SK", S(absl::StrCat(i))}, {"blob", S(std::string(300000, 'x'))}});
  }
  const std::string head =
      R"({"TableName":"App","IndexName":"GSI1","ProjectionExpression":"PK","KeyConditions":{"GSI1PK":{"ComparisonOperator":"EQ","AttributeValueList":[{"S":"BIG"}]}})";
  std::string first = Ok("Query", head + "}");
  EXPECT_EQ(first,
            R"({"Items":[{"PK":{"S":"B#0"}},{"PK":{"S":"B#1"}},{"PK":{"S":"B#2"}},{"PK":{"S":"B#3"}}],"Count":4,"ScannedCount":4,"LastEvaluatedKey":{"GSI1PK":{"S":"BIG"},"GSI1SK":{"S":"3"},"PK":{"S":"B#3"},"SK":{"S":"X"}}})");
  EXPECT_EQ(Ok("Query", absl::StrCat(head, R"(,"ExclusiveStartKey":)", LastKey(first), "}")),
            R"({"Items":[{"PK":{"S":"B#4"}}],"Count":1,"ScannedCount":1})");
}

// Under inline_bytes (an I/O thread's bound) a Query or Scan reads one entry, then as many as
// the bytes left hold: a page that needs more once past the bound answers run_long and nothing
// else; the others answer what they answer without it.
TEST_F(DynamoDbApiTest, InlineBytesMoveOnlyPagesThatReadPastThem) {
  Ready();
  PutGsi1();
  for (int i = 0; i < 5; ++i) {  // about 30,000 bytes each
    Put({{"PK", S(absl::StrCat("B#", i))}, {"SK", S("X")}, {"GSI1PK", S("BIG")},
         {"GSI1SK", S(absl::StrCat(i))}, {"blob", S(std::string(30000, 'x'))}});
  }
  ApiRequest bounded;
  bounded.inline_bytes = kShortPageBytes;
  auto both = [&](std::string_view op, const std::string& body) {
    EXPECT_EQ(Ok(op, body, bounded), Ok(op, body)) << body;
  };
  for (int limit = 1; limit <= 8; ++limit) {
    both("Query", absl::StrCat(R"({"TableName":"App","IndexName":"GSI1","KeyConditionExpression":"GSI1PK = :p","ExpressionAttributeValues":{":p":{"S":"G"}},"Limit":)", limit, "}"));
    // A Scan meets the large items first: the third passes the bound, so Limit 4 moves.
    const std::string scan = absl::StrCat(
        R"({"TableName":"App","IndexName":"GSI1","ProjectionExpression":"PK","Limit":)", limit, "}");
    if (limit <= 3) {
      both("Scan", scan);
    } else {
      EXPECT_TRUE(Call("Scan", scan, bounded).run_long) << limit;
    }
  }
  const std::string big =
      R"({"TableName":"App","IndexName":"GSI1","ProjectionExpression":"PK","KeyConditionExpression":"GSI1PK = :p","ExpressionAttributeValues":{":p":{"S":"BIG"}},"Limit":)";
  // Limit 3: the third item passes the bound and ends the page.
  both("Query", big + "3}");
  ApiResponse moved = Call("Query", big + "5}", bounded);
  EXPECT_TRUE(moved.run_long);
  EXPECT_EQ(moved.http_status, 200);
  EXPECT_EQ(moved.body, "");
  EXPECT_EQ(moved.operation, "Query");
  EXPECT_FALSE(Call("Query", big + "5}").run_long);
  EXPECT_TRUE(Call("Scan", R"({"TableName":"App","IndexName":"GSI1","Limit":100})", bounded).run_long);
}

// The store ends a bounded read after the entry that passes the bound, whatever the sizes
// before it: a small item then large ones stops at the first large one, so Limit 3 moves.
TEST_F(DynamoDbApiTest, InlineBytesHoldForUnevenItems) {
  Ready();
  Put({{"PK", S("U#0")}, {"SK", S("X")}, {"GSI1PK", S("UNEVEN")}, {"GSI1SK", S("0")}});
  for (int i = 1; i <= 4; ++i) {  // about 100,000 bytes each
    Put({{"PK", S(absl::StrCat("U#", i))}, {"SK", S("X")}, {"GSI1PK", S("UNEVEN")},
         {"GSI1SK", S(absl::StrCat(i))}, {"blob", S(std::string(100000, 'x'))}});
  }
  ApiRequest bounded;
  bounded.inline_bytes = kShortPageBytes;
  const std::string query =
      R"({"TableName":"App","IndexName":"GSI1","ProjectionExpression":"PK","KeyConditionExpression":"GSI1PK = :p","ExpressionAttributeValues":{":p":{"S":"UNEVEN"}},"Limit":)";
  // Limit 2: the small item and the first large one end the page as the bound is passed.
  EXPECT_EQ(Ok("Query", query + "2}", bounded), Ok("Query", query + "2}"));
  for (int limit = 3; limit <= 5; ++limit) {
    EXPECT_TRUE(Call("Query", absl::StrCat(query, limit, "}"), bounded).run_long) << limit;
    EXPECT_EQ(Column(Ok("Query", absl::StrCat(query, limit, "}")), "PK").size(),
              static_cast<size_t>(limit));
  }
}

TEST_F(DynamoDbApiTest, QueryMergesTheShardsOfALogicalKey) {
  Ready();
  Put({{"PK", S("E#1")}, {"SK", S("X")}, {"day", S("D#0")}, {"at", S("10")}});
  Put({{"PK", S("E#2")}, {"SK", S("X")}, {"day", S("D#1")}, {"at", S("11")}});
  Put({{"PK", S("E#3")}, {"SK", S("X")}, {"day", S("D#0")}, {"at", S("12")}});
  const std::string head =
      R"({"TableName":"App","IndexName":"ByDay","KeyConditions":{"day":{"ComparisonOperator":"EQ","AttributeValueList":[{"S":"D"}]}})";
  EXPECT_EQ(Column(Ok("Query", head + "}"), "PK"), (Strings{"E#1", "E#2", "E#3"}));
  std::string first = Ok("Query", head + R"(,"Limit":2})");
  EXPECT_EQ(LastKey(first),
            R"({"PK":{"S":"E#2"},"SK":{"S":"X"},"at":{"S":"11"},"day":{"S":"D#1"}})");
  EXPECT_EQ(Column(Ok("Query", absl::StrCat(head, R"(,"ExclusiveStartKey":)", LastKey(first), "}")),
                   "PK"),
            (Strings{"E#3"}));
  // A physical key is one partition.
  EXPECT_EQ(Column(Ok("Query", R"({"TableName":"App","IndexName":"ByDay","KeyConditions":{"day":{"ComparisonOperator":"EQ","AttributeValueList":[{"S":"D#0"}]}}})"),
                   "PK"),
            (Strings{"E#1", "E#3"}));
}

// Under inline_shards a Query that would merge more shards than that does not start (run_long);
// one that merges no more, or names one shard, answers as without the bound.
TEST_F(DynamoDbApiTest, InlineShardsMoveWideMerges) {
  Ready();
  Put({{"PK", S("E#1")}, {"SK", S("X")}, {"day", S("D#0")}, {"at", S("10")}});
  Put({{"PK", S("E#2")}, {"SK", S("X")}, {"day", S("D#1")}, {"at", S("11")}});
  const std::string logical =
      R"({"TableName":"App","IndexName":"ByDay","Limit":5,"KeyConditions":{"day":{"ComparisonOperator":"EQ","AttributeValueList":[{"S":"D"}]}}})";
  const std::string physical =
      R"({"TableName":"App","IndexName":"ByDay","Limit":5,"KeyConditions":{"day":{"ComparisonOperator":"EQ","AttributeValueList":[{"S":"D#1"}]}}})";
  ApiRequest one;  // ByDay has two shards
  one.inline_shards = 1;
  ApiRequest two;
  two.inline_shards = 2;
  ApiResponse moved = Call("Query", logical, one);
  EXPECT_TRUE(moved.run_long);
  EXPECT_EQ(moved.body, "");
  EXPECT_EQ(Column(Ok("Query", logical, two), "PK"), (Strings{"E#1", "E#2"}));
  EXPECT_EQ(Ok("Query", physical, one), Ok("Query", physical));
}

TEST_F(DynamoDbApiTest, QueryRefusesWhatDynamoDbRefuses) {
  Ready();
  PutGsi1();
  const std::string p = R"(":p":{"S":"G"})";
  EXPECT_EQ(Err("Query", Expression("GSI1SK = :p", p)),
            Validation("Query condition missed key schema element: GSI1PK"));
  EXPECT_EQ(Err("Query", Expression("GSI1PK = :p AND misc = :s", p + R"(,":s":{"S":"b"})")),
            Validation("Query condition missed key schema element: GSI1SK"));
  EXPECT_EQ(Err("Query", Legacy("").replace(Legacy("").find("EQ"), 2, "BEGINS_WITH")),
            Validation("Query key condition not supported"));
  EXPECT_EQ(Err("Query", Expression("GSI1PK = :p", R"(":p":{"N":"1"})")),
            Validation("One or more parameter values were invalid: Condition parameter type does "
                       "not match schema type"));
  EXPECT_EQ(Err("Query", Expression("GSI1PK = :p AND GSI1SK BETWEEN :s AND :t",
                                    p + R"(,":s":{"S":"b"},":t":{"S":"a"})")),
            Validation("Invalid KeyConditionExpression: The BETWEEN operator requires upper bound "
                       "to be greater than or equal to lower bound; lower bound operand: "
                       "AttributeValue: {S:b}, upper bound operand: AttributeValue: {S:a}"));
  EXPECT_EQ(Err("Query", Legacy(R"({"ComparisonOperator":"BETWEEN","AttributeValueList":[{"S":"b"},{"S":"a"}]})")),
            Validation("The BETWEEN condition was provided a range where the lower bound is "
                       "greater than the upper bound"));
  EXPECT_EQ(Err("Query", Expression("GSI1PK = :p", p + R"(,":x":{"S":"b"})")),
            Validation("Value provided in ExpressionAttributeValues unused in expressions: keys: "
                       "{:x}"));
  EXPECT_EQ(Err("Query", Expression("GSI1PK = :p", p, R"(,"ExpressionAttributeNames":{"#x":"a"})")),
            Validation("Value provided in ExpressionAttributeNames unused in expressions: keys: "
                       "{#x}"));
  EXPECT_EQ(Err("Query", Expression("GSI1PK = :p", p,
                                    R"(,"KeyConditions":{"GSI1PK":{"ComparisonOperator":"EQ","AttributeValueList":[{"S":"G"}]}})")),
            Validation("Can not use both expression and non-expression parameters in the same "
                       "request: Non-expression parameters: {KeyConditions} Expression "
                       "parameters: {KeyConditionExpression}"));
  EXPECT_EQ(Err("Query", Legacy("", R"(,"ExpressionAttributeValues":{":p":{"S":"G"}})")),
            Validation("ExpressionAttributeValues can only be specified when using expressions: "
                       "KeyConditionExpression and FilterExpression are null"));
  EXPECT_EQ(Err("Query", R"({"TableName":"App","IndexName":"GSI1"})"),
            Validation("Either the KeyConditions or KeyConditionExpression parameter must be "
                       "specified in the request."));
  EXPECT_EQ(Err("Query", Legacy("", R"(,"ConsistentRead":true)")),
            Validation("Consistent reads are not supported on global secondary indexes"));
  EXPECT_EQ(Err("Query", Legacy("", R"(,"Limit":0)")),
            Validation("1 validation error detected: Value '0' at 'limit' failed to satisfy "
                       "constraint: Member must have value greater than or equal to 1"));
  EXPECT_EQ(Err("Query", Legacy("", R"(,"Select":"SOME")")),
            Validation("1 validation error detected: Value 'SOME' at 'select' failed to satisfy "
                       "constraint: Member must satisfy enum value set: [SPECIFIC_ATTRIBUTES, "
                       "COUNT, ALL_ATTRIBUTES, ALL_PROJECTED_ATTRIBUTES]"));
  EXPECT_EQ(Err("Query", R"({"TableName":"App","KeyConditionExpression":"PK = :p","ExpressionAttributeValues":{":p":{"S":"G"}}})"),
            Validation("cdcview serves Query and Scan on its views (IndexName); read the table by "
                       "GetItem or BatchGetItem, or query it at DynamoDB"));
  EXPECT_EQ(Err("Query", R"({"TableName":"App","IndexName":"Nope","KeyConditionExpression":"PK = :p","ExpressionAttributeValues":{":p":{"S":"G"}}})"),
            Validation("The table does not have the specified index: Nope"));
  EXPECT_EQ(Err("Query", R"({"TableName":"Other","IndexName":"GSI1","KeyConditionExpression":"PK = :p","ExpressionAttributeValues":{":p":{"S":"G"}}})"),
            Validation("The table does not have the specified index: GSI1"));
  EXPECT_EQ(Err("Query", R"({"TableName":"Nope","IndexName":"GSI1"})"),
            R"(400 {"__type":"com.amazonaws.dynamodb.v20120810#ResourceNotFoundException","message":"Requested resource not found"})");
  EXPECT_EQ(Err("Query", R"({"IndexName":"GSI1"})"),
            Validation("1 validation error detected: Value null at 'tableName' failed to satisfy "
                       "constraint: Member must not be null"));
  // ExclusiveStartKey: DynamoDB's shape (table key + index key) of this partition.
  EXPECT_EQ(Err("Query", Legacy("", R"(,"ExclusiveStartKey":{"PK":{"S":"I#1"},"SK":{"S":"X"}})")),
            Validation("The provided starting key is invalid: The provided key element does not "
                       "match the schema"));
  EXPECT_EQ(Err("Query", Legacy("", R"(,"ExclusiveStartKey":{"PK":{"S":"I#1"},"SK":{"S":"X"},"GSI1PK":{"S":"G"},"GSI1SK":{"N":"1"}})")),
            Validation("The provided starting key is invalid: The provided key element does not "
                       "match the schema"));
  EXPECT_EQ(Err("Query", Legacy("", R"(,"ExclusiveStartKey":{"PK":{"S":"I#1"},"SK":{"S":"X"},"GSI1PK":{"S":"H"},"GSI1SK":{"S":"a"}})")),
            Validation("The provided starting key is outside query boundaries based on provided "
                       "conditions"));
}

TEST_F(DynamoDbApiTest, BadJsonIsASerializationException) {
  Ready();
  EXPECT_EQ(Err("Query", "{not json"),
            R"(400 {"__type":"com.amazon.coral.service#SerializationException","message":"The request body is not a JSON object"})");
  EXPECT_EQ(Err("Query", R"({"TableName":5})"),
            R"(400 {"__type":"com.amazon.coral.service#SerializationException","message":"class com.amazon.coral.value.json.numbers.TruncatingBigNumber can not be converted to an String"})");
  EXPECT_EQ(Err("Query", R"({"TableName":"App","IndexName":"GSI1","Limit":"5"})"),
            R"(400 {"__type":"com.amazon.coral.service#SerializationException","message":"class java.lang.String can not be converted to an Integer"})");
  EXPECT_EQ(Err("Query", Expression("GSI1PK = :p", R"(":p":{"S":"G","N":"1"})")),
            Validation("ExpressionAttributeValues contains invalid value: Supplied AttributeValue "
                       "has more than one datatypes set, must contain exactly one of the "
                       "supported datatypes for key :p"));
  EXPECT_EQ(Err("Query", Expression("GSI1PK = :p", R"(":p":{"N":"x1"})")),
            Validation("ExpressionAttributeValues contains invalid value: The parameter cannot be "
                       "converted to a numeric value: \\\"x1\\\" for key :p"));
  // Nesting deeper than DynamoDB's 32 levels.
  std::string deep;
  for (int i = 0; i < 40; ++i) deep += R"({"L":[)";
  deep += R"({"S":"x"})";
  for (int i = 0; i < 40; ++i) deep += "]}";
  EXPECT_EQ(Err("Query", Expression("GSI1PK = :p", R"(":p":)" + deep)),
            Validation("ExpressionAttributeValues contains invalid value: Nesting Levels have "
                       "exceeded supported limits for key :p"));
  // Deeper than the JSON parser goes: refused, not a stack overflow.
  std::string abyss(100000, '[');
  EXPECT_EQ(Call("Query", abyss).error_type, "SerializationException");
}

TEST_F(DynamoDbApiTest, AViewBeingBuiltIsABackfillingIndex) {
  PutGsi1();
  EXPECT_EQ(Err("Query", Legacy("")),
            Validation("Cannot read from backfilling global secondary index: GSI1"));
}

// Whatever the client sends is answered in bounded work and bounded words.
TEST_F(DynamoDbApiTest, HostileRequestsStayBounded) {
  Ready();
  PutGsi1();
  EXPECT_EQ(Ok("Query", Legacy("", R"(,"Limit":9223372036854775807,"Select":"COUNT")")),
            R"({"Count":6,"ScannedCount":6})");
  EXPECT_EQ(Call("Query", Legacy("", R"(,"Limit":9223372036854775808)")).error_type,
            "SerializationException");
  EXPECT_EQ(Ok("Scan", R"({"TableName":"App","IndexName":"GSI1","Segment":999999,"TotalSegments":1000000,"Select":"COUNT"})"),
            R"({"Count":0,"ScannedCount":0})");
  // A start key of 100,000 bytes resumes after it, like any other.
  const std::string big(100000, 'z');
  EXPECT_EQ(Ok("Query", Legacy("", absl::StrCat(R"(,"Select":"COUNT","ExclusiveStartKey":{"PK":{"S":")", big,
                                                R"("},"SK":{"S":"X"},"GSI1PK":{"S":"G"},"GSI1SK":{"S":"b"}})"))),
            R"({"Count":2,"ScannedCount":2})");
  // Ten thousand unused placeholders: the message is cut, not ten thousand names long.
  std::string values = R"(":p":{"S":"G"})";
  for (int i = 0; i < 10000; ++i) absl::StrAppend(&values, R"(,":u)", i, R"(":{"S":"x"})");
  ApiResponse r = Call("Query", Expression("GSI1PK = :p", values));
  EXPECT_EQ(r.error_type, "ValidationException");
  EXPECT_LT(r.body.size(), 1200u);
  EXPECT_TRUE(r.body.starts_with(
      R"({"__type":"com.amazonaws.dynamodb.v20120810#ValidationException","message":"Value provided in ExpressionAttributeValues unused in expressions: keys: {:u0, :u1, )"))
      << r.body;
  // Maps nested 40 levels in a key: refused at DynamoDB's 32; 1,000 levels: by the parser.
  auto nested = [](int levels) {
    std::string deep;
    for (int i = 0; i < levels; ++i) deep += R"({"M":{"a":)";
    deep += R"({"S":"x"})";
    for (int i = 0; i < levels; ++i) deep += "}}";
    return absl::StrCat(R"({"TableName":"App","Key":{"PK":)", deep, R"(,"SK":{"S":"X"}}})");
  };
  EXPECT_EQ(Err("GetItem", nested(40)), Validation("Nesting Levels have exceeded supported limits"));
  EXPECT_EQ(Err("GetItem", nested(1000)),
            R"(400 {"__type":"com.amazon.coral.service#SerializationException","message":"The request body nests more than 256 levels deep"})");
}

// ---- Scan

TEST_F(DynamoDbApiTest, ScanPagesAndSegments) {
  Ready();
  PutGsi1();
  Put({{"PK", S("I#z")}, {"SK", S("X")}, {"GSI1PK", S("Z")}, {"GSI1SK", S("z")}});
  const std::string all = Ok("Scan", R"({"TableName":"App","IndexName":"GSI1","ProjectionExpression":"PK"})");
  EXPECT_EQ(all,
            R"({"Items":[{"PK":{"S":"I#1"}},{"PK":{"S":"I#2"}},{"PK":{"S":"I#4"}},{"PK":{"S":"I#5"}},{"PK":{"S":"I#3"}},{"PK":{"S":"I#0"}},{"PK":{"S":"I#h"}},{"PK":{"S":"I#z"}}],"Count":8,"ScannedCount":8})");
  const std::string page = Ok("Scan", R"({"TableName":"App","IndexName":"GSI1","Limit":7,"Select":"COUNT"})");
  EXPECT_EQ(page,
            R"({"Count":7,"ScannedCount":7,"LastEvaluatedKey":{"GSI1PK":{"S":"H"},"GSI1SK":{"S":"a"},"PK":{"S":"I#h"},"SK":{"S":"X"}}})");
  EXPECT_EQ(Ok("Scan", absl::StrCat(R"({"TableName":"App","IndexName":"GSI1","ProjectionExpression":"PK","ExclusiveStartKey":)",
                                    LastKey(page), "}")),
            R"({"Items":[{"PK":{"S":"I#z"}}],"Count":1,"ScannedCount":1})");

  // Three segments: together every entry once, a partition in one segment only.
  std::multiset<std::string> seen;
  std::set<std::string> partitions_seen;
  uint64_t scanned = 0;
  for (int segment = 0; segment < 3; ++segment) {
    const std::string body = Ok("Scan", absl::StrCat(
        R"({"TableName":"App","IndexName":"GSI1","Segment":)", segment, R"(,"TotalSegments":3})"));
    Strings pks = Column(body, "PK");
    seen.insert(pks.begin(), pks.end());
    std::set<std::string> mine;
    for (const std::string& p : Column(body, "GSI1PK")) mine.insert(p);
    for (const std::string& p : mine) EXPECT_TRUE(partitions_seen.insert(p).second) << p;
    scanned += Number(body, "ScannedCount");
    EXPECT_EQ(Number(body, "ScannedCount"), pks.size());
  }
  EXPECT_EQ(seen, (std::multiset<std::string>{"I#0", "I#1", "I#2", "I#3", "I#4", "I#5", "I#h", "I#z"}));
  EXPECT_EQ(scanned, 8u);
  EXPECT_EQ(partitions_seen, (std::set<std::string>{"G", "H", "Z"}));

  EXPECT_EQ(Err("Scan", R"({"TableName":"App","IndexName":"GSI1","Segment":3,"TotalSegments":3})"),
            Validation("The Segment parameter is zero-based and must be less than parameter "
                       "TotalSegments: Segment: 3 is not less than TotalSegments: 3"));
  EXPECT_EQ(Err("Scan", R"({"TableName":"App","IndexName":"GSI1","Segment":1})"),
            Validation("The TotalSegments parameter is required but was not present in the "
                       "request when Segment parameter is present"));
  EXPECT_EQ(Err("Scan", R"({"TableName":"App","IndexName":"GSI1","Segment":0,"TotalSegments":1000001})"),
            Validation("1 validation error detected: Value '1000001' at 'totalSegments' failed to "
                       "satisfy constraint: Member must have value less than or equal to 1000000"));
  EXPECT_EQ(Err("Scan", R"({"TableName":"App","IndexName":"GSI1","Segment":-1,"TotalSegments":2})"),
            Validation("1 validation error detected: Value '-1' at 'segment' failed to satisfy "
                       "constraint: Member must have value greater than or equal to 0"));
  EXPECT_EQ(Err("Scan", R"({"TableName":"App"})"),
            Validation("cdcview serves Query and Scan on its views (IndexName); read the table by "
                       "GetItem or BatchGetItem, or query it at DynamoDB"));
}

TEST_F(DynamoDbApiTest, ScanFilters) {
  Ready();
  PutGsi1();
  EXPECT_EQ(Ok("Scan", R"({"TableName":"App","IndexName":"GSI1","FilterExpression":"n > :n","ExpressionAttributeValues":{":n":{"N":"3"}},"ProjectionExpression":"PK"})"),
            R"({"Items":[{"PK":{"S":"I#4"}},{"PK":{"S":"I#5"}}],"Count":2,"ScannedCount":7})");
}

// ---- GetItem, BatchGetItem

TEST_F(DynamoDbApiTest, GetItem) {
  Ready();
  PutGsi1();
  Put({{"id", N("7")}, {"v", S("seven")}}, 1);
  EXPECT_EQ(Ok("GetItem", R"({"TableName":"App","Key":{"PK":{"S":"I#2"},"SK":{"S":"X"}}})"),
            R"({"Item":{"GSI1PK":{"S":"G"},"GSI1SK":{"S":"ab"},"PK":{"S":"I#2"},"SK":{"S":"X"},"n":{"N":"2"}}})");
  // By the DynamoDB table name of the source feeding App; ConsistentRead is accepted.
  EXPECT_EQ(Ok("GetItem", R"({"TableName":"prod-app","ConsistentRead":true,"ProjectionExpression":"n","Key":{"PK":{"S":"I#2"},"SK":{"S":"X"}}})"),
            R"({"Item":{"n":{"N":"2"}}})");
  EXPECT_EQ(Ok("GetItem", R"({"TableName":"App","Key":{"PK":{"S":"nope"},"SK":{"S":"X"}}})"), "{}");
  EXPECT_EQ(Ok("GetItem", R"({"TableName":"arn:aws:dynamodb:eu-west-1:123456789012:table/App","ProjectionExpression":"n","Key":{"PK":{"S":"I#2"},"SK":{"S":"X"}}})"),
            R"({"Item":{"n":{"N":"2"}}})");
  EXPECT_EQ(Ok("GetItem", R"({"TableName":"Other","Key":{"id":{"N":"7.0"}}})"),
            R"({"Item":{"id":{"N":"7"},"v":{"S":"seven"}}})");
  EXPECT_EQ(Err("GetItem", R"({"TableName":"App","Key":{"PK":{"S":"I#2"}}})"),
            Validation("The provided key element does not match the schema"));
  EXPECT_EQ(Err("GetItem", R"({"TableName":"App","Key":{"PK":{"S":"I#2"},"SK":{"N":"1"}}})"),
            Validation("The provided key element does not match the schema"));
  EXPECT_EQ(Err("GetItem", R"({"TableName":"App"})"),
            Validation("1 validation error detected: Value null at 'key' failed to satisfy "
                       "constraint: Member must not be null"));
  ApiResponse r = Call("GetItem", R"({"TableName":"App","Key":{"PK":{"S":"I#2"},"SK":{"S":"X"}}})");
  std::string token;
  ASSERT_TRUE(Base64Decode(r.applied_position, &token)) << r.applied_position;
  EXPECT_FALSE(token.empty());
}

TEST_F(DynamoDbApiTest, BatchGetItem) {
  Ready();
  PutGsi1();
  Put({{"id", N("7")}, {"v", S("seven")}}, 1);
  EXPECT_EQ(Ok("BatchGetItem", R"({"RequestItems":{"prod-app":{"Keys":[{"PK":{"S":"I#2"},"SK":{"S":"X"}},{"PK":{"S":"none"},"SK":{"S":"X"}},{"PK":{"S":"I#0"},"SK":{"S":"X"}}],"ProjectionExpression":"PK, #n","ExpressionAttributeNames":{"#n":"n"}},"Other":{"Keys":[{"id":{"N":"7"}}],"ConsistentRead":true}}})"),
            R"({"Responses":{"prod-app":[{"PK":{"S":"I#2"},"n":{"N":"2"}},{"PK":{"S":"I#0"},"n":{"N":"0"}}],"Other":[{"id":{"N":"7"},"v":{"S":"seven"}}]},"UnprocessedKeys":{}})");
  std::string keys;
  for (int i = 0; i < 101; ++i) {
    absl::StrAppend(&keys, i ? "," : "", R"({"id":{"N":")", i, R"("}})");
  }
  EXPECT_EQ(Err("BatchGetItem", absl::StrCat(R"({"RequestItems":{"Other":{"Keys":[)", keys, "]}}}")),
            Validation("Too many items requested for the BatchGetItem call"));
  EXPECT_EQ(Err("BatchGetItem", R"({"RequestItems":{"Other":{"Keys":[{"id":{"N":"1"}},{"id":{"N":"1.0"}}]}}})"),
            Validation("Provided list of item keys contains duplicates"));
  EXPECT_EQ(Err("BatchGetItem", R"({"RequestItems":{"Nope":{"Keys":[{"id":{"N":"1"}}]}}})"),
            R"(400 {"__type":"com.amazonaws.dynamodb.v20120810#ResourceNotFoundException","message":"Requested resource not found"})");
  EXPECT_EQ(Err("BatchGetItem", R"({"RequestItems":{}})"),
            Validation("1 validation error detected: Value '{}' at 'requestItems' failed to "
                       "satisfy constraint: Member must have length greater than or equal to 1"));
}

// ---- DescribeTable, ListTables

TEST_F(DynamoDbApiTest, DescribeTable) {
  Ready();
  PutGsi1();
  // Item counts and sizes come from the store; the sizes depend on LMDB's pages.
  simdjson::dom::parser parser;
  const std::string body = Ok("DescribeTable", R"({"TableName":"App"})");
  simdjson::dom::element root = Parse(parser, body);
  uint64_t gsi1_items = 0, gsi1_bytes = 0;
  ASSERT_EQ(root["Table"]["GlobalSecondaryIndexes"].at(0)["ItemCount"].get(gsi1_items),
            simdjson::SUCCESS);
  ASSERT_EQ(root["Table"]["GlobalSecondaryIndexes"].at(0)["IndexSizeBytes"].get(gsi1_bytes),
            simdjson::SUCCESS);
  EXPECT_EQ(gsi1_items, 7u);
  EXPECT_GT(gsi1_bytes, 0u);
  const std::string sizes = absl::StrCat(R"("IndexSizeBytes":)", gsi1_bytes, R"(,"ItemCount":7)");
  const std::string zero = R"("ProvisionedThroughput":{"NumberOfDecreasesToday":0,"ReadCapacityUnits":0,"WriteCapacityUnits":0})";
  const std::string arn = "arn:aws:dynamodb:ddblocal:000000000000:table/App";
  EXPECT_EQ(
      body,
      absl::StrCat(
          R"({"Table":{"AttributeDefinitions":[{"AttributeName":"PK","AttributeType":"S"},{"AttributeName":"SK","AttributeType":"S"},{"AttributeName":"GSI1PK","AttributeType":"S"},{"AttributeName":"GSI1SK","AttributeType":"S"},{"AttributeName":"board","AttributeType":"S"},{"AttributeName":"score","AttributeType":"N"},{"AttributeName":"status","AttributeType":"S"},{"AttributeName":"cdcview_pk","AttributeType":"S"},{"AttributeName":"cdcview_sk","AttributeType":"S"},{"AttributeName":"day","AttributeType":"S"},{"AttributeName":"at","AttributeType":"S"}],)",
          R"("TableName":"App","KeySchema":[{"AttributeName":"PK","KeyType":"HASH"},{"AttributeName":"SK","KeyType":"RANGE"}],"TableStatus":"ACTIVE","CreationDateTime":1700000000.500,)",
          zero, R"(,"TableSizeBytes":0,"ItemCount":0,"TableArn":")", arn,
          R"(","BillingModeSummary":{"BillingMode":"PAY_PER_REQUEST","LastUpdateToPayPerRequestDateTime":1700000000.500},"GlobalSecondaryIndexes":[)",
          R"({"IndexName":"GSI1","KeySchema":[{"AttributeName":"GSI1PK","KeyType":"HASH"},{"AttributeName":"GSI1SK","KeyType":"RANGE"}],"Projection":{"ProjectionType":"ALL"},"IndexStatus":"ACTIVE",)",
          zero, ",", sizes, R"(,"IndexArn":")", arn, R"(/index/GSI1"},)",
          R"({"IndexName":"ByScore","KeySchema":[{"AttributeName":"board","KeyType":"HASH"},{"AttributeName":"score","KeyType":"RANGE"}],"Projection":{"ProjectionType":"INCLUDE","NonKeyAttributes":["player"]},"IndexStatus":"ACTIVE",)",
          zero, R"(,"IndexSizeBytes":0,"ItemCount":0,"IndexArn":")", arn, R"(/index/ByScore"},)",
          R"({"IndexName":"ByStatus","KeySchema":[{"AttributeName":"status","KeyType":"HASH"}],"Projection":{"ProjectionType":"KEYS_ONLY"},"IndexStatus":"ACTIVE",)",
          zero, R"(,"IndexSizeBytes":0,"ItemCount":0,"IndexArn":")", arn, R"(/index/ByStatus"},)",
          R"({"IndexName":"ByEntity","KeySchema":[{"AttributeName":"cdcview_pk","KeyType":"HASH"},{"AttributeName":"cdcview_sk","KeyType":"RANGE"}],"Projection":{"ProjectionType":"KEYS_ONLY"},"IndexStatus":"ACTIVE",)",
          zero, R"(,"IndexSizeBytes":0,"ItemCount":0,"IndexArn":")", arn, R"(/index/ByEntity"},)",
          R"({"IndexName":"ByDay","KeySchema":[{"AttributeName":"day","KeyType":"HASH"},{"AttributeName":"at","KeyType":"RANGE"}],"Projection":{"ProjectionType":"ALL"},"IndexStatus":"ACTIVE",)",
          zero, R"(,"IndexSizeBytes":0,"ItemCount":0,"IndexArn":")", arn, R"(/index/ByDay"}]}})"));
  EXPECT_EQ(Err("DescribeTable", R"({"TableName":"Nope"})"),
            R"(400 {"__type":"com.amazonaws.dynamodb.v20120810#ResourceNotFoundException","message":"Requested resource not found: Table: Nope not found"})");
  EXPECT_EQ(Ok("DescribeTable", R"({"TableName":"Other"})"),
            R"({"Table":{"AttributeDefinitions":[{"AttributeName":"id","AttributeType":"N"}],"TableName":"Other","KeySchema":[{"AttributeName":"id","KeyType":"HASH"}],"TableStatus":"ACTIVE","CreationDateTime":1700000000.500,)" +
                zero +
                R"(,"TableSizeBytes":0,"ItemCount":0,"TableArn":"arn:aws:dynamodb:ddblocal:000000000000:table/Other","BillingModeSummary":{"BillingMode":"PAY_PER_REQUEST","LastUpdateToPayPerRequestDateTime":1700000000.500}}})");
}

TEST_F(DynamoDbApiTest, DescribeTableWhileViewsBuild) {
  // Before RebuildViews every view is BUILDING: DynamoDB's index being created.
  const std::string body = Ok("DescribeTable", R"({"TableName":"App"})");
  EXPECT_NE(body.find(R"("IndexName":"GSI1","KeySchema":[{"AttributeName":"GSI1PK","KeyType":"HASH"},{"AttributeName":"GSI1SK","KeyType":"RANGE"}],"Projection":{"ProjectionType":"ALL"},"IndexStatus":"CREATING","Backfilling":true,)"),
            std::string::npos)
      << body;
}

TEST_F(DynamoDbApiTest, ListTables) {
  EXPECT_EQ(Ok("ListTables", "{}"), R"({"TableNames":["App","Other"]})");
  EXPECT_EQ(Ok("ListTables", R"({"Limit":1})"),
            R"({"TableNames":["App"],"LastEvaluatedTableName":"App"})");
  EXPECT_EQ(Ok("ListTables", R"({"Limit":1,"ExclusiveStartTableName":"App"})"),
            R"({"TableNames":["Other"]})");
  EXPECT_EQ(Err("ListTables", R"({"Limit":101})"),
            Validation("1 validation error detected: Value '101' at 'limit' failed to satisfy "
                       "constraint: Member must have value less than or equal to 100"));
}

// ---- Operations, consistency, permissions

TEST_F(DynamoDbApiTest, WritesAndUnknownOperations) {
  EXPECT_EQ(Err("PutItem", "{}"),
            Validation("cdcview's DynamoDB endpoint is read-only: PutItem is not served; write to "
                       "the table itself (its stream feeds cdcview)"));
  EXPECT_EQ(Call("CreateTable", "{}").operation, "CreateTable");
  for (const char* change : {"CreateTable", "UpdateTable", "DeleteTable"}) {
    EXPECT_EQ(Err(change, "{}"),
              Validation(absl::StrCat("cdcview's DynamoDB endpoint is read-only: ", change,
                                      " is not served; write to the table itself (its stream "
                                      "feeds cdcview)")));
  }
  EXPECT_EQ(Err("Frobnicate", "{}"),
            R"(400 {"__type":"com.amazon.coral.service#UnknownOperationException","message":""})");
  ApiRequest other;
  other.target = "Other_2020.Query";
  other.body = "{}";
  ApiResponse r = api_->Handle(other);
  EXPECT_EQ(r.error_type, "UnknownOperationException");
  EXPECT_EQ(r.operation, "unknown");
}

TEST_F(DynamoDbApiTest, ConsistencyHeaders) {
  Ready();
  PutGsi1();  // offsets 1..7 of orders/0 applied: the next offset is 7
  ApiRequest wait;
  wait.min_kafka_offsets = "orders/0=6";
  ApiResponse r = Call("Query", Legacy(""), wait);
  EXPECT_EQ(r.http_status, 200) << r.body;
  std::string token;
  ASSERT_TRUE(Base64Decode(r.applied_position, &token));
  // The applied position is a token min_position takes.
  ApiRequest again;
  again.min_position = r.applied_position;
  EXPECT_EQ(Call("Query", Legacy(""), again).http_status, 200);

  ApiRequest ahead;
  ahead.min_kafka_offsets = "orders/0=100";
  ahead.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  r = Call("Query", Legacy(""), ahead);
  EXPECT_EQ(r.http_status, 400);
  EXPECT_EQ(r.error_type, "PositionNotAppliedException");
  EXPECT_TRUE(r.body.starts_with(
      R"({"__type":"com.cdcview#PositionNotAppliedException","message":"view GSI1: min_position not applied before the deadline)"))
      << r.body;

  v1::AppliedPosition future;
  auto* e = future.add_entries();
  e->set_source("orders");
  e->set_partition("orders/0");
  e->set_position("100");
  ApiRequest position;
  const std::string future_token = Base64Encode(EncodePositionToken(future));
  position.min_position = future_token;
  position.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  r = Call("GetItem", R"({"TableName":"App","Key":{"PK":{"S":"I#2"},"SK":{"S":"X"}}})", position);
  EXPECT_EQ(r.http_status, 400);
  EXPECT_TRUE(r.body.starts_with(
      R"({"__type":"com.cdcview#PositionNotAppliedException","message":"table App: min_position not applied before the deadline: source orders partition orders/0: applied up to 7, waiting for )"))
      << r.body;

  ApiRequest bad;
  bad.min_position = "%%%";
  EXPECT_EQ(Err("Query", Legacy(""), bad),
            Validation("x-cdcview-min-position is not base64; pass an earlier answer's "
                       "x-cdcview-applied-position unchanged"));
  bad = {};
  bad.min_kafka_offsets = "orders=5";
  EXPECT_EQ(Err("Query", Legacy(""), bad),
            Validation("x-cdcview-min-kafka-offsets: entry \\\"orders=5\\\" is not "
                       "topic/partition=offset (entries joined by \\\",\\\")"));
  bad = {};
  bad.max_staleness_seconds = "-1";
  EXPECT_EQ(Err("Query", Legacy(""), bad),
            Validation("x-cdcview-max-staleness-seconds is \\\"-1\\\"; give a number of seconds >= 0"));
  EXPECT_TRUE(MayWait(wait));
  EXPECT_FALSE(MayWait(ApiRequest{}));
}

// Which requests the endpoint answers on its I/O threads: those whose work is bounded small.
TEST(RunsShortTest, ShortAreBoundedReadsAndErrorsLongArePagesBatchesAndLongBodies) {
  auto runs_short = [](std::string_view operation, std::string_view body) {
    const std::string target = "DynamoDB_20120810." + std::string(operation);
    ApiRequest request;
    request.target = target;
    request.body = body;
    return RunsShort(request);
  };
  EXPECT_TRUE(runs_short("GetItem", R"({"TableName":"App","Key":{"PK":{"S":"a"}}})"));
  EXPECT_TRUE(runs_short("DescribeTable", R"({"TableName":"App"})"));
  EXPECT_TRUE(runs_short("ListTables", "{}"));
  EXPECT_TRUE(runs_short("PutItem", "{}"));  // refused at once
  EXPECT_TRUE(runs_short("Query", R"({"IndexName":"GSI1","Limit":1})"));
  EXPECT_TRUE(runs_short("Query", R"({"Limit":100})"));
  EXPECT_TRUE(runs_short("Scan", R"({"Limit":100,"TotalSegments":null})"));
  EXPECT_TRUE(runs_short("Scan", R"({"Limit":5,"Segment":0,"TotalSegments":1})"));
  EXPECT_TRUE(runs_short("Query", "{not json"));  // a SerializationException
  ApiRequest other;
  other.target = "Other.Query";
  EXPECT_TRUE(RunsShort(other));

  EXPECT_FALSE(runs_short("Query", R"({"IndexName":"GSI1"})"));  // up to 1 MB
  EXPECT_FALSE(runs_short("Query", R"({"Limit":101})"));
  EXPECT_FALSE(runs_short("Query", R"({"Limit":0})"));
  EXPECT_FALSE(runs_short("Query", R"({"Limit":"1"})"));
  EXPECT_FALSE(runs_short("Scan", "{}"));
  EXPECT_FALSE(runs_short("Scan", R"({"Limit":5,"Segment":0,"TotalSegments":4})"));
  EXPECT_FALSE(runs_short("Scan", R"({"Limit":5,"TotalSegments":"4"})"));
  EXPECT_FALSE(runs_short("BatchGetItem", R"({"RequestItems":{}})"));
  const std::string padded =
      R"({"Limit":1,"TableName":")" + std::string(kMaxShortBody, 'x') + R"("})";
  EXPECT_FALSE(runs_short("Query", padded));
  EXPECT_FALSE(runs_short("GetItem", padded));
  const std::string at_limit = absl::StrCat(
      R"({"Limit":1,"TableName":")", std::string(kMaxShortBody - 26, 'x'), R"("})");
  ASSERT_EQ(at_limit.size(), kMaxShortBody);
  EXPECT_TRUE(runs_short("Query", at_limit));
}

// ReturnConsumedCapacity answers what DynamoDB would charge for the same read: half a unit per
// 4 KB begun of the items read (a Query's or Scan's before the filter, a GetItem's whole item),
// at least one; a whole unit when ConsistentRead is asked; BatchGetItem one entry per table.
TEST_F(DynamoDbApiTest, ConsumedCapacityIsWhatDynamoDbWouldCharge) {
  Ready();
  // ItemSize 6 + 3 + 7 + 7 + 5004 = 5027 bytes each: 15081 bytes, 4 units of 4 KB.
  for (int i = 0; i < 3; ++i) {
    Put({{"PK", S(absl::StrCat("I#L", i))},
         {"SK", S("X")},
         {"GSI1PK", S("L")},
         {"GSI1SK", S("a")},
         {"xpad", S(std::string(5000, 'p'))}});
  }
  Put({{"id", N("7")}, {"v", S("seven")}}, 1);
  const std::string query =
      R"({"TableName":"App","IndexName":"GSI1","KeyConditionExpression":"GSI1PK = :p","ExpressionAttributeValues":{":p":{"S":"L"}},"Select":"COUNT")";
  EXPECT_EQ(Ok("Query", query + R"(,"ReturnConsumedCapacity":"TOTAL"})"),
            R"({"ConsumedCapacity":{"TableName":"App","CapacityUnits":2.000,"ReadCapacityUnits":2.000},"Count":3,"ScannedCount":3})");
  EXPECT_EQ(Ok("Query", query + R"(,"ReturnConsumedCapacity":"INDEXES","FilterExpression":"xpad = :p"})"),
            R"({"ConsumedCapacity":{"TableName":"App","CapacityUnits":2.000,"ReadCapacityUnits":2.000,"GlobalSecondaryIndexes":{"GSI1":{"CapacityUnits":2.000,"ReadCapacityUnits":2.000}}},"Count":0,"ScannedCount":3})");
  const std::string one = Ok("Query", query + R"(,"Limit":1,"ReturnConsumedCapacity":"TOTAL"})");
  EXPECT_EQ(one.substr(0, one.find("},") + 2),
            R"({"ConsumedCapacity":{"TableName":"App","CapacityUnits":1.000,"ReadCapacityUnits":1.000},)");
  EXPECT_EQ(Ok("Query", query + R"(,"ReturnConsumedCapacity":"NONE"})"),
            R"({"Count":3,"ScannedCount":3})");
  EXPECT_EQ(Ok("Query", query + "}"), R"({"Count":3,"ScannedCount":3})");
  // Every segment reads its own entries only; nothing read is still half a unit.
  const std::string scan =
      R"({"TableName":"App","IndexName":"GSI1","Select":"COUNT","ReturnConsumedCapacity":"TOTAL","TotalSegments":2,"Segment":)";
  const std::string seg0 = Ok("Scan", scan + "0}"), seg1 = Ok("Scan", scan + "1}");
  EXPECT_TRUE((seg0 == R"({"ConsumedCapacity":{"TableName":"App","CapacityUnits":2.000,"ReadCapacityUnits":2.000},"Count":3,"ScannedCount":3})" &&
               seg1 == R"({"ConsumedCapacity":{"TableName":"App","CapacityUnits":0.500,"ReadCapacityUnits":0.500},"Count":0,"ScannedCount":0})") ||
              (seg1 == R"({"ConsumedCapacity":{"TableName":"App","CapacityUnits":2.000,"ReadCapacityUnits":2.000},"Count":3,"ScannedCount":3})" &&
               seg0 == R"({"ConsumedCapacity":{"TableName":"App","CapacityUnits":0.500,"ReadCapacityUnits":0.500},"Count":0,"ScannedCount":0})"))
      << seg0 << " " << seg1;

  const std::string get = R"({"TableName":"prod-app","Key":{"PK":{"S":"I#L0"},"SK":{"S":"X"}},"ProjectionExpression":"SK")";
  EXPECT_EQ(Ok("GetItem", get + R"(,"ReturnConsumedCapacity":"TOTAL"})"),
            R"({"Item":{"SK":{"S":"X"}},"ConsumedCapacity":{"TableName":"prod-app","CapacityUnits":1.000,"ReadCapacityUnits":1.000}})");
  EXPECT_EQ(Ok("GetItem", get + R"(,"ReturnConsumedCapacity":"INDEXES","ConsistentRead":true})"),
            R"({"Item":{"SK":{"S":"X"}},"ConsumedCapacity":{"TableName":"prod-app","CapacityUnits":2.000,"ReadCapacityUnits":2.000,"Table":{"CapacityUnits":2.000,"ReadCapacityUnits":2.000}}})");
  EXPECT_EQ(Ok("GetItem", R"({"TableName":"App","Key":{"PK":{"S":"none"},"SK":{"S":"X"}},"ReturnConsumedCapacity":"TOTAL"})"),
            R"({"ConsumedCapacity":{"TableName":"App","CapacityUnits":0.500,"ReadCapacityUnits":0.500}})");
  EXPECT_EQ(Ok("BatchGetItem", R"({"ReturnConsumedCapacity":"TOTAL","RequestItems":{"App":{"Keys":[{"PK":{"S":"I#L0"},"SK":{"S":"X"}},{"PK":{"S":"I#L1"},"SK":{"S":"X"}},{"PK":{"S":"none"},"SK":{"S":"X"}}],"ProjectionExpression":"SK"},"Other":{"Keys":[{"id":{"N":"7"}}],"ConsistentRead":true}}})"),
            R"({"Responses":{"App":[{"SK":{"S":"X"}},{"SK":{"S":"X"}}],"Other":[{"id":{"N":"7"},"v":{"S":"seven"}}]},"UnprocessedKeys":{},"ConsumedCapacity":[{"TableName":"App","CapacityUnits":2.500,"ReadCapacityUnits":2.500},{"TableName":"Other","CapacityUnits":1.000,"ReadCapacityUnits":1.000}]})");
}

TEST_F(DynamoDbApiTest, Permissions) {
  Ready();
  PutGsi1();
  security::Principal reader;
  reader.name = "reader";
  reader.views = {"GSI1"};
  ApiRequest as_reader;
  as_reader.who = &reader;
  EXPECT_EQ(Call("Query", Legacy(""), as_reader).http_status, 200);
  EXPECT_EQ(Err("Query", R"({"TableName":"App","IndexName":"ByStatus","KeyConditions":{"status":{"ComparisonOperator":"EQ","AttributeValueList":[{"S":"open"}]}}})", as_reader),
            R"(400 {"__type":"com.amazonaws.dynamodb.v20120810#AccessDeniedException","message":"token \"reader\" may not read view \"ByStatus\": add the view to its views in server.tokens_file"})");
  EXPECT_EQ(Err("GetItem", R"({"TableName":"App","Key":{"PK":{"S":"I#2"},"SK":{"S":"X"}}})", as_reader),
            R"json(400 {"__type":"com.amazonaws.dynamodb.v20120810#AccessDeniedException","message":"token \"reader\" may not read table \"App\"'s items: only a token with views: all may (server.tokens_file)"})json");
  // DescribeTable lists the indexes the token may read.
  const std::string body = Ok("DescribeTable", R"({"TableName":"App"})", as_reader);
  EXPECT_NE(body.find(R"("IndexName":"GSI1")"), std::string::npos);
  EXPECT_EQ(body.find(R"("IndexName":"ByStatus")"), std::string::npos);

  // The refusal comes before anything of the request is read against a schema the token may
  // not read: no key attribute, index or projection of it is named.
  EXPECT_EQ(Err("Query", R"({"TableName":"App","IndexName":"ByStatus","KeyConditionExpression":"nokey = :v","ExpressionAttributeValues":{":v":{"S":"x"}}})", as_reader),
            R"(400 {"__type":"com.amazonaws.dynamodb.v20120810#AccessDeniedException","message":"token \"reader\" may not read view \"ByStatus\": add the view to its views in server.tokens_file"})");
  EXPECT_EQ(Err("Scan", R"({"TableName":"App","IndexName":"ByStatus","ProjectionExpression":"notprojected"})", as_reader),
            R"(400 {"__type":"com.amazonaws.dynamodb.v20120810#AccessDeniedException","message":"token \"reader\" may not read view \"ByStatus\": add the view to its views in server.tokens_file"})");
  EXPECT_EQ(Err("GetItem", R"({"TableName":"App","Key":{"nokey":{"S":"x"}}})", as_reader),
            R"json(400 {"__type":"com.amazonaws.dynamodb.v20120810#AccessDeniedException","message":"token \"reader\" may not read table \"App\"'s items: only a token with views: all may (server.tokens_file)"})json");
  EXPECT_EQ(Err("BatchGetItem", R"({"RequestItems":{"App":{"Keys":[{"nokey":{"S":"x"}}]}}})", as_reader),
            R"json(400 {"__type":"com.amazonaws.dynamodb.v20120810#AccessDeniedException","message":"token \"reader\" may not read table \"App\"'s items: only a token with views: all may (server.tokens_file)"})json");
  // A table none of whose views the token may read is neither listed nor described, and its
  // indexes are not looked up; one that does not exist is refused alike, and an index the
  // token may not read alike whether or not it exists.
  constexpr char kOtherRefused[] =
      R"json(400 {"__type":"com.amazonaws.dynamodb.v20120810#AccessDeniedException","message":"token \"reader\" may not read table \"Other\": it reads only the tables of the views in its views (server.tokens_file)"})json";
  EXPECT_EQ(Err("DescribeTable", R"({"TableName":"Missing"})", as_reader),
            R"json(400 {"__type":"com.amazonaws.dynamodb.v20120810#AccessDeniedException","message":"token \"reader\" may not read table \"Missing\": it reads only the tables of the views in its views (server.tokens_file)"})json");
  EXPECT_EQ(Err("Scan", R"({"TableName":"App","IndexName":"Nope"})", as_reader),
            R"(400 {"__type":"com.amazonaws.dynamodb.v20120810#AccessDeniedException","message":"token \"reader\" may not read view \"Nope\": add the view to its views in server.tokens_file"})");
  EXPECT_EQ(Err("GetItem", R"({"TableName":"prod-app","Key":{"PK":{"S":"x"}}})", as_reader),
            R"json(400 {"__type":"com.amazonaws.dynamodb.v20120810#AccessDeniedException","message":"token \"reader\" may not read table \"prod-app\"'s items: only a token with views: all may (server.tokens_file)"})json");
  EXPECT_EQ(Err("BatchGetItem", R"({"RequestItems":{"Missing":{"Keys":[{"id":{"N":"1"}}]}}})", as_reader),
            R"json(400 {"__type":"com.amazonaws.dynamodb.v20120810#AccessDeniedException","message":"token \"reader\" may not read table \"Missing\"'s items: only a token with views: all may (server.tokens_file)"})json");
  EXPECT_EQ(Ok("ListTables", "{}", as_reader), R"({"TableNames":["App"]})");
  EXPECT_EQ(Ok("ListTables", "{}"), R"({"TableNames":["App","Other"]})");
  EXPECT_EQ(Err("DescribeTable", R"({"TableName":"Other"})", as_reader), kOtherRefused);
  EXPECT_EQ(Err("Query", R"({"TableName":"Other","IndexName":"Nope","KeyConditionExpression":"id = :v","ExpressionAttributeValues":{":v":{"N":"1"}}})", as_reader),
            kOtherRefused);
  EXPECT_EQ(Err("Scan", R"({"TableName":"Other","IndexName":"Nope"})", as_reader), kOtherRefused);
  security::Principal everything;
  everything.name = "all";
  everything.all_views = true;
  ApiRequest as_all;
  as_all.who = &everything;
  EXPECT_EQ(Ok("ListTables", "{}", as_all), R"({"TableNames":["App","Other"]})");
  EXPECT_EQ(Ok("DescribeTable", R"({"TableName":"Other"})", as_all),
            Ok("DescribeTable", R"({"TableName":"Other"})"));
}

// ---- Bounds on what one request may make cdcview do

constexpr char kSubstitutionLimit[] =
    "The expression attribute names and values substituted in the request's expressions exceed "
    "2097152 bytes (DynamoDB's limit on the size of all substitution variables; each reference "
    "counts)";

// A 120 KB value referenced 300 times made 300 copies (1.7 GB): each reference now counts
// against DynamoDB's 2 MB of substitution variables, and the parsed value is shared.
TEST_F(DynamoDbApiTest, PlaceholderReferencesAreBounded) {
  Ready();
  PutGsi1();
  std::string list = R"({"L":[)";
  for (int i = 0; i < 60000; ++i) absl::StrAppend(&list, i ? "," : "", R"({"NULL":true})");
  list += "]}";
  auto scan = [&](int refs) {
    std::string filter;
    for (int done = 0; done < refs;) {
      absl::StrAppend(&filter, filter.empty() ? "" : " OR ", "a IN (");
      for (int k = 0; k < 100 && done < refs; ++k, ++done) absl::StrAppend(&filter, k ? "," : "", ":b");
      filter += ")";
    }
    return absl::StrCat(R"({"TableName":"App","IndexName":"GSI1","Select":"COUNT","FilterExpression":")",
                        filter, R"(","ExpressionAttributeValues":{":b":)", list, "}}");
  };
  EXPECT_EQ(Ok("Scan", scan(17)), R"({"Count":0,"ScannedCount":7})");
  EXPECT_EQ(Err("Scan", scan(300)), Validation(absl::StrCat("Invalid FilterExpression: ", kSubstitutionLimit)));
  EXPECT_EQ(Err("Scan", scan(1300)).substr(0, 200),
            Validation(absl::StrCat("Invalid FilterExpression: ", kSubstitutionLimit)).substr(0, 200));
  // An 800 KB name three times.
  const std::string big(800000, 'n');
  auto get = [&](const std::string& projection) {
    return absl::StrCat(R"({"TableName":"App","Key":{"PK":{"S":"I#1"},"SK":{"S":"X"}},"ProjectionExpression":")",
                        projection, R"(","ExpressionAttributeNames":{"#n":")", big, "\"}}");
  };
  EXPECT_EQ(Ok("GetItem", get("#n.a, #n.b")), R"({"Item":{}})");
  EXPECT_EQ(Err("GetItem", get("#n.a, #n.b, #n.c")),
            Validation(absl::StrCat("Invalid ProjectionExpression: ", kSubstitutionLimit)));
}

// AttributesToGet counts as the ProjectionExpression it stands for (4 KB): 100,000 names took
// seconds (a projection rebuilt per item, a quadratic check of what a KEYS_ONLY index lacks).
TEST_F(DynamoDbApiTest, AttributesToGetIsBounded) {
  Ready();
  PutGsi1();
  auto names = [](int n) {
    std::string out;
    for (int i = 0; i < n; ++i) absl::StrAppend(&out, i ? "," : "", "\"a", 100 + i % 900, i / 900 ? "x" : "", "\"");
    return out;
  };
  // 819 names of 4 bytes and 818 commas: 4094 bytes.
  std::string fits;
  for (int i = 0; i < 819; ++i) absl::StrAppend(&fits, i ? "," : "", "\"", 1000 + i, "\"");
  EXPECT_EQ(Ok("Scan", absl::StrCat(R"({"TableName":"App","IndexName":"GSI1","Limit":1,"AttributesToGet":[)",
                                    fits, R"(,"n"]})")),
            R"({"Items":[{"n":{"N":"1"}}],"Count":1,"ScannedCount":1,"LastEvaluatedKey":{"GSI1PK":{"S":"G"},"GSI1SK":{"S":"a"},"PK":{"S":"I#1"},"SK":{"S":"X"}}})");
  const std::string refused = Validation(
      "AttributesToGet exceeds 4096 bytes (the names joined by \\\",\\\", counted as the "
      "ProjectionExpression's 4 KB limit); ask for fewer attributes");
  EXPECT_EQ(Err("Scan", absl::StrCat(R"({"TableName":"App","IndexName":"GSI1","AttributesToGet":[)",
                                     fits, R"(,"n0"]})")),
            refused);
  for (const char* index : {"GSI1", "ByStatus"}) {
    EXPECT_EQ(Err("Scan", absl::StrCat(R"({"TableName":"App","IndexName":")", index,
                                       R"(","AttributesToGet":[)", names(100000), "]}")),
              refused)
        << index;
  }
  EXPECT_EQ(Err("GetItem", absl::StrCat(R"({"TableName":"App","Key":{"PK":{"S":"I#1"},"SK":{"S":"X"}},"AttributesToGet":[)",
                                        names(100000), "]}")),
            refused);
  // What a KEYS_ONLY index lacks is named once each, in order.
  EXPECT_EQ(Err("Scan", R"({"TableName":"App","IndexName":"ByStatus","AttributesToGet":["x","PK","y","z"]})"),
            Validation("One or more parameter values were invalid: Global secondary index ByStatus does not project [x, y, z]"));
  EXPECT_EQ(Err("Scan", R"({"TableName":"App","IndexName":"ByStatus","ProjectionExpression":"x.a, PK, y, x.b"})"),
            Validation("One or more parameter values were invalid: Global secondary index ByStatus does not project [x, y]"));
}

TEST_F(DynamoDbApiTest, StartKeyWithinTheKeyCondition) {
  Ready();
  PutGsi1();  // G: a(I#1) ab(I#2) abc(I#4) b(I#5) ba(I#3) c(I#0)
  auto query = [](const std::string& sort, const std::string& values, const std::string& start_sk,
                  const std::string& start_pk, bool forward) {
    return absl::StrCat(R"({"TableName":"App","IndexName":"GSI1","KeyConditionExpression":"GSI1PK = :p AND )", sort,
                        R"(","ExpressionAttributeValues":{":p":{"S":"G"},)", values,
                        R"(},"ExclusiveStartKey":{"PK":{"S":")", start_pk, R"("},"SK":{"S":"X"},"GSI1PK":{"S":"G"},"GSI1SK":{"S":")",
                        start_sk, R"("}},"ScanIndexForward":)", forward ? "true" : "false",
                        R"(,"ProjectionExpression":"GSI1SK"})");
  };
  const std::string outside = Validation(
      "The provided starting key is outside query boundaries based on provided conditions");
  EXPECT_EQ(Err("Query", query("GSI1SK < :s", R"(":s":{"S":"b"})", "zzz", "I#0", false)), outside);
  EXPECT_EQ(Err("Query", query("GSI1SK < :s", R"(":s":{"S":"b"})", "b", "I#5", true)), outside);
  EXPECT_EQ(Err("Query", query("GSI1SK <= :s", R"(":s":{"S":"b"})", "ba", "I#3", true)), outside);
  EXPECT_EQ(Err("Query", query("GSI1SK > :s", R"(":s":{"S":"b"})", "b", "I#5", true)), outside);
  EXPECT_EQ(Err("Query", query("GSI1SK >= :s", R"(":s":{"S":"b"})", "abc", "I#4", true)), outside);
  EXPECT_EQ(Err("Query", query("GSI1SK = :s", R"(":s":{"S":"b"})", "ba", "I#3", true)), outside);
  EXPECT_EQ(Err("Query", query("GSI1SK BETWEEN :s AND :t", R"(":s":{"S":"ab"},":t":{"S":"b"})", "a", "I#1", true)),
            outside);
  EXPECT_EQ(Err("Query", query("begins_with(GSI1SK, :s)", R"(":s":{"S":"a"})", "b", "I#5", true)), outside);
  // Inside: the page continues after the start key.
  EXPECT_EQ(Ok("Query", query("GSI1SK < :s", R"(":s":{"S":"b"})", "ab", "I#2", true)),
            R"({"Items":[{"GSI1SK":{"S":"abc"}}],"Count":1,"ScannedCount":1})");
  EXPECT_EQ(Ok("Query", query("GSI1SK < :s", R"(":s":{"S":"b"})", "ab", "I#2", false)),
            R"({"Items":[{"GSI1SK":{"S":"a"}}],"Count":1,"ScannedCount":1})");
  EXPECT_EQ(Ok("Query", query("GSI1SK BETWEEN :s AND :t", R"(":s":{"S":"ab"},":t":{"S":"b"})", "ab", "I#2", true)),
            R"({"Items":[{"GSI1SK":{"S":"abc"}},{"GSI1SK":{"S":"b"}}],"Count":2,"ScannedCount":2})");
  EXPECT_EQ(Ok("Query", query("begins_with(GSI1SK, :s)", R"(":s":{"S":"a"})", "a", "I#1", true)),
            R"({"Items":[{"GSI1SK":{"S":"ab"}},{"GSI1SK":{"S":"abc"}}],"Count":2,"ScannedCount":2})");
  // Empty key values: DynamoDB's refusal, as for a Key.
  EXPECT_EQ(Err("Query", query("GSI1SK < :s", R"(":s":{"S":"b"})", "", "", true)),
            Validation("One or more parameter values are not valid. The AttributeValue for a key "
                       "attribute cannot contain an empty string value. Key: PK"));
  EXPECT_EQ(Err("Scan", R"({"TableName":"App","IndexName":"GSI1","ExclusiveStartKey":{"PK":{"S":"I#1"},"SK":{"S":"X"},"GSI1PK":{"S":"G"},"GSI1SK":{"S":""}}})"),
            Validation("One or more parameter values are not valid. The AttributeValue for a key "
                       "attribute cannot contain an empty string value. Key: GSI1SK"));
  // Keys past DynamoDB's sizes: its refusals, in its words.
  const std::string long_pk(2049, 'p'), long_sk(1025, 's');
  EXPECT_EQ(Err("GetItem", absl::StrCat(R"({"TableName":"App","Key":{"PK":{"S":")", long_pk,
                                        R"("},"SK":{"S":"X"}}})")),
            Validation("One or more parameter values were invalid: Size of hashkey has exceeded "
                       "the maximum size limit of2048 bytes"));
  EXPECT_EQ(Err("BatchGetItem", absl::StrCat(R"({"RequestItems":{"App":{"Keys":[{"PK":{"S":"I#1"},"SK":{"S":")",
                                             long_sk, R"("}}]}}})")),
            Validation("One or more parameter values were invalid: Aggregated size of all range "
                       "keys has exceeded the size limit of 1024 bytes"));
  EXPECT_EQ(Ok("GetItem", absl::StrCat(R"({"TableName":"App","Key":{"PK":{"S":")",
                                       std::string(2048, 'p'), R"("},"SK":{"S":")",
                                       std::string(1024, 's'), R"("}}})")),
            "{}");
  // An empty sort key value in the key condition, as DynamoDB refuses it (a begins_with of ""
  // would otherwise read the whole partition).
  for (const char* condition :
       {"begins_with(GSI1SK, :e)", "GSI1SK = :e", "GSI1SK BETWEEN :e AND :e", "GSI1SK < :e"}) {
    EXPECT_EQ(Err("Query", Expression(absl::StrCat("GSI1PK = :p AND ", condition),
                                      R"(":p":{"S":"G"},":e":{"S":""})")),
              Validation("One or more parameter values are not valid. The AttributeValue for a "
                         "key attribute cannot contain an empty string value. Key: GSI1SK"))
        << condition;
  }
}

TEST_F(DynamoDbApiTest, QueryFilterOnKeysIsRefused) {
  Ready();
  PutGsi1();
  for (const char* key : {"GSI1SK", "GSI1PK"}) {
    EXPECT_EQ(Err("Query", Expression("GSI1PK = :p", R"(":p":{"S":"G"},":x":{"S":"b"})",
                                      absl::StrCat(R"(,"FilterExpression":"n > :x OR #k = :x","ExpressionAttributeNames":{"#k":")",
                                                   key, "\"}"))),
              Validation(absl::StrCat("Filter Expression can only contain non-primary key "
                                      "attributes: Primary key attribute: ", key)))
        << key;
  }
  // The table's keys are ordinary attributes of the index's items.
  EXPECT_EQ(Ok("Query", Expression("GSI1PK = :p", R"(":p":{"S":"G"},":x":{"S":"I#2"},":y":{"S":"X"})",
                                   R"(,"Select":"COUNT","FilterExpression":"PK < :x AND SK = :y")")),
            R"({"Count":2,"ScannedCount":6})");
  // cdcview_pk of a template-keyed index is its key too; Scan filters on keys as DynamoDB's does.
  EXPECT_EQ(Err("Query", R"({"TableName":"App","IndexName":"ByEntity","KeyConditionExpression":"cdcview_pk = :p","FilterExpression":"cdcview_sk > :p","ExpressionAttributeValues":{":p":{"S":"STATUS#x"}}})"),
            Validation("Filter Expression can only contain non-primary key attributes: Primary "
                       "key attribute: cdcview_sk"));
  EXPECT_EQ(Ok("Scan", R"({"TableName":"App","IndexName":"GSI1","Select":"COUNT","FilterExpression":"GSI1SK > :x","ExpressionAttributeValues":{":x":{"S":"b"}}})"),
            R"({"Count":2,"ScannedCount":7})");
}

TEST_F(DynamoDbApiTest, BatchGetItemNamesATableOnce) {
  Ready();
  PutGsi1();
  EXPECT_EQ(Err("BatchGetItem", R"J({"RequestItems":{"App":{"Keys":[{"PK":{"S":"I#1"},"SK":{"S":"X"}}]},"prod-app":{"Keys":[{"PK":{"S":"I#2"},"SK":{"S":"X"}}]}}})J"),
            Validation(R"(RequestItems names table App more than once (as \"App\" and \"prod-app\"); name each table once)"));
  EXPECT_EQ(Err("BatchGetItem", R"J({"RequestItems":{"App":{"Keys":[{"PK":{"S":"I#1"},"SK":{"S":"X"}}]},"App":{"Keys":[{"PK":{"S":"I#1"},"SK":{"S":"X"}}]}}})J"),
            Validation(R"(RequestItems names table App more than once (as \"App\" and \"App\"); name each table once)"));
}

// DynamoDB answers at most 16 MB; the keys past it come back in UnprocessedKeys, as asked, and
// a table none of whose keys was read answers [] (every table is listed). ConsumedCapacity
// counts the items answered.
TEST_F(DynamoDbApiTest, BatchGetItemStopsAtSixteenMegabytes) {
  Ready();
  const std::string blob(399000, 'x');
  std::string keys;
  for (int i = 0; i < 45; ++i) {
    const std::string pk = absl::StrCat("B#", i < 10 ? "0" : "", i);
    Put({{"PK", S(pk)}, {"SK", S("X")}, {"blob", S(blob)}, {"other", S("o")}});
    absl::StrAppend(&keys, i ? "," : "", R"({"PK":{"S":")", pk, R"("},"SK":{"S":"X"}})");
  }
  Put({{"id", N("7")}, {"v", S("seven")}}, 1);
  // Each answered item: PK 2+4, SK 2+1, blob 4+399000 = 399013 bytes; 42 fit in 16 MB.
  const std::string body = Ok(
      "BatchGetItem",
      absl::StrCat(R"({"ReturnConsumedCapacity":"TOTAL","RequestItems":{"App":{"Keys":[)", keys,
                   R"(],"ProjectionExpression":"PK, SK, #b","ExpressionAttributeNames":{"#b":"blob"},"ConsistentRead":true},"Other":{"Keys":[{"id":{"N":"7"}}]}}})"));
  simdjson::dom::parser parser;
  simdjson::dom::element root = Parse(parser, body);
  simdjson::dom::array answered;
  ASSERT_EQ(root["Responses"]["App"].get(answered), simdjson::SUCCESS) << body.substr(0, 200);
  EXPECT_EQ(answered.size(), 42u);
  EXPECT_EQ(simdjson::minify(root["Responses"]["Other"]), "[]");
  // A whole item (other 5+1 more: 399019 bytes) is 98 units of 4 KB, read consistently.
  EXPECT_EQ(simdjson::minify(root["ConsumedCapacity"]),
            R"([{"TableName":"App","CapacityUnits":4116.0,"ReadCapacityUnits":4116.0},{"TableName":"Other","CapacityUnits":0.0,"ReadCapacityUnits":0.0}])");
  EXPECT_EQ(simdjson::minify(root["UnprocessedKeys"]),
            R"({"App":{"Keys":[{"PK":{"S":"B#42"},"SK":{"S":"X"}},{"PK":{"S":"B#43"},"SK":{"S":"X"}},{"PK":{"S":"B#44"},"SK":{"S":"X"}}],"ProjectionExpression":"PK, SK, #b","ExpressionAttributeNames":{"#b":"blob"},"ConsistentRead":true},"Other":{"Keys":[{"id":{"N":"7"}}]}})");
}

TEST_F(DynamoDbApiTest, ReadsNotServedNameWhatIs) {
  for (const char* op : {"DescribeTimeToLive", "DescribeContinuousBackups", "DescribeLimits",
                         "DescribeEndpoints", "ListTagsOfResource", "TransactGetItems"}) {
    EXPECT_EQ(Err(op, "{}"),
              Validation(absl::StrCat("cdcview's DynamoDB endpoint does not serve ", op,
                                      "; it serves Query and Scan on indexes, GetItem, "
                                      "BatchGetItem, DescribeTable and ListTables")));
  }
  EXPECT_EQ(Err("UpdateTimeToLive", "{}"),
            Validation("cdcview's DynamoDB endpoint is read-only: UpdateTimeToLive is not served; "
                       "write to the table itself (its stream feeds cdcview)"));
}

TEST_F(DynamoDbApiTest, QuotedValuesAreCutOnACharacterBoundary) {
  std::string value = "x";
  for (int i = 0; i < 40; ++i) value += "é";
  std::string cut = "x";
  for (int i = 0; i < 31; ++i) cut += "é";  // 63 bytes: the 64th is inside a character
  EXPECT_EQ(Err("Scan", absl::StrCat(R"({"TableName":"App","IndexName":"GSI1","Select":")", value, "\"}")),
            Validation(absl::StrCat("1 validation error detected: Value '", cut,
                                    "...' at 'select' failed to satisfy constraint: Member must "
                                    "satisfy enum value set: [SPECIFIC_ATTRIBUTES, COUNT, "
                                    "ALL_ATTRIBUTES, ALL_PROJECTED_ATTRIBUTES]")));
}

// ViewQueries whose stored items do not decode (an N that is not a number).
class CorruptQueries : public test::ForwardingQueries {
 public:
  using ForwardingQueries::ForwardingQueries;
  absl::StatusOr<v1::QueryResponse> Query(const v1::QueryRequest& r, Deadline d) const override {
    absl::StatusOr<v1::QueryResponse> out = inner_.Query(r, d);
    if (out.ok()) {
      for (v1::ViewEntry& e : *out->mutable_entries()) Corrupt(e.mutable_item());
    }
    return out;
  }
  absl::StatusOr<v1::GetItemResponse> GetItem(const v1::GetItemRequest& r, Deadline d) const override {
    absl::StatusOr<v1::GetItemResponse> out = inner_.GetItem(r, d);
    if (out.ok() && out->found()) Corrupt(out->mutable_item());
    return out;
  }

 private:
  static void Corrupt(v1::Item* item) { (*item->mutable_attributes())["n"].set_n("not a number"); }
};

// ViewQueries that count the entries each Scan call returns and name each GetItem's table.
class CountingQueries : public test::ForwardingQueries {
 public:
  using ForwardingQueries::ForwardingQueries;
  absl::StatusOr<v1::ScanResponse> Scan(const v1::ScanRequest& r, Deadline d) const override {
    absl::StatusOr<v1::ScanResponse> out = inner_.Scan(r, d);
    if (out.ok()) calls.push_back(out->entries_size());
    return out;
  }
  absl::StatusOr<v1::GetItemResponse> GetItem(const v1::GetItemRequest& r, Deadline d) const override {
    gets.push_back(r.table());
    return inner_.GetItem(r, d);
  }
  mutable std::vector<int> calls;
  mutable Strings gets;
};

// A page of large items reads about the 1 MB it answers, not a call's 1,000 entries: a Scan of
// twelve items of 300,000 bytes reads four (the fourth passes 1 MB and ends the page).
TEST_F(DynamoDbApiTest, APageOfLargeItemsReadsAboutOneMegabyte) {
  Ready();
  for (int i = 0; i < 12; ++i) {
    Put({{"PK", S(absl::StrCat("L#", i))}, {"SK", S("X")}, {"GSI1PK", S("LARGE")},
         {"GSI1SK", S(absl::StrCat(i))}, {"blob", S(std::string(300000, 'x'))}});
  }
  CountingQueries counting(*reader_);
  DynamoDbApi api(*catalog_, counting, kCreated);
  const std::string target = "DynamoDB_20120810.Scan";
  ApiRequest request;
  request.target = target;
  request.body = R"({"TableName":"App","IndexName":"GSI1","Select":"COUNT"})";
  ApiResponse r = api.Handle(request);
  EXPECT_EQ(r.http_status, 200) << r.body;
  EXPECT_EQ(r.body.substr(0, r.body.find(",\"LastEvaluatedKey\"")),
            R"({"Count":4,"ScannedCount":4)");
  EXPECT_EQ(counting.calls, (std::vector<int>{4}));
}

// ApiRequest::before_build is called once, after the reads that carry the wait (a Query's or
// Scan's reads one entry; a BatchGetItem reads one key of each table first) and before the
// rest; the answer is the one without it. When it refuses, the request answers its refusal.
TEST_F(DynamoDbApiTest, BeforeBuildIsCalledOnceAfterTheReadsThatWait) {
  Ready();
  PutGsi1();  // offsets 1..7 of orders/0 applied
  Put({{"id", N("1")}, {"v", S("x")}}, 1);
  CountingQueries counting(*reader_);
  DynamoDbApi api(*catalog_, counting, kCreated);
  auto handle = [&](std::string_view op, std::string_view body, ApiRequest request) {
    const std::string target = absl::StrCat("DynamoDB_20120810.", std::string(op));
    request.target = target;
    request.body = body;
    return api.Handle(request);
  };
  const std::string scan = R"({"TableName":"App","IndexName":"GSI1"})";
  ApiRequest plain;
  plain.min_kafka_offsets = "orders/0=6";
  const std::string expected = handle("Scan", scan, plain).body;
  EXPECT_EQ(counting.calls, (std::vector<int>{7}));
  int built = 0;
  ApiRequest gated = plain;
  gated.before_build = [&] {
    ++built;
    EXPECT_EQ(counting.calls, (std::vector<int>{1}));  // the waiting read only
    return absl::OkStatus();
  };
  counting.calls.clear();
  EXPECT_EQ(handle("Scan", scan, gated).body, expected);
  EXPECT_EQ(built, 1);
  EXPECT_EQ(counting.calls, (std::vector<int>{1, 6}));

  built = 0;
  ApiRequest hooked = plain;
  hooked.before_build = [&] {
    ++built;
    return absl::OkStatus();
  };
  const std::string query = Expression("GSI1PK = :p", R"(":p":{"S":"G"})");
  EXPECT_EQ(handle("Query", query, hooked).body, handle("Query", query, plain).body);
  EXPECT_EQ(built, 1);

  const std::string batch =
      R"({"RequestItems":{"App":{"Keys":[{"PK":{"S":"I#2"},"SK":{"S":"X"}},{"PK":{"S":"I#3"},"SK":{"S":"X"}}]},"Other":{"Keys":[{"id":{"N":"1"}}]}}})";
  built = 0;
  hooked.before_build = [&] {
    ++built;
    EXPECT_EQ(counting.gets, (Strings{"App", "Other"}));  // each table's wait first
    return absl::OkStatus();
  };
  counting.gets.clear();
  const std::string answered = handle("BatchGetItem", batch, hooked).body;
  EXPECT_EQ(built, 1);
  EXPECT_EQ(counting.gets, (Strings{"App", "Other", "App", "App", "Other"}));
  EXPECT_EQ(answered, handle("BatchGetItem", batch, plain).body);

  ApiRequest refused = plain;
  refused.before_build = [] {
    return absl::UnavailableError("the page is not built because of a test");
  };
  EXPECT_EQ(absl::StrCat(handle("Scan", scan, refused).http_status, " ",
                         handle("Scan", scan, refused).body),
            R"(503 {"__type":"com.amazonaws.dynamodb.v20120810#ServiceUnavailable","message":"the page is not built because of a test"})");
}

TEST_F(DynamoDbApiTest, AStoredItemThatDoesNotDecodeIsAnInternalError) {
  Ready();
  PutGsi1();
  CorruptQueries corrupt(*reader_);
  DynamoDbApi api(*catalog_, corrupt, kCreated);
  auto call = [&](std::string_view op, std::string_view body) {
    const std::string target = absl::StrCat("DynamoDB_20120810.", std::string(op));
    ApiRequest request;
    request.target = target;
    request.body = body;
    ApiResponse r = api.Handle(request);
    return absl::StrCat(r.http_status, " ", r.body);
  };
  const std::string internal =
      R"(500 {"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"A stored item does not decode: item.n: number \"not a number\" is not a valid number"})";
  EXPECT_EQ(call("GetItem", R"({"TableName":"App","Key":{"PK":{"S":"I#2"},"SK":{"S":"X"}}})"), internal);
  EXPECT_EQ(call("BatchGetItem", R"({"RequestItems":{"App":{"Keys":[{"PK":{"S":"I#2"},"SK":{"S":"X"}}]}}})"), internal);
  EXPECT_EQ(call("Query", Expression("GSI1PK = :p", R"(":p":{"S":"G"})")), internal);
}

}  // namespace
}  // namespace cdcview::dynamodb
