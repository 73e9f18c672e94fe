// DynamoDbProbe: the metrics of one DynamoDB Streams source (every series carries its
// `source` label).
//
//   cdcview_dynamodb_shards{source,state="open|closed|waiting_parent"}   gauge
//   cdcview_dynamodb_iterator_age_seconds{source,shard}   gauge: now - creation time of the
//                                                         newest record read from the shard;
//                                                         0 once a read finds none (caught up)
//   cdcview_dynamodb_requests_total{source,call,result}   counter: every API attempt
//   cdcview_dynamodb_trimmed_data_total{source}           counter: TrimmedDataAccessException
//                                                         (records lost upstream)
//
// Thread-safe; label sets created on first use are kept in a map under a mutex (requests and
// shards are few, so the lookup is cheap next to an HTTP round trip).
#pragma once

#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "daemon/metrics/metrics.h"

namespace prometheus {
template <typename T>
class Family;
}  // namespace prometheus

namespace cdcview {

class DynamoDbProbe {
 public:
  DynamoDbProbe(MetricsRegistry& metrics, std::string source);

  void SetShards(uint64_t open, uint64_t closed, uint64_t waiting_parent);
  void SetIteratorAge(const std::string& shard, double seconds);
  void ForgetShard(const std::string& shard);  // a finished shard's series is removed
  void CountRequest(std::string_view call, std::string_view result);
  void CountTrimmedData();

 private:
  const std::string source_;
  prometheus::Registry& registry_;
  prometheus::Gauge* open_;
  prometheus::Gauge* closed_;
  prometheus::Gauge* waiting_;
  prometheus::Counter* trimmed_;
  prometheus::Family<prometheus::Gauge>* age_family_;
  prometheus::Family<prometheus::Counter>* request_family_;
  absl::Mutex mu_;
  std::map<std::string, prometheus::Gauge*> ages_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, std::string>, prometheus::Counter*> requests_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cdcview
