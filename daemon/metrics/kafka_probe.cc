#include "daemon/metrics/kafka_probe.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

namespace cdcview {

KafkaProbe::KafkaProbe(MetricsRegistry& metrics, const std::string& source) : source_(source) {
  // The registry merges families of the same name, so every Kafka source shares these.
  lag_family_ = &prometheus::BuildGauge()
                     .Name("cdcview_kafka_consumer_lag_messages")
                     .Help("Messages in a partition not applied yet: high watermark minus the "
                           "applied next offset, per partition assigned to this cdcviewd.")
                     .Register(metrics.registry());
  errors_family_ = &prometheus::BuildCounter()
                        .Name("cdcview_kafka_errors_total")
                        .Help("Kafka client errors by kind: broker, commit, dead_letter, consume.")
                        .Register(metrics.registry());
  rebalances_ = &prometheus::BuildCounter()
                     .Name("cdcview_kafka_rebalances_total")
                     .Help("Changes of the source's partition assignment: at start, and when "
                           "a topic gained partitions.")
                     .Register(metrics.registry())
                     .Add({{"source", source_}});
  partitions_owned_ = &prometheus::BuildGauge()
                           .Name("cdcview_cluster_partitions_owned")
                           .Help("Kafka partitions assigned to this cdcviewd: every partition of "
                                 "the source's topics for a standalone daemon, its share for a "
                                 "cluster member.")
                           .Register(metrics.registry())
                           .Add({{"source", source_}});
  history_family_ = &prometheus::BuildGauge()
                         .Name("cdcview_cluster_topic_history_incomplete")
                         .Help("1 when a cluster member found at start that the topic neither "
                               "compacts nor keeps data forever: a member that gains its "
                               "partitions in a resize cannot read their whole history.")
                         .Register(metrics.registry());
}

void KafkaProbe::SetConsumerLag(const std::string& topic, int32_t partition, int64_t messages) {
  absl::MutexLock lock(&mu_);
  prometheus::Gauge*& gauge = lag_[{topic, partition}];
  if (gauge == nullptr) {
    gauge = &lag_family_->Add(
        {{"source", source_}, {"topic", topic}, {"partition", std::to_string(partition)}});
  }
  gauge->Set(static_cast<double>(messages));
}

void KafkaProbe::RemoveConsumerLag(const std::string& topic, int32_t partition) {
  absl::MutexLock lock(&mu_);
  auto it = lag_.find({topic, partition});
  if (it == lag_.end()) return;
  lag_family_->Remove(it->second);
  lag_.erase(it);
}

void KafkaProbe::RecordRebalance() { rebalances_->Increment(); }

void KafkaProbe::SetPartitionsOwned(size_t partitions) {
  partitions_owned_->Set(static_cast<double>(partitions));
}

void KafkaProbe::SetTopicHistoryIncomplete(const std::string& topic, bool incomplete) {
  // Add returns the series already there for the same labels.
  history_family_->Add({{"source", source_}, {"topic", topic}}).Set(incomplete ? 1 : 0);
}

void KafkaProbe::RecordError(const std::string& kind) {
  absl::MutexLock lock(&mu_);
  prometheus::Counter*& counter = errors_[kind];
  if (counter == nullptr) counter = &errors_family_->Add({{"source", source_}, {"kind", kind}});
  counter->Increment();
}

}  // namespace cdcview
