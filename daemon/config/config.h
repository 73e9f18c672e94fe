// Config: the daemon's configuration, parsed once from YAML into typed, validated structs.
//
// Immutable after LoadConfig returns; share it as const between threads.
// Errors name the file, line and field and say what was expected, e.g.
//   examples/cdcview.yaml:14: tables[0].views[1].partition_key.type: expected one of S, N, B, got "X"
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/config/source_kinds.h"
#include "index_builders/view_spec.h"

namespace cdcview {

struct StorageConfig {
  std::string path = "./data";
  uint64_t map_size = 4ull << 30;       // initial LMDB map size
  uint64_t max_map_size = 64ull << 30;  // MDB_MAP_FULL grows the map up to this
  // Both sizes at most: LMDB reserves the whole map in the process's address space, and a
  // 64-bit Linux process has 128 TiB of it (47-bit addresses on x86-64 and arm64).
  static constexpr uint64_t kMaxMapSize = 64ull << 40;
  // MDB_WRITEMAP: commits write pages in the map instead of copying them with pwrite (a large
  // share of a commit's cost). Cost: a stray pointer write could reach the map. Either way
  // data.mdb's disk is reserved for the whole map, so a full disk fails a growth (retried)
  // instead of a write to the map raising SIGBUS. See docs/ARCHITECTURE.md, "Write map".
  bool write_map = true;
  // Write-back: 0 (the default), a batch is visible once committed to LMDB. N > 0, a batch is
  // visible once applied in memory, and a background thread commits what was applied to LMDB
  // in one transaction, normally within N ms (a flush still syncing delays the next). Costs: a
  // process crash loses what was not flushed (the sources replay it, so views step back until
  // then), and another process reading the store sees it that much later. Worth it where a
  // commit's sync is slow (a disk). See docs/ARCHITECTURE.md, "Write-back".
  uint32_t flush_interval_ms = 0;
  static constexpr uint32_t kMaxFlushIntervalMs = 60000;
  // Whether Store::Open verifies the store's pages first (store_verifier.h), refusing a
  // damaged store with what is damaged. kAuto: after an unclean shutdown (no clean-shutdown
  // marker) or when the store's used pages are at most kVerifyCheapBytes; kAlways; kNever.
  enum class Verify { kAuto, kAlways, kNever };
  Verify verify_at_start = Verify::kAuto;
  static constexpr uint64_t kVerifyCheapBytes = 1ull << 30;
  // Where AdminService.Backup (`cdcview backup --to DIR`) may write: each backup is a new
  // directory inside it. Empty (the default): backups are off, so no client can make the
  // daemon write anywhere.
  std::string backup_dir;

  bool operator==(const StorageConfig&) const = default;
};

struct ServerConfig {
  std::string grpc = "127.0.0.1:50051";     // host:port; port 0 picks a free port
  std::string metrics = "127.0.0.1:9464";   // host:port; port 0 picks a free port; "" disables
  // The fast read port (H2ReadServer): ViewService's unary reads over gRPC, answered on one
  // event loop without the gRPC library. host:port like grpc; "" (the default) disables it.
  std::string fast_reads;
  // The DynamoDB endpoint (daemon/dynamodb/http_server.h): the DynamoDB JSON 1.0 protocol over
  // HTTP/1.1, so that AWS SDKs read the views as global secondary indexes. host:port like
  // grpc; "" (the default) disables it.
  std::string dynamodb;
  // A view's health service ("cdcview.view.<name>") is SERVING only while the view is READY
  // and every source of its table is at most this far behind (finished/caught-up sources: 0).
  uint32_t ready_max_lag_seconds = 60;
  static constexpr uint32_t kMaxReadyLagSeconds = 86400;  // a day
  // A read that waits for a position (ReadConsistency) without a deadline of its own waits at
  // most this long, on both ports, then answers DEADLINE_EXCEEDED.
  uint32_t max_wait_ms = 10000;
  static constexpr uint32_t kMaxWaitMs = 3600 * 1000;

