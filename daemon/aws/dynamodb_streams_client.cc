#include "daemon/aws/dynamodb_streams_client.h"

#include <algorithm>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/log/redact.h"
#include "simdjson.h"

namespace cdcview::aws {
namespace {

constexpr char kErrorTypeUrl[] = "type.cdcview.dev/aws-error";
constexpr char kStreamsTarget[] = "DynamoDBStreams_20120810.";
constexpr char kDynamoDbTarget[] = "DynamoDB_20120810.";

absl::Status Typed(absl::StatusCode code, const std::string& type, const std::string& message) {
  absl::Status status(code, message);
  if (!type.empty()) status.SetPayload(kErrorTypeUrl, absl::Cord(type));
  return status;
}

absl::StatusCode CodeOf(const std::string& type, long http_status) {
  if (type == "ResourceNotFoundException") return absl::StatusCode::kNotFound;
  if (type == "ExpiredIteratorException") return absl::StatusCode::kFailedPrecondition;
  if (type == "TrimmedDataAccessException") return absl::StatusCode::kOutOfRange;
  if (IsThrottling(type)) return absl::StatusCode::kResourceExhausted;
  if (type == "AccessDeniedException") return absl::StatusCode::kPermissionDenied;
  if (type == "UnrecognizedClientException" || type == "InvalidSignatureException" ||
      type == "MissingAuthenticationTokenException" || type == "ExpiredTokenException") {
    return absl::StatusCode::kUnauthenticated;
  }
  if (type == "ValidationException" || type == "SerializationException") {
    return absl::StatusCode::kInvalidArgument;
  }
  if (http_status >= 500) return absl::StatusCode::kUnavailable;
  return absl::StatusCode::kFailedPrecondition;
}

absl::Status BadResponse(const std::string& call, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(call, " response: ", what));
}

// Names, ARNs, shard ids and iterators as JSON strings. (Not daemon/decode's escaper: the AWS
// layer stays below the decoders.)
std::string Quote(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppend(&out, absl::StrFormat("\\u%04x", static_cast<int>(c)));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string StringField(simdjson::dom::element e, const char* field) {
  std::string_view value;
  if (e[field].get_string().get(value) != simdjson::SUCCESS) return "";
  return std::string(value);
}

}  // namespace

std::string AwsErrorType(const absl::Status& status) {
  auto type = status.GetPayload(kErrorTypeUrl);
  return type ? std::string(*type) : std::string();
}

bool IsThrottling(std::string_view type) {
  return type == "ProvisionedThroughputExceededException" || type == "ThrottlingException" ||
         type == "LimitExceededException" || type == "RequestLimitExceeded";
}

std::string_view IteratorTypeName(IteratorType type) {
  switch (type) {
    case IteratorType::kTrimHorizon: return "TRIM_HORIZON";
    case IteratorType::kLatest: return "LATEST";
    case IteratorType::kAfterSequenceNumber: return "AFTER_SEQUENCE_NUMBER";
    case IteratorType::kAtSequenceNumber: return "AT_SEQUENCE_NUMBER";
  }
  return "TRIM_HORIZON";
}

std::pair<std::string, std::string> ParseError(const std::string& json) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(json).get(doc) != simdjson::SUCCESS || !doc.is_object()) return {"", json};
  std::string type = StringField(doc, "__type");
  if (size_t hash = type.rfind('#'); hash != std::string::npos) type = type.substr(hash + 1);
  std::string message = StringField(doc, "message");
  if (message.empty()) message = StringField(doc, "Message");
  return {type, message};
}

