#include "daemon/sources/kafka_source.h"

#include <librdkafka/rdkafka.h>
#include <pthread.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <limits>
#include <optional>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/config/secret_reference.h"
#include "daemon/decode/debezium_json.h"
#include "daemon/decode/dynamodb_json.h"
#include "daemon/decode/protobuf_event.h"
#include "daemon/log/log.h"
#include "daemon/sources/kafka_client_secrets.h"
#include "daemon/sources/record_queue.h"

namespace cdcview {
namespace {

constexpr int kPollMs = 100;
constexpr int kPausedPollMs = 10;  // while holding records for a full queue
// How long a message waits for room in a full queue before the partitions are paused: longer
// than the writer takes for its largest normal batch (a backlog batch of up to 8 x
// apply.batch_size), even on a busy machine, and short against max.poll.interval.ms so the
// group does not notice. A pause makes librdkafka drop what it prefetched (up to
// queued.max.messages.kbytes per partition) and fetch it again, which costs the broker more
// than the reads themselves, so ordinary batches must never cause one.
constexpr std::chrono::milliseconds kFullQueueWait(5000);
constexpr auto kPeriodic = std::chrono::seconds(1);  // offset commits, lag gauges, backfill
// How often the topics' partitions are read again (new partitions are assigned by the same
// rule) unless the properties set topic.metadata.refresh.interval.ms; while a topic is not
// found, kMetadataRetry.
constexpr auto kMetadataInterval = std::chrono::seconds(10);
constexpr auto kMetadataRetry = std::chrono::seconds(1);
// Each metadata, watermark and topic-config request blocks the consumer thread at most this.
constexpr int kRequestTimeoutMs = 5000;
constexpr int kDeadLetterTimeoutMs = 10000;
constexpr std::chrono::seconds kKafkaCloseTimeout = kSourceStopTimeout;

absl::string_view ToAbsl(std::string_view text) { return {text.data(), text.size()}; }

std::string PartitionKey(std::string_view topic, int32_t partition) {
  return absl::StrCat(ToAbsl(topic), "/", partition);
}

bool ParseInt64(std::string_view text, int64_t* out) {
  if (text.empty()) return false;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return error == std::errc() && end == text.data() + text.size() && *out >= 0;
}

// "<topic>/<partition>" -> topic, partition. Topic names cannot contain '/'.
bool ParsePartitionKey(std::string_view key, std::string* topic, int32_t* partition) {
  size_t slash = key.rfind('/');
  int64_t p = 0;
  if (slash == std::string_view::npos || slash == 0 || !ParseInt64(key.substr(slash + 1), &p) ||
      p > INT32_MAX) {
    return false;
  }
  *topic = std::string(key.substr(0, slash));
  *partition = static_cast<int32_t>(p);
  return true;
}

std::string_view Bytes(const void* data, size_t len) {
  return data == nullptr ? std::string_view() : std::string_view(static_cast<const char*>(data), len);
}

void LogFromKafka(const rd_kafka_t* rk, int level, const char* facility, const char* text,
                  const ClientSecrets& secrets) {
  // Levels are syslog's: 3 error, 4 warning; the rest is librdkafka's chatter.
  if (level > 4) return;
  std::string line = KafkaLogLine(rd_kafka_name(rk), facility, text, secrets);
  level <= 3 ? LogError(line) : LogWarning(line);
}

// librdkafka before 2.6.1 sends a SCRAM proof that Kafka 4.0 and later brokers refuse (it
// repeats the client nonce; the brokers compare it strictly, as RFC 5802 says), so a refused
// SCRAM login may not be the password's fault: say so where it applies.
std::string ScramCaveat(const std::map<std::string, std::string>& properties) {
  constexpr int kFixedIn = 0x020601ff;  // 2.6.1
  auto mechanism = properties.find("sasl.mechanism");
  if (mechanism == properties.end()) mechanism = properties.find("sasl.mechanisms");
  if (rd_kafka_version() >= kFixedIn || mechanism == properties.end() ||
      !mechanism->second.starts_with("SCRAM-")) {
    return "";
  }
  return absl::StrCat(" (this librdkafka, ", rd_kafka_version_str(),
                      ", fails SCRAM with Kafka 4.0 and later brokers even with the right "
                      "password; 2.6.1 and later do not)");
}

// A property written in the file as a plain secret works, but is worth a warning at start.
void WarnOfSecretsInTheFile(const std::map<std::string, std::string>& properties,
                            const std::string& field) {
  for (const auto& [name, value] : properties) {
    if (IsSecretProperty(name) && !IsSecretReference(value)) {
      LogWarning(absl::StrCat(field, ".properties.", name,
                              " is written in the config file; give it as ${file:PATH} or "
                              "${env:NAME} so that the secret stays out of the file"));
    }
  }
}

// Errors that mean "cannot talk to the cluster" as opposed to a problem with one partition.
bool IsBrokerError(rd_kafka_resp_err_t err) {
  return err == RD_KAFKA_RESP_ERR__TRANSPORT || err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN ||
         err == RD_KAFKA_RESP_ERR__RESOLVE || err == RD_KAFKA_RESP_ERR__TIMED_OUT ||
         err == RD_KAFKA_RESP_ERR__AUTHENTICATION || err == RD_KAFKA_RESP_ERR__SSL;
}

struct ListDeleter {
  void operator()(rd_kafka_topic_partition_list_t* list) const {
    if (list != nullptr) rd_kafka_topic_partition_list_destroy(list);
  }
};
using PartitionList = std::unique_ptr<rd_kafka_topic_partition_list_t, ListDeleter>;

}  // namespace

// ---- KafkaDeadLetterSink ----

struct KafkaDeadLetterSink::Producer {
  rd_kafka_t* rk = nullptr;  // its opaque is this Producer
  ClientSecrets secrets;     // outlives rk: the destructor destroys rk first