  // The fast read port's limits (see docs/ARCHITECTURE.md, "Limits and failure behaviour").
  // Request bytes buffered for calls whose request has not ended: per call (gRPC's own
  // default message limit), per connection, and across the port. A call over one of them
  // answers RESOURCE_EXHAUSTED naming the field.
  uint64_t fast_reads_max_request_bytes = 4 << 20;
  uint64_t fast_reads_max_buffered_per_connection = 16 << 20;
  uint64_t fast_reads_max_buffered_bytes = 256 << 20;
  static constexpr uint64_t kMaxFastReadsRequestBytes = 64 << 20;
  static constexpr uint64_t kMaxFastReadsBufferedBytes = uint64_t{64} << 30;
  // Reads waiting for a position at once per connection; one more answers RESOURCE_EXHAUSTED.
  // A read whose position is already applied is not a wait.
  uint32_t fast_reads_max_waits_per_connection = 4;
  // Connections open at once; one more is closed as soon as accepted. Below the process's
  // open-files limit, so that the main port, the store and the sources keep theirs.
  uint32_t fast_reads_max_connections = 1024;
  static constexpr uint32_t kMaxFastReadsConnections = 1 << 20;
  // A connection without an open call this long is closed (GOAWAY).
  uint32_t fast_reads_idle_timeout_ms = 300 * 1000;
  // A connection whose preface, or a call's headers and request, take longer than this to
  // arrive is closed: a client that sends slowly holds no connection for long.
  uint32_t fast_reads_request_timeout_ms = 10 * 1000;
  static constexpr uint32_t kMinFastReadsTimeoutMs = 100;
  static constexpr uint32_t kMaxFastReadsTimeoutMs = 24 * 3600 * 1000;

  // The DynamoDB endpoint's limits (see docs/ARCHITECTURE.md, "Limits and failure behaviour").
  // I/O threads: each reads requests, answers the short ones (dynamodb::RunsShort) without a
  // consistency header and writes the answers; as many page threads, at a lower priority, build
  // the long ones (a 1 MB Scan or Query page). 0: one per CPU the daemon may use (UsableCpus:
  // its affinity and cgroup quota).
  uint32_t dynamodb_threads = 0;
  static constexpr uint32_t kMaxDynamoDbThreads = 64;
  // Connections open at once; one more is closed as soon as accepted (within the open-files
  // budget, like the other ports).
  uint32_t dynamodb_max_connections = 1024;
  // A request's body at most (held in memory until it has all arrived); over it: 413 naming
  // the field, then the connection is closed.
  uint64_t dynamodb_max_request_bytes = 1 << 20;
  static constexpr uint64_t kMaxDynamoDbRequestBytes = 64 << 20;
  // A keep-alive connection without a request this long is closed.
  uint32_t dynamodb_idle_timeout_ms = 300 * 1000;
  // A request's head and body must arrive within this of its first byte (a TLS handshake within
  // this of accept), and its answer be written within it; else the connection is closed.
  uint32_t dynamodb_request_timeout_ms = 10 * 1000;
  // Requests with a consistency header (x-cdcview-min-position, ...) running at once, each on a
  // thread of its own while it waits; one more answers ThrottlingException naming the field.
  uint32_t dynamodb_max_waits = 256;
  static constexpr uint32_t kMaxDynamoDbWaits = 4096;
  // Long requests (dynamodb::RunsShort false: Scan and Query pages, BatchGetItem) queued for
  // the page threads or running at once; one more answers ThrottlingException naming the field.
  uint32_t dynamodb_max_pages = 64;
  static constexpr uint32_t kMaxDynamoDbPages = 4096;

  // The main gRPC port's connections (GrpcListener and gRPC's channel arguments). Beyond the
  // cap a connection is accepted and closed at once; the cap is lowered at start to what the
  // open-files limit leaves (see fd_reserve). Durations: 0 is never.
  uint32_t grpc_max_connections = 1000;
  uint32_t grpc_max_connection_idle_seconds = 300;       // no call in flight for this long
  uint32_t grpc_max_connection_age_seconds = 3600;       // then GOAWAY (gRPC adds +-10%)
  uint32_t grpc_max_connection_age_grace_seconds = 300;  // calls may finish, then it is closed
  // Keepalive enforcement: a client pinging more often than this with no call in flight earns
  // a strike; past grpc_max_ping_strikes it is sent GOAWAY (0: any number of strikes).
  uint32_t grpc_min_ping_interval_seconds = 300;
  uint32_t grpc_max_ping_strikes = 2;
  // File descriptors kept free of connections for what the sources, the store and metrics
  // open later (Kafka and DynamoDB sockets, dead-letter files, /metrics scrapes). Connections
  // on both ports share the open-files limit less this and what is open once the sources
  // have started.
  uint32_t fd_reserve = 256;