absl::StatusOr<std::string> ParseLatestStreamArn(const std::string& json,
                                                 const std::string& table) {
  simdjson::dom::parser parser;
  simdjson::dom::array streams;
  if (parser.parse(json)["Streams"].get_array().get(streams) != simdjson::SUCCESS) {
    return BadResponse("ListStreams", "no Streams array");
  }
  std::string arn, label;
  for (simdjson::dom::element s : streams) {
    std::string l = StringField(s, "StreamLabel");
    if (arn.empty() || l > label) {
      arn = StringField(s, "StreamArn");
      label = l;
    }
  }
  if (arn.empty()) {
    return absl::NotFoundError(absl::StrCat("table ", table,
                                            " has no stream; enable DynamoDB Streams on it "
                                            "(NEW_AND_OLD_IMAGES or NEW_IMAGE)"));
  }
  return arn;
}

absl::Status ParseDescribeStreamPage(const std::string& json, StreamDescription* out,
                                     std::string* last_evaluated_shard_id) {
  simdjson::dom::parser parser;
  simdjson::dom::element d;
  if (parser.parse(json)["StreamDescription"].get(d) != simdjson::SUCCESS || !d.is_object()) {
    return BadResponse("DescribeStream", "no StreamDescription object");
  }
  out->stream_arn = StringField(d, "StreamArn");
  out->stream_status = StringField(d, "StreamStatus");
  out->table_name = StringField(d, "TableName");
  *last_evaluated_shard_id = StringField(d, "LastEvaluatedShardId");
  simdjson::dom::array shards;
  if (d["Shards"].get_array().get(shards) != simdjson::SUCCESS) return absl::OkStatus();
  for (simdjson::dom::element s : shards) {
    StreamShard shard;
    shard.shard_id = StringField(s, "ShardId");
    shard.parent_shard_id = StringField(s, "ParentShardId");
    simdjson::dom::element range;
    if (s["SequenceNumberRange"].get(range) == simdjson::SUCCESS) {
      shard.starting_sequence_number = StringField(range, "StartingSequenceNumber");
      shard.ending_sequence_number = StringField(range, "EndingSequenceNumber");
    }
    if (shard.shard_id.empty()) return BadResponse("DescribeStream", "a shard without ShardId");
    out->shards.push_back(std::move(shard));
  }
  return absl::OkStatus();
}

absl::StatusOr<RecordsPage> ParseGetRecords(const std::string& json) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(json).get(doc) != simdjson::SUCCESS || !doc.is_object()) {
    return BadResponse("GetRecords", "not a JSON object");
  }
  RecordsPage page;
  page.next_iterator = StringField(doc, "NextShardIterator");
  simdjson::dom::array records;
  if (doc["Records"].get_array().get(records) == simdjson::SUCCESS) {
    for (simdjson::dom::element r : records) page.records.push_back(simdjson::to_string(r));
  }
  return page;
}

absl::StatusOr<ScanPage> ParseScan(const std::string& json) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  simdjson::dom::array items;
  if (parser.parse(json).get(doc) != simdjson::SUCCESS ||
      doc["Items"].get_array().get(items) != simdjson::SUCCESS) {
    return BadResponse("Scan", "no Items array");
  }
  ScanPage page;
  for (simdjson::dom::element item : items) page.items.push_back(simdjson::to_string(item));
  simdjson::dom::element key;
  if (doc["LastEvaluatedKey"].get(key) == simdjson::SUCCESS && key.is_object()) {
    page.last_evaluated_key = simdjson::to_string(key);
  }
  double units = 0;
  if (doc["ConsumedCapacity"]["CapacityUnits"].get_double().get(units) == simdjson::SUCCESS) {
    page.consumed_read_units = units;
  }
  return page;
}

DynamoDbStreamsClient::DynamoDbStreamsClient(Options options, CredentialsProvider* credentials,
                                             const HttpClient* http, Sleeper sleep,
                                             Observer observer)
    : options_(std::move(options)),
      credentials_(credentials),
      http_(http),
      sleep_(std::move(sleep)),
      observer_(std::move(observer)) {
  if (!options_.endpoint.empty()) {
    streams_url_ = dynamodb_url_ = options_.endpoint;
  } else {
    streams_url_ = absl::StrCat("https://streams.dynamodb.", options_.region, ".amazonaws.com/");
    dynamodb_url_ = absl::StrCat("https://dynamodb.", options_.region, ".amazonaws.com/");
  }
  if (!sleep_) {
    sleep_ = [](std::chrono::milliseconds d) {
      std::this_thread::sleep_for(d);
      return true;
    };
  }
}