  static void OnLog(const rd_kafka_t* rk, int level, const char* facility, const char* text) {
    LogFromKafka(rk, level, facility, text, static_cast<Producer*>(rd_kafka_opaque(rk))->secrets);
  }

  ~Producer() {
    if (rk != nullptr) {
      rd_kafka_flush(rk, 1000);
      rd_kafka_destroy(rk);
    }
  }
};

namespace {

// One message's delivery outcome. Shared between Write and the delivery callback, which may
// run after Write gave up waiting (it then only drops its reference).
struct Delivery {
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  rd_kafka_resp_err_t err ABSL_GUARDED_BY(mu) = RD_KAFKA_RESP_ERR_NO_ERROR;
};

void OnDelivery(rd_kafka_t*, const rd_kafka_message_t* message, void*) {
  auto* holder = static_cast<std::shared_ptr<Delivery>*>(message->_private);
  if (holder == nullptr) return;
  {
    Delivery& delivery = **holder;
    absl::MutexLock lock(&delivery.mu);
    delivery.done = true;
    delivery.err = message->err;
  }
  delete holder;
}

// Produces one dead letter of `record` with `value` to `dlt` and waits for its delivery;
// `value_bytes`, where not 0, is the original value's size (header cdcview.value.bytes).
rd_kafka_resp_err_t ProduceDeadLetter(rd_kafka_t* rk, const std::string& dlt,
                                      const SourceRecord& record, const std::string& reason,
                                      std::string_view value, uint64_t value_bytes) {
  std::string topic;
  int32_t partition = -1;
  if (!ParsePartitionKey(record.partition, &topic, &partition)) topic = record.partition;
  const std::string partition_text = std::to_string(partition);
  const std::string offset_text = std::to_string(record.offset);

  rd_kafka_headers_t* headers = rd_kafka_headers_new(5);
  auto add = [headers](const char* name, const std::string& text) {
    rd_kafka_header_add(headers, name, -1, text.data(), static_cast<ssize_t>(text.size()));
  };
  add("cdcview.source.topic", topic);
  add("cdcview.source.partition", partition_text);
  add("cdcview.source.offset", offset_text);
  add("cdcview.reason", reason);
  if (value_bytes > 0) add("cdcview.value.bytes", std::to_string(value_bytes));

  auto delivery = std::make_shared<Delivery>();
  auto* holder = new std::shared_ptr<Delivery>(delivery);
  rd_kafka_resp_err_t err = rd_kafka_producev(
      rk, RD_KAFKA_V_TOPIC(dlt.c_str()),
      RD_KAFKA_V_KEY(record.raw_key.data(), record.raw_key.size()),
      RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(headers),
      RD_KAFKA_V_OPAQUE(holder), RD_KAFKA_V_END);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    rd_kafka_headers_destroy(headers);  // not enqueued: still ours, and no callback will come
    delete holder;
    return err;
  }
  // Waits for this message's acknowledgement (or its failure after message.timeout.ms).
  rd_kafka_flush(rk, kDeadLetterTimeoutMs + 5000);
  absl::MutexLock done_lock(&delivery->mu);
  return delivery->done ? delivery->err : RD_KAFKA_RESP_ERR__TIMED_OUT;
}

}  // namespace

KafkaDeadLetterSink::KafkaDeadLetterSink(std::string source_name, const KafkaSourceConfig& config,
                                         KafkaProbe* probe)
    : source_name_(std::move(source_name)), config_(config), probe_(probe) {}

KafkaDeadLetterSink::~KafkaDeadLetterSink() = default;

absl::Status KafkaDeadLetterSink::CreateProducerLocked() {
  const std::string field = absl::StrCat("source ", source_name_, ": kafka");
  auto producer = std::make_unique<Producer>();
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> properties =
      ResolveProperties(config_.properties, field, &producer->secrets);
  if (!properties.ok()) return properties.status();
  // The connection settings of the consumer apply to the producer too; consumer-only
  // properties would only make librdkafka warn.
  std::vector<std::pair<std::string, std::string>> settings = {
      {"bootstrap.servers", config_.brokers},
      {"client.id", absl::StrCat("cdcviewd-", source_name_, "-dead-letters")},
      {"message.timeout.ms", std::to_string(kDeadLetterTimeoutMs)},
      {"linger.ms", "0"},
      {"acks", "all"}};
  for (auto& [name, value] : *properties) {
    if (name.rfind("security.", 0) == 0 || name.rfind("sasl.", 0) == 0 ||
        name.rfind("ssl.", 0) == 0) {
      settings.emplace_back(name, std::move(value));
    }
  }
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  for (const auto& [name, value] : settings) {
    if (absl::Status s =
            SetConf(conf, name, value, absl::StrCat(field, ".", name), producer->secrets);
        !s.ok()) {
      rd_kafka_conf_destroy(conf);
      return s;
    }
  }
  rd_kafka_conf_set_opaque(conf, producer.get());
  rd_kafka_conf_set_dr_msg_cb(conf, OnDelivery);
  rd_kafka_conf_set_log_cb(conf, Producer::OnLog);
  char error[512];
  producer->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, error, sizeof error);
  if (producer->rk == nullptr) {
    rd_kafka_conf_destroy(conf);
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": cannot create the dead-letter producer: ", producer->secrets.Redact(error)));
  }
  producer_ = std::move(producer);
  return absl::OkStatus();
}