  // A plaintext port that serves only grpc.health.v1.Health (the main port's statuses, every
  // "cdcview.view.<name>" service included), for the kubelet's gRPC probes, which speak neither
  // TLS nor tokens. "" (the default) turns it off.
  std::string health;
  // TLS (see docs/TLS.md). tls_cert_file (PEM chain, leaf first) and tls_key_file together turn
  // TLS on for the main port, the fast read port and, unless tls_metrics is false, /metrics.
  // Each listener reloads them when they change; connections open keep their session.
  std::string tls_cert_file;
  std::string tls_key_file;
  // With it, clients must present a certificate this CA signed (mTLS) on both read ports.
  std::string tls_client_ca_file;
  bool tls_metrics = true;
  // Bearer tokens (a YAML file, reloaded when it changes): every call on both read ports, and
  // every scrape of /metrics, then needs "authorization: Bearer <token>". Needs TLS.
  std::string tokens_file;
  bool TlsEnabled() const { return !tls_cert_file.empty(); }
  // Durations in seconds at most this: gRPC takes milliseconds as an int.
  static constexpr uint32_t kMaxGrpcSeconds = 2'147'483;
  static constexpr uint32_t kMaxConnections = 1'000'000;

  bool operator==(const ServerConfig&) const = default;
};

struct ApplyConfig {
  // Events per write transaction at most, while the writer keeps up; a writer behind its
  // sources (more than this many queued) commits up to 8 times as many (at most
  // queue_capacity) per transaction, to pay fewer syncs while it catches up.
  uint32_t batch_size = 1024;
  uint32_t max_delay_ms = 20;      // a partial batch waits at most this long (WriterLinger)
  uint32_t queue_capacity = 8192;  // events buffered between sources and the writer
  // batch_size and queue_capacity at most: both count events held in memory at once, so
  // their bound must be one memory can honour (a million events of a few KiB is GiBs).
  static constexpr uint32_t kMaxEventsInMemory = 1u << 20;
  // Every this many seconds, one info line per source with its event counts (applied,
  // skipped, rejected: since the last line and in total) and lag; 0: none.
  uint32_t log_counts_seconds = 30;
  static constexpr uint32_t kMaxDelayMs = 60000;            // max_delay_ms: a minute
  static constexpr uint32_t kMaxLogCountsSeconds = 86400;   // log_counts_seconds: a day
  // Tombstones a compaction step drops at most (see TombstoneCompactor): the step is a write
  // transaction between two batches, so this bounds how long it can hold the next batch up.
  uint32_t tombstone_compaction_step = 1000;
  static constexpr uint32_t kMaxTombstoneCompactionStep = 100000;

  bool operator==(const ApplyConfig&) const = default;
};

// The change log Watch streams read (see docs/ARCHITECTURE.md, "Watch").
struct WatchConfig {
  // Entry changes kept in the `changes` database, all views together. A watcher can resume
  // from a position only while the changes after it are retained. At least 1: the log is how
  // Watch sees changes at all, so there is no "off" value.
  uint32_t retain_changes = 1000000;
  // A watcher further behind the head than this is told it fell behind and is cut off. Below
  // retain_changes, so the position it is told to resume from is still retained. 0 in the
  // file is rejected; unset, it is retain_changes / 2.
  uint32_t max_lag_changes = 500000;
  // Bytes of events one stream prepares ahead of its client's reads (a snapshot chunk, a batch
  // of changes), on top of what gRPC buffers itself (about its flow-control window): what a
  // client that stops reading costs, times max_streams at worst.
  uint64_t max_stream_buffer_bytes = 1ull << 20;
  static constexpr uint64_t kMaxStreamBufferBytes = 1ull << 30;
  // A stream whose client reads nothing for this long (its Write stays blocked) ends with
  // RESOURCE_EXHAUSTED: it would hold its thread and its buffer for good.
  uint32_t stalled_stream_timeout_ms = 10000;
  static constexpr uint32_t kMinStalledStreamTimeoutMs = 100;
  static constexpr uint32_t kMaxStalledStreamTimeoutMs = 3600000;
  // Watch streams open at once (each holds a gRPC handler thread); one more is
  // RESOURCE_EXHAUSTED.
  uint32_t max_streams = 256;
  static constexpr uint32_t kMaxStreams = 16384;

