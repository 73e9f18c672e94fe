// The watch: section: defaults, max_lag_changes following retain_changes, and the values
// that would leave Watch unable to work (0, a lag bound not below the retained log).
#include <string>

#include "daemon/config/config.h"
#include "daemon/config/config_yaml.h"
#include "gtest/gtest.h"

namespace cdcview {
namespace {

constexpr char kTables[] = R"(
tables:
  - name: App
    key: { partition: PK }
    views:
      - name: ByStatus
        partition_key: { attribute: status, type: S }
)";

absl::StatusOr<Config> Parse(const std::string& watch) {
  return ParseConfig(watch + kTables, "w.yaml");
}

TEST(WatchConfigTest, DefaultsKeepAMillionChangesAndCutOffAtHalf) {
  auto config = Parse("");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->watch.retain_changes, 1000000u);
  EXPECT_EQ(config->watch.max_lag_changes, 500000u);
}

TEST(WatchConfigTest, MaxLagDefaultsToHalfTheRetainedLog) {
  auto config = Parse("watch: { retain_changes: 1000 }\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->watch.retain_changes, 1000u);
  EXPECT_EQ(config->watch.max_lag_changes, 500u);
  config = Parse("watch: { retain_changes: 1000, max_lag_changes: 999 }\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->watch.max_lag_changes, 999u);
}

TEST(WatchConfigTest, ZeroIsRejected) {
  EXPECT_EQ(std::string(Parse("watch: { retain_changes: 0 }\n").status().message()),
            "w.yaml:1: watch.retain_changes: 0 would keep no change log, and Watch streams read "
            "every change from it; set how many changes a watcher may resume across (default "
            "1000000)");
  EXPECT_EQ(std::string(Parse("watch: { max_lag_changes: 0 }\n").status().message()),
            "w.yaml:1: watch.max_lag_changes: 0 would cut off every watcher at the first change "
            "it has not read yet; set it above 0 and below retain_changes");
}

TEST(WatchConfigTest, LagBoundMustBeBelowTheRetainedLog) {
  EXPECT_EQ(std::string(
                Parse("watch: { retain_changes: 10, max_lag_changes: 10 }\n").status().message()),
            "w.yaml:1: watch.max_lag_changes: max_lag_changes (10) must be below retain_changes "
            "(10), so a watcher cut off for lagging can still resume");
  // retain_changes: 1 leaves no room for any lag.
  EXPECT_EQ(std::string(Parse("watch: { retain_changes: 1 }\n").status().message()),
            "w.yaml:1: watch.retain_changes: max_lag_changes (1) must be below retain_changes "
            "(1), so a watcher cut off for lagging can still resume");
}

TEST(WatchConfigTest, PrintedConfigReadsBackEqual) {
  auto config = Parse("watch: { retain_changes: 300, max_lag_changes: 7 }\n");
  ASSERT_TRUE(config.ok()) << config.status();
  auto again = ParseConfig(ConfigToYaml(*config), "printed.yaml");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->watch, config->watch);
}

}  // namespace
}  // namespace cdcview
