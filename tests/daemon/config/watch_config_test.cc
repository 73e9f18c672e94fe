// The watch: section: defaults, max_lag_changes following retain_changes, the values that
// would leave Watch unable to work (0, a lag bound not below the retained log), and the
// bounds on a stream's buffer, stall time and the number of streams.
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

TEST(WatchConfigTest, StreamBoundsHaveSafeDefaults) {
  auto config = Parse("");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->watch.max_stream_buffer_bytes, 1u << 20);
  EXPECT_EQ(config->watch.stalled_stream_timeout_ms, 10000u);
  EXPECT_EQ(config->watch.max_streams, 256u);
}

TEST(WatchConfigTest, StreamBoundsAcceptTheirLimits) {
  auto config = Parse(
      "watch: { max_stream_buffer_bytes: 1GiB, stalled_stream_timeout_ms: 3600000, "
      "max_streams: 16384 }\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->watch.max_stream_buffer_bytes, 1u << 30);
  EXPECT_EQ(config->watch.stalled_stream_timeout_ms, 3600000u);
  EXPECT_EQ(config->watch.max_streams, 16384u);
  config = Parse(
      "watch: { max_stream_buffer_bytes: 1, stalled_stream_timeout_ms: 100, max_streams: 1 }\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->watch.max_stream_buffer_bytes, 1u);
  EXPECT_EQ(config->watch.stalled_stream_timeout_ms, 100u);
  EXPECT_EQ(config->watch.max_streams, 1u);
}

TEST(WatchConfigTest, StreamBoundsOutsideTheirRangeAreRejected) {
  auto error = [](const std::string& watch) {
    return std::string(Parse("watch: { " + watch + " }\n").status().message());
  };
  EXPECT_EQ(error("max_stream_buffer_bytes: 0"),
            "w.yaml:1: watch.max_stream_buffer_bytes: must be greater than 0");
  EXPECT_EQ(error("max_stream_buffer_bytes: 2GiB"),
            "w.yaml:1: watch.max_stream_buffer_bytes: 2GiB is larger than this system allows (at "
            "most 1GiB: memory held per stream whose client does not read, for up to "
            "watch.max_streams streams)");
  EXPECT_EQ(error("stalled_stream_timeout_ms: 99"),
            "w.yaml:1: watch.stalled_stream_timeout_ms: expected a whole number from 100 to "
            "3600000, got \"99\"");
  EXPECT_EQ(error("stalled_stream_timeout_ms: 3600001"),
            "w.yaml:1: watch.stalled_stream_timeout_ms: expected a whole number from 100 to "
            "3600000, got \"3600001\"");
  EXPECT_EQ(error("max_streams: 0"),
            "w.yaml:1: watch.max_streams: expected a whole number from 1 to 16384, got \"0\"");
  EXPECT_EQ(error("max_streams: 16385"),
            "w.yaml:1: watch.max_streams: expected a whole number from 1 to 16384, got "
            "\"16385\"");
}

TEST(WatchConfigTest, PrintedConfigReadsBackEqual) {
  auto config = Parse(
      "watch: { retain_changes: 300, max_lag_changes: 7, max_stream_buffer_bytes: 3KiB, "
      "stalled_stream_timeout_ms: 1500, max_streams: 9 }\n");
  ASSERT_TRUE(config.ok()) << config.status();
  auto again = ParseConfig(ConfigToYaml(*config), "printed.yaml");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->watch, config->watch);
}

}  // namespace
}  // namespace cdcview
