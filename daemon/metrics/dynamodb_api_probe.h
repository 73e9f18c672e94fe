// DynamoDbApiProbe: the requests of the DynamoDB endpoint (server.dynamodb).
//
//   cdcview_dynamodb_api_requests_total{operation,outcome}   counter: every request answered,
//       by DynamoDB operation ("unknown" for a target that names none) and outcome ("ok", or
//       the error type answered, e.g. "ValidationException", "ThrottlingException")
//   cdcview_dynamodb_api_request_duration_seconds{operation} histogram: from the request's
//       last byte to its answer handed to the socket
//   cdcview_dynamodb_api_moved_total                          counter: short requests that
//       needed more than an I/O thread may do (dynamodb::kShortPageBytes of items,
//       kShortMergeShards shards) and ran again on a page thread
//   cdcview_dynamodb_api_build_wait_seconds                   histogram: each wait for a
//       build place (as many as page threads, shared by the page and page-wait threads) that
//       found them all taken, and how long it took; a page-wait request with a long body may
//       wait twice (to hash it for its signature, then to build)
//
// Not cdcview_dynamodb_requests_total: that family is the DynamoDB Streams source's calls to
// AWS (DynamoDbProbe), labelled source, call and result.
//
// Connections and refusals are ConnectionProbe's (port="dynamodb"), token refusals AuthProbe's.
// Thread-safe; series are made on first use under a mutex, their label values bounded: an
// operation that is not one of DynamoDB's counts as "unknown".
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "daemon/metrics/metrics.h"

namespace prometheus {
template <typename T>
class Family;
}  // namespace prometheus

namespace cdcview {

class DynamoDbApiProbe {
 public:
  explicit DynamoDbApiProbe(MetricsRegistry& metrics);

  // `operation` is kept only when it is one of DynamoDB's operation names, else "unknown".
  void Observe(std::string_view operation, std::string_view outcome, double seconds);
  // A short request moved to a page thread.
  void Moved();
  // A wait of `seconds` for a build place.
  void BuildWaited(double seconds);

  // One of DynamoDB_20120810's operation names (Query, GetItem, PutItem, ...)?
  static bool IsDynamoDbOperation(std::string_view name);

 private:
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Histogram>* duration_;
  prometheus::Counter* moved_;
  prometheus::Histogram* build_wait_;
  absl::Mutex mu_;
  std::map<std::pair<std::string, std::string>, prometheus::Counter*, std::less<>> counters_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Histogram*, std::less<>> histograms_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cdcview
