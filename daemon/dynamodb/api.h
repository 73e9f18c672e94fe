// DynamoDbApi: the DynamoDB JSON 1.0 operations on cdcview's tables and views, independent of
// HTTP. The endpoint (http_server.h) hands it each request's target, body, cdcview headers and
// caller, and sends back what it answers.
//
// Tables are cdcview's tables, found by their own name or by the `table_name` of a DynamoDB
// source feeding them; each view is a global secondary index of its table (IndexName = the
// view's name). Served: Query and Scan on an index, GetItem and BatchGetItem on the table,
// DescribeTable, ListTables. Every other DynamoDB operation answers ValidationException: a
// write names the endpoint read-only, another read names what is served; an unknown target
// UnknownOperationException.
//
// As DynamoDB answers (its messages for the common mistakes):
// - Query and Scan read the view through ViewQueries, up to 1,000 entries a call and about
//   what is left of the page in stored bytes (max_bytes), until Limit entries are evaluated
//   (before FilterExpression: Count vs ScannedCount), 1 MB of index items (ItemSize) is read,
//   or the view ends. Under ApiRequest::inline_bytes the page is one call of at most that many
//   stored bytes, or run_long. LastEvaluatedKey (table key + index key) comes
//   only when the page stopped early and another entry follows; ExclusiveStartKey becomes the
//   page token the store issues after that entry (a merged token for a write-sharded view
//   queried by its logical key).
// - An index key that is an attribute (the same in every rule) is named by it; a template key,
//   or rules keyed by different attributes, by cdcview_pk / cdcview_sk, which every item of
//   such an index carries. KEYS_ONLY and INCLUDE items hold the table key, the index key and
//   the included attributes, as DynamoDB's index would.
// - Scan's Segment / TotalSegments: an entry belongs to segment FNV-1a-64(enc(index partition
//   key)) % TotalSegments, so a partition is in one segment; each segment walks the whole view
//   and skips the others' entries, which count towards the 1 MB but not ScannedCount.
// - ConsistentRead on GetItem / BatchGetItem is answered from the applied state; on an index
//   it is DynamoDB's ValidationException. Consistency headers wait through ViewQueries'
//   ReadConsistency; each read answer carries applied_position.
// - Errors: INVALID_ARGUMENT ValidationException, unknown table ResourceNotFoundException, a
//   view being built "Cannot read from backfilling global secondary index", PERMISSION_DENIED
//   AccessDeniedException, RESOURCE_EXHAUSTED ThrottlingException, a consistency wait that ran
//   out com.cdcview#PositionNotAppliedException, max staleness com.cdcview#StaleReadException
//   (all 400), other UNAVAILABLE 503, anything else 500.
// - A Query's ExclusiveStartKey must meet the key condition (partition and sort), with no
//   empty key value; a Query's FilterExpression names no key attribute of the table or index.
// Bounded work: the body is parsed once (simdjson DOM); attribute values nest at most 32
// levels; the request's expressions substitute at most 2 MB of names and values, counting
// every reference (kMaxSubstitutedBytes); AttributesToGet counts as a 4 KB ProjectionExpression;
// a projection is compiled once per request; a page reads at most 1 MB of entries;
// BatchGetItem takes at most 100 keys, names each table once, and answers at most 16 MB of
// items (the rest in UnprocessedKeys, in the request's shape).
//
// Thread-safe. Handle blocks only while a request with consistency headers waits for its
// position (at most until `deadline`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "daemon/server/view_queries.h"
#include "daemon/state/catalog.h"

namespace cdcview::security {
struct Principal;
}

