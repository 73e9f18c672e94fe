// ConfigToYaml round trips, server.ready_max_lag_seconds, and flag/environment overrides.
#include "daemon/config/config_yaml.h"

#include <cstdlib>
#include <filesystem>
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
            "server:\n"
            "  grpc: \"127.0.0.1:50051\"\n"
            "  metrics: \"127.0.0.1:9464\"\n"
            "  ready_max_lag_seconds: 60\n"
            "apply:\n"
            "  batch_size: 1024\n"
            "  max_delay_ms: 20\n"
            "  queue_capacity: 8192\n"
            "watch:\n"
            "  retain_changes: 1000000\n"
            "  max_lag_changes: 500000\n"
            "sources:\n"
            "  - name: \"s\"\n"
            "    table: \"T\"\n"
            "    file:\n"
            "      path: \"in.ndjson\"\n"
            "      follow: false\n"
            "      dead_letter_path: \"./data/dead-letters/s.ndjson\"\n"
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
            "t.yaml:1: server.ready_max_lag_seconds: expected a whole number from 0 to "
            "4294967295, got \"-1\"");
  absl::StatusOr<Config> unknown = ParseConfig("server: { ready_lag: 5 }\n" + tables, "t.yaml");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(Text(unknown.status()),
            "t.yaml:1: server: unknown field \"ready_lag\" (expected one of grpc, metrics, "
            "ready_max_lag_seconds)");
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

}  // namespace
}  // namespace cdcview
