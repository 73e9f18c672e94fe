// Tombstone compaction's settings: each source kind's tombstone_horizon_seconds (its default
// is the kind's retention) and apply.tombstone_compaction_step, with their bounds.
#include <string>

#include "daemon/config/config.h"
#include "gtest/gtest.h"

namespace cdcview {
namespace {

constexpr char kSources[] = R"(
sources:
  - name: f
    table: App
    file: { path: x.ndjson FILE }
  - name: k
    table: App
    kafka: { brokers: "b:9092", topics: [t], group: g KAFKA }
  - name: d
    table: App
    dynamodb: { table_name: App DYNAMODB }
tables:
  - name: App
    key: { partition: PK }
)";

// kSources with `file`, `kafka` and `dynamodb` added to the three source blocks.
absl::StatusOr<Config> Parse(const std::string& apply, const std::string& file = "",
                             const std::string& kafka = "", const std::string& dynamodb = "") {
  std::string yaml = apply + kSources;
  yaml.replace(yaml.find(" FILE"), 5, file);
  yaml.replace(yaml.find(" KAFKA"), 6, kafka);
  yaml.replace(yaml.find(" DYNAMODB"), 9, dynamodb);
  return ParseConfig(yaml, "t.yaml");
}

TEST(TombstoneConfigTest, HorizonsDefaultToEachKindsRetentionAndTheStepToAThousand) {
  auto config = Parse("");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(TombstoneHorizonSeconds(config->sources[0]), 86400u);   // a file of Streams records
  EXPECT_EQ(TombstoneHorizonSeconds(config->sources[1]), 604800u);  // Kafka's default retention
  EXPECT_EQ(TombstoneHorizonSeconds(config->sources[2]), 86400u);   // DynamoDB Streams
  EXPECT_EQ(config->apply.tombstone_compaction_step, 1000u);
}

TEST(TombstoneConfigTest, EachSourceSetsItsOwnHorizon) {
  auto config = Parse("apply: { tombstone_compaction_step: 100000 }\n",
                      ", tombstone_horizon_seconds: 1", ", tombstone_horizon_seconds: 3600",
                      ", tombstone_horizon_seconds: 4294967295");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(TombstoneHorizonSeconds(config->sources[0]), 1u);
  EXPECT_EQ(TombstoneHorizonSeconds(config->sources[1]), 3600u);
  EXPECT_EQ(TombstoneHorizonSeconds(config->sources[2]), 4294967295u);
  EXPECT_EQ(config->apply.tombstone_compaction_step, 100000u);
}

TEST(TombstoneConfigTest, AZeroHorizonAndAStepOutOfBoundsAreRejected) {
  const std::string zero_horizon =
      "0 would drop a removed item's tombstone at once, and a replayed older change would "
      "bring the item back; set the source's retention in seconds (DynamoDB Streams: 86400)";
  EXPECT_EQ(std::string(Parse("", ", tombstone_horizon_seconds: 0").status().message()),
            "t.yaml:5: sources[0].file.tombstone_horizon_seconds: " + zero_horizon);
  EXPECT_EQ(std::string(Parse("", "", ", tombstone_horizon_seconds: 0").status().message()),
            "t.yaml:8: sources[1].kafka.tombstone_horizon_seconds: " + zero_horizon);
  EXPECT_EQ(std::string(Parse("", "", "", ", tombstone_horizon_seconds: 0").status().message()),
            "t.yaml:11: sources[2].dynamodb.tombstone_horizon_seconds: " + zero_horizon);
  EXPECT_EQ(std::string(Parse("apply: { tombstone_compaction_step: 0 }\n").status().message()),
            "t.yaml:1: apply.tombstone_compaction_step: expected a whole number from 1 to 100000, "
            "got \"0\"");
  EXPECT_EQ(std::string(Parse("apply: { tombstone_compaction_step: 100001 }\n").status().message()),
            "t.yaml:1: apply.tombstone_compaction_step: expected a whole number from 1 to 100000, "
            "got \"100001\"");
}

}  // namespace
}  // namespace cdcview