std::chrono::milliseconds DynamoDbStreamsClient::Backoff(int attempt) {
  // Full jitter: uniform in [0, min(max, base * 2^attempt)], so retrying readers spread out.
  thread_local std::mt19937_64 random(std::random_device{}());
  int64_t cap = std::min<int64_t>(options_.max_backoff.count(),
                                  options_.base_backoff.count() << std::min(attempt, 20));
  return std::chrono::milliseconds(std::uniform_int_distribution<int64_t>(0, cap)(random));
}

absl::StatusOr<std::string> DynamoDbStreamsClient::Attempt(bool streams, const std::string& call,
                                                           const std::string& body,
                                                           std::string* result) {
  const std::string& url = streams ? streams_url_ : dynamodb_url_;
  auto key = credentials_->Get();
  if (!key.ok()) {
    *result = "credentials";
    return key.status();
  }
  std::string host, path;
  if (absl::Status s = SplitUrl(url, &host, &path); !s.ok()) {
    *result = "bad_endpoint";
    return s;
  }
  RequestToSign request;
  request.path = path;
  request.body = body;
  request.headers = {{"Host", host},
                     {"Content-Type", "application/x-amz-json-1.0"},
                     {"X-Amz-Target", absl::StrCat(streams ? kStreamsTarget : kDynamoDbTarget, call)}};
  SignedParts signed_parts = Sign(request, *key, options_.region, "dynamodb", absl::Now());
  HeaderList headers = request.headers;
  headers.insert(headers.end(), signed_parts.added_headers.begin(), signed_parts.added_headers.end());
  auto response = http_->Post(url, headers, body);
  if (!response.ok()) {
    *result = "network_error";
    return response.status();
  }
  if (response->status == 200) {
    *result = "ok";
    return std::move(response->body);
  }
  auto [type, message] = ParseError(response->body);
  // An error body is the server's text: one that echoes the request (a proxy, a faulty
  // endpoint) would carry the session token, and no secret may reach a log line.
  message = RedactSecrets(message, {key->secret_access_key, key->session_token});
  *result = IsThrottling(type) ? "throttled"
            : response->status >= 500 ? "server_error"
            : type.empty() ? "client_error" : type;
  return Typed(CodeOf(type, response->status), type,
               absl::StrCat(call, ": ", type.empty() ? "HTTP error" : type, " (HTTP ",
                            response->status, "): ", message.substr(0, 500)));
}

absl::StatusOr<std::string> DynamoDbStreamsClient::Call(bool streams, const std::string& call,
                                                        const std::string& body) {
  for (int attempt = 0;; ++attempt) {
    std::string result;
    absl::StatusOr<std::string> response = Attempt(streams, call, body, &result);
    if (observer_) observer_(call, result);
    bool retry = result == "throttled" || result == "server_error" || result == "network_error";
    if (response.ok() || !retry || attempt + 1 >= options_.max_attempts) return response;
    if (!sleep_(Backoff(attempt))) {
      return absl::CancelledError(absl::StrCat(call, ": stopped while backing off after: ",
                                               response.status().message()));
    }
  }
}

absl::StatusOr<std::string> DynamoDbStreamsClient::LatestStreamArn(const std::string& table) {
  auto body = Call(true, "ListStreams", absl::StrCat("{\"TableName\":", Quote(table), "}"));
  if (!body.ok()) return body.status();
  return ParseLatestStreamArn(*body, table);
}