absl::Status KafkaDeadLetterSink::Write(const SourceRecord& record, const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  if (producer_ == nullptr) {
    if (absl::Status s = CreateProducerLocked(); !s.ok()) return s;
  }
  const std::string reason(why.message().data(), why.message().size());
  const std::string& dlt = config_.dead_letter_topic;
  rd_kafka_resp_err_t err =
      ProduceDeadLetter(producer_->rk, dlt, record, reason, record.raw, record.raw_bytes);
  if (err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE) {
    // Too large for this producer or topic: its head still says what it was and where from.
    err = ProduceDeadLetter(producer_->rk, dlt, record, reason, RecordHead(record.raw),
                            record.raw_bytes > 0 ? record.raw_bytes : record.raw.size());
  }
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return absl::OkStatus();
  if (probe_ != nullptr) probe_->RecordError("dead_letter");
  return absl::UnavailableError(absl::StrCat(
      "cannot deliver the dead letter of ", record.locator, " to topic ", dlt, ": ",
      rd_kafka_err2str(err),
      "; check that the topic exists and the brokers ", config_.brokers, " are up"));
}

// ---- KafkaSource ----

struct KafkaSource::Consumer {
  struct PartitionState {
    std::string topic;
    int32_t partition = 0;
    bool at_end = false;
    int64_t read_next = -1;  // the offset after the last message read (-1: none yet)
  };
  // A cluster member's partition assigned without a stored position: read from `low`, and
  // backfilling until the store applied it up to `high` (its high watermark at assignment).
  struct Backfill {
    int64_t low = 0;
    int64_t high = 0;
  };

  KafkaSource* source = nullptr;
  rd_kafka_t* rk = nullptr;
  RecordQueue* queue = nullptr;
  DynamoDbJsonDecoder dynamodb;
  std::unique_ptr<DebeziumJsonDecoder> debezium;
  std::map<std::string, PartitionState> assigned;   // by "topic/partition"
  std::map<std::string, Backfill> backfill;         // by "topic/partition"
  double backfill_progress = 0;
  std::map<std::string, rd_kafka_topic_t*> topic_handles;  // for metadata requests
  std::set<std::string> missing_topics;             // not read at the last metadata read
  std::set<std::string> checked_topics;             // cluster: retention checked
  bool metadata_complete = false;  // the last metadata read found every topic
  std::chrono::steady_clock::time_point next_metadata;
  std::map<std::string, std::string> committed;     // last position committed to the group
  std::deque<SourceRecord> held;                    // read while the queue was full
  bool paused = false;
  std::string error;        // the current error ("" when healthy)
  rd_kafka_resp_err_t error_code = RD_KAFKA_RESP_ERR_NO_ERROR;  // the client error behind it
  bool broker_error = false;
  ClientSecrets secrets;    // outlives rk: the destructor destroys rk first
  std::chrono::steady_clock::time_point next_periodic;

  bool closed = false;  // Close ran: destroying must not close again (and wait unbounded)

  ~Consumer() {
    if (rk == nullptr) return;
    for (auto& [topic, handle] : topic_handles) rd_kafka_topic_destroy(handle);
    if (closed) {
      rd_kafka_destroy_flags(rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
    } else {
      rd_kafka_destroy(rk);
    }
  }

  // Closes the consumer (giving up its assignment), but waits at most kKafkaCloseTimeout:
  // rd_kafka_consumer_close has no bound of its own (an unreachable broker), and the daemon's
  // drain time must have one (Application::kMaxDrainTime).
  void Close() {
    closed = true;
    rd_kafka_queue_t* close_queue = rd_kafka_queue_new(rk);
    rd_kafka_error_t* error = rd_kafka_consumer_close_queue(rk, close_queue);
    if (error != nullptr) {
      LogWarning(absl::StrCat("source ", Name(), ": closing the consumer: ",
                              rd_kafka_error_string(error)));
      rd_kafka_error_destroy(error);
    } else {
      const auto deadline = std::chrono::steady_clock::now() + kKafkaCloseTimeout;
      // Events, not callbacks: without a rebalance callback (partitions are assigned, not
      // subscribed) the close's final revocation is handed to the application, which
      // rd_kafka_queue_poll_callback refuses with an abort.
      while (!rd_kafka_consumer_closed(rk) && std::chrono::steady_clock::now() < deadline) {
        rd_kafka_event_t* event = rd_kafka_queue_poll(close_queue, kPollMs);
        if (event == nullptr) continue;
        if (rd_kafka_event_type(event) == RD_KAFKA_EVENT_REBALANCE) rd_kafka_assign(rk, nullptr);
        rd_kafka_event_destroy(event);
      }
      if (!rd_kafka_consumer_closed(rk)) {
        LogWarning(absl::StrCat(
            "source ", Name(), ": closing the consumer took more than ",
            std::chrono::duration_cast<std::chrono::seconds>(kKafkaCloseTimeout).count(),
            " s; stopped without it"));
      }
    }
    rd_kafka_queue_destroy(close_queue);
  }

  const std::string& Name() const { return source->config_.name; }

  // ---- callbacks (run inside rd_kafka_consumer_poll on the consumer thread)

  static void OnLog(const rd_kafka_t* rk, int level, const char* facility, const char* text) {
    LogFromKafka(rk, level, facility, text, static_cast<Consumer*>(rd_kafka_opaque(rk))->secrets);
  }
  static void OnError(rd_kafka_t*, int err, const char* reason, void* opaque) {
    static_cast<Consumer*>(opaque)->ClientError(static_cast<rd_kafka_resp_err_t>(err), reason);
  }
  static void OnCommit(rd_kafka_t*, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t*,
                       void* opaque) {
    auto* self = static_cast<Consumer*>(opaque);
    // _NO_OFFSET: nothing to commit. Commits are informational: a failure is counted, logged
    // and retried with the next round; it never affects what is applied.
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR || err == RD_KAFKA_RESP_ERR__NO_OFFSET) return;
    if (self->source->probe_) self->source->probe_->RecordError("commit");
    LogWarning(absl::StrCat("source ", self->Name(), ": committing offsets to group ",
                            self->source->config_.kafka.group, " failed: ", rd_kafka_err2str(err),
                            " (informational only; positions are in the store)"));
    self->committed.clear();  // commit everything again next time
  }

