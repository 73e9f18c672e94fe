// ConfigToYaml round trips, server.ready_max_lag_seconds, and flag/environment overrides.
#include "daemon/config/config_yaml.h"

#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/config/config.h"
#include "gtest/gtest.h"

namespace cdcview {
namespace {

std::string Text(const absl::Status& status) {
  return std::string(status.message().data(), status.message().size());
}

std::string ExamplePath() {
  if (const char* dir = std::getenv("CDCVIEW_SOURCE_DIR")) {
    return std::string(dir) + "/examples/cdcview.yaml";
  }
  for (std::string up : {".", "..", "../.."}) {
    std::string path = up + "/examples/cdcview.yaml";
    if (std::filesystem::exists(path)) return path;
  }
  return "examples/cdcview.yaml";
}

// Everything a view's contents depend on is in its fingerprint (rules, keys, types,
// projection, table key); name, table and the inverted flag are compared besides.
void ExpectSameTables(const std::vector<TableSpec>& got, const std::vector<TableSpec>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t t = 0; t < want.size(); ++t) {
    SCOPED_TRACE("table " + want[t].name);
    EXPECT_EQ(got[t].name, want[t].name);
    EXPECT_EQ(got[t].key.partition, want[t].key.partition);
    EXPECT_EQ(got[t].key.partition_type, want[t].key.partition_type);
    EXPECT_EQ(got[t].key.sort, want[t].key.sort);
    EXPECT_EQ(got[t].key.sort_type, want[t].key.sort_type);
    ASSERT_EQ(got[t].views.size(), want[t].views.size());
    for (size_t v = 0; v < want[t].views.size(); ++v) {
      const ViewSpec& g = got[t].views[v];
      const ViewSpec& w = want[t].views[v];
      SCOPED_TRACE("view " + w.name);
      EXPECT_EQ(g.name, w.name);
      EXPECT_EQ(g.table, w.table);
      EXPECT_EQ(g.inverted, w.inverted);
      EXPECT_EQ(g.shards, w.shards);
      EXPECT_EQ(g.rules.size(), w.rules.size());
      EXPECT_EQ(g.projection.include, w.projection.include);
      EXPECT_EQ(g.Fingerprint(got[t].key), w.Fingerprint(want[t].key));
    }
  }
}

void ExpectRoundTrip(const Config& config) {
  std::string yaml = ConfigToYaml(config);
  absl::StatusOr<Config> again = ParseConfig(yaml, config.file);
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << yaml;
  EXPECT_EQ(again->file, config.file);
  EXPECT_EQ(again->storage, config.storage);
  EXPECT_EQ(again->server, config.server);
  EXPECT_EQ(again->apply, config.apply);
  EXPECT_EQ(again->watch, config.watch);
  EXPECT_EQ(again->sources, config.sources) << yaml;
  ExpectSameTables(again->tables, config.tables);
  // A fixpoint too: printing the re-read config gives the same text.
  EXPECT_EQ(ConfigToYaml(*again), yaml);
}

TEST(ConfigToYamlTest, ExampleRoundTrips) {
  absl::StatusOr<Config> config = LoadConfig(ExamplePath());
  ASSERT_TRUE(config.ok()) << config.status();
  ExpectRoundTrip(*config);
}

TEST(ConfigToYamlTest, EverySourceKindAndViewFormRoundTrips) {
  absl::StatusOr<Config> config = ParseConfig(
      "storage: { path: /var/lib/cdcview/, map_size: 1000000000, max_map_size: 3GiB }\n"
      "server: { grpc: \"[::1]:0\", metrics: \"\", ready_max_lag_seconds: 0 }\n"
      "apply: { batch_size: 7, max_delay_ms: 0, queue_capacity: 9 }\n"
      "sources:\n"
      "  - { name: f, table: T, file: { path: \"in #1.ndjson\", follow: true } }\n"
      "  - name: k\n"
      "    table: T\n"
      "    kafka: { brokers: \"a:1,b:2\", topics: [t1, \"true\"], group: g, format: protobuf,\n"
      "             dead_letter_topic: dlq, start: latest, key_attributes: [id],\n"
      "             properties: { fetch.min.bytes: 1024, enable.idempotence: true } }\n"
      "  - name: d\n"
      "    table: T\n"
      "    dynamodb: { stream_arn: \"arn:aws:dynamodb:eu-west-1:1:table/T/stream/x\",\n"
      "                region: eu-west-1, endpoint: \"http://127.0.0.1:8000\", start: latest,\n"
      "                poll_interval_ms: 0, snapshot: scan, scan_read_units_per_second: 50 }\n"
      "tables:\n"
      "  - name: T\n"
      "    key: { partition: { attribute: id, type: N }, sort: { attribute: at, type: B } }\n"
      "    views:\n"
      "      - name: Inv\n"
      "        inverted: true\n"
      "        filter: { attribute: kind, exists: false }\n"
      "      - name: Sparse\n"
      "        partition_key: { template: \"{{literal}}#{kind}\" }\n"
      "        filter: [ { attribute: flag, equals: \"true\" }, { attribute: s, begins_with: \"#\" } ]\n"
      "        projection: { include: [a, \"b c\"] }\n"
      "      - name: Over\n"
      "        rules:\n"
      "          - when: { attribute: k, equals: 01 }\n"
      "            partition_key: { attribute: x }\n"
      "            sort_key: { attribute: n, type: N }\n"
      "          - { partition_key: { template: \"7\" }, sort_key: { attribute: m, type: N } }\n"
      "        projection: KEYS_ONLY\n"
      "  - name: U\n"
      "    key: { partition: id }\n",
      "t.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  ExpectRoundTrip(*config);
}

// Every settable field at a value other than its default, so a field ConfigToYaml leaves out
// comes back as the default and fails the round trip (storage.write_map once did). A field
// added to a config struct belongs in this file and in the list below.
TEST(ConfigToYamlTest, EveryFieldAtANonDefaultValueRoundTrips) {
  absl::StatusOr<Config> config = ParseConfig(
      "storage: { path: /srv/x, map_size: 1MiB, max_map_size: 2MiB, write_map: false,\n"
      "           flush_interval_ms: 50, verify_at_start: never }\n"
      "server: { grpc: \"0.0.0.0:7\", fast_reads: \"0.0.0.0:9\", metrics: \"0.0.0.0:8\",\n"
      "          ready_max_lag_seconds: 3 }\n"
      "apply: { batch_size: 5, max_delay_ms: 6, queue_capacity: 70, log_counts_seconds: 0,\n"
      "         tombstone_compaction_step: 7 }\n"
      "watch: { retain_changes: 100, max_lag_changes: 10, max_stream_buffer_bytes: 64KiB,\n"
      "         stalled_stream_timeout_ms: 500, max_streams: 3 }\n"
      "sources:\n"
      "  - { name: f, table: T, file: { path: in.ndjson, follow: true,\n"
      "                                dead_letter_path: /dl/f.ndjson,\n"
      "                                tombstone_horizon_seconds: 60 } }\n"
      "  - name: k\n"
      "    table: T\n"
      "    kafka: { brokers: \"b:1\", topics: [t], group: g, format: debezium-json,\n"
      "             dead_letter_topic: dlq, dead_letter_path: /dl/k.ndjson, start: latest,\n"
      "             key_attributes: [id], properties: { fetch.min.bytes: 1 },\n"
      "             tombstone_horizon_seconds: 120 }\n"
      "  - name: d\n"
      "    table: T\n"
      "    dynamodb: { table_name: T1, region: eu-west-1, endpoint: \"http://127.0.0.1:1\",\n"
      "                start: latest, poll_interval_ms: 11, shard_concurrency: 2,\n"
      "                discovery_interval_ms: 1300, snapshot: scan, scan_segments: 3,\n"
      "                scan_read_units_per_second: 17, dead_letter_path: /dl/d.ndjson,\n"
      "                tombstone_horizon_seconds: 180 }\n"
      "  - name: a\n"
      "    table: T\n"
      "    dynamodb: { stream_arn: \"arn:aws:dynamodb:eu-west-1:1:table/T/stream/x\" }\n"
      "tables: [ { name: T, key: { partition: id } } ]\n",
      "t.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  const Config& c = *config;
  const StorageConfig storage;
  EXPECT_NE(c.storage.path, storage.path);
  EXPECT_NE(c.storage.map_size, storage.map_size);
  EXPECT_NE(c.storage.max_map_size, storage.max_map_size);
  EXPECT_NE(c.storage.write_map, storage.write_map);
  EXPECT_NE(c.storage.flush_interval_ms, storage.flush_interval_ms);
  EXPECT_NE(c.storage.verify_at_start, storage.verify_at_start);
  const ServerConfig server;
  EXPECT_NE(c.server.grpc, server.grpc);
  EXPECT_NE(c.server.fast_reads, server.fast_reads);
  EXPECT_NE(c.server.metrics, server.metrics);
  EXPECT_NE(c.server.ready_max_lag_seconds, server.ready_max_lag_seconds);
  const ApplyConfig apply;
  EXPECT_NE(c.apply.batch_size, apply.batch_size);
  EXPECT_NE(c.apply.max_delay_ms, apply.max_delay_ms);
  EXPECT_NE(c.apply.queue_capacity, apply.queue_capacity);
  EXPECT_NE(c.apply.log_counts_seconds, apply.log_counts_seconds);
  EXPECT_NE(c.apply.tombstone_compaction_step, apply.tombstone_compaction_step);
  const WatchConfig watch;
  EXPECT_NE(c.watch.retain_changes, watch.retain_changes);
  EXPECT_NE(c.watch.max_lag_changes, watch.max_lag_changes);
  EXPECT_NE(c.watch.max_stream_buffer_bytes, watch.max_stream_buffer_bytes);
  EXPECT_NE(c.watch.stalled_stream_timeout_ms, watch.stalled_stream_timeout_ms);
  EXPECT_NE(c.watch.max_streams, watch.max_streams);
  const FileSourceConfig file;
  EXPECT_NE(c.sources[0].file.follow, file.follow);
  EXPECT_NE(c.sources[0].file.dead_letter_path, file.dead_letter_path);
  EXPECT_NE(c.sources[0].file.tombstone_horizon_seconds, file.tombstone_horizon_seconds);
  const KafkaSourceConfig kafka;
  const KafkaSourceConfig& k = c.sources[1].kafka;
  EXPECT_TRUE(k.format != kafka.format && k.start != kafka.start);
  EXPECT_FALSE(k.dead_letter_topic.empty() || k.key_attributes.empty() || k.properties.empty());
  EXPECT_NE(k.dead_letter_path, "/srv/x/dead-letters/k.ndjson");
  EXPECT_NE(k.tombstone_horizon_seconds, kafka.tombstone_horizon_seconds);
  const DynamoDbSourceConfig dynamodb;
  const DynamoDbSourceConfig& d = c.sources[2].dynamodb;
  EXPECT_NE(d.region, dynamodb.region);
  EXPECT_NE(d.endpoint, dynamodb.endpoint);
  EXPECT_TRUE(d.start != dynamodb.start && d.snapshot != dynamodb.snapshot);
  EXPECT_NE(d.poll_interval_ms, dynamodb.poll_interval_ms);
  EXPECT_NE(d.shard_concurrency, dynamodb.shard_concurrency);
  EXPECT_NE(d.discovery_interval_ms, dynamodb.discovery_interval_ms);
  EXPECT_NE(d.scan_segments, dynamodb.scan_segments);
  EXPECT_NE(d.scan_read_units_per_second, dynamodb.scan_read_units_per_second);
  EXPECT_NE(d.dead_letter_path, "/srv/x/dead-letters/d.ndjson");
  EXPECT_NE(d.tombstone_horizon_seconds, dynamodb.tombstone_horizon_seconds);
  EXPECT_FALSE(c.sources[3].dynamodb.stream_arn.empty());
  ExpectRoundTrip(c);
  // And the field the round trip once lost, in the text itself.
  EXPECT_NE(ConfigToYaml(c).find("  write_map: false\n"), std::string::npos);
}

TEST(ConfigToYamlTest, PrintsEveryDefaultExactly) {
  absl::StatusOr<Config> config = ParseConfig(
      "sources: [ { name: s, table: T, file: { path: in.ndjson } } ]\n"
      "tables:\n"
      "  - name: T\n"
      "    key: { partition: PK }\n"
      "    views: [ { name: V, partition_key: { attribute: g }, sort_key: { template: \"{a}#{b}\" } } ]\n",
      "t.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(ConfigToYaml(*config),
            "storage:\n"
            "  path: \"./data\"\n"
            "  map_size: \"4GiB\"\n"
            "  max_map_size: \"64GiB\"\n"
            "  write_map: true\n"
            "  flush_interval_ms: 0\n"
            "  verify_at_start: \"auto\"\n"
            "server:\n"
            "  grpc: \"127.0.0.1:50051\"\n"
            "  fast_reads: \"\"\n"
            "  dynamodb: \"\"\n"
            "  metrics: \"127.0.0.1:9464\"\n"
            "  ready_max_lag_seconds: 60\n"
            "  max_wait_ms: 10000\n"
            "  fast_reads_max_request_bytes: \"4MiB\"\n"
            "  fast_reads_max_buffered_per_connection: \"16MiB\"\n"
            "  fast_reads_max_buffered_bytes: \"256MiB\"\n"
            "  fast_reads_max_waits_per_connection: 4\n"
            "  fast_reads_max_connections: 1024\n"
            "  fast_reads_idle_timeout_ms: 300000\n"
            "  fast_reads_request_timeout_ms: 10000\n"
            "  dynamodb_threads: 0\n"
            "  dynamodb_max_connections: 1024\n"
            "  dynamodb_max_request_bytes: \"1MiB\"\n"
            "  dynamodb_idle_timeout_ms: 300000\n"
            "  dynamodb_request_timeout_ms: 10000\n"
            "  dynamodb_max_waits: 256\n"
            "  dynamodb_max_pages: 64\n"
            "  grpc_max_connections: 1000\n"
            "  grpc_max_connection_idle_seconds: 300\n"
            "  grpc_max_connection_age_seconds: 3600\n"
            "  grpc_max_connection_age_grace_seconds: 300\n"
            "  grpc_min_ping_interval_seconds: 300\n"
            "  grpc_max_ping_strikes: 2\n"
            "  fd_reserve: 256\n"
            "  health: \"\"\n"
            "  tls_metrics: true\n"
            "apply:\n"
            "  batch_size: 1024\n"
            "  max_delay_ms: 20\n"
            "  queue_capacity: 8192\n"
            "  log_counts_seconds: 30\n"
            "  tombstone_compaction_step: 1000\n"
            "watch:\n"
            "  retain_changes: 1000000\n"
            "  max_lag_changes: 500000\n"
            "  max_stream_buffer_bytes: \"1MiB\"\n"
            "  stalled_stream_timeout_ms: 10000\n"
            "  max_streams: 256\n"
            "sources:\n"
            "  - name: \"s\"\n"
            "    table: \"T\"\n"
            "    file:\n"
            "      path: \"in.ndjson\"\n"
            "      follow: false\n"
            "      dead_letter_path: \"./data/dead-letters/s.ndjson\"\n"
            "      tombstone_horizon_seconds: 86400\n"
            "      max_line_bytes: \"16MiB\"\n"
            "tables:\n"
            "  - name: \"T\"\n"
            "    key:\n"
            "      partition: {attribute: \"PK\", type: \"S\"}\n"
            "    views:\n"
            "      - name: \"V\"\n"
            "        partition_key: {attribute: \"g\", type: \"S\"}\n"
            "        sort_key: {template: \"{a}#{b}\"}\n"
            "        projection: ALL\n");
}

// ---- server.ready_max_lag_seconds ----

TEST(ReadyMaxLagTest, DefaultsTo60AndTakesAWholeNumber) {
  const std::string tables = "tables: [ { name: T, key: { partition: PK } } ]\n";
  absl::StatusOr<Config> plain = ParseConfig(tables, "t.yaml");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->server.ready_max_lag_seconds, 60u);
  absl::StatusOr<Config> set = ParseConfig("server: { ready_max_lag_seconds: 5 }\n" + tables, "t.yaml");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->server.ready_max_lag_seconds, 5u);
  EXPECT_EQ(set->server.grpc, "127.0.0.1:50051");

  absl::StatusOr<Config> bad = ParseConfig("server: { ready_max_lag_seconds: -1 }\n" + tables, "t.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(Text(bad.status()),
            "t.yaml:1: server.ready_max_lag_seconds: expected a whole number from 0 to 86400, "
            "got \"-1\" (at most 86400: a view a day behind is not ready by any measure, and "
            "DynamoDB Streams keeps records only 24 hours)");
  absl::StatusOr<Config> unknown = ParseConfig("server: { ready_lag: 5 }\n" + tables, "t.yaml");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(Text(unknown.status()),
            "t.yaml:1: server: unknown field \"ready_lag\" (expected one of grpc, fast_reads, "
            "dynamodb, metrics, ready_max_lag_seconds, max_wait_ms, fast_reads_max_request_bytes, "
            "fast_reads_max_buffered_per_connection, fast_reads_max_buffered_bytes, "
            "fast_reads_max_waits_per_connection, fast_reads_max_connections, "
            "fast_reads_idle_timeout_ms, fast_reads_request_timeout_ms, dynamodb_threads, "
            "dynamodb_max_connections, dynamodb_max_request_bytes, dynamodb_idle_timeout_ms, "
            "dynamodb_request_timeout_ms, dynamodb_max_waits, dynamodb_max_pages, "
            "grpc_max_connections, grpc_max_connection_idle_seconds, "
            "grpc_max_connection_age_seconds, grpc_max_connection_age_grace_seconds, "
            "grpc_min_ping_interval_seconds, grpc_max_ping_strikes, fd_reserve, health, "
            "tls_cert_file, tls_key_file, tls_client_ca_file, tls_metrics, tokens_file)");
}

// ---- the main port's connection limits ----

TEST(GrpcConnectionLimitsTest, DefaultsAndBounds) {
  const std::string tables = "tables: [ { name: T, key: { partition: PK } } ]\n";
  absl::StatusOr<Config> plain = ParseConfig(tables, "t.yaml");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->server.grpc_max_connections, 1000u);
  EXPECT_EQ(plain->server.grpc_max_connection_idle_seconds, 300u);
  EXPECT_EQ(plain->server.grpc_max_connection_age_seconds, 3600u);
  EXPECT_EQ(plain->server.grpc_max_connection_age_grace_seconds, 300u);
  EXPECT_EQ(plain->server.grpc_min_ping_interval_seconds, 300u);
  EXPECT_EQ(plain->server.grpc_max_ping_strikes, 2u);
  EXPECT_EQ(plain->server.fd_reserve, 256u);

