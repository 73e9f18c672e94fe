#include "daemon/config/config_fields.h"

#include <initializer_list>
#include <utility>

namespace cdcview::config_fields {
namespace {

// A source's tombstone_horizon_seconds: 0 would drop a tombstone at once.
std::string_view CheckTombstoneHorizon(uint32_t seconds) {
  return seconds != 0 ? ""
                      : "0 would drop a removed item's tombstone at once, and a replayed older "
                        "change would bring the item back; set the source's retention in seconds "
                        "(DynamoDB Streams: 86400)";
}

template <typename S>
Field<S> Text(std::string_view key, std::string S::*member) {
  return {key, TextRule<S>{member}};
}

template <typename S>
Field<S> HostPort(std::string_view key, std::string S::*member, std::string_view example_port,
                  bool may_disable) {
  return {key, HostPortRule<S>{member, example_port, may_disable}};
}

template <typename S>
Field<S> Flag(std::string_view key, bool S::*member) {
  return {key, FlagRule<S>{member}};
}

template <typename S>
Field<S> Whole(std::string_view key, uint32_t S::*member, uint32_t min, uint32_t max = kNoMax,
               std::string_view (*check)(uint32_t) = nullptr) {
  return {key, WholeRule<S>{member, min, max, check, {}}};
}

// A whole number from `min` to `max`, where the message says why `max` is the limit.
template <typename S>
Field<S> Bounded(std::string_view key, uint32_t S::*member, uint32_t min, uint32_t max,
                 std::string_view why_max) {
  return {key, WholeRule<S>{member, min, max, nullptr, why_max}};
}

template <typename S>
Field<S> Size(std::string_view key, uint64_t S::*member, uint64_t max, std::string_view why_max) {
  return {key, SizeRule<S>{member, max, why_max}};
}

template <typename S, typename E>
Field<S> Choice(std::string_view key, E S::*member,
                std::initializer_list<std::pair<std::string_view, E>> choices) {
  std::vector<std::pair<std::string_view, E>> values(choices);
  ChoiceRule<S> rule;
  for (const auto& [name, value] : values) rule.names.push_back(name);
  rule.get = [member, values](const S& s) {
    for (size_t i = 0; i < values.size(); ++i) {
      if (values[i].second == s.*member) return i;
    }
    std::abort();  // a value without a name: its table line is missing
  };
  rule.set = [member, values](S& s, size_t i) { s.*member = values[i].second; };
  return {key, std::move(rule)};
}

template <typename S>
Field<S> NameList(std::string_view key, std::vector<std::string> S::*member) {
  return {key, NameListRule<S>{member}};
}

template <typename S>
Field<S> Properties(std::string_view key, std::map<std::string, std::string> S::*member) {
  return {key, PropertiesRule<S>{member}};
}

template <typename S>
Field<S> Required(Field<S> field) {
  field.required = true;
  return field;
}

}  // namespace

const FieldTable<StorageConfig>& StorageFields() {
  using S = StorageConfig;
  // A larger map fails at open or at its first growth, with an error that names no field.
  constexpr std::string_view kWhyMaxMap =
      "LMDB reserves the whole map in the process's address space, 128 TiB on 64-bit Linux";
  static const FieldTable<S> table = {
      Text("path", &S::path),
      Size("map_size", &S::map_size, S::kMaxMapSize, kWhyMaxMap),
      Size("max_map_size", &S::max_map_size, S::kMaxMapSize, kWhyMaxMap),
      Flag("write_map", &S::write_map),
      // At most a minute: what is not flushed is lost at a crash and replayed.
      Whole("flush_interval_ms", &S::flush_interval_ms, 0, S::kMaxFlushIntervalMs),
      Choice("verify_at_start", &S::verify_at_start,
             {{"auto", S::Verify::kAuto}, {"always", S::Verify::kAlways}, {"never", S::Verify::kNever}}),
      Text("backup_dir", &S::backup_dir),
  };
  return table;
}

const FieldTable<ServerConfig>& ServerFields() {
  using S = ServerConfig;
  constexpr std::string_view kWhyMaxRequests =
      "a request is held in memory until it has all arrived";
  static const FieldTable<S> table = {
      HostPort("grpc", &S::grpc, "50051", /*may_disable=*/false),
      HostPort("fast_reads", &S::fast_reads, "50052", /*may_disable=*/true),
      HostPort("dynamodb", &S::dynamodb, "8000", /*may_disable=*/true),
      HostPort("metrics", &S::metrics, "9464", /*may_disable=*/true),
      Bounded("ready_max_lag_seconds", &S::ready_max_lag_seconds, 0, S::kMaxReadyLagSeconds,
              "a view a day behind is not ready by any measure, and DynamoDB Streams keeps "
              "records only 24 hours"),
      Whole("max_wait_ms", &S::max_wait_ms, 1, S::kMaxWaitMs),
      Size("fast_reads_max_request_bytes", &S::fast_reads_max_request_bytes,
           S::kMaxFastReadsRequestBytes, kWhyMaxRequests),
      Size("fast_reads_max_buffered_per_connection", &S::fast_reads_max_buffered_per_connection,
           S::kMaxFastReadsBufferedBytes, kWhyMaxRequests),
      Size("fast_reads_max_buffered_bytes", &S::fast_reads_max_buffered_bytes,
           S::kMaxFastReadsBufferedBytes, kWhyMaxRequests),
      // At most the streams a connection may open at once (H2ReadServer's 100).
      Whole("fast_reads_max_waits_per_connection", &S::fast_reads_max_waits_per_connection, 1,
            100),
      Whole("fast_reads_max_connections", &S::fast_reads_max_connections, 1,
            S::kMaxFastReadsConnections),
      Whole("fast_reads_idle_timeout_ms", &S::fast_reads_idle_timeout_ms,
            S::kMinFastReadsTimeoutMs, S::kMaxFastReadsTimeoutMs),
      Whole("fast_reads_request_timeout_ms", &S::fast_reads_request_timeout_ms,
            S::kMinFastReadsTimeoutMs, S::kMaxFastReadsTimeoutMs),
      Bounded("dynamodb_threads", &S::dynamodb_threads, 0, S::kMaxDynamoDbThreads,
              "an I/O and a page thread each"),
      Whole("dynamodb_max_connections", &S::dynamodb_max_connections, 1,
            S::kMaxFastReadsConnections),
      Size("dynamodb_max_request_bytes", &S::dynamodb_max_request_bytes,
           S::kMaxDynamoDbRequestBytes, kWhyMaxRequests),
      Whole("dynamodb_idle_timeout_ms", &S::dynamodb_idle_timeout_ms, S::kMinFastReadsTimeoutMs,
            S::kMaxFastReadsTimeoutMs),
      Whole("dynamodb_request_timeout_ms", &S::dynamodb_request_timeout_ms,
            S::kMinFastReadsTimeoutMs, S::kMaxFastReadsTimeoutMs),
      Bounded("dynamodb_max_waits", &S::dynamodb_max_waits, 1, S::kMaxDynamoDbWaits,
              "each waiting request holds a thread"),
      Bounded("dynamodb_max_pages", &S::dynamodb_max_pages, 1, S::kMaxDynamoDbPages,
              "each is a request held until a page thread builds it"),
      Whole("grpc_max_connections", &S::grpc_max_connections, 1, S::kMaxConnections),
      Whole("grpc_max_connection_idle_seconds", &S::grpc_max_connection_idle_seconds, 0,
            S::kMaxGrpcSeconds),
      Whole("grpc_max_connection_age_seconds", &S::grpc_max_connection_age_seconds, 0,
            S::kMaxGrpcSeconds),
      Whole("grpc_max_connection_age_grace_seconds", &S::grpc_max_connection_age_grace_seconds,
            0, S::kMaxGrpcSeconds),
      Whole("grpc_min_ping_interval_seconds", &S::grpc_min_ping_interval_seconds, 0,
            S::kMaxGrpcSeconds),
      Whole("grpc_max_ping_strikes", &S::grpc_max_ping_strikes, 0, 1000),
      Whole("fd_reserve", &S::fd_reserve, 0, S::kMaxConnections),
      HostPort("health", &S::health, "50054", /*may_disable=*/true),
      Text("tls_cert_file", &S::tls_cert_file),
      Text("tls_key_file", &S::tls_key_file),
      Text("tls_client_ca_file", &S::tls_client_ca_file),
      Flag("tls_metrics", &S::tls_metrics),
      Text("tokens_file", &S::tokens_file),
  };
  return table;
}

const FieldTable<ApplyConfig>& ApplyFields() {
  using S = ApplyConfig;
  // A zero delay means "commit as soon as the queue runs dry"; zero-sized batches or queues
  // would never move. No count lines is a valid choice too.
  static const FieldTable<S> table = {
      Whole("batch_size", &S::batch_size, 1, S::kMaxEventsInMemory),
      Bounded("max_delay_ms", &S::max_delay_ms, 0, S::kMaxDelayMs,
              "a partial batch waits this long for more events, and no read sees them "
              "meanwhile"),
      Whole("queue_capacity", &S::queue_capacity, 1, S::kMaxEventsInMemory),
      Bounded("log_counts_seconds", &S::log_counts_seconds, 0, S::kMaxLogCountsSeconds,
              "a count line at least once a day; 0 turns them off"),
      // At least one tombstone per step, or compaction never moves.
      Whole("tombstone_compaction_step", &S::tombstone_compaction_step, 1,
            S::kMaxTombstoneCompactionStep),
  };
  return table;
}

const FieldTable<WatchConfig>& WatchFields() {
  using S = WatchConfig;
  // Both at least 1: an empty change log would leave Watch nothing to read, and a watcher
  // allowed no lag at all would be cut off by every commit it has not read yet. Their
  // messages say so rather than "from 1 to ...".
  static const FieldTable<S> table = {
      Whole("retain_changes", &S::retain_changes, 0, kNoMax,
            [](uint32_t n) -> std::string_view {
              return n != 0 ? ""
                            : "0 would keep no change log, and Watch streams read every change "
                              "from it; set how many changes a watcher may resume across "
                              "(default 1000000)";
            }),
      Whole("max_lag_changes", &S::max_lag_changes, 0, kNoMax,
            [](uint32_t n) -> std::string_view {
              return n != 0 ? ""
                            : "0 would cut off every watcher at the first change it has not "
                              "read yet; set it above 0 and below retain_changes";
            }),
      Size("max_stream_buffer_bytes", &S::max_stream_buffer_bytes, S::kMaxStreamBufferBytes,
           "memory held per stream whose client does not read, for up to watch.max_streams "
           "streams"),
      Whole("stalled_stream_timeout_ms", &S::stalled_stream_timeout_ms,
            S::kMinStalledStreamTimeoutMs, S::kMaxStalledStreamTimeoutMs),
      // Each stream holds a handler thread.
      Whole("max_streams", &S::max_streams, 1, S::kMaxStreams),
  };
  return table;
}

const FieldTable<FileSourceConfig>& FileSourceFields() {
  using S = FileSourceConfig;
  static const FieldTable<S> table = {
      // Relative paths stay as written: relative to the daemon's working directory.
      Required(Text("path", &S::path)),
      Flag("follow", &S::follow),
      Text("dead_letter_path", &S::dead_letter_path),
      Whole("tombstone_horizon_seconds", &S::tombstone_horizon_seconds, 0, kNoMax,
            CheckTombstoneHorizon),
      Size("max_line_bytes", &S::max_line_bytes, S::kMaxLineBytes,
           "each line is held in memory whole while it is read"),
  };
  return table;
}

const FieldTable<KafkaSourceConfig>& KafkaSourceFields() {
  using S = KafkaSourceConfig;
  static const FieldTable<S> table = {
      Required(Text("brokers", &S::brokers)),
      Required(NameList("topics", &S::topics)),
      Required(Text("group", &S::group)),
      Choice("format", &S::format,
             {{"dynamodb-json", S::Format::kDynamoDbJson},
              {"debezium-json", S::Format::kDebeziumJson},
              {"protobuf", S::Format::kProtobuf}}),
      Text("dead_letter_topic", &S::dead_letter_topic),
      Text("dead_letter_path", &S::dead_letter_path),
      Choice("start", &S::start,
             {{"earliest", S::Start::kEarliest}, {"latest", S::Start::kLatest}}),
      NameList("key_attributes", &S::key_attributes),
      Properties("properties", &S::properties),
      Whole("tombstone_horizon_seconds", &S::tombstone_horizon_seconds, 0, kNoMax,
            CheckTombstoneHorizon),
  };
  return table;
}

const FieldTable<DynamoDbSourceConfig>& DynamoDbSourceFields() {
  using S = DynamoDbSourceConfig;
  static const FieldTable<S> table = {
      Text("table_name", &S::table_name),
      Text("stream_arn", &S::stream_arn),
      Text("region", &S::region),
      Text("endpoint", &S::endpoint),
      Choice("start", &S::start,
             {{"trim_horizon", S::Start::kTrimHorizon}, {"latest", S::Start::kLatest}}),
      Bounded("poll_interval_ms", &S::poll_interval_ms, 0, S::kMaxPollIntervalMs,
              "a new record on an idle shard waits this long to be read"),
      Bounded("shard_concurrency", &S::shard_concurrency, 1, S::kMaxThreads,
              "one thread each"),
      Bounded("discovery_interval_ms", &S::discovery_interval_ms, 100, S::kMaxDiscoveryIntervalMs,
              "the records of a new shard wait this long to be found, and DynamoDB Streams "
              "keeps them only 24 hours"),
      Choice("snapshot", &S::snapshot,
             {{"none", S::Snapshot::kNone}, {"scan", S::Snapshot::kScan}}),
      Bounded("scan_segments", &S::scan_segments, 1, S::kMaxThreads, "one thread each"),
      Whole("scan_read_capacity_percent", &S::scan_read_capacity_percent, 1, kNoMax,
            [](uint32_t n) -> std::string_view {
              return n <= 100 ? "" : "expected a percentage of the table's read capacity, 1 to 100";
            }),
      Bounded("scan_read_units_per_second", &S::scan_read_units_per_second, 0,
              S::kMaxScanReadUnitsPerSecond,
              "25 times DynamoDB's default read quota of a table, 40,000 units per second"),
      Text("dead_letter_path", &S::dead_letter_path),
      Whole("tombstone_horizon_seconds", &S::tombstone_horizon_seconds, 0, kNoMax,
            CheckTombstoneHorizon),
  };
  return table;
}

}  // namespace cdcview::config_fields
