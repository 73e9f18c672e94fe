// KafkaProbe: the metrics of one Kafka source (labels carry the source name, so several
// sources may read the same topic in different groups).
//
//   cdcview_kafka_consumer_lag_messages{source,topic,partition}  high watermark - applied next
//                                                                offset, per assigned partition
//   cdcview_kafka_rebalances_total{source}                       changes of the source's
//                                                                assignment (at start, and
//                                                                when a topic gained partitions)
//   cdcview_kafka_errors_total{source,kind}                      kind: broker (transport, all
//                                                                brokers down, ...), commit
//                                                                (offset commit failed),
//                                                                dead_letter (not delivered),
//                                                                consume (fetch/partition errors)
//   cdcview_cluster_partitions_owned{source}                     partitions assigned to this
//                                                                daemon (all of its topics' for
//                                                                a standalone one)
//   cdcview_cluster_topic_history_incomplete{source,topic}       a cluster member's check at
//                                                                start: 1 when the topic neither
//                                                                compacts nor keeps data
//                                                                forever, which resizing needs
//
// Thread-safe: the consumer thread and the writer thread (dead letters) both record.
#pragma once

#include <cstdint>
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

class KafkaProbe {
 public:
  KafkaProbe(MetricsRegistry& metrics, const std::string& source);

  void SetConsumerLag(const std::string& topic, int32_t partition, int64_t messages);
  // The partition is no longer assigned here: its lag is another consumer's to report.
  void RemoveConsumerLag(const std::string& topic, int32_t partition);
  void RecordRebalance();
  void RecordError(const std::string& kind);
  void SetPartitionsOwned(size_t partitions);
  void SetTopicHistoryIncomplete(const std::string& topic, bool incomplete);

 private:
  const std::string source_;
  prometheus::Family<prometheus::Gauge>* lag_family_;
  prometheus::Family<prometheus::Counter>* errors_family_;
  prometheus::Counter* rebalances_;
  prometheus::Gauge* partitions_owned_;
  prometheus::Family<prometheus::Gauge>* history_family_;
  absl::Mutex mu_;
  std::map<std::pair<std::string, int32_t>, prometheus::Gauge*> lag_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Counter*> errors_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cdcview