  absl::Status Create() {
    const KafkaSourceConfig& kafka = source->config_.kafka;
    const std::string field = absl::StrCat("sources[", source->index_, "].kafka");
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    std::vector<std::tuple<std::string, std::string, std::string>> settings = {
        {"bootstrap.servers", kafka.brokers, field + ".brokers"},
        {"group.id", kafka.group, field + ".group"},
        {"client.id", absl::StrCat("cdcviewd-", Name()), field},
        {"enable.auto.commit", "false", field},
        {"enable.auto.offset.store", "false", field},
        {"enable.partition.eof", "true", field},
        // fetch.wait.max.ms stays librdkafka's 500 ms: the broker answers a waiting fetch as
        // soon as data comes, so a long wait adds no latency, while a short one makes every
        // idle source cost the broker empty fetches (docs/PERFORMANCE.md).
        {"auto.offset.reset",
         kafka.start == KafkaSourceConfig::Start::kLatest ? "latest" : "earliest", field + ".start"}};
    absl::StatusOr<std::vector<std::pair<std::string, std::string>>> properties =
        ResolveProperties(kafka.properties, field, &secrets);
    if (!properties.ok()) {
      rd_kafka_conf_destroy(conf);
      return properties.status();
    }
    WarnOfSecretsInTheFile(kafka.properties, field);
    for (auto& [name, value] : *properties) {
      settings.emplace_back(name, std::move(value), absl::StrCat(field, ".properties.", name));
    }
    for (const auto& [name, value, where] : settings) {
      if (absl::Status s = SetConf(conf, name, value, where, secrets); !s.ok()) {
        rd_kafka_conf_destroy(conf);
        return s;
      }
    }
    rd_kafka_conf_set_opaque(conf, this);
    rd_kafka_conf_set_error_cb(conf, OnError);
    rd_kafka_conf_set_offset_commit_cb(conf, OnCommit);
    rd_kafka_conf_set_log_cb(conf, OnLog);
    char error_text[512];
    rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, error_text, sizeof error_text);
    if (rk == nullptr) {
      rd_kafka_conf_destroy(conf);
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": cannot create the Kafka consumer: ", secrets.Redact(error_text)));
    }
    rd_kafka_poll_set_consumer(rk);  // error and commit callbacks come through consumer_poll
    for (const std::string& topic : kafka.topics) {
      rd_kafka_topic_t* handle = rd_kafka_topic_new(rk, topic.c_str(), nullptr);
      if (handle == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ".topics: cannot use topic \"", topic, "\": ",
            rd_kafka_err2str(rd_kafka_last_error())));
      }
      topic_handles[topic] = handle;
    }
    if (kafka.format == KafkaSourceConfig::Format::kDebeziumJson) {
      debezium = std::make_unique<DebeziumJsonDecoder>(kafka.key_attributes);
    }
    return absl::OkStatus();
  }

  // Where a newly assigned partition starts: the stored next offset, else `start`.
  int64_t StartOffset(const std::map<std::string, std::string>& positions, const std::string& key,
                      std::string* how) {
    int64_t offset = 0;
    if (auto it = positions.find(key); it != positions.end() && ParseInt64(it->second, &offset)) {
      *how = absl::StrCat("stored offset ", offset);
      return offset;
    }
    bool latest = source->config_.kafka.start == KafkaSourceConfig::Start::kLatest;
    *how = latest ? "latest (no stored offset)" : "earliest (no stored offset)";
    return latest ? RD_KAFKA_OFFSET_END : RD_KAFKA_OFFSET_BEGINNING;
  }

  // ---- the static assignment

  // The partition ids of `topic` now, or nullopt when it cannot be read (the topic does not
  // exist, the brokers cannot be reached).
  std::optional<std::vector<int32_t>> PartitionsOf(const std::string& topic) {
    const rd_kafka_metadata_t* metadata = nullptr;
    rd_kafka_resp_err_t err =
        rd_kafka_metadata(rk, 0, topic_handles.at(topic), &metadata, kRequestTimeoutMs);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      // Once until it is read again: the retries of an outage would repeat it every second.
      if (missing_topics.insert(topic).second) {
        LogWarning(absl::StrCat("source ", Name(), ": cannot read the partitions of topic ",
                                topic, ": ", rd_kafka_err2str(err), "; trying again"));
      }
      return std::nullopt;
    }
    std::optional<std::vector<int32_t>> ids;
    for (int t = 0; t < metadata->topic_cnt; ++t) {
      const rd_kafka_metadata_topic_t& m = metadata->topics[t];
      if (topic != m.topic) continue;
      if (m.err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        if (missing_topics.insert(topic).second) {
          LogWarning(absl::StrCat("source ", Name(), ": topic ", topic, ": ",
                                  rd_kafka_err2str(m.err),
                                  "; its partitions are assigned once it is there"));
        }
        break;
      }
      missing_topics.erase(topic);
      ids.emplace();
      for (int p = 0; p < m.partition_cnt; ++p) ids->push_back(m.partitions[p].id);
    }
    rd_kafka_metadata_destroy(metadata);
    return ids;
  }

  // Assigns the partitions of the topics that are this daemon's and not assigned yet: at
  // start, and whenever a topic gained partitions.
  void RefreshAssignment() {
    const auto now = std::chrono::steady_clock::now();
    if (now < next_metadata) return;
    const ClusterConfig& cluster = source->cluster_;
    PartitionList fresh(rd_kafka_topic_partition_list_new(0));
    bool complete = true;
    for (const std::string& topic : source->config_.kafka.topics) {
      std::optional<std::vector<int32_t>> ids = PartitionsOf(topic);
      if (!ids) {
        complete = false;
        continue;
      }
      for (int32_t id : *ids) {
        if (OwnsPartition(id, cluster.members, cluster.ordinal) &&
            !assigned.contains(PartitionKey(topic, id))) {
          rd_kafka_topic_partition_list_add(fresh.get(), topic.c_str(), id);
        }
      }
      if (cluster.Enabled() && !checked_topics.contains(topic)) CheckHistory(topic);
    }
    metadata_complete = complete;
    next_metadata = now + (complete ? source->metadata_interval_ : kMetadataRetry);
    if (fresh->cnt > 0) Assign(fresh.get());
    PublishAssignment();
    UpdateHealth();
  }

  void Assign(rd_kafka_topic_partition_list_t* partitions) {
    // The writer's positions now, not at start: the source may be restarted in one process.
    std::map<std::string, std::string> positions = source->lookup_();
    std::string log;
    for (int i = 0; i < partitions->cnt; ++i) {
      rd_kafka_topic_partition_t& p = partitions->elems[i];
      std::string key = PartitionKey(p.topic, p.partition);
      std::string how;
      p.offset = StartOffset(positions, key, &how);
      // A member is whole only once it has read what its partitions held when it took them:
      // a newly owned partition from its start, and one it had (a restart) from where it was.
      if (source->cluster_.Enabled()) StartBackfill(p, key, p.offset);
      absl::StrAppend(&log, log.empty() ? "" : ", ", key, " at ", how);
    }
    if (rd_kafka_error_t* error = rd_kafka_incremental_assign(rk, partitions)) {
      SetError(absl::StrCat("cannot take partitions ", log, ": ", rd_kafka_error_string(error)),
               rd_kafka_error_code(error), false);
      rd_kafka_error_destroy(error);
      for (int i = 0; i < partitions->cnt; ++i) {
        backfill.erase(PartitionKey(partitions->elems[i].topic, partitions->elems[i].partition));
      }
      return;
    }
    for (int i = 0; i < partitions->cnt; ++i) {
      const rd_kafka_topic_partition_t& p = partitions->elems[i];
      assigned[PartitionKey(p.topic, p.partition)] = PartitionState{p.topic, p.partition};
    }
    if (paused) rd_kafka_pause_partitions(rk, partitions);
    if (source->probe_) {
      source->probe_->RecordRebalance();
      source->probe_->SetPartitionsOwned(assigned.size());
    }
    LogInfo(absl::StrCat("source ", Name(), ": assigned ", log));
  }

  // A partition with data to read from `from` (an offset, or a logical one: the start):
  // backfilling until applied up to its high watermark now.
  void StartBackfill(const rd_kafka_topic_partition_t& p, const std::string& key, int64_t from) {
    int64_t low = -1, high = -1;
    rd_kafka_resp_err_t err =
        rd_kafka_query_watermark_offsets(rk, p.topic, p.partition, &low, &high, kRequestTimeoutMs);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      // Unknown: the partition counts as read once its first read reaches the end.
      LogWarning(absl::StrCat("source ", Name(), ": cannot read the offsets of ", key, ": ",
                              rd_kafka_err2str(err), "; it is backfilling until read to its end"));
      backfill[key] = Backfill{0, std::numeric_limits<int64_t>::max()};
      return;
    }
    if (from >= 0) low = std::max(low, from);
    if (high > low) backfill[key] = Backfill{low, high};
  }

  // Ends the backfill of the partitions the store applied up to their mark (or, for a
  // partition whose last offsets hold no message, such as a transaction's commit marker, to
  // where reading found its end), and computes the progress of the rest.
  void UpdateBackfill(const std::map<std::string, std::string>& positions) {
    if (backfill.empty()) return;
    double total = 0, done = 0;
    for (auto it = backfill.begin(); it != backfill.end();) {
      const Backfill& b = it->second;
      int64_t applied = b.low;
      if (auto p = positions.find(it->first); p != positions.end()) ParseInt64(p->second, &applied);
      auto state = assigned.find(it->first);
      const bool read_out = state != assigned.end() && state->second.at_end &&
                            applied >= state->second.read_next;
      if (applied >= b.high || read_out) {
        it = backfill.erase(it);
        continue;
      }
      if (b.high != std::numeric_limits<int64_t>::max()) {
        total += static_cast<double>(b.high - b.low);
        done += static_cast<double>(std::max<int64_t>(0, applied - b.low));
      }
      ++it;
    }
    const double progress = total > 0 ? done / total : 0;
    if (backfill.empty()) LogInfo(absl::StrCat("source ", Name(), ": backfill done"));
    if (backfill.empty() || progress != backfill_progress) {
      backfill_progress = backfill.empty() ? 0 : progress;
      UpdateHealth();
    }
  }

  // Whether `topic` keeps every message (what a member that gains its partitions reads);
  // warns and sets cdcview_cluster_topic_history_incomplete when not.
  void CheckHistory(const std::string& topic) {
    // Once per start, whatever the answer: a broker that does not answer (or an ACL that
    // refuses DescribeConfigs) must not hold the consumer thread at every metadata read.
    checked_topics.insert(topic);
    std::optional<std::map<std::string, std::string>> configs = TopicConfigs(topic);
    if (!configs) return;  // warned
    const std::string policy = (*configs)["cleanup.policy"];
    const std::string retention_ms = (*configs)["retention.ms"];
    const std::string retention_bytes = (*configs)["retention.bytes"];
    const bool compacted = policy == "compact";
    const bool forever = retention_ms == "-1" && retention_bytes == "-1";
    const bool complete = compacted || forever;
    if (source->probe_) source->probe_->SetTopicHistoryIncomplete(topic, !complete);
    if (complete) return;
    LogWarning(absl::StrCat(
        "source ", Name(), ": topic ", topic, " does not keep its full history (cleanup.policy=",
        policy, ", retention.ms=", retention_ms, ", retention.bytes=", retention_bytes,
        "): a member that gains partitions when the cluster is resized reads them from the "
        "oldest message still kept, and its views miss what was deleted; set cleanup.policy="
        "compact on the topic, or retention.ms=-1 and retention.bytes=-1"));
  }

  // The topic's configuration (DescribeConfigs), or nullopt with a warning.
  std::optional<std::map<std::string, std::string>> TopicConfigs(const std::string& topic) {
    char error_text[512];
    rd_kafka_ConfigResource_t* resource =
        rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic.c_str());
    rd_kafka_AdminOptions_t* options =
        rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS);
    rd_kafka_AdminOptions_set_request_timeout(options, kRequestTimeoutMs, error_text,
                                              sizeof error_text);
    rd_kafka_queue_t* results = rd_kafka_queue_new(rk);
    rd_kafka_DescribeConfigs(rk, &resource, 1, options, results);
    rd_kafka_event_t* event = rd_kafka_queue_poll(results, kRequestTimeoutMs + 1000);
    std::optional<std::map<std::string, std::string>> configs;
    std::string why = "no answer in time";
    if (event != nullptr && rd_kafka_event_error(event) != RD_KAFKA_RESP_ERR_NO_ERROR) {
      why = rd_kafka_event_error_string(event);
    } else if (const rd_kafka_DescribeConfigs_result_t* result =
                   event == nullptr ? nullptr : rd_kafka_event_DescribeConfigs_result(event)) {
      size_t count = 0;
      const rd_kafka_ConfigResource_t** described =
          rd_kafka_DescribeConfigs_result_resources(result, &count);
      if (count == 1 && rd_kafka_ConfigResource_error(described[0]) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        why = rd_kafka_ConfigResource_error_string(described[0]);
      } else if (count == 1) {
        configs.emplace();
        size_t n = 0;
        const rd_kafka_ConfigEntry_t** entries = rd_kafka_ConfigResource_configs(described[0], &n);
        for (size_t i = 0; i < n; ++i) {
          const char* value = rd_kafka_ConfigEntry_value(entries[i]);
          (*configs)[rd_kafka_ConfigEntry_name(entries[i])] = value == nullptr ? "" : value;
        }
      }
    }
    if (event != nullptr) rd_kafka_event_destroy(event);
    rd_kafka_queue_destroy(results);
    rd_kafka_AdminOptions_destroy(options);
    rd_kafka_ConfigResource_destroy(resource);
    if (!configs) {
      LogWarning(absl::StrCat("source ", Name(), ": cannot read the configuration of topic ",
                              topic, " (", why, "); resizing the cluster needs topics that keep "
                              "their full history (cleanup.policy=compact, or retention.ms=-1 "
                              "and retention.bytes=-1)"));
    }
    return configs;
  }

  void PublishAssignment() {
    std::vector<std::string> keys;
    for (const auto& [key, state] : assigned) keys.push_back(key);
    absl::MutexLock lock(&source->mu_);
    source->assignment_ = std::move(keys);
  }

  void ClientError(rd_kafka_resp_err_t err, const char* reason) {
    const bool broker = IsBrokerError(err);
    if (source->probe_) source->probe_->RecordError(broker ? "broker" : "consume");
    const std::string& brokers = source->config_.kafka.brokers;
    const std::string properties = absl::StrCat("sources[", source->index_, "].kafka.properties");
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
      char fatal[512];
      rd_kafka_fatal_error(rk, fatal, sizeof fatal);
      SetError(absl::StrCat("fatal Kafka client error: ", fatal, "; restart cdcviewd"), err, false);
    } else if (err == RD_KAFKA_RESP_ERR__AUTHENTICATION) {
      SetError(absl::StrCat("the Kafka brokers ", brokers, " refused the credentials: ", reason,
                            "; check sasl.mechanism, sasl.username and sasl.password in ",
                            properties, " and the user on the brokers; retrying by itself",
                            ScramCaveat(source->config_.kafka.properties)),
               err, true);
    } else if (err == RD_KAFKA_RESP_ERR__SSL ||
               (err == RD_KAFKA_RESP_ERR__TRANSPORT && absl::StrContains(reason, "SSL routines"))) {
      // A broker that refuses our certificate (or the lack of one) sends a TLS alert, which
      // librdkafka reports as a failed receive after its side of the handshake went well.
      SetError(absl::StrCat("TLS with the Kafka brokers ", brokers, " failed: ", reason,
                            "; check ssl.ca.location (the brokers' CA) and, where the brokers "
                            "require client certificates, ssl.certificate.location and "
                            "ssl.key.location in ",
                            properties, "; retrying by itself"),
               RD_KAFKA_RESP_ERR__SSL, true);
    } else if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN &&
               (error_code == RD_KAFKA_RESP_ERR__AUTHENTICATION ||
                error_code == RD_KAFKA_RESP_ERR__SSL)) {
      // Follows each refused handshake: the error before it says why they are "down".
    } else {
      SetError(absl::StrCat(broker ? "cannot reach the Kafka brokers " : "Kafka client error: ",
                            broker ? brokers + ": " : "", reason,
                            broker ? "; retrying by itself; check sources[" : "; check sources[",
                            source->index_, "].kafka and the brokers"),
               err, broker);
    }
  }

  void SetError(std::string message, rd_kafka_resp_err_t code, bool broker) {
    message = secrets.Redact(message);
    if (message != error) LogError(absl::StrCat("source ", Name(), ": ", message));
    error = std::move(message);
    error_code = code;
    broker_error = broker;
    UpdateHealth();
  }

  void ClearError() {
    if (error.empty()) return;
    LogInfo(absl::StrCat("source ", Name(), ": Kafka is reachable again, resuming"));
    error.clear();
    error_code = RD_KAFKA_RESP_ERR_NO_ERROR;
    broker_error = false;
    UpdateHealth();
  }

  void UpdateHealth() {
    if (!error.empty()) {
      source->SetHealth(SourceState::kError, error);
      return;
    }
    if (!backfill.empty()) {
      source->SetHealth(SourceState::kBackfilling, "", backfill_progress);
      return;
    }
    // A member none of whose partitions exist has nothing to read, once every topic was found.
    bool at_end = held.empty() && metadata_complete;
    for (const auto& [key, state] : assigned) at_end = at_end && state.at_end;
    source->SetHealth(at_end ? SourceState::kCaughtUp : SourceState::kRunning, "");
  }

  // ---- messages

  void Handle(rd_kafka_message_t* m) {
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      if (m->rkt != nullptr) {
        auto it = assigned.find(PartitionKey(rd_kafka_topic_name(m->rkt), m->partition));
        if (it != assigned.end()) it->second.at_end = true;
      }
      ClearError();
      UpdateHealth();
      return;
    }
    if (m->err) {
      ClientError(m->err, rd_kafka_message_errstr(m));
      return;
    }
    ClearError();
    const std::string topic = rd_kafka_topic_name(m->rkt);
    const std::string key = PartitionKey(topic, m->partition);
    auto it = assigned.find(key);
    if (it != assigned.end()) {
      it->second.read_next = m->offset + 1;
      if (it->second.at_end) {
        it->second.at_end = false;
        UpdateHealth();
      }
    }
    SourceRecord record = Decode(m, key);
    // A full queue usually means the writer is in the middle of a batch: waiting for it a
    // moment is far cheaper than pausing, which makes librdkafka drop what it prefetched and
    // fetch it again on resume. Only a writer stalled for longer pauses the partitions.
    if (held.empty() &&
        queue->PushWithin(&record, kFullQueueWait, [this] { return source->stop_.load(); }) ==
            RecordQueue::PushResult::kPushed) {
      return;
    }
    held.push_back(std::move(record));
    SetPaused(true);
  }

  SourceRecord Decode(const rd_kafka_message_t* m, const std::string& partition_key) {
    SourceRecord record;
    record.source = source->index_;
    record.partition = partition_key;
    record.offset = m->offset;
    // Received now, not when queued: a record held back by a full queue is cdcviewd's delay.
    record.received_ms = UnixNowMs();
    record.next_position = std::to_string(m->offset + 1);
    record.locator = absl::StrCat(partition_key, "@", m->offset);
    record.raw.assign(Bytes(m->payload, m->len));
    record.raw_key.assign(Bytes(m->key, m->key_len));
    absl::StatusOr<std::optional<ChangeEvent>> event = DecodeValue(record.raw_key, record.raw);
    if (!event.ok()) {
      const absl::Status& s = event.status();
      record.reason = IsMalformedJson(s)       ? "malformed_json"
                      : IsMalformedProtobuf(s) ? "bad_protobuf"
                                               : "bad_record";
      record.rejection = absl::Status(s.code(), absl::StrCat(record.locator, ": ", s.message()));
      return record;
    }
    if (!event->has_value()) return record;  // a tombstone: advances the position only
    record.event = **std::move(event);
    if (record.event->creation_time_ms <= 0) {
      rd_kafka_timestamp_type_t type;
      int64_t timestamp = rd_kafka_message_timestamp(m, &type);
      if (timestamp > 0) record.event->creation_time_ms = timestamp;
    }
    return record;
  }

  absl::StatusOr<std::optional<ChangeEvent>> DecodeValue(const std::string& key,
                                                         const std::string& value) {
    switch (source->config_.kafka.format) {
      case KafkaSourceConfig::Format::kDebeziumJson: return debezium->Decode(key, value);
      case KafkaSourceConfig::Format::kProtobuf: {
        absl::StatusOr<ChangeEvent> event = DecodeProtobufEvent(value);
        if (!event.ok()) return event.status();
        return std::optional<ChangeEvent>(*std::move(event));
      }
      case KafkaSourceConfig::Format::kDynamoDbJson: break;
    }
    absl::StatusOr<ChangeEvent> event = dynamodb.Decode(value);
    if (!event.ok()) return event.status();
    return std::optional<ChangeEvent>(*std::move(event));
  }

  // ---- back-pressure

  void SetPaused(bool pause) {
    if (pause == paused) return;
    rd_kafka_topic_partition_list_t* list = nullptr;
    if (rd_kafka_assignment(rk, &list) == RD_KAFKA_RESP_ERR_NO_ERROR && list != nullptr) {
      // librdkafka drops what it prefetched for a paused partition and fetches again from
      // the last message handed to us when resumed, so nothing is lost or repeated.
      pause ? rd_kafka_pause_partitions(rk, list) : rd_kafka_resume_partitions(rk, list);
      rd_kafka_topic_partition_list_destroy(list);
    }
    paused = pause;
    source->paused_.store(pause);
  }

  void PushHeld() {
    while (!held.empty() && queue->TryPush(std::move(held.front()))) held.pop_front();
    if (held.empty()) SetPaused(false);
  }

  // ---- once a second

  void Periodic() {
    auto now = std::chrono::steady_clock::now();
    if (now < next_periodic) return;
    next_periodic = now + kPeriodic;
    std::map<std::string, std::string> positions = source->lookup_();
    CommitOffsets(positions);
    ReportLag(positions);
    UpdateBackfill(positions);
    if (broker_error) ProbeBrokers();
  }

  void CommitOffsets(const std::map<std::string, std::string>& positions) {
    PartitionList list(rd_kafka_topic_partition_list_new(static_cast<int>(assigned.size())));
    std::vector<std::pair<std::string, std::string>> changed;
    for (const auto& [key, state] : assigned) {
      auto it = positions.find(key);
      int64_t offset = 0;
      if (it == positions.end() || !ParseInt64(it->second, &offset)) continue;
      auto done = committed.find(key);
      if (done != committed.end() && done->second == it->second) continue;
      rd_kafka_topic_partition_list_add(list.get(), state.topic.c_str(), state.partition)->offset =
          offset;
      changed.emplace_back(key, it->second);
    }
    if (changed.empty()) return;
    if (rd_kafka_commit(rk, list.get(), /*async=*/1) == RD_KAFKA_RESP_ERR_NO_ERROR) {
      for (auto& [key, position] : changed) committed[key] = std::move(position);
    }
  }

  void ReportLag(const std::map<std::string, std::string>& positions) {
    if (!source->probe_) return;
    for (const auto& [key, state] : assigned) {
      int64_t low = -1, high = -1;
      // Cached from fetch responses: no broker round trip on this thread.
      if (rd_kafka_get_watermark_offsets(rk, state.topic.c_str(), state.partition, &low, &high) !=
              RD_KAFKA_RESP_ERR_NO_ERROR ||
          high < 0) {
        continue;
      }
      int64_t applied = low < 0 ? 0 : low;
      if (auto it = positions.find(key); it != positions.end()) ParseInt64(it->second, &applied);
      source->probe_->SetConsumerLag(state.topic, state.partition, std::max<int64_t>(0, high - applied));
    }
  }

  // While the brokers were unreachable: are they back? (Nothing else tells us when the
  // topics are idle.)
  void ProbeBrokers() {
    const rd_kafka_metadata_t* metadata = nullptr;
    if (rd_kafka_metadata(rk, 0, nullptr, &metadata, 1000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
      rd_kafka_metadata_destroy(metadata);
      ClearError();
    }
  }
};

