#include "daemon/config/config.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace cdcview {
namespace {

std::string Text(const absl::Status& status) {
  return std::string(status.message().data(), status.message().size());
}

// ctest sets CDCVIEW_SOURCE_DIR; run by hand from the repository or a build directory
// below it, the example is found relative to the working directory.
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

// Canonical one-line descriptions, so that a whole spec is checked with one exact EXPECT_EQ.
std::string Describe(const KeySpec& key) {
  std::string out;
  if (key.kind == KeySpec::Kind::kAttribute) {
    return key.attribute + ":" + std::string(AttrTypeName(key.type));
  }
  out = "template \"" + key.template_text + "\" =";
  for (const KeySpec::Part& part : key.parts) {
    out += part.is_placeholder ? " {" + part.text + "}" : " '" + part.text + "'";
  }
  return out;
}

std::string Describe(const Condition& condition) {
  switch (condition.op) {
    case Condition::Op::kEquals:
      return condition.attribute + " equals \"" + condition.operand + "\"";
    case Condition::Op::kBeginsWith:
      return condition.attribute + " begins_with \"" + condition.operand + "\"";
    case Condition::Op::kExists:
      return condition.attribute + " exists";
    case Condition::Op::kNotExists:
      return condition.attribute + " not exists";
  }
  return "?";
}

std::string Describe(const ViewRule& rule) {
  std::string out;
  if (!rule.when.empty()) {
    out += "when [";
    for (size_t i = 0; i < rule.when.size(); ++i) {
      out += (i == 0 ? "" : ", ") + Describe(rule.when[i]);
    }
    out += "] ";
  }
  out += "pk " + Describe(rule.partition_key);
  if (rule.sort_key.has_value()) out += " sk " + Describe(*rule.sort_key);
  return out;
}

std::string Describe(const Projection& projection) {
  switch (projection.kind) {
    case ProjectionKind::kAll:
      return "ALL";
    case ProjectionKind::kKeysOnly:
      return "KEYS_ONLY";
    case ProjectionKind::kInclude: {
      std::string out = "include";
      for (const std::string& name : projection.include) out += " " + name;
      return out;
    }
  }
  return "?";
}

std::vector<std::string> Describe(const ViewSpec& view) {
  std::vector<std::string> lines = {view.name + " on " + view.table +
                                    (view.inverted ? " inverted" : "") + " projection " +
                                    Describe(view.projection) +
                                    (view.shards.enabled()
                                         ? " shards " + std::to_string(view.shards.count) +
                                               " \"" + view.shards.suffix + "\""
                                         : "")};
  for (const ViewRule& rule : view.rules) lines.push_back("  " + Describe(rule));
  return lines;
}

absl::StatusOr<Config> Parse(const std::string& yaml) { return ParseConfig(yaml, "t.yaml"); }

// The full message of a config that must be rejected as INVALID_ARGUMENT.
std::string ErrorOf(const std::string& yaml) {
  absl::StatusOr<Config> config = Parse(yaml);
  if (config.ok()) return "(accepted)";
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << config.status();
  return Text(config.status());
}

class TempDir {
 public:
  TempDir() {
    const char* test = testing::UnitTest::GetInstance()->current_test_info()->name();
    path_ = std::filesystem::path(testing::TempDir()) / (std::string("config_test_") + test);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string Write(const std::string& name, const std::string& text) const {
    std::string file = (path_ / name).string();
    std::ofstream(file) << text;
    return file;
  }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// ---- the example ----

TEST(ConfigTest, LoadsTheExampleExactly) {
  const std::string path = ExamplePath();
  absl::StatusOr<Config> config = LoadConfig(path);
  ASSERT_TRUE(config.ok()) << config.status();

  EXPECT_EQ(config->file, path);
  EXPECT_EQ(config->storage.path, "./data");
  EXPECT_EQ(config->storage.map_size, 4ull << 30);
  EXPECT_EQ(config->storage.max_map_size, 64ull << 30);
  EXPECT_EQ(config->server.grpc, "127.0.0.1:50051");
  EXPECT_EQ(config->server.metrics, "127.0.0.1:9464");
  EXPECT_EQ(config->apply.batch_size, 1024u);
  EXPECT_EQ(config->apply.max_delay_ms, 20u);
  EXPECT_EQ(config->apply.queue_capacity, 8192u);

  ASSERT_EQ(config->sources.size(), 1u);
  const SourceConfig& source = config->sources[0];
  EXPECT_EQ(source.name, "sample");
  EXPECT_EQ(source.table, "App");
  EXPECT_EQ(source.kind, SourceConfig::Kind::kFile);
  EXPECT_EQ(source.file.path, "examples/app-stream.ndjson");
  EXPECT_FALSE(source.file.follow);
  EXPECT_EQ(source.file.dead_letter_path, "./data/dead-letters/sample.ndjson");

  ASSERT_EQ(config->tables.size(), 1u);
  const TableSpec& table = config->tables[0];
  EXPECT_EQ(table.name, "App");
  EXPECT_EQ(table.key.partition, "PK");
  EXPECT_EQ(table.key.partition_type, AttrType::kS);
  EXPECT_EQ(table.key.sort, "SK");
  EXPECT_EQ(table.key.sort_type, AttrType::kS);
  EXPECT_EQ(config->FindTable("App"), &table);
  EXPECT_EQ(config->FindTable("Nope"), nullptr);

  std::vector<std::vector<std::string>> views;
  for (const ViewSpec& view : table.views) views.push_back(Describe(view));
  const std::vector<std::vector<std::string>> expected = {
      {"GSI1 on App projection ALL", "  pk GSI1PK:S sk GSI1SK:S"},
      {"OpenOrders on App projection include status total",
       "  pk template \"OPEN\" = 'OPEN' sk open_since:S"},
      {"ByMember on App inverted projection KEYS_ONLY", "  pk SK:S sk PK:S"},
      {"ByEntity on App projection ALL",
       "  when [type equals \"order\"] pk template \"STATUS#{status}\" = 'STATUS#' {status} "
       "sk template \"{created_at}\" = {created_at}",
       "  when [type equals \"user\"] pk template \"EMAIL#{email}\" = 'EMAIL#' {email} sk PK:S"},
      {"ByLocation on App projection ALL",
       "  pk country:S sk template \"{state}#{city}\" = {state} '#' {city}"},
      {"ByScore on App projection ALL", "  pk board:S sk score:N"},
      {"VotesByDay on App projection KEYS_ONLY shards 4 \"#{shard}\"",
       "  when [type equals \"vote\"] pk GSI1PK:S sk GSI1SK:S"},
  };
  EXPECT_EQ(views, expected);
}

// ---- defaults and accepted forms ----

TEST(ConfigTest, DefaultsWhenOnlyTablesAreGiven) {
  absl::StatusOr<Config> config = Parse(
      "tables:\n"
      "  - name: Users\n"
      "    key: { partition: id }\n"
      "    views:\n"
      "      - name: ByEmail\n"
      "        partition_key: { attribute: email }\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->file, "t.yaml");
  EXPECT_EQ(config->storage.path, "./data");
  EXPECT_EQ(config->storage.map_size, 4ull << 30);
  EXPECT_EQ(config->storage.max_map_size, 64ull << 30);
  EXPECT_EQ(config->server.grpc, "127.0.0.1:50051");
  EXPECT_EQ(config->server.metrics, "127.0.0.1:9464");
  EXPECT_EQ(config->apply.batch_size, 1024u);
  EXPECT_EQ(config->apply.max_delay_ms, 20u);
  EXPECT_EQ(config->apply.queue_capacity, 8192u);
  EXPECT_TRUE(config->sources.empty());
  ASSERT_EQ(config->tables.size(), 1u);
  EXPECT_EQ(config->tables[0].key.partition, "id");
  EXPECT_EQ(config->tables[0].key.partition_type, AttrType::kS);
  EXPECT_FALSE(config->tables[0].key.sort.has_value());
  ASSERT_EQ(config->tables[0].views.size(), 1u);
  const ViewSpec& view = config->tables[0].views[0];
  EXPECT_EQ(Describe(view), (std::vector<std::string>{"ByEmail on Users projection ALL",
                                                      "  pk email:S"}));
  EXPECT_FALSE(view.has_sort_key());
}

TEST(ConfigTest, ExplicitSettingsOverrideDefaults) {
  absl::StatusOr<Config> config = Parse(
      "storage: { path: /var/lib/cdcview/, map_size: 1MiB, max_map_size: 1GB,\n"
      "           write_map: false, flush_interval_ms: 25 }\n"
      "server: { grpc: \"[::1]:0\", metrics: \"\" }\n"
      "apply: { batch_size: 1, max_delay_ms: 0, queue_capacity: 1048576 }\n"
      "sources:\n"
      "  - { name: a, table: T, file: { path: in/a.ndjson, follow: true } }\n"
      "  - { name: b.2, table: T, file: { path: b, dead_letter_path: dl/b.ndjson } }\n"
      "tables:\n"
      "  - name: T\n"
      "    key: { partition: { attribute: id, type: N }, sort: { attribute: at, type: B } }\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->storage.path, "/var/lib/cdcview/");
  EXPECT_EQ(config->storage.map_size, 1ull << 20);
  EXPECT_EQ(config->storage.max_map_size, 1000000000ull);
  EXPECT_FALSE(config->storage.write_map);
  EXPECT_EQ(config->storage.flush_interval_ms, 25u);
  EXPECT_EQ(config->server.grpc, "[::1]:0");
  EXPECT_EQ(config->server.metrics, "");
  EXPECT_EQ(config->apply.batch_size, 1u);
  EXPECT_EQ(config->apply.max_delay_ms, 0u);
  EXPECT_EQ(config->apply.queue_capacity, 1048576u);
  ASSERT_EQ(config->sources.size(), 2u);
  EXPECT_EQ(config->sources[0].file.path, "in/a.ndjson");
  EXPECT_TRUE(config->sources[0].file.follow);
  // The default dead-letter file lives under storage.path, without a doubled slash.
  EXPECT_EQ(config->sources[0].file.dead_letter_path, "/var/lib/cdcview/dead-letters/a.ndjson");
  EXPECT_EQ(config->sources[1].file.dead_letter_path, "dl/b.ndjson");
  EXPECT_FALSE(config->sources[1].file.follow);
  const TableKeySpec& key = config->tables[0].key;
  EXPECT_EQ(key.partition, "id");
  EXPECT_EQ(key.partition_type, AttrType::kN);
  EXPECT_EQ(key.sort, "at");
  EXPECT_EQ(key.sort_type, AttrType::kB);
  EXPECT_TRUE(config->tables[0].views.empty());
}

TEST(ConfigTest, InvertedViewSwapsTheTableKeysWithTheirTypes) {
  absl::StatusOr<Config> config = Parse(
      "tables:\n"
      "  - name: T\n"
      "    key: { partition: { attribute: id, type: N }, sort: SK }\n"
      "    views:\n"
      "      - { name: Inv, inverted: true, filter: { attribute: SK, begins_with: \"M#\" } }\n"
      "      - { name: NotInv, inverted: false, partition_key: { attribute: x } }\n");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->tables[0].views.size(), 2u);
  EXPECT_EQ(Describe(config->tables[0].views[0]),
            (std::vector<std::string>{"Inv on T inverted projection ALL",
                                      "  when [SK begins_with \"M#\"] pk SK:S sk id:N"}));
  EXPECT_EQ(Describe(config->tables[0].views[1]),
            (std::vector<std::string>{"NotInv on T projection ALL", "  pk x:S"}));
}

TEST(ConfigTest, ConditionsKeepScalarsAsWrittenAndMapExistsFalseToNotExists) {
  absl::StatusOr<Config> config = Parse(
      "tables:\n"
      "  - name: T\n"
      "    key: { partition: PK }\n"
      "    views:\n"
      "      - name: V\n"
      "        partition_key: { attribute: a, type: N }\n"
      "        filter:\n"
      "          - { attribute: n, equals: 42 }\n"
      "          - { attribute: b, equals: true }\n"
      "          - { attribute: s, equals: \"x y\" }\n"
      "          - { attribute: d, exists: true }\n"
      "          - { attribute: g, exists: false }\n"
      "      - name: W\n"
      "        rules:\n"
      "          - when: { attribute: t, equals: 1.50 }\n"
      "            partition_key: { template: \"{a}\" }\n"
      "          - partition_key: { attribute: b }\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(Describe(config->tables[0].views[0]),
            (std::vector<std::string>{
                "V on T projection ALL",
                "  when [n equals \"42\", b equals \"true\", s equals \"x y\", d exists, "
                "g not exists] pk a:N"}));
  // A rule without `when` matches everything: the catch-all last rule.
  EXPECT_EQ(Describe(config->tables[0].views[1]),
            (std::vector<std::string>{"W on T projection ALL",
                                      "  when [t equals \"1.50\"] pk template \"{a}\" = {a}",
                                      "  pk b:S"}));
}

// ---- every error names file, line, field and what was expected ----

TEST(ConfigErrorTest, KeyTypeMustBeSNOrB) {
  EXPECT_EQ(ErrorOf("tables:\n"
                    "  - name: App\n"
                    "    key: { partition: PK }\n"
                    "    views:\n"
                    "      - name: GSI1\n"
                    "        partition_key: { attribute: GSI1PK, type: S }\n"
                    "        sort_key:\n"
                    "          attribute: GSI1SK\n"
                    "          type: X\n"),
            "t.yaml:9: tables[0].views[0].sort_key.type: expected one of S, N, B, got \"X\"");
  EXPECT_EQ(ErrorOf("tables:\n"
                    "  - name: App\n"
                    "    key: { partition: { attribute: PK, type: BOOL } }\n"),
            "t.yaml:3: tables[0].key.partition.type: expected one of S, N, B, got \"BOOL\"");
}

TEST(ConfigErrorTest, UnknownFieldsAreErrorsEverywhere) {
  EXPECT_EQ(ErrorOf("tables:\n"
                    "  - name: App\n"
                    "    key: { partition: PK }\n"
                    "    views:\n"
                    "      - name: GSI1\n"
                    "        partiton_key: { attribute: GSI1PK }\n"),
            "t.yaml:6: tables[0].views[0]: unknown field \"partiton_key\" (expected one of name, "
            "partition_key, sort_key, rules, inverted, projection, filter, shards)");
  EXPECT_EQ(ErrorOf("storage: { path: d }\n"
                    "table: []\n"),
            "t.yaml:2: unknown field \"table\" (expected one of storage, server, apply, watch, "
            "cluster, sources, tables)");
  EXPECT_EQ(ErrorOf("apply: { batch_sise: 3 }\n"
                    "tables: [ { name: T, key: { partition: PK } } ]\n"),
            "t.yaml:1: apply: unknown field \"batch_sise\" (expected one of batch_size, "
            "max_delay_ms, queue_capacity, log_counts_seconds, tombstone_compaction_step)");
}

TEST(ConfigErrorTest, RepeatedYamlKeyIsAnError) {
  EXPECT_EQ(ErrorOf("tables:\n"
                    "  - name: App\n"
                    "    key: { partition: PK }\n"
                    "    name: Other\n"),
            "t.yaml:4: tables[0].name: is given twice (also at line 2)");
}

TEST(ConfigErrorTest, RequiredFields) {
  EXPECT_EQ(ErrorOf("tables:\n"
                    "  - name: App\n"
                    "    key: { partition: PK }\n"
                    "    views:\n"
                    "      - partition_key: { attribute: a }\n"
                    "        projection: ALL\n"),
            "t.yaml:5: tables[0].views[0].name: is required");
  EXPECT_EQ(ErrorOf("storage: { path: d }\n"), "t.yaml:1: tables: is required");
  EXPECT_EQ(ErrorOf("tables:\n"
                    "  - name: App\n"),
            "t.yaml:2: tables[0].key: is required");
  EXPECT_EQ(ErrorOf("tables:\n"
                    "  - name: App\n"
                    "    key: { partition: PK }\n"
                    "    views:\n"
                    "      - name: V\n"
                    "        sort_key: { attribute: a }\n"),
            "t.yaml:5: tables[0].views[0].partition_key: is required (or give rules, or "
            "inverted: true)");
}

TEST(ConfigErrorTest, AtLeastOneTable) {
  EXPECT_EQ(ErrorOf("tables: []\n"),
            "t.yaml:1: tables: expected a list of at least one table, got an empty list");
  EXPECT_EQ(ErrorOf("tables:\n"),
            "t.yaml:1: tables: expected a list of at least one table, got nothing");
}

TEST(ConfigErrorTest, ViewNamesAreUniqueAcrossTables) {
  EXPECT_EQ(ErrorOf("tables:\n"
                    "  - name: App\n"
                    "    key: { partition: PK }\n"
                    "    views:\n"
                    "      - name: GSI1\n"
                    "        partition_key: { attribute: a }\n"
                    "  - name: Other\n"
                    "    key: { partition: PK }\n"
                    "    views:\n"
                    "      - name: GSI1\n"
                    "        partition_key: { attribute: b }\n"),
            "t.yaml:10: tables[1].views[0].name: view name \"GSI1\" is used twice (also at "
            "line 5)");
}

TEST(ConfigErrorTest, NamesAreLmdbSafe) {
  EXPECT_EQ(ErrorOf("tables:\n"
                    "  - name: App\n"
                    "    key: { partition: PK }\n"
                    "    views: [ { name: \"by email\", partition_key: { attribute: e } } ]\n"),
            "t.yaml:4: tables[0].views[0].name: expected a name of 1 to 200 characters from A-Z, "
            "a-z, 0-9, _, . and -, got \"by email\"");
  const std::string long_name(201, 'v');
  EXPECT_EQ(ErrorOf("tables:\n"
                    "  - name: App\n"
                    "    key: { partition: PK }\n"
                    "    views: [ { name: " +
                    long_name + ", partition_key: { attribute: e } } ]\n"),
            "t.yaml:4: tables[0].views[0].name: expected a name of 1 to 200 characters from A-Z, "
            "a-z, 0-9, _, . and -, got \"" + long_name + "\"");
  EXPECT_EQ(ErrorOf("tables:\n"
                    "  - name: \"\"\n"
                    "    key: { partition: PK }\n"),
            "t.yaml:2: tables[0].name: expected a name of 1 to 200 characters from A-Z, a-z, "
            "0-9, _, . and -, got \"\"");
}

TEST(ConfigErrorTest, TableNamesAreUnique) {
  EXPECT_EQ(ErrorOf("tables:\n"
                    "  - { name: App, key: { partition: PK } }\n"
                    "  - { name: App, key: { partition: PK } }\n"),
            "t.yaml:3: tables[1].name: table name \"App\" is used twice (also at line 2)");
}

TEST(ConfigErrorTest, SourceTableMustExist) {
  EXPECT_EQ(ErrorOf("sources:\n"
                    "  - name: sample\n"
                    "    table: Nope\n"
                    "    file: { path: x.ndjson }\n"
                    "tables:\n"
                    "  - { name: App, key: { partition: PK } }\n"
                    "  - { name: Log, key: { partition: PK } }\n"),
            "t.yaml:3: sources[0].table: source \"sample\" names table \"Nope\", which is not "
            "defined (tables: App, Log)");
}

TEST(ConfigErrorTest, SourceNamesAreUnique) {
  EXPECT_EQ(ErrorOf("sources:\n"
                    "  - { name: s, table: App, file: { path: a } }\n"
                    "  - { name: s, table: App, file: { path: b } }\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:3: sources[1].name: source name \"s\" is used twice (also at line 2)");
}

TEST(ConfigErrorTest, SourceTypes) {
  EXPECT_EQ(ErrorOf("sources:\n"
                    "  - name: x\n"
                    "    table: App\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:2: sources[0]: source \"x\": expected a source type: file: { path: ... }, "
            "kafka: { ... } or dynamodb: { ... }");
  EXPECT_EQ(ErrorOf("sources:\n"
                    "  - name: x\n"
                    "    table: App\n"
                    "    file: { path: a }\n"
                    "    kafka: { brokers: b, topics: [t], group: g }\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:5: sources[0]: source \"x\": has two source types (file and kafka); give "
            "exactly one");
  EXPECT_EQ(ErrorOf("sources:\n"
                    "  - { name: x, table: App, file: { path: a, folow: true } }\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:2: sources[0].file: unknown field \"folow\" (expected one of path, follow, "
            "dead_letter_path, tombstone_horizon_seconds, max_line_bytes)");
  EXPECT_EQ(ErrorOf("sources:\n"
                    "  - { name: x, table: App, file: { path: a, max_line_bytes: 257MiB } }\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:2: sources[0].file.max_line_bytes: 257MiB is larger than this system allows "
            "(at most 256MiB: each line is held in memory whole while it is read)");
  EXPECT_EQ(ErrorOf("sources:\n"
                    "  - { name: x, table: App, file: { path: a, follow: maybe } }\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:2: sources[0].file.follow: expected true or false, got \"maybe\"");
}

TEST(ConfigTest, KafkaSource) {
  absl::StatusOr<Config> config = ParseConfig(
      "storage: { path: /var/lib/cdcview }\n"
      "sources:\n"
      "  - name: orders\n"
      "    table: App\n"
      "    kafka:\n"
      "      brokers: 127.0.0.1:9092\n"
      "      topics: [orders, users]\n"
      "      group: cdcview\n"
      "      format: debezium-json\n"
      "      dead_letter_topic: orders.dlq\n"
      "      start: latest\n"
      "      key_attributes: [PK, SK]\n"
      "      properties: { fetch.min.bytes: 1024, enable.idempotence: true }\n"
      "tables: [ { name: App, key: { partition: PK, sort: SK } } ]\n",
      "t.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  const SourceConfig& s = config->sources.at(0);
  EXPECT_EQ(s.kind, SourceConfig::Kind::kKafka);
  EXPECT_EQ(s.kafka.brokers, "127.0.0.1:9092");
  EXPECT_EQ(s.kafka.topics, (std::vector<std::string>{"orders", "users"}));
  EXPECT_EQ(s.kafka.group, "cdcview");
  EXPECT_EQ(s.kafka.format, KafkaSourceConfig::Format::kDebeziumJson);
  EXPECT_EQ(s.kafka.dead_letter_topic, "orders.dlq");
  EXPECT_EQ(s.kafka.dead_letter_path, "/var/lib/cdcview/dead-letters/orders.ndjson");
  EXPECT_EQ(s.kafka.start, KafkaSourceConfig::Start::kLatest);
  EXPECT_EQ(s.kafka.key_attributes, (std::vector<std::string>{"PK", "SK"}));
  EXPECT_EQ(s.kafka.properties,
            (std::map<std::string, std::string>{{"enable.idempotence", "true"},
                                                {"fetch.min.bytes", "1024"}}));
}

TEST(ConfigErrorTest, KafkaSource) {
  EXPECT_EQ(ErrorOf("sources:\n"
                    "  - name: x\n"
                    "    table: App\n"
                    "    kafka: { brokers: b, topics: [t] }\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:4: sources[0].kafka.group: is required");
  EXPECT_EQ(ErrorOf("sources:\n"
                    "  - name: x\n"
                    "    table: App\n"
                    "    kafka: { brokers: b, topics: [t], group: g, format: avro }\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:4: sources[0].kafka.format: expected one of dynamodb-json, debezium-json, "
            "protobuf, got \"avro\"");
  EXPECT_EQ(ErrorOf("sources:\n"
                    "  - name: x\n"
                    "    table: App\n"
                    "    kafka: { brokers: b, topics: [], group: g }\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:4: sources[0].kafka.topics: expected a non-empty list of names, got a list");
}

TEST(ConfigTest, DynamoDbSource) {
  absl::StatusOr<Config> config = ParseConfig(
      "sources:\n"
      "  - name: app\n"
      "    table: App\n"
      "    dynamodb: { table_name: App, region: eu-west-1, endpoint: 'http://127.0.0.1:8000',\n"
      "                start: latest, snapshot: scan, scan_segments: 8, poll_interval_ms: 250 }\n"
      "tables: [ { name: App, key: { partition: PK } } ]\n",
      "t.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  const SourceConfig& s = config->sources.at(0);
  EXPECT_EQ(s.kind, SourceConfig::Kind::kDynamoDb);
  EXPECT_EQ(s.dynamodb.table_name, "App");
  EXPECT_EQ(s.dynamodb.stream_arn, "");
  EXPECT_EQ(s.dynamodb.region, "eu-west-1");
  EXPECT_EQ(s.dynamodb.endpoint, "http://127.0.0.1:8000");
  EXPECT_EQ(s.dynamodb.start, DynamoDbSourceConfig::Start::kLatest);
  EXPECT_EQ(s.dynamodb.snapshot, DynamoDbSourceConfig::Snapshot::kScan);
  EXPECT_EQ(s.dynamodb.scan_segments, 8u);
  EXPECT_EQ(s.dynamodb.poll_interval_ms, 250u);
  EXPECT_EQ(s.dynamodb.shard_concurrency, 8u);
  EXPECT_EQ(s.dynamodb.scan_read_capacity_percent, 50u);
  EXPECT_EQ(s.dynamodb.scan_read_units_per_second, 0u);
  EXPECT_EQ(s.dynamodb.dead_letter_path, "./data/dead-letters/app.ndjson");
}

TEST(ConfigTest, DynamoDbScanReadBudget) {
  absl::StatusOr<Config> config = ParseConfig(
      "sources:\n"
      "  - name: app\n"
      "    table: App\n"
      "    dynamodb: { table_name: App, snapshot: scan, scan_read_capacity_percent: 25,\n"
      "                scan_read_units_per_second: 40 }\n"
      "tables: [ { name: App, key: { partition: PK } } ]\n",
      "t.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->sources.at(0).dynamodb.scan_read_capacity_percent, 25u);
  EXPECT_EQ(config->sources.at(0).dynamodb.scan_read_units_per_second, 40u);
}

TEST(ConfigErrorTest, DynamoDbSource) {
  EXPECT_EQ(ErrorOf("sources:\n"
                    "  - name: x\n"
                    "    table: App\n"
                    "    dynamodb: { region: us-east-1 }\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:4: sources[0].dynamodb: give exactly one of table_name and stream_arn");
  EXPECT_EQ(ErrorOf("sources:\n"
                    "  - name: x\n"
                    "    table: App\n"
                    "    dynamodb: { table_name: App, start: beginning }\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:4: sources[0].dynamodb.start: expected one of trim_horizon, latest, got "
            "\"beginning\"");
  EXPECT_EQ(ErrorOf("sources:\n"
                    "  - name: x\n"
                    "    table: App\n"
                    "    dynamodb: { table_name: App, scan_read_capacity_percent: 150 }\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:4: sources[0].dynamodb.scan_read_capacity_percent: expected a percentage of "
            "the table's read capacity, 1 to 100");
}

TEST(ConfigErrorTest, SizesAndLimits) {
  EXPECT_EQ(ErrorOf("storage:\n"
                    "  path: d\n"
                    "  map_size: 4 gigs\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:3: storage.map_size: expected a size like 4GiB, 512MiB or 1048576, got "
            "\"4 gigs\"");
  EXPECT_EQ(ErrorOf("storage:\n"
                    "  max_map_size: 1GiB\n"
                    "  map_size: 2GiB\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:3: storage.map_size: map_size (2147483648 bytes) must not exceed max_map_size "
            "(1073741824 bytes)");
  // Only max_map_size given, below the default map_size: it is the one to blame.
  EXPECT_EQ(ErrorOf("storage: { max_map_size: 1GiB }\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:1: storage.max_map_size: map_size (4294967296 bytes) must not exceed "
            "max_map_size (1073741824 bytes)");
  EXPECT_EQ(ErrorOf("storage: { flush_interval_ms: 60001 }\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:1: storage.flush_interval_ms: expected a whole number from 0 to 60000, got "
            "\"60001\"");
  EXPECT_EQ(ErrorOf("storage: { flush_interval_ms: -5 }\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:1: storage.flush_interval_ms: expected a whole number from 0 to 60000, got "
            "\"-5\"");
  EXPECT_EQ(ErrorOf("storage: { write_map: sometimes }\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:1: storage.write_map: expected true or false, got \"sometimes\"");
  EXPECT_EQ(ErrorOf("storage: { map_size: 0 }\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:1: storage.map_size: must be greater than 0");
  EXPECT_EQ(ErrorOf("apply:\n"
                    "  batch_size: 0\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:2: apply.batch_size: expected a whole number from 1 to 1048576, got \"0\"");
  EXPECT_EQ(ErrorOf("apply:\n"
                    "  queue_capacity: -5\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:2: apply.queue_capacity: expected a whole number from 1 to 1048576, got "
            "\"-5\"");
  // Queued events are held in memory: a count memory cannot hold is refused, in any notation.
  EXPECT_EQ(ErrorOf("apply:\n"
                    "  queue_capacity: 4000000000\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:2: apply.queue_capacity: expected a whole number from 1 to 1048576, got "
            "\"4000000000\"");
  EXPECT_EQ(ErrorOf("apply:\n"
                    "  queue_capacity: 4e9\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:2: apply.queue_capacity: expected a whole number from 1 to 1048576, got "
            "\"4e9\"");
  EXPECT_EQ(ErrorOf("apply: { batch_size: 1048577 }\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:1: apply.batch_size: expected a whole number from 1 to 1048576, got "
            "\"1048577\"");
  // A map LMDB could not reserve is refused here, naming the field, not at open.
  EXPECT_EQ(ErrorOf("storage:\n"
                    "  max_map_size: 1000TiB\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:2: storage.max_map_size: 1000TiB is larger than this system allows (at most "
            "64TiB: LMDB reserves the whole map in the process's address space, 128 TiB on "
            "64-bit Linux)");
  EXPECT_EQ(ErrorOf("storage: { map_size: 70368744177665, max_map_size: 70368744177665 }\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:1: storage.map_size: 70368744177665 is larger than this system allows (at "
            "most 64TiB: LMDB reserves the whole map in the process's address space, 128 TiB on "
            "64-bit Linux)");
  absl::StatusOr<Config> largest =
      Parse("storage: { map_size: 64TiB, max_map_size: 64TiB }\n"
            "tables: [ { name: App, key: { partition: PK } } ]\n");
  ASSERT_TRUE(largest.ok()) << largest.status();
  EXPECT_EQ(largest->storage.max_map_size, 64ull << 40);
}

// The fast read port's limits and the wait cap: their defaults, their bounds, and a config
// at the bounds is taken.
TEST(ConfigTest, ServerLimitsHaveSafeDefaultsAndBounds) {
  absl::StatusOr<Config> defaults = Parse("tables: [ { name: App, key: { partition: PK } } ]\n");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  const ServerConfig& d = defaults->server;
  EXPECT_EQ(d.max_wait_ms, 10000u);
  EXPECT_EQ(d.fast_reads_max_request_bytes, 4ull << 20);
  EXPECT_EQ(d.fast_reads_max_buffered_per_connection, 16ull << 20);
  EXPECT_EQ(d.fast_reads_max_buffered_bytes, 256ull << 20);
  EXPECT_EQ(d.fast_reads_max_waits_per_connection, 4u);
  EXPECT_EQ(d.fast_reads_max_connections, 1024u);
  EXPECT_EQ(d.fast_reads_idle_timeout_ms, 300000u);
  EXPECT_EQ(d.fast_reads_request_timeout_ms, 10000u);

  absl::StatusOr<Config> set = Parse(
      "server: { max_wait_ms: 3600000, fast_reads_max_request_bytes: 64MiB,\n"
      "          fast_reads_max_buffered_per_connection: 1, fast_reads_max_buffered_bytes: 64GiB,\n"
      "          fast_reads_max_waits_per_connection: 100, fast_reads_max_connections: 1,\n"
      "          fast_reads_idle_timeout_ms: 100, fast_reads_request_timeout_ms: 86400000 }\n"
      "tables: [ { name: App, key: { partition: PK } } ]\n");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->server.max_wait_ms, 3600000u);
  EXPECT_EQ(set->server.fast_reads_max_request_bytes, 64ull << 20);
  EXPECT_EQ(set->server.fast_reads_max_buffered_per_connection, 1u);
  EXPECT_EQ(set->server.fast_reads_max_buffered_bytes, 64ull << 30);
  EXPECT_EQ(set->server.fast_reads_max_waits_per_connection, 100u);
  EXPECT_EQ(set->server.fast_reads_max_connections, 1u);
  EXPECT_EQ(set->server.fast_reads_idle_timeout_ms, 100u);
  EXPECT_EQ(set->server.fast_reads_request_timeout_ms, 86400000u);

  auto error = [](const std::string& field) {
    return ErrorOf("server: { " + field + " }\ntables: [ { name: App, key: { partition: PK } } ]\n");
  };
  EXPECT_EQ(error("max_wait_ms: 0"),
            "t.yaml:1: server.max_wait_ms: expected a whole number from 1 to 3600000, got \"0\"");
  EXPECT_EQ(error("max_wait_ms: 3600001"),
            "t.yaml:1: server.max_wait_ms: expected a whole number from 1 to 3600000, got "
            "\"3600001\"");
  EXPECT_EQ(error("fast_reads_max_request_bytes: 65MiB"),
            "t.yaml:1: server.fast_reads_max_request_bytes: 65MiB is larger than this system "
            "allows (at most 64MiB: a request is held in memory until it has all arrived)");
  EXPECT_EQ(error("fast_reads_max_buffered_per_connection: 0"),
            "t.yaml:1: server.fast_reads_max_buffered_per_connection: must be greater than 0");
  EXPECT_EQ(error("fast_reads_max_buffered_bytes: 65GiB"),
            "t.yaml:1: server.fast_reads_max_buffered_bytes: 65GiB is larger than this system "
            "allows (at most 64GiB: a request is held in memory until it has all arrived)");
  EXPECT_EQ(error("fast_reads_max_waits_per_connection: 0"),
            "t.yaml:1: server.fast_reads_max_waits_per_connection: expected a whole number from "
            "1 to 100, got \"0\"");
  EXPECT_EQ(error("fast_reads_max_waits_per_connection: 101"),
            "t.yaml:1: server.fast_reads_max_waits_per_connection: expected a whole number from "
            "1 to 100, got \"101\"");
  EXPECT_EQ(error("fast_reads_max_connections: 0"),
            "t.yaml:1: server.fast_reads_max_connections: expected a whole number from 1 to "
            "1048576, got \"0\"");
  EXPECT_EQ(error("fast_reads_max_connections: 1048577"),
            "t.yaml:1: server.fast_reads_max_connections: expected a whole number from 1 to "
            "1048576, got \"1048577\"");
  EXPECT_EQ(error("fast_reads_idle_timeout_ms: 99"),
            "t.yaml:1: server.fast_reads_idle_timeout_ms: expected a whole number from 100 to "
            "86400000, got \"99\"");
  EXPECT_EQ(error("fast_reads_request_timeout_ms: 86400001"),
            "t.yaml:1: server.fast_reads_request_timeout_ms: expected a whole number from 100 "
            "to 86400000, got \"86400001\"");
}

// The DynamoDB endpoint: off by default, its limits' defaults and bounds, each error naming the
// field and its range.
TEST(ConfigTest, DynamoDbEndpointLimitsHaveSafeDefaultsAndBounds) {
  absl::StatusOr<Config> defaults = Parse("tables: [ { name: App, key: { partition: PK } } ]\n");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  const ServerConfig& d = defaults->server;
  EXPECT_EQ(d.dynamodb, "");
  EXPECT_EQ(d.dynamodb_threads, 0u);  // one per usable CPU
  EXPECT_EQ(d.dynamodb_max_connections, 1024u);
  EXPECT_EQ(d.dynamodb_max_request_bytes, 1ull << 20);
  EXPECT_EQ(d.dynamodb_idle_timeout_ms, 300000u);
  EXPECT_EQ(d.dynamodb_request_timeout_ms, 10000u);
  EXPECT_EQ(d.dynamodb_max_waits, 256u);
  EXPECT_EQ(d.dynamodb_max_pages, 64u);

  absl::StatusOr<Config> set = Parse(
      "server: { dynamodb: \"0.0.0.0:8000\", dynamodb_threads: 64,\n"
      "          dynamodb_max_connections: 1, dynamodb_max_request_bytes: 64MiB,\n"
      "          dynamodb_idle_timeout_ms: 100, dynamodb_request_timeout_ms: 86400000,\n"
      "          dynamodb_max_waits: 4096, dynamodb_max_pages: 1 }\n"
      "tables: [ { name: App, key: { partition: PK } } ]\n");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->server.dynamodb, "0.0.0.0:8000");
  EXPECT_EQ(set->server.dynamodb_threads, 64u);
  EXPECT_EQ(set->server.dynamodb_max_connections, 1u);
  EXPECT_EQ(set->server.dynamodb_max_request_bytes, 64ull << 20);
  EXPECT_EQ(set->server.dynamodb_idle_timeout_ms, 100u);
  EXPECT_EQ(set->server.dynamodb_request_timeout_ms, 86400000u);
  EXPECT_EQ(set->server.dynamodb_max_waits, 4096u);
  EXPECT_EQ(set->server.dynamodb_max_pages, 1u);
  absl::StatusOr<Config> per_cpu = Parse(
      "server: { dynamodb_threads: 0 }\ntables: [ { name: App, key: { partition: PK } } ]\n");
  ASSERT_TRUE(per_cpu.ok()) << per_cpu.status();
  EXPECT_EQ(per_cpu->server.dynamodb_threads, 0u);

  auto error = [](const std::string& field) {
    return ErrorOf("server: { " + field + " }\ntables: [ { name: App, key: { partition: PK } } ]\n");
  };
  EXPECT_EQ(error("dynamodb: 8000"),
            "t.yaml:1: server.dynamodb: expected host:port like 127.0.0.1:8000 (or \"\" to "
            "disable), got \"8000\"");
  EXPECT_EQ(error("dynamodb_threads: 65"),
            "t.yaml:1: server.dynamodb_threads: expected a whole number from 0 to 64, got \"65\" "
            "(at most 64: an I/O and a page thread each)");
  EXPECT_EQ(error("dynamodb_max_connections: 0"),
            "t.yaml:1: server.dynamodb_max_connections: expected a whole number from 1 to "
            "1048576, got \"0\"");
  EXPECT_EQ(error("dynamodb_max_request_bytes: 0"),
            "t.yaml:1: server.dynamodb_max_request_bytes: must be greater than 0");
  EXPECT_EQ(error("dynamodb_max_request_bytes: 65MiB"),
            "t.yaml:1: server.dynamodb_max_request_bytes: 65MiB is larger than this system "
            "allows (at most 64MiB: a request is held in memory until it has all arrived)");
  EXPECT_EQ(error("dynamodb_idle_timeout_ms: 99"),
            "t.yaml:1: server.dynamodb_idle_timeout_ms: expected a whole number from 100 to "
            "86400000, got \"99\"");
  EXPECT_EQ(error("dynamodb_request_timeout_ms: 86400001"),
            "t.yaml:1: server.dynamodb_request_timeout_ms: expected a whole number from 100 to "
            "86400000, got \"86400001\"");
  EXPECT_EQ(error("dynamodb_max_waits: 0"),
            "t.yaml:1: server.dynamodb_max_waits: expected a whole number from 1 to 4096, got "
            "\"0\" (at most 4096: each waiting request holds a thread)");
  EXPECT_EQ(error("dynamodb_max_waits: 4097"),
            "t.yaml:1: server.dynamodb_max_waits: expected a whole number from 1 to 4096, got "
            "\"4097\" (at most 4096: each waiting request holds a thread)");
  EXPECT_EQ(error("dynamodb_max_pages: 0"),
            "t.yaml:1: server.dynamodb_max_pages: expected a whole number from 1 to 4096, got "
            "\"0\" (at most 4096: each is a request held until a page thread builds it)");
}

// Each of these counts time, threads or a rate: the message says why its maximum is the one.
TEST(ConfigErrorTest, IntervalsThreadsAndRatesHaveAMaximumThatSaysWhy) {
  const std::string tables = "tables: [ { name: App, key: { partition: PK } } ]\n";
  auto dynamodb = [&](const std::string& field) {
    return "sources:\n  - name: x\n    table: App\n    dynamodb: { table_name: App, " + field +
           " }\n" + tables;
  };
  EXPECT_EQ(ErrorOf("apply: { max_delay_ms: 60001 }\n" + tables),
            "t.yaml:1: apply.max_delay_ms: expected a whole number from 0 to 60000, got "
            "\"60001\" (at most 60000: a partial batch waits this long for more events, and no "
            "read sees them meanwhile)");
  EXPECT_EQ(ErrorOf("apply: { log_counts_seconds: 86401 }\n" + tables),
            "t.yaml:1: apply.log_counts_seconds: expected a whole number from 0 to 86400, got "
            "\"86401\" (at most 86400: a count line at least once a day; 0 turns them off)");
  EXPECT_EQ(ErrorOf("server: { ready_max_lag_seconds: 4000000000 }\n" + tables),
            "t.yaml:1: server.ready_max_lag_seconds: expected a whole number from 0 to 86400, "
            "got \"4000000000\" (at most 86400: a view a day behind is not ready by any "
            "measure, and DynamoDB Streams keeps records only 24 hours)");
  const std::pair<std::string, std::string> dynamodb_fields[] = {
      {"poll_interval_ms: 60001",
       "poll_interval_ms: expected a whole number from 0 to 60000, got \"60001\" (at most "
       "60000: a new record on an idle shard waits this long to be read)"},
      {"shard_concurrency: 1025",
       "shard_concurrency: expected a whole number from 1 to 1024, got \"1025\" (at most "
       "1024: one thread each)"},
      {"discovery_interval_ms: 3600001",
       "discovery_interval_ms: expected a whole number from 100 to 3600000, got \"3600001\" "
       "(at most 3600000: the records of a new shard wait this long to be found, and DynamoDB "
       "Streams keeps them only 24 hours)"},
      {"scan_segments: 100000",
       "scan_segments: expected a whole number from 1 to 1024, got \"100000\" (at most 1024: "
       "one thread each)"},
      {"scan_read_units_per_second: 1000001",
       "scan_read_units_per_second: expected a whole number from 0 to 1000000, got "
       "\"1000001\" (at most 1000000: 25 times DynamoDB's default read quota of a table, "
       "40,000 units per second)"},
  };
  for (const auto& [field, message] : dynamodb_fields) {
    EXPECT_EQ(ErrorOf(dynamodb(field)), "t.yaml:4: sources[0].dynamodb." + message);
  }
  // The reason explains the maximum whatever is wrong with the value.
  EXPECT_EQ(ErrorOf(dynamodb("shard_concurrency: many")),
            "t.yaml:4: sources[0].dynamodb.shard_concurrency: expected a whole number from 1 to "
            "1024, got \"many\" (at most 1024: one thread each)");

  // Each maximum itself is accepted.
  absl::StatusOr<Config> largest = Parse(
      "server: { ready_max_lag_seconds: 86400 }\n"
      "apply: { max_delay_ms: 60000, log_counts_seconds: 86400 }\n"
      "sources:\n  - name: x\n    table: App\n"
      "    dynamodb: { table_name: App, poll_interval_ms: 60000, shard_concurrency: 1024,\n"
      "                discovery_interval_ms: 3600000, scan_segments: 1024,\n"
      "                scan_read_units_per_second: 1000000 }\n" +
      tables);
  ASSERT_TRUE(largest.ok()) << largest.status();
  EXPECT_EQ(largest->server.ready_max_lag_seconds, 86400u);
  EXPECT_EQ(largest->apply.max_delay_ms, 60000u);
  EXPECT_EQ(largest->apply.log_counts_seconds, 86400u);
  const DynamoDbSourceConfig& d = largest->sources.at(0).dynamodb;
  EXPECT_EQ(d.poll_interval_ms, 60000u);
  EXPECT_EQ(d.shard_concurrency, 1024u);
  EXPECT_EQ(d.discovery_interval_ms, 3600000u);
  EXPECT_EQ(d.scan_segments, 1024u);
  EXPECT_EQ(d.scan_read_units_per_second, 1000000u);
}

TEST(ConfigErrorTest, AddressesLookLikeHostPort) {
  EXPECT_EQ(ErrorOf("server:\n"
                    "  grpc: localhost\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:2: server.grpc: expected host:port like 127.0.0.1:50051, got \"localhost\"");
  EXPECT_EQ(ErrorOf("server:\n"
                    "  metrics: \"0.0.0.0:99999\"\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:2: server.metrics: expected host:port like 127.0.0.1:9464 (or \"\" to "
            "disable), got \"0.0.0.0:99999\"");
  EXPECT_EQ(ErrorOf("server: { grpc: \"\" }\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:1: server.grpc: expected host:port like 127.0.0.1:50051, got \"\"");
}

TEST(ConfigErrorTest, InvertedNeedsATableSortKey) {
  EXPECT_EQ(ErrorOf("tables:\n"
                    "  - name: App\n"
                    "    key: { partition: PK }\n"
                    "    views:\n"
                    "      - name: ByMember\n"
                    "        inverted: true\n"),
            "t.yaml:6: tables[0].views[0].inverted: table \"App\" has no sort key, so there is "
            "nothing to invert");
}

TEST(ConfigErrorTest, InvertedCannotBeCombinedWithKeysOrRules) {
  EXPECT_EQ(ErrorOf("tables:\n"
                    "  - name: App\n"
                    "    key: { partition: PK, sort: SK }\n"
                    "    views:\n"
                    "      - name: ByMember\n"
                    "        inverted: true\n"
                    "        partition_key: { attribute: a }\n"),
            "t.yaml:7: tables[0].views[0].partition_key: cannot be combined with inverted: true "
            "(an inverted view's keys are the table's keys swapped)");
  EXPECT_EQ(ErrorOf("tables:\n"
                    "  - name: App\n"
                    "    key: { partition: PK, sort: SK }\n"
                    "    views:\n"
                    "      - name: ByMember\n"
                    "        rules: [ { partition_key: { attribute: a } } ]\n"
                    "        inverted: true\n"),
            "t.yaml:6: tables[0].views[0].rules: cannot be combined with inverted: true (an "
            "inverted view's keys are the table's keys swapped)");
}

TEST(ConfigErrorTest, RulesCannotBeCombinedWithViewLevelKeys) {
  EXPECT_EQ(ErrorOf("tables:\n"
                    "  - name: App\n"
                    "    key: { partition: PK }\n"
                    "    views:\n"
                    "      - name: V\n"
                    "        rules: [ { partition_key: { attribute: a } } ]\n"
                    "        sort_key: { attribute: b }\n"),
            "t.yaml:7: tables[0].views[0].sort_key: cannot be combined with rules (give it inside "
            "each rule)");
  EXPECT_EQ(ErrorOf("tables:\n"
                    "  - name: App\n"
                    "    key: { partition: PK }\n"
                    "    views:\n"
                    "      - name: V\n"
                    "        rules: []\n"),
            "t.yaml:6: tables[0].views[0].rules: expected a list of at least one rule, got an "
            "empty list");
}

TEST(ConfigErrorTest, AllRulesShareOneKeySchema) {
  const std::string head =
      "tables:\n"
      "  - name: App\n"
      "    key: { partition: PK }\n"
      "    views:\n"
      "      - name: ByEntity\n"
      "        rules:\n"
      "          - when: { attribute: type, equals: order }\n"
      "            partition_key: { template: \"STATUS#{status}\" }\n";
  // Line 8 is rules[0].partition_key; rules[1] starts on line 9.
  EXPECT_EQ(ErrorOf(head +
                    "            sort_key: { attribute: at, type: N }\n"
                    "          - when: { attribute: type, equals: user }\n"
                    "            partition_key: { attribute: id, type: N }\n"
                    "            sort_key: { attribute: at, type: N }\n"),
            "t.yaml:11: tables[0].views[0].rules[1].partition_key: type N differs from "
            "rules[0].partition_key (type S); all rules of a view share one key schema");
  EXPECT_EQ(ErrorOf(head +
                    "            sort_key: { attribute: at, type: N }\n"
                    "          - when: { attribute: type, equals: user }\n"
                    "            partition_key: { attribute: email }\n"
                    "            sort_key: { template: \"{at}\" }\n"),
            "t.yaml:12: tables[0].views[0].rules[1].sort_key: type S differs from "
            "rules[0].sort_key (type N); all rules of a view share one key schema");
  EXPECT_EQ(ErrorOf(head +
                    "            sort_key: { attribute: at }\n"
                    "          - when: { attribute: type, equals: user }\n"
                    "            partition_key: { attribute: email }\n"),
            "t.yaml:10: tables[0].views[0].rules[1].sort_key: rules[0] has a sort key but "
            "rules[1] has none; all rules of a view share one key schema");
  EXPECT_EQ(ErrorOf(head +
                    "          - when: { attribute: type, equals: user }\n"
                    "            partition_key: { attribute: email }\n"
                    "            sort_key: { attribute: at }\n"),
            "t.yaml:11: tables[0].views[0].rules[1].sort_key: rules[1] has a sort key but "
            "rules[0] has none; all rules of a view share one key schema");
}

TEST(ConfigErrorTest, KeySpecIsAttributeOrTemplate) {
  const std::string head =
      "tables:\n"
      "  - name: App\n"
      "    key: { partition: PK }\n"
      "    views:\n"
      "      - name: V\n";
  EXPECT_EQ(ErrorOf(head + "        partition_key: { attribute: a, template: \"x\" }\n"),
            "t.yaml:6: tables[0].views[0].partition_key: give either attribute or template, not "
            "both");
  EXPECT_EQ(ErrorOf(head + "        partition_key: { template: \"x{a}\", type: S }\n"),
            "t.yaml:6: tables[0].views[0].partition_key.type: applies to attribute keys only (a "
            "template always yields an S value)");
  EXPECT_EQ(ErrorOf(head + "        partition_key: {}\n"),
            "t.yaml:6: tables[0].views[0].partition_key: expected { attribute: NAME, type: S|N|B "
            "} or { template: \"...\" }");
  EXPECT_EQ(ErrorOf(head + "        partition_key: GSI1PK\n"),
            "t.yaml:6: tables[0].views[0].partition_key: expected a mapping, got \"GSI1PK\"");
  EXPECT_EQ(ErrorOf(head + "        partition_key:\n"
                           "        sort_key: { attribute: b }\n"),
            "t.yaml:6: tables[0].views[0].partition_key: expected a mapping, got nothing");
  // The template's own error, placed at the template.
  EXPECT_EQ(ErrorOf(head + "        partition_key: { attribute: a }\n"
                           "        sort_key:\n"
                           "          template: \"STATUS#{status\"\n"),
            "t.yaml:8: tables[0].views[0].sort_key.template: template \"STATUS#{status\": "
            "unclosed \"{\"");
}

TEST(ConfigErrorTest, ConditionsHaveExactlyOneOperator) {
  const std::string head =
      "tables:\n"
      "  - name: App\n"
      "    key: { partition: PK }\n"
      "    views:\n"
      "      - name: V\n"
      "        partition_key: { attribute: a }\n";
  EXPECT_EQ(ErrorOf(head + "        filter: { attribute: t, equals: x, exists: true }\n"),
            "t.yaml:7: tables[0].views[0].filter: expected exactly one of equals, begins_with, "
            "exists, got both equals and exists");
  EXPECT_EQ(ErrorOf(head + "        filter:\n"
                           "          - { attribute: t, exists: true }\n"
                           "          - { attribute: u }\n"),
            "t.yaml:9: tables[0].views[0].filter[1]: expected exactly one of equals, begins_with, "
            "exists, got none");
  EXPECT_EQ(ErrorOf(head + "        filter: { attribute: t, equals: [a, b] }\n"),
            "t.yaml:7: tables[0].views[0].filter.equals: expected a string, number or bool, got a "
            "list");
  EXPECT_EQ(ErrorOf(head + "        filter: { attribute: t, exists: 1x }\n"),
            "t.yaml:7: tables[0].views[0].filter.exists: expected true or false, got \"1x\"");
  EXPECT_EQ(ErrorOf(head + "        filter: { equals: x }\n"),
            "t.yaml:7: tables[0].views[0].filter.attribute: is required");
  EXPECT_EQ(ErrorOf(head + "        filter: []\n"),
            "t.yaml:7: tables[0].views[0].filter: expected a condition { attribute: NAME, equals "
            "| begins_with | exists: ... } or a non-empty list of them, got an empty list");
}

TEST(ConfigErrorTest, Projections) {
  const std::string head =
      "tables:\n"
      "  - name: App\n"
      "    key: { partition: PK }\n"
      "    views:\n"
      "      - name: V\n"
      "        partition_key: { attribute: a }\n";
  EXPECT_EQ(ErrorOf(head + "        projection: KEYS\n"),
            "t.yaml:7: tables[0].views[0].projection: expected ALL, KEYS_ONLY or { include: "
            "[NAMES] }, got \"KEYS\"");
  EXPECT_EQ(ErrorOf(head + "        projection: { include: [] }\n"),
            "t.yaml:7: tables[0].views[0].projection.include: expected a non-empty list of "
            "attribute names, got an empty list");
  EXPECT_EQ(ErrorOf(head + "        projection:\n"
                           "          include:\n"
                           "            - status\n"
                           "            - status\n"),
            "t.yaml:10: tables[0].views[0].projection.include[1]: attribute \"status\" is listed "
            "twice");
}

// yaml-cpp notices an unclosed bracket where it gives up, and a missing colon at the next
// key's colon: the message names the line of the mistake itself.
TEST(ConfigErrorTest, InvalidYamlNamesTheLineOfTheMistake) {
  EXPECT_EQ(ErrorOf("tables:\n"
                    "  - name: [App\n"
                    "    key: PK\n"),
            "t.yaml:2: invalid YAML: end of sequence flow not found (the \"[\" on this line is "
            "never closed)");
  EXPECT_EQ(ErrorOf("storage:\n"
                    "  path: { a: \"]}\", b: [1, 2]\n"
                    "  # a comment with { and [\n"
                    "tables:\n"
                    "  - name: App\n"),
            "t.yaml:2: invalid YAML: end of map flow not found (the \"{\" on this line is never "
            "closed)");
  EXPECT_EQ(ErrorOf("storage:\n"
                    "  path: \"/srv/x\n"
                    "  map_size: 4GiB\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:2: invalid YAML: the quote on this line is never closed");
  EXPECT_EQ(ErrorOf("storage:\n"
                    "  path: 'it''s\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:2: invalid YAML: the quote on this line is never closed");
  EXPECT_EQ(ErrorOf("storage:\n"
                    "  path /srv/x\n"
                    "\n"
                    "  map_size: 4GiB\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:2: invalid YAML: illegal map value (a key on this line has no \":\" after it)");
  EXPECT_EQ(ErrorOf("storage:\n"
                    "  path: /srv/x\n"
                    "   map_size: 4GiB\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:3: invalid YAML: illegal map value");
  EXPECT_EQ(ErrorOf("storage:\n"
                    "\tpath: /srv/x\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:2: invalid YAML: illegal map value");
  EXPECT_EQ(ErrorOf("storage:\n"
                    "  path: /srv/x\n"
                    " map_size: 4GiB\n"
                    "tables: [ { name: App, key: { partition: PK } } ]\n"),
            "t.yaml:3: invalid YAML: end of map not found");
  // Apostrophes and brackets inside plain text open nothing.
  absl::StatusOr<Config> plain = Parse("storage:\n"
                                       "  path: it's/a[1 - 'b\n"
                                       "tables: [ { name: App, key: { partition: PK } } ]\n");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->storage.path, "it's/a[1 - 'b");
}

TEST(ConfigErrorTest, DocumentMustBeAMapping) {
  EXPECT_EQ(ErrorOf(""),
            "t.yaml:1: expected a mapping with tables: (and optionally storage:, server:, apply:, "
            "sources:), got an empty document");
  EXPECT_EQ(ErrorOf("- a\n"),
            "t.yaml:1: expected a mapping with tables: (and optionally storage:, server:, apply:, "
            "sources:), got a list");
}

TEST(LoadConfigTest, MissingFileIsNotFound) {
  TempDir dir;
  const std::string path = dir.path() + "/missing.yaml";
  absl::StatusOr<Config> config = LoadConfig(path);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Text(config.status()),
            "cannot read config file \"" + path + "\": No such file or directory");
}

TEST(LoadConfigTest, DirectoryIsNotReadable) {
  TempDir dir;
  absl::StatusOr<Config> config = LoadConfig(dir.path());
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Text(config.status()),
            "cannot read config file \"" + dir.path() + "\": Is a directory");
}

TEST(LoadConfigTest, ErrorsNameTheFileRead) {
  TempDir dir;
  const std::string path =
      dir.Write("bad.yaml",
                "tables:\n"
                "  - name: App\n"
                "    key: { partition: PK, sort: { attribute: SK, type: Q } }\n");
  absl::StatusOr<Config> config = LoadConfig(path);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Text(config.status()),
            path + ":3: tables[0].key.sort.type: expected one of S, N, B, got \"Q\"");
}

// ---- byte sizes ----

TEST(ParseByteSizeTest, AcceptsIecSiAndPlainNumbers) {
  struct Case {
    std::string text;
    uint64_t bytes;
  };
  const Case cases[] = {
      {"4GiB", 4ull << 30},       {"512MiB", 512ull << 20},   {"64KiB", 64ull << 10},
      {"1TiB", 1ull << 40},       {"4GB", 4000000000ull},     {"3MB", 3000000ull},
      {"2KB", 2000ull},           {"1TB", 1000000000000ull},  {"1048576", 1048576ull},
      {"7B", 7ull},               {"1 MiB", 1ull << 20},      {"0", 0ull},
      {"16777215TiB", ((1ull << 24) - 1) << 40},
      {"18446744073709551615", 18446744073709551615ull},
  };
  for (const Case& c : cases) {
    absl::StatusOr<uint64_t> bytes = ParseByteSize(c.text);
    ASSERT_TRUE(bytes.ok()) << c.text << ": " << bytes.status();
    EXPECT_EQ(*bytes, c.bytes) << c.text;
  }
}

TEST(ParseByteSizeTest, RejectsAnythingElse) {
  for (std::string text : {"4 gigs", "", "GiB", "-1", "1.5GiB", "4gib", "4 GiB ", "0x10", "+4"}) {
    absl::StatusOr<uint64_t> bytes = ParseByteSize(text);
    ASSERT_FALSE(bytes.ok()) << text;
    EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Text(bytes.status()),
              "expected a size like 4GiB, 512MiB or 1048576, got \"" + text + "\"");
  }
  for (std::string text : {"16777216TiB", "18446744073709551616"}) {
    absl::StatusOr<uint64_t> bytes = ParseByteSize(text);
    ASSERT_FALSE(bytes.ok()) << text;
    EXPECT_EQ(Text(bytes.status()), "size \"" + text + "\" does not fit in 64 bits");
  }
}

}  // namespace
}  // namespace cdcview