absl::StatusOr<StreamDescription> DynamoDbStreamsClient::DescribeStream(
    const std::string& stream_arn) {
  StreamDescription description;
  std::string start;
  for (int page = 0; page < 100000; ++page) {
    std::string request = absl::StrCat("{\"StreamArn\":", Quote(stream_arn));
    if (!start.empty()) absl::StrAppend(&request, ",\"ExclusiveStartShardId\":", Quote(start));
    request += "}";
    auto body = Call(true, "DescribeStream", request);
    if (!body.ok()) return body.status();
    std::string next;
    if (absl::Status s = ParseDescribeStreamPage(*body, &description, &next); !s.ok()) return s;
    if (next.empty() || next == start) return description;
    start = next;
  }
  return absl::InternalError("DescribeStream: more than 100000 pages");
}

absl::StatusOr<std::string> DynamoDbStreamsClient::GetShardIterator(
    const std::string& stream_arn, const std::string& shard_id, IteratorType type,
    const std::string& sequence_number) {
  std::string request =
      absl::StrCat("{\"StreamArn\":", Quote(stream_arn), ",\"ShardId\":", Quote(shard_id),
                   ",\"ShardIteratorType\":\"", std::string(IteratorTypeName(type)), "\"");
  if (type == IteratorType::kAfterSequenceNumber || type == IteratorType::kAtSequenceNumber) {
    absl::StrAppend(&request, ",\"SequenceNumber\":", Quote(sequence_number));
  }
  request += "}";
  auto body = Call(true, "GetShardIterator", request);
  if (!body.ok()) return body.status();
  simdjson::dom::parser parser;
  std::string_view iterator;
  if (parser.parse(*body)["ShardIterator"].get_string().get(iterator) != simdjson::SUCCESS) {
    return BadResponse("GetShardIterator", "no ShardIterator");
  }
  return std::string(iterator);
}

absl::StatusOr<RecordsPage> DynamoDbStreamsClient::GetRecords(const std::string& iterator,
                                                              int limit) {
  auto body = Call(true, "GetRecords",
                   absl::StrCat("{\"ShardIterator\":", Quote(iterator), ",\"Limit\":", limit, "}"));
  if (!body.ok()) return body.status();
  return ParseGetRecords(*body);
}

absl::StatusOr<ScanPage> DynamoDbStreamsClient::Scan(const std::string& table, uint32_t segment,
                                                     uint32_t total_segments,
                                                     const std::string& exclusive_start_key,
                                                     int limit) {
  std::string request = absl::StrCat(
      "{\"TableName\":", Quote(table), ",\"Segment\":", segment, ",\"TotalSegments\":",
      total_segments, ",\"ConsistentRead\":true,\"ReturnConsumedCapacity\":\"TOTAL\",\"Limit\":",
      limit);
  if (!exclusive_start_key.empty()) {
    absl::StrAppend(&request, ",\"ExclusiveStartKey\":", exclusive_start_key);
  }
  request += "}";
  auto body = Call(false, "Scan", request);
  if (!body.ok()) return body.status();
  return ParseScan(*body);
}

absl::StatusOr<TableDescription> DynamoDbStreamsClient::DescribeTable(const std::string& table) {
  auto body = Call(false, "DescribeTable", absl::StrCat("{\"TableName\":", Quote(table), "}"));
  if (!body.ok()) return body.status();
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(*body).get(doc) != simdjson::SUCCESS) {
    return BadResponse("DescribeTable", "not JSON");
  }
  TableDescription out;
  if (doc["Table"]["ItemCount"].get_uint64().get(out.item_count) != simdjson::SUCCESS) {
    return BadResponse("DescribeTable", "no Table.ItemCount");
  }
  // On-demand tables report 0 (or no ProvisionedThroughput at all).
  uint64_t units = 0;
  if (doc["Table"]["ProvisionedThroughput"]["ReadCapacityUnits"].get_uint64().get(units) ==
      simdjson::SUCCESS) {
    out.read_capacity_units = units;
  }
  return out;
}

}  // namespace cdcview::aws
