// DynamoDbApi: the DynamoDB JSON 1.0 operations on cdcview's tables and views, independent of
// HTTP. The endpoint (http_server.h) hands it each request's target, body, cdcview headers and
// caller, and sends back what it answers.
//
// Tables are cdcview's tables, found by their own name or by the `table_name` of a DynamoDB
// source feeding them; each view is a global secondary index of its table (IndexName = the
// view's name). Served: Query and Scan on an index, GetItem and BatchGetItem on the table,
// DescribeTable, ListTables. Every other DynamoDB operation answers ValidationException naming
// the endpoint read-only; an unknown target UnknownOperationException.
//
// Thread-safe. Handle blocks only while a request with consistency headers waits for its
// position (at most until `deadline`).
#pragma once

#include <string>
#include <string_view>

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
};

struct ApiResponse {
  int http_status = 200;       // 200, 400 (the caller's mistake), 500 or 503
  std::string body;            // application/x-amz-json-1.0
  std::string applied_position;  // x-cdcview-applied-position (base64); "" when none
  std::string operation;       // for metrics: the operation's name, or "unknown"
  std::string error_type;      // "" on success, else e.g. "ValidationException"
};

// True when the request carries a consistency header, so Handle may wait.
bool MayWait(const ApiRequest& request);

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
