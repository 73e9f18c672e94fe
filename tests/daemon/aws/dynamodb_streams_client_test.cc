#include "daemon/aws/dynamodb_streams_client.h"

#include <gtest/gtest.h>

#include <optional>

#include "tests/fakes/fake_http_server.h"

namespace cdcview::aws {
namespace {

using test::FakeHttpServer;

CredentialsProvider::Getenv Env(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

struct Harness {
  explicit Harness(std::vector<FakeHttpServer::Response> script, int max_attempts = 4,
                   std::chrono::milliseconds base_backoff = std::chrono::milliseconds(1),
                   std::chrono::milliseconds max_backoff = std::chrono::milliseconds(5000))
      : server(std::move(script)),
        credentials(&http, "eu-west-1",
                    Env({{"AWS_ACCESS_KEY_ID", "AKID"}, {"AWS_SECRET_ACCESS_KEY", "SECRET"},
                         {"AWS_SESSION_TOKEN", "TOKEN"}})) {
    DynamoDbStreamsClient::Options options;
    options.region = "eu-west-1";
    options.endpoint = server.url();
    options.max_attempts = max_attempts;
    options.base_backoff = base_backoff;
    options.max_backoff = max_backoff;
    client = std::make_unique<DynamoDbStreamsClient>(
        options, &credentials, &http,
        [this](std::chrono::milliseconds d) {
          sleeps.push_back(d);
          return true;
        },
        [this](std::string_view call, std::string_view result) {
          observed.push_back(std::string(call) + ":" + std::string(result));
        });
  }
  FakeHttpServer server;
  HttpClient http;
  CredentialsProvider credentials;
  std::unique_ptr<DynamoDbStreamsClient> client;
  std::vector<std::chrono::milliseconds> sleeps;
  std::vector<std::string> observed;
};

constexpr char kArn[] = "arn:aws:dynamodb:eu-west-1:1:table/App/stream/2025";

TEST(DynamoDbStreamsClientTest, DescribeStreamFollowsPagesAndSignsRequests) {
  Harness h({{200, R"({"StreamDescription":{"StreamArn":"A","StreamStatus":"ENABLED","TableName":"App",
      "Shards":[{"ShardId":"s1","SequenceNumberRange":{"StartingSequenceNumber":"100","EndingSequenceNumber":"200"}}],
      "LastEvaluatedShardId":"s1"}})"},
             {200, R"({"StreamDescription":{"StreamArn":"A","StreamStatus":"ENABLED","TableName":"App",
      "Shards":[{"ShardId":"s2","ParentShardId":"s1","SequenceNumberRange":{"StartingSequenceNumber":"201"}}]}})"}});
  auto d = h.client->DescribeStream(kArn);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->table_name, "App");
  ASSERT_EQ(d->shards.size(), 2u);
  EXPECT_EQ(d->shards[0].shard_id, "s1");
  EXPECT_EQ(d->shards[0].ending_sequence_number, "200");
  EXPECT_EQ(d->shards[1].parent_shard_id, "s1");
  EXPECT_EQ(d->shards[1].ending_sequence_number, "");
  auto requests = h.server.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].body, R"({"StreamArn":"arn:aws:dynamodb:eu-west-1:1:table/App/stream/2025"})");
  EXPECT_EQ(requests[1].body,
            R"({"StreamArn":"arn:aws:dynamodb:eu-west-1:1:table/App/stream/2025","ExclusiveStartShardId":"s1"})");
  EXPECT_EQ(requests[0].method, "POST");
  EXPECT_EQ(requests[0].headers["x-amz-target"], "DynamoDBStreams_20120810.DescribeStream");
  EXPECT_EQ(requests[0].headers["content-type"], "application/x-amz-json-1.0");
  EXPECT_EQ(requests[0].headers["x-amz-security-token"], "TOKEN");
  EXPECT_TRUE(requests[0].headers["authorization"].starts_with("AWS4-HMAC-SHA256 Credential=AKID/"));
  EXPECT_NE(requests[0].headers["authorization"].find(
                "/eu-west-1/dynamodb/aws4_request, SignedHeaders=content-type;host;x-amz-date;"
                "x-amz-security-token;x-amz-target, Signature="),
            std::string::npos);
  EXPECT_EQ(h.observed, (std::vector<std::string>{"DescribeStream:ok", "DescribeStream:ok"}));
}

