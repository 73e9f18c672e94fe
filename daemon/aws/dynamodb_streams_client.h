// DynamoDbStreamsClient: the DynamoDB Streams and DynamoDB calls the stream source needs,
// over the JSON 1.0 protocol (POST /, X-Amz-Target DynamoDBStreams_20120810.<Call> or
// DynamoDB_20120810.<Call>, Content-Type application/x-amz-json-1.0), signed with SigV4 for
// the service "dynamodb".
//
// Errors are typed: the AWS exception name (ExpiredIteratorException,
// TrimmedDataAccessException, ResourceNotFoundException, ...) is in the Status message and
// AwsErrorType(status) returns it. Throttling (ProvisionedThroughputExceededException,
// ThrottlingException, LimitExceededException, RequestLimitExceeded), HTTP 5xx and network
// failures are retried here with jittered exponential back-off, up to Options::max_attempts;
// every attempt is reported to the observer (for cdcview_dynamodb_requests_total).
//
// Thread-safe: calls may run concurrently from several threads (each thread uses its own
// curl handle). Records and items are returned as their raw JSON text, for the decoder.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/aws/credentials.h"
#include "daemon/aws/http_client.h"

namespace cdcview::aws {

// The AWS error type carried by a Status from this client ("ExpiredIteratorException"), or "".
std::string AwsErrorType(const absl::Status& status);
bool IsThrottling(std::string_view error_type);

struct StreamShard {
  std::string shard_id;
  std::string parent_shard_id;          // "" when none
  std::string starting_sequence_number;
  std::string ending_sequence_number;   // "" while the shard is open
};

struct StreamDescription {
  std::string stream_arn;
  std::string stream_status;  // ENABLING, ENABLED, DISABLING, DISABLED
  std::string table_name;
  std::vector<StreamShard> shards;  // every page of DescribeStream, in the order listed
};

enum class IteratorType { kTrimHorizon, kLatest, kAfterSequenceNumber, kAtSequenceNumber };
std::string_view IteratorTypeName(IteratorType type);  // "TRIM_HORIZON", ...

struct RecordsPage {
  std::vector<std::string> records;  // each a Records[] element as JSON text
  std::string next_iterator;         // "" when the shard is closed and fully read
};

struct ScanPage {
  std::vector<std::string> items;       // each an item as DynamoDB JSON text
  std::string last_evaluated_key;       // JSON text of LastEvaluatedKey, "" on the last page
  double consumed_read_units = 0;       // ConsumedCapacity.CapacityUnits
};

struct TableDescription {
  uint64_t item_count = 0;            // approximate
  uint64_t read_capacity_units = 0;   // provisioned; 0 for an on-demand table
};

class DynamoDbStreamsClient {
 public:
  struct Options {
    std::string region = "us-east-1";
    std::string endpoint;  // "" = https://dynamodb.<region>.amazonaws.com and streams.dynamodb...
    int max_attempts = 8;
    std::chrono::milliseconds base_backoff{50};
    std::chrono::milliseconds max_backoff{5000};
  };
  // Sleeps for the back-off; returns false when the caller is stopping (the call then fails
  // with CANCELLED). `observer(call, result)` sees every attempt: result "ok", "throttled",
  // "server_error", "network_error" or the error type for other errors.
  using Sleeper = std::function<bool(std::chrono::milliseconds)>;
  using Observer = std::function<void(std::string_view call, std::string_view result)>;

  // `credentials` and `http` must outlive the client.
  DynamoDbStreamsClient(Options options, CredentialsProvider* credentials, const HttpClient* http,
                        Sleeper sleep = nullptr, Observer observer = nullptr);

  // The newest stream of `table` (ListStreams, the highest StreamLabel). NOT_FOUND naming the
  // table when it has no stream.
  absl::StatusOr<std::string> LatestStreamArn(const std::string& table);
  // All shards, following ExclusiveStartShardId / LastEvaluatedShardId pages.
  absl::StatusOr<StreamDescription> DescribeStream(const std::string& stream_arn);
  // `sequence_number` is used with AFTER_/AT_SEQUENCE_NUMBER only.
  absl::StatusOr<std::string> GetShardIterator(const std::string& stream_arn,
                                               const std::string& shard_id, IteratorType type,
                                               const std::string& sequence_number = "");
  absl::StatusOr<RecordsPage> GetRecords(const std::string& iterator, int limit = 1000);
  // One page of a parallel Scan segment; `exclusive_start_key` is "" or JSON from a page.
  absl::StatusOr<ScanPage> Scan(const std::string& table, uint32_t segment,
                                uint32_t total_segments, const std::string& exclusive_start_key,
                                int limit);
  // DescribeTable: the ItemCount (DynamoDB updates it about every six hours) and the
  // provisioned read capacity (0 for an on-demand table).
  absl::StatusOr<TableDescription> DescribeTable(const std::string& table);

  // One call with retries: exposed for tests. `streams` picks the Streams endpoint and target.
  absl::StatusOr<std::string> Call(bool streams, const std::string& call, const std::string& body);

 private:
  absl::StatusOr<std::string> Attempt(bool streams, const std::string& call,
                                      const std::string& body, std::string* result);
  std::chrono::milliseconds Backoff(int attempt);

  Options options_;
  CredentialsProvider* credentials_;
  const HttpClient* http_;
  Sleeper sleep_;
  Observer observer_;
  std::string streams_url_, dynamodb_url_;
};

// Parsers of the responses, exposed for tests. INVALID_ARGUMENT naming the missing field.
absl::StatusOr<std::string> ParseLatestStreamArn(const std::string& json, const std::string& table);
absl::Status ParseDescribeStreamPage(const std::string& json, StreamDescription* out,
                                     std::string* last_evaluated_shard_id);
absl::StatusOr<RecordsPage> ParseGetRecords(const std::string& json);
absl::StatusOr<ScanPage> ParseScan(const std::string& json);
// An error response body {"__type": "com.amazonaws...#ExpiredIteratorException",
// "message": "..."} as (type, message); the type is "" when the body has none.
std::pair<std::string, std::string> ParseError(const std::string& json);

}  // namespace cdcview::aws