namespace cdcview::dynamodb {

struct ApiRequest {
  std::string_view target;  // the X-Amz-Target header: "DynamoDB_20120810.<Operation>"
  std::string_view body;    // the JSON body
  // cdcview's consistency headers, "" when absent:
  //   x-cdcview-min-position: an earlier answer's x-cdcview-applied-position (base64)
  //   x-cdcview-min-kafka-offsets: "topic/partition=offset" entries joined by ","
  //   x-cdcview-max-staleness-seconds: a decimal number of seconds
  std::string_view min_position;
  std::string_view min_kafka_offsets;
  std::string_view max_staleness_seconds;
  const security::Principal* who = nullptr;  // null: the endpoint authenticates no one
  ViewQueries::Deadline deadline = ViewQueries::Deadline::max();
  // Set when the request is answered on an I/O thread (kShortPageBytes, kShortMergeShards): a
  // Query or Scan reads once, at most this many stored bytes of entries (the entry that
  // reaches them included), and a Query that merges more shards than inline_shards does not
  // start; a page that needs more answers run_long instead. 0: no bound.
  uint64_t inline_bytes = 0;
  uint32_t inline_shards = 0;
  // Set by the server for a long request that may wait: called once, before the reads that
  // build the page and after every read that carries the request's wait (a Query or Scan with
  // a consistency header makes that a read of one entry; a BatchGetItem reads one key of each
  // table first); it may block until a build may start. Not OK: the page is not built, and
  // the request answers that status (UNAVAILABLE: 503 ServiceUnavailable).
  std::function<absl::Status()> before_build;
};

struct ApiResponse {
  int http_status = 200;       // 200, 400 (the caller's mistake), 500 or 503
  std::string body;            // application/x-amz-json-1.0
  std::string applied_position;  // x-cdcview-applied-position (base64); "" when none
  std::string operation;       // for metrics: the operation's name, or "unknown"
  std::string error_type;      // "" on success, else e.g. "ValidationException"
  // The request read past ApiRequest::inline_bytes and was not answered: run it again without
  // the bound, off the I/O thread. Nothing else is set but `operation`.
  bool run_long = false;
};

// True when the request carries a consistency header, so Handle may wait.
bool MayWait(const ApiRequest& request);

// A Query or Scan whose Limit is at most this many entries counts as short.
inline constexpr int64_t kShortPageLimit = 100;
// A body longer than this is not short, whatever it asks (parsing it takes time of its own).
inline constexpr size_t kMaxShortBody = 64 * 1024;
// What a short Query or Scan may read on an I/O thread (ApiRequest::inline_bytes): bytes of
// stored entries, the last one read included.
inline constexpr uint64_t kShortPageBytes = 64 * 1024;
// The most shards a Query of a write-sharded view by its logical key merges on an I/O thread
// (ApiRequest::inline_shards): each of its reads opens a cursor per shard.
inline constexpr uint32_t kShortMergeShards = 16;

// True when the request's work is bounded by a few entries before it runs: a target that is
// not DynamoDB's (answered with an error unread), and within kMaxShortBody bytes GetItem,
// DescribeTable, ListTables, any operation not served, a body that does not parse (answered
// with an error), and a Query or an unsegmented Scan with a Limit of 1-kShortPageLimit. False
// for the rest: Query and Scan pages of up to 1 MB, segmented Scans (a segment walks past the
// other segments' entries), BatchGetItem (up to 100 items) and long bodies. Parses a Query or
// Scan body's top level, not the catalog: what a short page reads is bounded on the I/O
// thread by ApiRequest::inline_bytes and inline_shards instead. The endpoint answers short
// requests on its I/O threads and runs the others on page threads.
bool RunsShort(const ApiRequest& request);

// An error in DynamoDB's shape: {"__type": "<namespace>#<type>", "message": "..."}.
ApiResponse ErrorResponse(int http_status, std::string_view type, std::string_view message,
                          std::string operation);

class DynamoDbApi {
 public:
  // `creation_date_time`: what DescribeTable reports as every table's CreationDateTime
  // (seconds since the epoch); the daemon passes its start time.
  DynamoDbApi(const Catalog& catalog, const ViewQueries& queries,
              double creation_date_time = NowSeconds());
  // Never fails: errors are answers in DynamoDB's shape (ErrorResponse).
  ApiResponse Handle(const ApiRequest& request) const;

  static double NowSeconds();

 private:
  const Catalog& catalog_;
  const ViewQueries& queries_;
  double creation_date_time_;
};

}  // namespace cdcview::dynamodb
