// KafkaSource: change events from Kafka topics, read by a librdkafka consumer that assigns
// itself its partitions (rd_kafka_assign: no group subscription, no rebalances).
//
// Which partitions: a standalone daemon (no `cluster:`) reads every partition of its topics; a
// cluster member reads those OwnsPartition(partition, members, ordinal) gives it (config.h).
// So two standalone daemons given one group id both read everything and both serve whole
// views; a group can never hand one of them a share and leave it serving part of a view as if
// whole. The topics' metadata is read at start and again every
// topic.metadata.refresh.interval.ms when the properties set it, else every 10 s, and the
// partitions a topic gained are assigned by the same rule.
//
// Exactly-once: the store, not Kafka, holds the truth. Each partition "<topic>/<partition>"
// has a stored position (the next offset, decimal), written by the writer in the transaction
// that applies the messages before it. A partition assigned here starts at the writer's
// CURRENT stored offset (asked through the PositionLookup), or at `start` (earliest/latest)
// when the store has none; the writer skips a record whose offset is below the stored next
// offset (SourceRecord::offset), so nothing applies twice. Offsets are committed to the group
// asynchronously about once a second from the applied positions, so standard lag tools work;
// they are never read back. Auto commit and the auto offset store are off.
//
// In a cluster, a partition assigned without a stored position (a fresh member, a partition
// gained by a resize or added to the topic) is read from its earliest offset, and the source
// says "backfilling" with progress 0..1 until the store has applied it up to the high
// watermark read when it was assigned: readiness and startup wait for it. At start a member
// checks that each topic keeps its full history (cleanup.policy compact, or retention.ms and
// retention.bytes -1), which a member gaining partitions needs; when one does not, it warns
// what to set and cdcview_cluster_topic_history_incomplete{source,topic} is 1.
//
// Back-pressure: when the RecordQueue is full the source PAUSES all its assigned partitions and
// keeps polling (serving the client's callbacks), holding the few records already
// fetched; it resumes once the writer made room. Memory stays bounded by librdkafka's fetch
// queue plus those records.
//
// Every message becomes one SourceRecord: locator "<topic>/<partition>@<offset>", raw = value,
// raw_key = key, creation time = the event's own (DynamoDB ApproximateCreationDateTime,
// Debezium source.ts_ms, protobuf creation_time_ms) or else the message timestamp. A message that
// does not decode becomes a rejection (reason malformed_json, bad_protobuf or bad_record) and
// goes to the dead-letter sink; a Debezium tombstone advances the position and applies nothing.
//
// Broker trouble (all brokers down, transport errors) is retried by librdkafka itself with
// back-off; Health() says "error" with the reason and what to check, cdcview_kafka_errors_total
// counts it, and consumption resumes by itself. Refused credentials (SASL) and failed TLS
// handshakes say so, naming the properties to check.
//
// Secrets: properties given as ${env:NAME} or ${file:PATH} (secret_reference.h) are resolved
// when the consumer and the dead-letter producer are created; the values of the properties
// that IsSecretProperty are taken out of every librdkafka log line and error this source logs
// or reports, and one written in the config file as a plain value is warned about at start.
//
// Threading: Start, Stop, Health, dead_letters, SetPositionLookup may be called from any thread
// (SetPositionLookup before Start). One consumer thread, owned by the source, polls librdkafka
// and runs its callbacks; it never blocks on the queue (metadata, watermark and topic-config
// requests block it up to a few seconds, at start and at each metadata refresh). Stop joins
// it (closing the consumer).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "daemon/config/config.h"
#include "daemon/metrics/kafka_probe.h"
#include "daemon/sources/change_source.h"
#include "daemon/sources/file_source.h"