TEST(DynamoDbStreamsClientTest, ThrottlingIsRetriedWithBackoff) {
  Harness h({{400, R"({"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"slow down"})"},
             {400, R"({"__type":"com.amazon.coral.availability#ThrottlingException","message":"x"})"},
             {200, R"({"ShardIterator":"it-1"})"}});
  auto it = h.client->GetShardIterator(kArn, "s1", IteratorType::kAfterSequenceNumber, "123");
  ASSERT_TRUE(it.ok()) << it.status();
  EXPECT_EQ(*it, "it-1");
  EXPECT_EQ(h.observed, (std::vector<std::string>{"GetShardIterator:throttled",
                                                  "GetShardIterator:throttled",
                                                  "GetShardIterator:ok"}));
  EXPECT_EQ(h.sleeps.size(), 2u);
  EXPECT_EQ(h.server.requests()[2].body,
            R"({"StreamArn":"arn:aws:dynamodb:eu-west-1:1:table/App/stream/2025","ShardId":"s1",)"
            R"("ShardIteratorType":"AFTER_SEQUENCE_NUMBER","SequenceNumber":"123"})");
}

TEST(DynamoDbStreamsClientTest, ServerErrorsGiveUpAfterMaxAttempts) {
  Harness h({{500, R"({"__type":"InternalServerError","message":"boom"})"}}, /*max_attempts=*/3);
  auto page = h.client->GetRecords("it", 10);
  ASSERT_FALSE(page.ok());
  EXPECT_EQ(page.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(page.status().message(), "GetRecords: InternalServerError (HTTP 500): boom");
  EXPECT_EQ(h.server.requests().size(), 3u);
  EXPECT_EQ(h.sleeps.size(), 2u);
}

// Full jitter: the n-th back-off is uniform in [0, min(max, base * 2^n)]. Each sleep is
// checked against its own cap; and over many sleeps some fall below half the cap, which the
// "equal jitter" [cap/2, cap] never does (the chance that none of 240 full-jitter draws at a
// cap of 100 ms or more falls below half is below 2^-200).
TEST(DynamoDbStreamsClientTest, BackoffIsFullJitterUnderAnExponentialCap) {
  Harness h({{503, R"({"__type":"ServiceUnavailable","message":"busy"})"}}, /*max_attempts=*/9,
            std::chrono::milliseconds(100), std::chrono::milliseconds(1600));
  constexpr int kCalls = 30;
  for (int call = 0; call < kCalls; ++call) {
    ASSERT_FALSE(h.client->GetRecords("it", 10).ok());
  }
  ASSERT_EQ(h.sleeps.size(), size_t(kCalls * 8));
  int below_half = 0;
  for (size_t i = 0; i < h.sleeps.size(); ++i) {
    const int attempt = int(i % 8);
    const int64_t cap = std::min<int64_t>(1600, int64_t(100) << attempt);
    EXPECT_GE(h.sleeps[i].count(), 0) << "attempt " << attempt;
    EXPECT_LE(h.sleeps[i].count(), cap) << "attempt " << attempt;
    if (h.sleeps[i].count() < cap / 2) ++below_half;
  }
  EXPECT_GT(below_half, 0);
}

TEST(DynamoDbStreamsClientTest, ExpiredIteratorIsTypedAndNotRetried) {
  Harness h({{400, R"({"__type":"com.amazonaws.dynamodb.v20120810#ExpiredIteratorException","message":"Iterator expired"})"}});
  auto page = h.client->GetRecords("it", 10);
  ASSERT_FALSE(page.ok());
  EXPECT_EQ(AwsErrorType(page.status()), "ExpiredIteratorException");
  EXPECT_EQ(page.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(page.status().message(),
            "GetRecords: ExpiredIteratorException (HTTP 400): Iterator expired");
  EXPECT_EQ(h.server.requests().size(), 1u);
  EXPECT_EQ(h.observed, (std::vector<std::string>{"GetRecords:ExpiredIteratorException"}));
}

TEST(DynamoDbStreamsClientTest, TrimmedDataAndNotFoundAreTyped) {
  Harness trimmed({{400, R"({"__type":"TrimmedDataAccessException","message":"gone"})"}});
  auto a = trimmed.client->GetShardIterator(kArn, "s", IteratorType::kTrimHorizon);
  EXPECT_EQ(AwsErrorType(a.status()), "TrimmedDataAccessException");
  EXPECT_EQ(a.status().code(), absl::StatusCode::kOutOfRange);
  Harness missing({{400, R"({"__type":"com.amazonaws.dynamodb.v20120810#ResourceNotFoundException","message":"no"})"}});
  auto b = missing.client->DescribeStream(kArn);
  EXPECT_EQ(AwsErrorType(b.status()), "ResourceNotFoundException");
  EXPECT_EQ(b.status().code(), absl::StatusCode::kNotFound);
}

TEST(DynamoDbStreamsClientTest, GetRecordsReturnsEachRecordAsJson) {
  Harness h({{200, R"({"Records":[{"eventName":"INSERT","dynamodb":{"Keys":{"PK":{"S":"a"}},"SequenceNumber":"7"}},
      {"eventName":"REMOVE","dynamodb":{"Keys":{"PK":{"S":"b"}},"SequenceNumber":"8"}}],"NextShardIterator":"it-2"})"}});
  auto page = h.client->GetRecords("it-1", 5);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->records.size(), 2u);
  EXPECT_EQ(page->records[0],
            R"({"eventName":"INSERT","dynamodb":{"Keys":{"PK":{"S":"a"}},"SequenceNumber":"7"}})");
  EXPECT_EQ(page->next_iterator, "it-2");
  EXPECT_EQ(h.server.requests()[0].body, R"({"ShardIterator":"it-1","Limit":5})");
}

TEST(DynamoDbStreamsClientTest, ClosedShardHasNoNextIterator) {
  auto page = ParseGetRecords(R"({"Records":[]})");
  ASSERT_TRUE(page.ok());
  EXPECT_TRUE(page->records.empty());
  EXPECT_EQ(page->next_iterator, "");
}

TEST(DynamoDbStreamsClientTest, ScanSendsSegmentAndStartKey) {
  Harness h({{200, R"({"Items":[{"PK":{"S":"a"},"n":{"N":"1"}}],"Count":1,
      "LastEvaluatedKey":{"PK":{"S":"a"}},"ConsumedCapacity":{"TableName":"App","CapacityUnits":2.5}})"}});
  auto page = h.client->Scan("App", 1, 4, R"({"PK":{"S":"0"}})", 100);
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(page->items, (std::vector<std::string>{R"({"PK":{"S":"a"},"n":{"N":"1"}})"}));
  EXPECT_EQ(page->last_evaluated_key, R"({"PK":{"S":"a"}})");
  EXPECT_EQ(page->consumed_read_units, 2.5);
  auto request = h.server.requests()[0];
  EXPECT_EQ(request.headers["x-amz-target"], "DynamoDB_20120810.Scan");
  EXPECT_EQ(request.body,
            R"({"TableName":"App","Segment":1,"TotalSegments":4,"ConsistentRead":true,)"
            R"("ReturnConsumedCapacity":"TOTAL","Limit":100,"ExclusiveStartKey":{"PK":{"S":"0"}}})");
}

TEST(DynamoDbStreamsClientTest, LatestStreamArnPicksTheNewestLabel) {
  EXPECT_EQ(*ParseLatestStreamArn(R"({"Streams":[{"StreamArn":"old","StreamLabel":"2024-01-01T00:00:00.000"},
      {"StreamArn":"new","StreamLabel":"2025-01-01T00:00:00.000"}]})", "App"), "new");
  auto none = ParseLatestStreamArn(R"({"Streams":[]})", "App");
  EXPECT_EQ(none.status().message(),
            "table App has no stream; enable DynamoDB Streams on it (NEW_AND_OLD_IMAGES or NEW_IMAGE)");
}

TEST(DynamoDbStreamsClientTest, RefusedConnectionIsANetworkError) {
  HttpClient http;
  CredentialsProvider credentials(&http, "us-east-1",
                                  Env({{"AWS_ACCESS_KEY_ID", "a"}, {"AWS_SECRET_ACCESS_KEY", "b"}}));
  DynamoDbStreamsClient::Options options;
  options.endpoint = "http://127.0.0.1:1/";
  options.max_attempts = 2;
  options.base_backoff = std::chrono::milliseconds(1);
  std::vector<std::string> observed;
  DynamoDbStreamsClient client(options, &credentials, &http, nullptr,
                               [&](std::string_view call, std::string_view result) {
                                 observed.push_back(std::string(call) + ":" + std::string(result));
                               });
  auto page = client.GetRecords("it");
  EXPECT_EQ(page.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(std::string(page.status().message()).starts_with("HTTP request to http://127.0.0.1:1/ failed: "))
      << page.status();
  EXPECT_EQ(observed, (std::vector<std::string>{"GetRecords:network_error", "GetRecords:network_error"}));
}

// An error body that echoes the request (a proxy, a faulty endpoint) goes into the status
// and the log: the secret key and the session token are taken out of it.
TEST(DynamoDbStreamsClientTest, AnErrorBodyThatEchoesTheRequestCarriesNoSecret) {
  Harness h({{400, R"({"__type":"com.amazon#UnrecognizedClientException",)"
                   R"("message":"X-Amz-Security-Token: TOKEN; signed with SECRET"})"}});
  auto arn = h.client->LatestStreamArn("App");
  EXPECT_EQ(std::string(arn.status().message()),
            "ListStreams: UnrecognizedClientException (HTTP 400): X-Amz-Security-Token: "
            "<redacted>; signed with <redacted>");
}

}  // namespace
}  // namespace cdcview::aws