namespace {

// topic.metadata.refresh.interval.ms where the properties set it (a whole number of ms above
// 0), else kMetadataInterval.
std::chrono::milliseconds MetadataInterval(const std::map<std::string, std::string>& properties) {
  int64_t ms = 0;
  auto it = properties.find("topic.metadata.refresh.interval.ms");
  if (it != properties.end() && ParseInt64(it->second, &ms) && ms > 0) {
    return std::chrono::milliseconds(ms);
  }
  return kMetadataInterval;
}

}  // namespace

KafkaSource::KafkaSource(uint32_t source_index, const SourceConfig& config,
                         std::unique_ptr<KafkaProbe> probe, ClusterConfig cluster)
    : index_(source_index),
      config_(config),
      cluster_(std::move(cluster)),
      metadata_interval_(MetadataInterval(config.kafka.properties)),
      probe_(std::move(probe)) {
  if (!config_.kafka.dead_letter_topic.empty()) {
    topic_dead_letters_ =
        std::make_unique<KafkaDeadLetterSink>(config_.name, config_.kafka, probe_.get());
  } else {
    file_dead_letters_ =
        std::make_unique<FileDeadLetterSink>(config_.name, config_.kafka.dead_letter_path);
  }
  health_.state = SourceState::kStopped;
}