  absl::StatusOr<Config> set = ParseConfig(
      "server: { grpc_max_connections: 1000000, grpc_max_connection_idle_seconds: 0, "
      "grpc_max_connection_age_seconds: 2147483, grpc_max_connection_age_grace_seconds: 0, "
      "grpc_min_ping_interval_seconds: 10, grpc_max_ping_strikes: 0, fd_reserve: 0 }\n" +
          tables,
      "t.yaml");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->server.grpc_max_connections, 1000000u);
  EXPECT_EQ(set->server.grpc_max_connection_idle_seconds, 0u);
  EXPECT_EQ(set->server.grpc_max_connection_age_seconds, 2147483u);
  EXPECT_EQ(set->server.grpc_max_connection_age_grace_seconds, 0u);
  EXPECT_EQ(set->server.grpc_min_ping_interval_seconds, 10u);
  EXPECT_EQ(set->server.grpc_max_ping_strikes, 0u);
  EXPECT_EQ(set->server.fd_reserve, 0u);

  const std::pair<std::string, std::string> bad[] = {
      {"grpc_max_connections: 0",
       "t.yaml:1: server.grpc_max_connections: expected a whole number from 1 to 1000000, got "
       "\"0\""},
      {"grpc_max_connections: 1000001",
       "t.yaml:1: server.grpc_max_connections: expected a whole number from 1 to 1000000, got "
       "\"1000001\""},
      // gRPC takes milliseconds in an int.
      {"grpc_max_connection_idle_seconds: 2147484",
       "t.yaml:1: server.grpc_max_connection_idle_seconds: expected a whole number from 0 to "
       "2147483, got \"2147484\""},
      {"grpc_max_connection_age_grace_seconds: -1",
       "t.yaml:1: server.grpc_max_connection_age_grace_seconds: expected a whole number from 0 "
       "to 2147483, got \"-1\""},
      {"grpc_max_ping_strikes: 1001",
       "t.yaml:1: server.grpc_max_ping_strikes: expected a whole number from 0 to 1000, got "
       "\"1001\""},
      {"fd_reserve: 1000001",
       "t.yaml:1: server.fd_reserve: expected a whole number from 0 to 1000000, got "
       "\"1000001\""},
  };
  for (const auto& [field, message] : bad) {
    absl::StatusOr<Config> c = ParseConfig("server: { " + field + " }\n" + tables, "t.yaml");
    ASSERT_FALSE(c.ok()) << field;
    EXPECT_EQ(Text(c.status()), message);
  }
}