namespace cdcview {

// Produces each rejected message to the dead-letter topic: key = the original key, value = the
// original value, headers cdcview.source.topic, cdcview.source.partition,
// cdcview.source.offset (decimal text) and cdcview.reason (what is wrong, with the locator).
// A value too large for the producer or the dead-letter topic (MSG_SIZE_TOO_LARGE: the
// source topic may allow larger messages than the dead-letter one) is sent again cut to its
// first kOversizedRecordHeadBytes, with header cdcview.value.bytes (its size), so that no
// message can stop its source for good. Write waits until the broker acknowledged the message
// (acks=all), at most ~10 s. Thread-safe; the producer is created by the first Write.
class KafkaDeadLetterSink : public DeadLetterSink {
 public:
  KafkaDeadLetterSink(std::string source_name, const KafkaSourceConfig& config, KafkaProbe* probe);
  ~KafkaDeadLetterSink() override;
  KafkaDeadLetterSink(const KafkaDeadLetterSink&) = delete;
  KafkaDeadLetterSink& operator=(const KafkaDeadLetterSink&) = delete;

  // UNAVAILABLE naming the topic and librdkafka's reason when the message was not delivered
  // in time (the writer then does not commit the batch and retries it); INVALID_ARGUMENT for a
  // producer property librdkafka refuses.
  absl::Status Write(const SourceRecord& record, const absl::Status& why) override;

 private:
  struct Producer;
  absl::Status CreateProducerLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string source_name_;
  const KafkaSourceConfig config_;
  KafkaProbe* probe_;  // may be null
  absl::Mutex mu_;
  std::unique_ptr<Producer> producer_ ABSL_GUARDED_BY(mu_);
};

class KafkaSource : public ChangeSource {
 public:
  // `probe` may be null (tests). `config.kafka` must be valid (config.h validated it).
  // `cluster`: which partitions are this daemon's (all of them when not Enabled).
  KafkaSource(uint32_t source_index, const SourceConfig& config, std::unique_ptr<KafkaProbe> probe,
              ClusterConfig cluster = {});
  ~KafkaSource() override;  // stops the consumer

  // Creates the consumer; the consumer thread then assigns the partitions. `positions` serves as the lookup when no
  // PositionLookup was set. Errors (also in Health): INVALID_ARGUMENT for a stored position
  // that is not "<topic>/<partition>" -> "<offset>", or a property librdkafka refuses
  // (naming sources[i].kafka.properties.<name>); FAILED_PRECONDITION if already started.
  absl::Status Start(const std::map<std::string, std::string>& positions,
                     RecordQueue* queue) override;
  void Stop() override;
  // "running"; "caught_up" when every assigned partition was read to its end (or none of the
  // topics' partitions is this member's); "backfilling" (a cluster member) while partitions
  // assigned without a stored position are applied below their high watermark at assignment;
  // "error" with the reason and what to do; "stopped" before Start and after Stop.
  // `partitions` lists the assignment.
  SourceHealth Health() const override;
  DeadLetterSink* dead_letters() override;
  std::string_view kind() const override { return SourceKindName(SourceKind::kKafka); }
  void SetPositionLookup(PositionLookup lookup) override;

  // For tests and status: partitions assigned now ("topic/3"), and whether they are paused.
  std::vector<std::string> Assignment() const;
  bool paused() const { return paused_.load(); }

 private:
  struct Consumer;  // librdkafka handle and consumer-thread state

  void Run();
  void SetHealth(SourceState state, std::string error, double progress = 0);

  const uint32_t index_;
  const SourceConfig config_;
  const ClusterConfig cluster_;
  const std::chrono::milliseconds metadata_interval_;  // how often the partitions are re-read
  std::unique_ptr<KafkaProbe> probe_;
  std::unique_ptr<KafkaDeadLetterSink> topic_dead_letters_;  // with dead_letter_topic
  std::unique_ptr<FileDeadLetterSink> file_dead_letters_;    // without
  PositionLookup lookup_;                                    // set before Start

  mutable absl::Mutex mu_;
  SourceHealth health_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> assignment_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stop_{false};
  std::atomic<bool> paused_{false};
  std::unique_ptr<Consumer> consumer_;         // used by the consumer thread only
  absl::Mutex start_stop_mu_;
  std::thread thread_ ABSL_GUARDED_BY(start_stop_mu_);
};

}  // namespace cdcview