  bool operator==(const WatchConfig&) const = default;
};

// A source's tombstone horizon: how long a removed item's tombstone is kept (from the
// removal's creation time), so that a replayed older change of the item is skipped. Replays
// come from the source's retention window, so the default is the source's retention where it
// is known: 24 h for DynamoDB Streams, and for a file of DynamoDB Streams records; for Kafka
// the topic's retention.ms is not known to cdcviewd, so the default is Kafka's own default
// retention, 7 days (set it to the topic's). A table keeps its tombstones for the longest
// horizon of its sources.
inline constexpr uint32_t kStreamsRetentionSeconds = 24 * 3600;
inline constexpr uint32_t kKafkaDefaultRetentionSeconds = 7 * 24 * 3600;

struct FileSourceConfig {
  std::string path;
  // Keep reading as the file grows, and follow it when it is truncated or replaced (tail -F).
  bool follow = false;
  std::string dead_letter_path;     // default: <storage.path>/dead-letters/<source>.ndjson
  uint32_t tombstone_horizon_seconds = kStreamsRetentionSeconds;
  // A longer line is rejected (record_too_large), its first 4 KiB dead-lettered, and reading
  // goes on after it. A line is held in memory whole while it is read; a DynamoDB stream
  // record is at most about 800 KB (two 400 KB images).
  uint64_t max_line_bytes = 16ull << 20;
  static constexpr uint64_t kMaxLineBytes = 256ull << 20;  // max_line_bytes at most

  bool operator==(const FileSourceConfig&) const = default;
};

struct KafkaSourceConfig {
  enum class Format { kDynamoDbJson, kDebeziumJson, kProtobuf };
  enum class Start { kEarliest, kLatest };

  std::string brokers;              // bootstrap.servers
  std::vector<std::string> topics;
  std::string group;                // group.id
  Format format = Format::kDynamoDbJson;
  std::string dead_letter_topic;    // "": rejected messages go to dead_letter_path instead
  std::string dead_letter_path;     // default: <storage.path>/dead-letters/<source>.ndjson
  Start start = Start::kEarliest;   // where a partition with no stored offset starts
  // Debezium: the table key attributes come from the message key, or else from these columns.
  std::vector<std::string> key_attributes;
  std::map<std::string, std::string> properties;  // any librdkafka property, passed through
  uint32_t tombstone_horizon_seconds = kKafkaDefaultRetentionSeconds;

  bool operator==(const KafkaSourceConfig&) const = default;
};

struct DynamoDbSourceConfig {
  enum class Start { kTrimHorizon, kLatest };
  enum class Snapshot { kNone, kScan };

  std::string table_name;   // one of table_name / stream_arn
  std::string stream_arn;
  std::string region = "us-east-1";
  std::string endpoint;     // "" = the region's public endpoint; set for local endpoints
  Start start = Start::kTrimHorizon;
  uint32_t poll_interval_ms = 1000;          // per shard, when a GetRecords returned nothing
  uint32_t shard_concurrency = 8;            // shards read at once
  uint32_t discovery_interval_ms = 10000;    // DescribeStream for new shards
  Snapshot snapshot = Snapshot::kNone;
  uint32_t scan_segments = 4;                // parallel Scan segments
  // The Scan's read budget: a share of the table's provisioned read capacity (DescribeTable)
  // or, for an on-demand table (no provisioned capacity), an absolute rate (0: unthrottled).
  uint32_t scan_read_capacity_percent = 50;  // 1..100, of provisioned ReadCapacityUnits
  uint32_t scan_read_units_per_second = 0;   // on-demand tables; 0: unthrottled
  std::string dead_letter_path;              // default: <storage.path>/dead-letters/<source>.ndjson
  uint32_t tombstone_horizon_seconds = kStreamsRetentionSeconds;

  // The bounds of the fields above (config_fields.cc says why in its messages).
  static constexpr uint32_t kMaxPollIntervalMs = 60000;         // a minute
  static constexpr uint32_t kMaxDiscoveryIntervalMs = 3600000;  // an hour
  static constexpr uint32_t kMaxThreads = 1024;  // shard_concurrency, scan_segments
  static constexpr uint32_t kMaxScanReadUnitsPerSecond = 1000000;

  bool operator==(const DynamoDbSourceConfig&) const = default;
};

struct SourceConfig {
  using Kind = SourceKind;

  std::string name;
  std::string table;
  Kind kind = Kind::kFile;
  FileSourceConfig file;
  KafkaSourceConfig kafka;
  DynamoDbSourceConfig dynamodb;

  bool operator==(const SourceConfig&) const = default;
};

// The file where `source` writes what it rejects: every kind has one (a Kafka source with a
// dead_letter_topic writes there instead).
const std::string& DeadLetterPath(const SourceConfig& source);
std::string& DeadLetterPath(SourceConfig& source);
// The tombstone_horizon_seconds of the block `source`'s kind uses.
uint32_t TombstoneHorizonSeconds(const SourceConfig& source);

// A partitioned cluster (`cluster:`): `members` daemons share one config, each consuming the
// Kafka partitions OwnsPartition gives it and answering reads for all of them by asking every
// member. members 0 (no `cluster:` block): a standalone daemon that owns every partition.
struct ClusterConfig {
  uint32_t members = 0;
  uint32_t ordinal = 0;              // this member, 0..members-1
  std::vector<std::string> peers;    // every member's gRPC address, by ordinal (members entries)
  static constexpr uint32_t kMaxMembers = 1024;

