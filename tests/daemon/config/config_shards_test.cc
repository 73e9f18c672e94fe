// Write-sharded views in the config: `shards: { count, suffix }`, its defaults, its exact
// errors, and its round trip through ConfigToYaml.
#include <string>

#include "daemon/config/config.h"
#include "daemon/config/config_yaml.h"
#include "gtest/gtest.h"

namespace cdcview {
namespace {

constexpr char kHead[] =
    "tables:\n"
    "  - name: App\n"
    "    key: { partition: PK, sort: SK }\n"
    "    views:\n"
    "      - name: Votes\n";

absl::StatusOr<Config> ParseView(const std::string& view_fields) {
  return ParseConfig(kHead + view_fields, "t.yaml");
}

std::string ErrorOf(const std::string& view_fields) {
  absl::StatusOr<Config> config = ParseView(view_fields);
  if (config.ok()) return "(accepted)";
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << config.status();
  return std::string(config.status().message());
}

TEST(ConfigShardsTest, CountAndSuffixAreRead) {
  absl::StatusOr<Config> config = ParseView(
      "        partition_key: { attribute: GSI1PK }\n"
      "        sort_key: { attribute: GSI1SK }\n"
      "        shards: { count: 16, suffix: \"-s{shard}\" }\n");
  ASSERT_TRUE(config.ok()) << config.status();
  const ShardSpec& shards = config->tables[0].views[0].shards;
  EXPECT_EQ(shards.count, 16u);
  EXPECT_EQ(shards.suffix, "-s{shard}");
}

TEST(ConfigShardsTest, SuffixDefaultsToHashShardAndUnshardedViewsHaveNone) {
  absl::StatusOr<Config> config = ParseConfig(
      "tables:\n"
      "  - name: App\n"
      "    key: { partition: PK, sort: SK }\n"
      "    views:\n"
      "      - { name: A, partition_key: { template: \"DAY#{day}\" }, shards: { count: 2 } }\n"
      "      - { name: B, partition_key: { attribute: day } }\n"
      "      - { name: C, inverted: true, shards: { count: 1024 } }\n",
      "t.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  const auto& views = config->tables[0].views;
  EXPECT_EQ(views[0].shards, (ShardSpec{2, "#{shard}"}));
  EXPECT_EQ(views[1].shards, (ShardSpec{}));
  EXPECT_FALSE(views[1].shards.enabled());
  EXPECT_EQ(views[2].shards, (ShardSpec{1024, "#{shard}"}));
}

// The entries are stored under the physical keys whatever the sharding says, so changing
// `shards` must not rebuild the view.
TEST(ConfigShardsTest, ShardsAreNotPartOfTheFingerprint) {
  absl::StatusOr<Config> plain = ParseView("        partition_key: { attribute: GSI1PK }\n");
  absl::StatusOr<Config> sharded = ParseView(
      "        partition_key: { attribute: GSI1PK }\n"
      "        shards: { count: 4 }\n");
  ASSERT_TRUE(plain.ok() && sharded.ok());
  const TableSpec& a = plain->tables[0];
  const TableSpec& b = sharded->tables[0];
  EXPECT_EQ(a.views[0].Fingerprint(a.key), b.views[0].Fingerprint(b.key));
}

TEST(ConfigShardsTest, RoundTripsThroughConfigToYaml) {
  absl::StatusOr<Config> config = ParseView(
      "        partition_key: { attribute: GSI1PK }\n"
      "        shards: { count: 8, suffix: \"_{shard}!\" }\n");
  ASSERT_TRUE(config.ok()) << config.status();
  const std::string yaml = ConfigToYaml(*config);
  EXPECT_NE(yaml.find("    shards: {count: 8, suffix: \"_{shard}!\"}\n"), std::string::npos)
      << yaml;
  absl::StatusOr<Config> again = ParseConfig(yaml, "t.yaml");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << yaml;
  EXPECT_EQ(again->tables[0].views[0].shards, (ShardSpec{8, "_{shard}!"}));
  EXPECT_EQ(ConfigToYaml(*again), yaml);
}

TEST(ConfigShardsErrorTest, CountIsRequiredAndBounded) {
  const std::string pk = "        partition_key: { attribute: GSI1PK }\n";
  EXPECT_EQ(ErrorOf(pk + "        shards: { suffix: \"#{shard}\" }\n"),
            "t.yaml:7: tables[0].views[0].shards.count: is required");
  EXPECT_EQ(ErrorOf(pk + "        shards: { count: 1 }\n"),
            "t.yaml:7: tables[0].views[0].shards.count: expected a whole number from 2 to 1024 "
            "(a query reads every shard), got \"1\"");
  EXPECT_EQ(ErrorOf(pk + "        shards: { count: 1025 }\n"),
            "t.yaml:7: tables[0].views[0].shards.count: expected a whole number from 2 to 1024 "
            "(a query reads every shard), got \"1025\"");
  EXPECT_EQ(ErrorOf(pk + "        shards: { count: four }\n"),
            "t.yaml:7: tables[0].views[0].shards.count: expected a whole number from 2 to 1024 "
            "(a query reads every shard), got \"four\"");
  EXPECT_EQ(ErrorOf(pk + "        shards: 4\n"),
            "t.yaml:7: tables[0].views[0].shards: expected a mapping, got \"4\"");
}

TEST(ConfigShardsErrorTest, SuffixMustHoldShardOnce) {
  const std::string pk = "        partition_key: { attribute: GSI1PK }\n";
  EXPECT_EQ(ErrorOf(pk + "        shards: { count: 4, suffix: \"#\" }\n"),
            "t.yaml:7: tables[0].views[0].shards.suffix: shard suffix \"#\" must contain "
            "{shard} exactly once, e.g. \"#{shard}\"");
  EXPECT_EQ(ErrorOf(pk + "        shards: { count: 4, suffix: \"{shard}{shard}\" }\n"),
            "t.yaml:7: tables[0].views[0].shards.suffix: shard suffix \"{shard}{shard}\" must "
            "contain {shard} exactly once, e.g. \"#{shard}\"");
  EXPECT_EQ(ErrorOf(pk + "        shards: { count: 4, suffix: \"#{day}{shard}\" }\n"),
            "t.yaml:7: tables[0].views[0].shards.suffix: shard suffix \"#{day}{shard}\" may hold "
            "no placeholder but {shard}");
  EXPECT_EQ(ErrorOf(pk + "        shards: { count: 4, suffix: [a] }\n"),
            "t.yaml:7: tables[0].views[0].shards.suffix: expected a string, got a list");
}

TEST(ConfigShardsErrorTest, UnknownFieldsAndNonStringKeysAreRejected) {
  EXPECT_EQ(ErrorOf("        partition_key: { attribute: GSI1PK }\n"
                    "        shards: { count: 4, sufix: \"#{shard}\" }\n"),
            "t.yaml:7: tables[0].views[0].shards: unknown field \"sufix\" (expected one of "
            "count, suffix)");
  EXPECT_EQ(ErrorOf("        partition_key: { attribute: day, type: N }\n"
                    "        shards: { count: 4 }\n"),
            "t.yaml:7: tables[0].views[0].shards: needs an S partition key (an attribute of type "
            "S or a template); view \"Votes\"'s partition key is N");
  EXPECT_EQ(ErrorOf("        partition_key: { attribute: blob, type: B }\n"
                    "        shards: { count: 4 }\n"),
            "t.yaml:7: tables[0].views[0].shards: needs an S partition key (an attribute of type "
            "S or a template); view \"Votes\"'s partition key is B");
}

}  // namespace
}  // namespace cdcview