KafkaSource::~KafkaSource() { Stop(); }

DeadLetterSink* KafkaSource::dead_letters() {
  if (topic_dead_letters_) return topic_dead_letters_.get();
  return file_dead_letters_.get();
}

void KafkaSource::SetPositionLookup(PositionLookup lookup) { lookup_ = std::move(lookup); }

absl::Status KafkaSource::Start(const std::map<std::string, std::string>& positions,
                                RecordQueue* queue) {
  absl::MutexLock start_stop(&start_stop_mu_);
  if (thread_.joinable()) {
    return absl::FailedPreconditionError(
        absl::StrCat("source \"", config_.name, "\" is already started"));
  }
  for (const auto& [partition, position] : positions) {
    std::string topic;
    int32_t number = 0;
    int64_t offset = 0;
    if (!ParsePartitionKey(partition, &topic, &number) || !ParseInt64(position, &offset)) {
      absl::Status status = absl::InvalidArgumentError(absl::StrCat(
          "stored position \"", partition, "\" -> \"", position, "\" of source \"", config_.name,
          "\" is not \"<topic>/<partition>\" -> \"<next offset>\"; was the store written by "
          "another kind of source?"));
      SetHealth(SourceState::kError, std::string(status.message()));
      return status;
    }
  }
  if (!lookup_) {
    lookup_ = [snapshot = positions] { return snapshot; };
  }
  consumer_ = std::make_unique<Consumer>();
  consumer_->source = this;
  consumer_->queue = queue;
  if (absl::Status s = consumer_->Create(); !s.ok()) {
    consumer_.reset();
    SetHealth(SourceState::kError, std::string(s.message()));
    return s;
  }
  stop_ = false;
  SetHealth(SourceState::kRunning, "");
  thread_ = std::thread(&KafkaSource::Run, this);
  return absl::OkStatus();
}

