// The source kinds table: each kind's name is its key in the file, what ConfigToYaml prints
// and what status and metrics call it; the dead-letter file of each kind.
#include "daemon/config/source_kinds.h"

#include <set>
#include <string>
#include <vector>

#include "daemon/config/config.h"
#include "daemon/config/config_yaml.h"
#include "gtest/gtest.h"

namespace cdcview {
namespace {

constexpr char kSources[] =
    "sources:\n"
    "  - { name: f, table: T, file: { path: in.ndjson } }\n"
    "  - { name: k, table: T, kafka: { brokers: \"b:1\", topics: [t], group: g } }\n"
    "  - { name: d, table: T, dynamodb: { table_name: T1 } }\n"
    "tables: [ { name: T, key: { partition: id } } ]\n";

TEST(SourceKindsTest, EachKindHasOneNameAndSketch) {
  std::vector<std::string> names;
  std::set<SourceKind> kinds;
  for (const SourceKindInfo& info : SourceKinds()) {
    names.emplace_back(info.name);
    kinds.insert(info.kind);
    EXPECT_EQ(SourceKindName(info.kind), info.name);
    EXPECT_TRUE(info.sketch.starts_with(std::string(info.name) + ": {")) << info.sketch;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"file", "kafka", "dynamodb"}));
  EXPECT_EQ(kinds.size(), names.size());
}

TEST(SourceKindsTest, EachKindIsReadAndPrintedUnderItsName) {
  absl::StatusOr<Config> config = ParseConfig(kSources, "t.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->sources.size(), 3u);
  EXPECT_EQ(config->sources[0].kind, SourceKind::kFile);
  EXPECT_EQ(config->sources[1].kind, SourceKind::kKafka);
  EXPECT_EQ(config->sources[2].kind, SourceKind::kDynamoDb);
  const std::string yaml = ConfigToYaml(*config);
  for (const SourceConfig& source : config->sources) {
    const std::string block = "    " + std::string(SourceKindName(source.kind)) + ":\n";
    EXPECT_NE(yaml.find(block), std::string::npos) << block << " in\n" << yaml;
  }
}

TEST(SourceKindsTest, DeadLetterPathIsTheKindsOwn) {
  absl::StatusOr<Config> config = ParseConfig(kSources, "t.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  const std::vector<SourceConfig>& s = config->sources;
  EXPECT_EQ(DeadLetterPath(s[0]), "./data/dead-letters/f.ndjson");
  EXPECT_EQ(&DeadLetterPath(s[0]), &s[0].file.dead_letter_path);
  EXPECT_EQ(&DeadLetterPath(s[1]), &s[1].kafka.dead_letter_path);
  EXPECT_EQ(&DeadLetterPath(s[2]), &s[2].dynamodb.dead_letter_path);
  // Each moves with --storage-path.
  ConfigOverrides overrides;
  overrides.storage_path = "/srv/x";
  ASSERT_TRUE(ApplyOverrides(overrides, &*config).ok());
  EXPECT_EQ(config->sources[0].file.dead_letter_path, "/srv/x/dead-letters/f.ndjson");
  EXPECT_EQ(config->sources[1].kafka.dead_letter_path, "/srv/x/dead-letters/k.ndjson");
  EXPECT_EQ(config->sources[2].dynamodb.dead_letter_path, "/srv/x/dead-letters/d.ndjson");
}

}  // namespace
}  // namespace cdcview
