#include "daemon/metrics/dynamodb_probe.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

namespace cdcview {
DynamoDbProbe::DynamoDbProbe(MetricsRegistry& metrics, std::string source)
    : source_(std::move(source)), registry_(metrics.registry()) {
  auto& shards = prometheus::BuildGauge()
                     .Name("cdcview_dynamodb_shards")
                     .Help("Shards of the source's stream by state: open (being read), closed "
                           "(read to its end, waiting for the end to commit), waiting_parent "
                           "(not started until its parent shard is fully applied).")
                     .Register(registry_);
  open_ = &shards.Add({{"source", source_}, {"state", "open"}});
  closed_ = &shards.Add({{"source", source_}, {"state", "closed"}});
  waiting_ = &shards.Add({{"source", source_}, {"state", "waiting_parent"}});
  trimmed_ = &prometheus::BuildCounter()
                  .Name("cdcview_dynamodb_trimmed_data_total")
                  .Help("TrimmedDataAccessException: stream records expired before they were "
                        "read; the views miss those changes (snapshot again).")
                  .Register(registry_)
                  .Add({{"source", source_}});
  age_family_ = &prometheus::BuildGauge()
                     .Name("cdcview_dynamodb_iterator_age_seconds")
                     .Help("Now minus the creation time of the newest record read from a shard, at "
                           "the read; 0 once a read finds no record (caught up).")
                     .Register(registry_);
  request_family_ = &prometheus::BuildCounter()
                         .Name("cdcview_dynamodb_requests_total")
                         .Help("DynamoDB and DynamoDB Streams API attempts by call and result "
                               "(ok, throttled, server_error, network_error or the error type).")
                         .Register(registry_);
}

void DynamoDbProbe::SetShards(uint64_t open, uint64_t closed, uint64_t waiting_parent) {
  open_->Set(double(open));
  closed_->Set(double(closed));
  waiting_->Set(double(waiting_parent));
}

void DynamoDbProbe::SetIteratorAge(const std::string& shard, double seconds) {
  absl::MutexLock lock(&mu_);
  prometheus::Gauge*& gauge = ages_[shard];
  if (gauge == nullptr) {
    gauge = &age_family_->Add({{"source", source_}, {"shard", shard}});
  }
  gauge->Set(seconds);
}

void DynamoDbProbe::ForgetShard(const std::string& shard) {
  absl::MutexLock lock(&mu_);
  auto it = ages_.find(shard);
  if (it == ages_.end()) return;
  age_family_->Remove(it->second);
  ages_.erase(it);
}

void DynamoDbProbe::CountRequest(std::string_view call, std::string_view result) {
  absl::MutexLock lock(&mu_);
  prometheus::Counter*& counter = requests_[{std::string(call), std::string(result)}];
  if (counter == nullptr) {
    counter = &request_family_->Add({{"source", source_}, {"call", std::string(call)},
                          {"result", std::string(result)}});
  }
  counter->Increment();
}

void DynamoDbProbe::CountTrimmedData() { trimmed_->Increment(); }

}  // namespace cdcview