void KafkaSource::Run() {
  // librdkafka names its own threads rdk:*; this one decodes and queues. Names are <= 15 bytes.
  pthread_setname_np(pthread_self(), absl::StrCat("kafka:", config_.name).substr(0, 15).c_str());
  Consumer& c = *consumer_;
  while (!stop_.load()) {
    c.RefreshAssignment();
    if (!c.held.empty()) c.PushHeld();
    rd_kafka_message_t* m = rd_kafka_consumer_poll(c.rk, c.held.empty() ? kPollMs : kPausedPollMs);
    if (m != nullptr) {
      c.Handle(m);
      rd_kafka_message_destroy(m);
    }
    c.Periodic();
  }
  c.Close();
}

void KafkaSource::Stop() {
  absl::MutexLock start_stop(&start_stop_mu_);
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  consumer_.reset();
  if (probe_) probe_->SetPartitionsOwned(0);
  absl::MutexLock lock(&mu_);
  assignment_.clear();
  if (health_.state != SourceState::kError) health_ = SourceHealth{SourceState::kStopped, ""};
}

SourceHealth KafkaSource::Health() const {
  absl::MutexLock lock(&mu_);
  SourceHealth health = health_;
  health.partitions = assignment_;
  return health;
}

std::vector<std::string> KafkaSource::Assignment() const {
  absl::MutexLock lock(&mu_);
  return assignment_;
}

void KafkaSource::SetHealth(SourceState state, std::string error, double progress) {
  absl::MutexLock lock(&mu_);
  health_ = SourceHealth{state, std::move(error), progress};
}

}  // namespace cdcview
