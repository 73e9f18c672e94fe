#include "daemon/metrics/dynamodb_api_probe.h"

#include <prometheus/counter.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <array>

namespace cdcview {
namespace {

// DynamoDB_20120810's operations, sorted (a label value is one of these or "unknown").
constexpr std::array<std::string_view, 57> kOperations = {
    "BatchExecuteStatement", "BatchGetItem", "BatchWriteItem", "CreateBackup",
    "CreateGlobalTable", "CreateTable", "DeleteBackup", "DeleteItem", "DeleteResourcePolicy",
    "DeleteTable", "DescribeBackup", "DescribeContinuousBackups", "DescribeContributorInsights",
    "DescribeEndpoints", "DescribeExport", "DescribeGlobalTable", "DescribeGlobalTableSettings",
    "DescribeImport", "DescribeKinesisStreamingDestination", "DescribeLimits", "DescribeTable",
    "DescribeTableReplicaAutoScaling", "DescribeTimeToLive", "DisableKinesisStreamingDestination",
    "EnableKinesisStreamingDestination", "ExecuteStatement", "ExecuteTransaction",
    "ExportTableToPointInTime", "GetItem", "GetResourcePolicy", "ImportTable", "ListBackups",
    "ListContributorInsights", "ListExports", "ListGlobalTables", "ListImports", "ListTables",
    "ListTagsOfResource", "PutItem", "PutResourcePolicy", "Query", "RestoreTableFromBackup",
    "RestoreTableToPointInTime", "Scan", "TagResource", "TransactGetItems", "TransactWriteItems",
    "UntagResource", "UpdateContinuousBackups", "UpdateContributorInsights", "UpdateGlobalTable",
    "UpdateGlobalTableSettings", "UpdateItem", "UpdateKinesisStreamingDestination", "UpdateTable",
    "UpdateTableReplicaAutoScaling", "UpdateTimeToLive"};

// The operations served: their latency series exist from the start.
constexpr std::array<std::string_view, 6> kServed = {"BatchGetItem", "DescribeTable", "GetItem",
                                                     "ListTables",   "Query",         "Scan"};

const prometheus::Histogram::BucketBoundaries kBuckets = {0.0001, 0.00025, 0.0005, 0.001,
                                                          0.0025, 0.005,   0.01,   0.025,
                                                          0.05,   0.1,     0.25,   0.5,
                                                          1,      2.5,     5,      10};

}  // namespace

bool DynamoDbApiProbe::IsDynamoDbOperation(std::string_view name) {
  return std::binary_search(kOperations.begin(), kOperations.end(), name);
}

DynamoDbApiProbe::DynamoDbApiProbe(MetricsRegistry& metrics) {
  requests_ = &prometheus::BuildCounter()
                   .Name("cdcview_dynamodb_api_requests_total")
                   .Help("Requests the DynamoDB endpoint answered, by operation and outcome "
                         "(ok, or the error type answered).")
                   .Register(metrics.registry());
  duration_ = &prometheus::BuildHistogram()
                   .Name("cdcview_dynamodb_api_request_duration_seconds")
                   .Help("Time from a DynamoDB endpoint request's arrival to its answer, per "
                         "operation.")
                   .Register(metrics.registry());
  moved_ = &prometheus::BuildCounter()
                .Name("cdcview_dynamodb_api_moved_total")
                .Help("Short requests (a Query or Scan with a small Limit) that needed more "
                      "than an I/O thread may do (bytes of index items, shards merged) and ran "
                      "again on a page thread.")
                .Register(metrics.registry())
                .Add({});
  build_wait_ = &prometheus::BuildHistogram()
                     .Name("cdcview_dynamodb_api_build_wait_seconds")
                     .Help("Waits for a build place (as many as page threads, shared by the "
                           "page and page-wait threads) that found them all taken, and how "
                           "long each took.")
                     .Register(metrics.registry())
                     .Add({}, kBuckets);
  absl::MutexLock lock(&mu_);
  for (std::string_view op : kServed) {
    histograms_.emplace(std::string(op),
                        &duration_->Add({{"operation", std::string(op)}}, kBuckets));
  }
}

void DynamoDbApiProbe::Observe(std::string_view operation, std::string_view outcome,
                               double seconds) {
  const std::string op(IsDynamoDbOperation(operation) ? operation : "unknown");
  prometheus::Counter* counter;
  prometheus::Histogram* histogram;
  {
    absl::MutexLock lock(&mu_);
    auto key = std::make_pair(op, std::string(outcome));
    auto c = counters_.find(key);
    if (c == counters_.end()) {
      c = counters_
              .emplace(key, &requests_->Add({{"operation", op}, {"outcome", key.second}}))
              .first;
    }
    counter = c->second;
    auto h = histograms_.find(op);
    if (h == histograms_.end()) {
      h = histograms_
              .emplace(op, &duration_->Add({{"operation", op}},
                                           prometheus::Histogram::BucketBoundaries{
                                               0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                               0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}))
              .first;
    }
    histogram = h->second;
  }
  counter->Increment();
  histogram->Observe(seconds);
}

void DynamoDbApiProbe::Moved() { moved_->Increment(); }

void DynamoDbApiProbe::BuildWaited(double seconds) { build_wait_->Observe(seconds); }

}  // namespace cdcview
