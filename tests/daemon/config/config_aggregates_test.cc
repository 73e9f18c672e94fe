// Aggregates in the config: parsing, and the exact FILE:LINE: FIELD: problem messages.
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "daemon/config/config.h"
#include "daemon/config/config_yaml.h"
#include "gtest/gtest.h"

namespace cdcview {
namespace {

std::string ErrorOf(const std::string& yaml) {
  absl::StatusOr<Config> config = ParseConfig(yaml, "t.yaml");
  if (config.ok()) return "(accepted)";
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << config.status();
  return std::string(config.status().message());
}

std::string Describe(const AggregateSpec& a) {
  std::vector<std::string> measures;
  for (const MeasureSpec& m : a.measures) measures.push_back(m.Name());
  std::string group = a.group_by.kind == KeySpec::Kind::kAttribute
                          ? a.group_by.attribute + ":" + std::string(AttrTypeName(a.group_by.type))
                          : "template " + a.group_by.template_text;
  std::vector<std::string> filter;
  for (const Condition& c : a.filter) filter.push_back(c.attribute);
  return a.name + " on " + a.table + " group " + group + " strip \"" + a.strip_shard_suffix +
         "\" filter [" + absl::StrJoin(filter, ",") + "] measures [" + absl::StrJoin(measures, ",") + "]";
}

constexpr char kTable[] =
    "tables:\n"
    "  - name: T\n"
    "    key: { partition: PK }\n"
    "    aggregates:\n";

TEST(ConfigAggregatesTest, ParsesEveryForm) {
  absl::StatusOr<Config> config = ParseConfig(
      std::string(kTable) +
          "      - name: by_status\n"
          "        filter: { attribute: kind, equals: order }\n"
          "        group_by: { attribute: status }\n"
          "        measures: [count, {sum: total}, {min: total}, {max: total}, {avg: total}]\n"
          "      - name: votes\n"
          "        group_by: { template: \"{GSI1PK}\" }\n"
          "        strip_shard_suffix: \"#{shard}\"\n"
          "        measures: [count]\n"
          "      - name: by_size\n"
          "        group_by: { attribute: size, type: N }\n"
          "        measures: [{sum: n}]\n",
      "t.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  const auto& aggregates = config->tables[0].aggregates;
  ASSERT_EQ(aggregates.size(), 3u);
  EXPECT_EQ(Describe(aggregates[0]),
            "by_status on T group status:S strip \"\" filter [kind] measures "
            "[count,sum(total),min(total),max(total),avg(total)]");
  EXPECT_EQ(Describe(aggregates[1]),
            "votes on T group template {GSI1PK} strip \"#{shard}\" filter [] measures [count]");
  EXPECT_EQ(Describe(aggregates[2]), "by_size on T group size:N strip \"\" filter [] measures [sum(n)]");
}

TEST(ConfigAggregatesTest, TheExampleAggregatesExactly) {
  std::string path = "examples/cdcview.yaml";
  if (const char* dir = std::getenv("CDCVIEW_SOURCE_DIR")) path = std::string(dir) + "/" + path;
  absl::StatusOr<Config> config = LoadConfig(path);
  ASSERT_TRUE(config.ok()) << config.status();
  std::vector<std::string> described;
  for (const AggregateSpec& a : config->tables[0].aggregates) described.push_back(Describe(a));
  EXPECT_EQ(described,
            (std::vector<std::string>{
                "VotesPerDay on App group template {GSI1PK} strip \"#{shard}\" filter [GSI1PK] "
                "measures [count]",
                "OrderTotals on App group status:S strip \"\" filter [type] measures "
                "[count,sum(total),min(total),max(total),avg(total)]"}));
}

TEST(ConfigAggregatesTest, RoundTripsThroughYaml) {
  absl::StatusOr<Config> config = ParseConfig(
      std::string(kTable) +
          "      - name: by_status\n"
          "        filter: [{ attribute: kind, equals: order }, { attribute: gone, exists: false }]\n"
          "        group_by: { template: \"S#{status}\" }\n"
          "        strip_shard_suffix: \"-{shard}\"\n"
          "        measures: [count, {sum: total}, {min: total}, {max: total}, {avg: total}]\n",
      "t.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  const std::string yaml = ConfigToYaml(*config);
  absl::StatusOr<Config> again = ParseConfig(yaml, "again.yaml");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << yaml;
  ASSERT_EQ(again->tables[0].aggregates.size(), 1u);
  EXPECT_EQ(again->tables[0].aggregates[0].Fingerprint(), config->tables[0].aggregates[0].Fingerprint());
  EXPECT_EQ(Describe(again->tables[0].aggregates[0]), Describe(config->tables[0].aggregates[0]));
  EXPECT_EQ(ConfigToYaml(*again), yaml);
}

TEST(ConfigAggregatesErrorTest, NamesAreUniqueAcrossAllTables) {
  EXPECT_EQ(ErrorOf("tables:\n"
                    "  - name: A\n"
                    "    key: { partition: PK }\n"
                    "    aggregates:\n"
                    "      - { name: totals, group_by: { attribute: x }, measures: [count] }\n"
                    "  - name: B\n"
                    "    key: { partition: PK }\n"
                    "    aggregates:\n"
                    "      - { name: totals, group_by: { attribute: y }, measures: [count] }\n"),
            "t.yaml:9: tables[1].aggregates[0].name: aggregate name \"totals\" is used twice (also at line 5)");
}

TEST(ConfigAggregatesErrorTest, GroupByAndMeasuresAreRequired) {
  EXPECT_EQ(ErrorOf(std::string(kTable) + "      - { name: a, measures: [count] }\n"),
            "t.yaml:5: tables[0].aggregates[0].group_by: is required");
  EXPECT_EQ(ErrorOf(std::string(kTable) + "      - { name: a, group_by: { attribute: x } }\n"),
            "t.yaml:5: tables[0].aggregates[0].measures: is required");
  EXPECT_EQ(ErrorOf(std::string(kTable) + "      - { name: a, group_by: { attribute: x }, measures: [] }\n"),
            "t.yaml:5: tables[0].aggregates[0].measures: expected a list of measures (count, "
            "{sum: ATTR}, {min: ATTR}, {max: ATTR}, {avg: ATTR}), got an empty list");
  EXPECT_EQ(ErrorOf(std::string(kTable) + "      - { name: a, group_by: x, measures: [count] }\n"),
            "t.yaml:5: tables[0].aggregates[0].group_by: expected a mapping, got \"x\"");
}

TEST(ConfigAggregatesErrorTest, BadMeasures) {
  EXPECT_EQ(ErrorOf(std::string(kTable) +
                    "      - { name: a, group_by: { attribute: x }, measures: [count, median] }\n"),
            "t.yaml:5: tables[0].aggregates[0].measures[1]: expected count or one of {sum: ATTR}, "
            "{min: ATTR}, {max: ATTR}, {avg: ATTR}, got \"median\"");
  EXPECT_EQ(ErrorOf(std::string(kTable) +
                    "      - { name: a, group_by: { attribute: x }, measures: [{total: n}] }\n"),
            "t.yaml:5: tables[0].aggregates[0].measures[0]: unknown field \"total\" (expected one "
            "of sum, min, max, avg)");
  EXPECT_EQ(ErrorOf(std::string(kTable) +
                    "      - { name: a, group_by: { attribute: x }, measures: [{sum: n, min: n}] }\n"),
            "t.yaml:5: tables[0].aggregates[0].measures[0]: expected count or one of {sum: ATTR}, "
            "{min: ATTR}, {max: ATTR}, {avg: ATTR}, got a mapping");
  EXPECT_EQ(ErrorOf(std::string(kTable) +
                    "      - { name: a, group_by: { attribute: x }, measures: [{sum: \"\"}] }\n"),
            "t.yaml:5: tables[0].aggregates[0].measures[0].sum: must not be empty");
  EXPECT_EQ(ErrorOf(std::string(kTable) +
                    "      - name: a\n"
                    "        group_by: { attribute: x }\n"
                    "        measures:\n"
                    "          - {sum: n}\n"
                    "          - count\n"
                    "          - {sum: n}\n"),
            "t.yaml:10: tables[0].aggregates[0].measures[2]: sum(n) is listed twice (also at "
            "tables[0].aggregates[0].measures[0])");
}

TEST(ConfigAggregatesErrorTest, StripShardSuffixNeedsOneShardPlaceholderAndAnSGroup) {
  EXPECT_EQ(ErrorOf(std::string(kTable) +
                    "      - { name: a, group_by: { attribute: x }, strip_shard_suffix: \"#\", "
                    "measures: [count] }\n"),
            "t.yaml:5: tables[0].aggregates[0].strip_shard_suffix: shard suffix \"#\" must contain "
            "{shard} exactly once, e.g. \"#{shard}\"");
  EXPECT_EQ(ErrorOf(std::string(kTable) +
                    "      - { name: a, group_by: { attribute: x, type: N }, strip_shard_suffix: "
                    "\"#{shard}\", measures: [count] }\n"),
            "t.yaml:5: tables[0].aggregates[0].strip_shard_suffix: needs an S group key; group_by "
            "is N (use type: S or a template)");
}

TEST(ConfigAggregatesErrorTest, UnknownFieldAndBadFilter) {
  EXPECT_EQ(ErrorOf(std::string(kTable) +
                    "      - { name: a, group: { attribute: x }, measures: [count] }\n"),
            "t.yaml:5: tables[0].aggregates[0]: unknown field \"group\" (expected one of name, "
            "filter, group_by, strip_shard_suffix, measures)");
  EXPECT_EQ(ErrorOf(std::string(kTable) +
                    "      - { name: a, filter: { attribute: k }, group_by: { attribute: x }, "
                    "measures: [count] }\n"),
            "t.yaml:5: tables[0].aggregates[0].filter: expected exactly one of equals, "
            "begins_with, exists, got none");
  EXPECT_EQ(ErrorOf("tables:\n  - name: T\n    key: { partition: PK }\n    aggregates: 3\n"),
            "t.yaml:4: tables[0].aggregates: expected a list of aggregates, got \"3\"");
}

}  // namespace
}  // namespace cdcview