// ---- server.fast_reads ----

TEST(FastReadsTest, OffByDefaultAndTakesHostPortOrNothing) {
  const std::string tables = "tables: [ { name: T, key: { partition: PK } } ]\n";
  absl::StatusOr<Config> plain = ParseConfig(tables, "t.yaml");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->server.fast_reads, "");
  absl::StatusOr<Config> set =
      ParseConfig("server: { fast_reads: \"[::1]:50052\" }\n" + tables, "t.yaml");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->server.fast_reads, "[::1]:50052");
  absl::StatusOr<Config> off = ParseConfig("server: { fast_reads: \"\" }\n" + tables, "t.yaml");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->server.fast_reads, "");
  absl::StatusOr<Config> bad = ParseConfig("server: { fast_reads: 50052 }\n" + tables, "t.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(Text(bad.status()),
            "t.yaml:1: server.fast_reads: expected host:port like 127.0.0.1:50052 (or \"\" to "
            "disable), got \"50052\"");
}

// ---- overrides (flags and environment) ----

Config Sample() {
  absl::StatusOr<Config> config = ParseConfig(
      "storage: { path: /srv/a }\n"
      "sources:\n"
      "  - { name: s, table: T, file: { path: in.ndjson } }\n"
      "  - { name: t, table: T, file: { path: in2.ndjson, dead_letter_path: /dl/t.ndjson } }\n"
      "tables: [ { name: T, key: { partition: PK } } ]\n",
      "t.yaml");
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

TEST(ApplyOverridesTest, UnsetOverridesChangeNothing) {
  Config config = Sample();
  ASSERT_TRUE(ApplyOverrides({}, &config).ok());
  EXPECT_EQ(ConfigToYaml(config), ConfigToYaml(Sample()));
}

TEST(ApplyOverridesTest, ReplaceAddressesAndMoveDefaultedDeadLettersWithTheStore) {
  Config config = Sample();
  ConfigOverrides overrides;
  overrides.grpc = "0.0.0.0:50051";
  overrides.metrics = "";
  overrides.storage_path = "/var/lib/cdcview";
  ASSERT_TRUE(ApplyOverrides(overrides, &config).ok());
  EXPECT_EQ(config.server.grpc, "0.0.0.0:50051");
  EXPECT_EQ(config.server.metrics, "");
  EXPECT_EQ(config.storage.path, "/var/lib/cdcview");
  EXPECT_EQ(config.sources[0].file.dead_letter_path, "/var/lib/cdcview/dead-letters/s.ndjson");
  EXPECT_EQ(config.sources[1].file.dead_letter_path, "/dl/t.ndjson");  // given explicitly
}

TEST(ApplyOverridesTest, InvalidValuesNameFieldFlagAndVariable) {
  Config config = Sample();
  ConfigOverrides grpc;
  grpc.grpc = "50051";
  EXPECT_EQ(Text(ApplyOverrides(grpc, &config)),
            "server.grpc (--grpc or CDCVIEW_GRPC): expected host:port like 127.0.0.1:50051, "
            "got \"50051\"");
  ConfigOverrides metrics;
  metrics.metrics = "localhost";
  EXPECT_EQ(Text(ApplyOverrides(metrics, &config)),
            "server.metrics (--metrics or CDCVIEW_METRICS): expected host:port like "
            "127.0.0.1:9464 (or \"\" to disable), got \"localhost\"");
  ConfigOverrides storage;
  storage.storage_path = "";
  EXPECT_EQ(Text(ApplyOverrides(storage, &config)),
            "storage.path (--storage-path or CDCVIEW_STORAGE_PATH): expected a directory, "
            "got \"\"");
  // A rejected override leaves the config as it was.
  EXPECT_EQ(ConfigToYaml(config), ConfigToYaml(Sample()));
}

// ---- settings (--set and CDCVIEW_<PATH>) ----

constexpr char kSettingsYaml[] =
    "storage: { path: /srv/a }\n"
    "sources:\n"
    "  - { name: s, table: T, file: { path: in.ndjson } }\n"
    "  - { name: k, table: T, kafka: { brokers: \"a:1\", topics: [t], group: g } }\n"
    "tables: [ { name: T, key: { partition: PK } } ]\n";

TEST(ConfigSettingsTest, SettingsReplaceOrAddFieldsAndALaterOneWins) {
  absl::StatusOr<Config> config = ParseConfig(
      kSettingsYaml, "t.yaml",
      {{"apply.batch_size", "64", "CDCVIEW_APPLY_BATCH_SIZE"},
       {"apply.batch_size", "128", "--set apply.batch_size=128"},
       {"storage.max_map_size", "8GiB", "CDCVIEW_STORAGE_MAX_MAP_SIZE"},
       {"storage.write_map", "false", "--set storage.write_map=false"},
       {"server.ready_max_lag_seconds", "5", "--set server.ready_max_lag_seconds=5"},
       {"sources.k.kafka.brokers", "b:2,c:3", "--set sources.k.kafka.brokers=b:2,c:3"},
       {"sources.k.kafka.topics", "[x, y]", "--set sources.k.kafka.topics=[x, y]"},
       {"storage.path", "/srv/b", "--set storage.path=/srv/b"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->apply.batch_size, 128u);
  EXPECT_EQ(config->storage.max_map_size, 8ull << 30);
  EXPECT_FALSE(config->storage.write_map);
  EXPECT_EQ(config->server.ready_max_lag_seconds, 5u);
  EXPECT_EQ(config->sources[1].kafka.brokers, "b:2,c:3");
  EXPECT_EQ(config->sources[1].kafka.topics, (std::vector<std::string>{"x", "y"}));
  // Validated as the file's own: the default dead-letter path follows the set storage.path.
  EXPECT_EQ(config->sources[0].file.dead_letter_path, "/srv/b/dead-letters/s.ndjson");
}

TEST(ConfigSettingsTest, ErrorsNameTheSettingInsteadOfALine) {
  auto error = [](std::vector<ConfigSetting> settings) {
    return Text(ParseConfig(kSettingsYaml, "t.yaml", settings).status());
  };
  EXPECT_EQ(error({{"apply.batch_size", "0", "CDCVIEW_APPLY_BATCH_SIZE"}}),
            "CDCVIEW_APPLY_BATCH_SIZE: apply.batch_size: expected a whole number from 1 to "
            "1048576, got \"0\"");
  EXPECT_EQ(error({{"apply.bogus", "1", "--set apply.bogus=1"}}),
            "--set apply.bogus=1: apply: unknown field \"bogus\" (expected one of batch_size, "
            "max_delay_ms, queue_capacity, log_counts_seconds, tombstone_compaction_step)");
  EXPECT_EQ(error({{"bogus.x", "1", "--set bogus.x=1"}}),
            "--set bogus.x=1: unknown field \"bogus\" (expected one of storage, server, apply, "
            "watch, cluster, sources, tables)");
  EXPECT_EQ(error({{"sources.nope.file.follow", "true", "--set sources.nope.file.follow=true"}}),
            "--set sources.nope.file.follow=true: no source named \"nope\" (sources: s, k)");
  EXPECT_EQ(error({{"sources.s", "x", "--set sources.s=x"}}),
            "--set sources.s=x: set a field of source \"s\", like sources.s.kafka.brokers");
  EXPECT_EQ(error({{"storage..path", "x", "--set storage..path=x"}}),
            "--set storage..path=x: expected a field path like apply.batch_size, got "
            "\"storage..path\"");
  // Inside a YAML value (which has marks of its own text): still the setting.
  EXPECT_EQ(error({{"storage.map_size", "[1]", "CDCVIEW_STORAGE_MAP_SIZE"}}),
            "CDCVIEW_STORAGE_MAP_SIZE: storage.map_size: expected a size like 4GiB, 512MiB or "
            "1048576, got a list");
  EXPECT_EQ(error({{"sources.k.kafka.topics", "[a, [b]]", "--set sources.k.kafka.topics=[a, [b]]"}}),
            "--set sources.k.kafka.topics=[a, [b]]: sources[1].kafka.topics[1]: expected a "
            "non-empty string, got a list");
  // An error in the file itself still names its line.
  EXPECT_EQ(Text(ParseConfig("apply: { batch_size: 0 }\ntables: []\n", "t.yaml",
                             {{"apply.max_delay_ms", "5", "--set apply.max_delay_ms=5"}})
                     .status()),
            "t.yaml:1: apply.batch_size: expected a whole number from 1 to 1048576, got \"0\"");
}

TEST(ConfigSettingsTest, SetFlagAndEnvironment) {
  absl::StatusOr<ConfigSetting> set = ParseSetFlag("sources.k.kafka.brokers=a:1=b");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->path, "sources.k.kafka.brokers");
  EXPECT_EQ(set->value, "a:1=b");
  EXPECT_EQ(set->origin, "--set sources.k.kafka.brokers=a:1=b");
  EXPECT_EQ(Text(ParseSetFlag("apply").status()),
            "--set \"apply\": expected <field path>=<value>, like apply.batch_size=512");
  // A secret property's value stays out of every error that names the setting.
  set = ParseSetFlag("sources.ordrs.kafka.properties.sasl.password=hunter2");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->value, "hunter2");
  EXPECT_EQ(set->origin, "--set sources.ordrs.kafka.properties.sasl.password=<redacted>");
  EXPECT_EQ(Text(ParseConfig(kSettingsYaml, "t.yaml", {*set}).status()),
            "--set sources.ordrs.kafka.properties.sasl.password=<redacted>: no source named "
            "\"ordrs\" (sources: s, k)");
  EXPECT_EQ(ParseSetFlag("sources.k.kafka.properties.ssl.key.pem=x")->origin,
            "--set sources.k.kafka.properties.ssl.key.pem=<redacted>");
  EXPECT_EQ(ParseSetFlag("sources.k.kafka.properties.sasl.username=cdc")->origin,
            "--set sources.k.kafka.properties.sasl.username=cdc");
  EXPECT_EQ(EnvironmentName("server.ready_max_lag_seconds"),
            "CDCVIEW_SERVER_READY_MAX_LAG_SECONDS");
  std::map<std::string, std::string> env = {{"CDCVIEW_APPLY_BATCH_SIZE", "9"},
                                            {"CDCVIEW_STORAGE_MAP_SIZE", ""},
                                            {"CDCVIEW_SERVICE_HOST", "10.0.0.1"}};
  std::vector<ConfigSetting> settings = SettingsFromEnvironment([&](const char* name) {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
  // Empty counts as unset; Kubernetes' service variables are not settings.
  ASSERT_EQ(settings.size(), 1u);
  EXPECT_EQ(settings[0].path, "apply.batch_size");
  EXPECT_EQ(settings[0].value, "9");
  EXPECT_EQ(settings[0].origin, "CDCVIEW_APPLY_BATCH_SIZE");
}

// The variables cover every field --print-config prints for storage, server, apply, watch and
// cluster, but the three with their own flag and variable.
TEST(ConfigSettingsTest, EveryScalarSectionFieldHasAVariable) {
  absl::StatusOr<Config> config =
      ParseConfig("tables: [ { name: T, key: { partition: PK } } ]\n", "t.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  config->storage.backup_dir = "/backups";  // printed only when set
  config->server.tls_cert_file = "/tls/tls.crt";
  config->server.tls_key_file = "/tls/tls.key";
  config->server.tls_client_ca_file = "/tls/ca.crt";
  config->server.tokens_file = "/auth/tokens.yaml";
  config->cluster = ClusterConfig{2, 0, {"a:1", "b:1"}};  // printed only for a cluster
  std::vector<std::string> printed;
  std::string section;
  std::istringstream yaml(ConfigToYaml(*config));
  for (std::string line; std::getline(yaml, line);) {
    if (!line.empty() && line[0] != ' ' && line.back() == ':') {
      section = line.substr(0, line.size() - 1);
    } else if (line.starts_with("  ") && line[2] != ' ' && line[2] != '-' &&
               (section == "storage" || section == "server" || section == "apply" ||
                section == "watch" || section == "cluster")) {
      std::string path = section + "." + line.substr(2, line.find(':') - 2);
      if (path != "storage.path" && path != "server.grpc" && path != "server.metrics") {
        printed.push_back(path);
      }
    }
  }
  EXPECT_EQ(printed, EnvironmentSettablePaths());
}

}  // namespace
}  // namespace cdcview