  bool Enabled() const { return members > 0; }
  bool operator==(const ClusterConfig&) const = default;
};

// The fixed assignment: partition p of every Kafka topic belongs to member p % members. A
// standalone daemon (members 0 or 1) owns them all.
inline bool OwnsPartition(int32_t partition, uint32_t members, uint32_t ordinal) {
  return members <= 1 || static_cast<uint32_t>(partition) % members == ordinal;
}

// The N of a Kafka position's partition "<topic>/N"; nullopt for any other form.
std::optional<int32_t> KafkaPartitionNumber(std::string_view partition);

struct Config {
  std::string file;  // where it was loaded from, for messages
  StorageConfig storage;
  ServerConfig server;
  ApplyConfig apply;
  WatchConfig watch;
  ClusterConfig cluster;
  std::vector<SourceConfig> sources;
  std::vector<TableSpec> tables;

  const TableSpec* FindTable(std::string_view name) const;
};

// One field set outside the file (12-factor): `path` is the field's place in the file's
// schema, dots between the steps ("apply.batch_size", "server.ready_max_lag_seconds"); a step
// after "sources" names a source ("sources.orders.kafka.brokers"). `value` is what the file
// would hold there (a scalar, or a flow list like "[a, b]"). `origin` names where it came
// from for messages: "--set apply.batch_size=0", "CDCVIEW_APPLY_BATCH_SIZE".
struct ConfigSetting {
  std::string path;
  std::string value;
  std::string origin;
};

// Reads and validates `path`, with `settings` put into the file's tree first (in order; a
// later one wins), so they are validated exactly like the file's own fields.
// INVALID_ARGUMENT with "FILE:LINE: FIELD: problem" for an error in the file, "ORIGIN: FIELD:
// problem" for one in a setting; NOT_FOUND if the file cannot be read.
absl::StatusOr<Config> LoadConfig(const std::string& path,
                                  const std::vector<ConfigSetting>& settings = {});
// The same from YAML text; `file` is used in messages only.
absl::StatusOr<Config> ParseConfig(const std::string& yaml, const std::string& file,
                                   const std::vector<ConfigSetting>& settings = {});

// `--set <path>=<value>` -> a setting. INVALID_ARGUMENT without a '='.
absl::StatusOr<ConfigSetting> ParseSetFlag(std::string_view text);
// The fields an environment variable can set: every field of storage, server, apply and watch
// but the three with their own flag (storage.path, server.grpc, server.metrics), then
// cluster.members, cluster.ordinal and cluster.peers.
const std::vector<std::string>& EnvironmentSettablePaths();
// "apply.batch_size" -> "CDCVIEW_APPLY_BATCH_SIZE".
std::string EnvironmentName(std::string_view path);
// The settings the environment holds (`getenv`: ::getenv, or a fake in tests); a variable set
// to "" counts as unset. Sources have no variables (their names are free text): use --set.
std::vector<ConfigSetting> SettingsFromEnvironment(
    const std::function<const char*(const char*)>& getenv);

// Settings given as flags or environment variables (12-factor); each one set replaces the
// file's value. main() resolves flag-over-environment precedence before filling this in.
struct ConfigOverrides {
  std::optional<std::string> grpc;          // --grpc, CDCVIEW_GRPC
  std::optional<std::string> metrics;       // --metrics, CDCVIEW_METRICS ("" disables)
  std::optional<std::string> storage_path;  // --storage-path, CDCVIEW_STORAGE_PATH
};

// Applies `overrides` to `config`, validated like the file's fields: INVALID_ARGUMENT naming
// the field, the flag and the variable. Dead-letter paths that were defaulted under the
// file's storage.path move with storage.path, so every file the daemon writes stays there.
absl::Status ApplyOverrides(const ConfigOverrides& overrides, Config* config);

// "4GiB", "512MiB", "1048576" -> bytes. INVALID_ARGUMENT otherwise.
absl::StatusOr<uint64_t> ParseByteSize(std::string_view text);

// Bytes in the largest power-of-two unit that divides them exactly: 4GiB, 1536MiB, 1000.
// What ParseByteSize reads back as the same number.
std::string FormatByteSize(uint64_t bytes);

}  // namespace cdcview
