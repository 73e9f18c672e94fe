#include "daemon/cli/advisor.h"

#include <string>

#include "gtest/gtest.h"

namespace cdcview {
namespace {

v1::HotKey Key(const std::string& s, double rate, double share, uint64_t error) {
  v1::HotKey k;
  k.mutable_key()->set_s(s);
  k.set_writes_per_second(rate);
  k.set_share(share);
  k.set_error_bound(error);
  return k;
}

v1::ViewDescription View(const std::string& name, uint32_t shards = 0) {
  v1::ViewDescription d;
  d.set_name(name);
  if (shards > 0) {
    d.set_shard_count(shards);
    d.set_shard_suffix("#{shard}");
  }
  return d;
}

TEST(AdvisorTest, SuggestedShardsArePowersOfTwoOfTheNeededCount) {
  EXPECT_EQ(SuggestedShards(500, 1000), 2u);
  EXPECT_EQ(SuggestedShards(1001, 1000), 2u);
  EXPECT_EQ(SuggestedShards(2001, 1000), 4u);
  EXPECT_EQ(SuggestedShards(4000, 1000), 4u);
  EXPECT_EQ(SuggestedShards(4001, 1000), 8u);
  EXPECT_EQ(SuggestedShards(4001, 300), 16u);
}

TEST(AdvisorTest, HotKeysOfAnUnshardedViewGetAShardCount) {
  v1::HotKeysResponse hot;
  hot.set_window_seconds(90);
  hot.set_total_writes_per_second(3200);
  *hot.add_keys() = Key("DAY#2025-03-01", 2600, 0.8, 900);  // for sure 2590/s
  *hot.add_keys() = Key("DAY#2025-02-28", 1005, 0.3, 900);  // for sure only 995/s
  *hot.add_keys() = Key("USER#7", 100, 0.03, 0);
  EXPECT_EQ(AdviseView(View("Feed"), hot, {}),
            "view Feed: 3200.0 entry writes/s over the last 90.0 s\n"
            "  shard \"DAY#2025-03-01\": 2600.0 writes/s, 80.0% of the view's writes, sketch "
            "error <= 900 writes in 90.0 s; over 1000 writes/s per partition: shards: { count: 4, "
            "suffix: \"#{shard}\" }\n");
  AdviseOptions lower;
  lower.target_writes_per_shard = 2000;
  EXPECT_EQ(AdviseView(View("Feed"), hot, lower),
            "view Feed: 3200.0 entry writes/s over the last 90.0 s\n"
            "  shard \"DAY#2025-03-01\": 2600.0 writes/s, 80.0% of the view's writes, sketch "
            "error <= 900 writes in 90.0 s; over 2000 writes/s per partition: shards: { count: 2, "
            "suffix: \"#{shard}\" }\n");
  lower.target_writes_per_shard = 3000;
  EXPECT_EQ(AdviseView(View("Feed"), hot, lower),
            "view Feed: 3200.0 entry writes/s over the last 90.0 s\n"
            "  nothing to change: no key above 3000 writes/s\n");
}

TEST(AdvisorTest, ShardedKeysThatAreNotHotOnlyMultiplyReads) {
  v1::HotKeysResponse hot;
  hot.set_window_seconds(60);
  hot.set_total_writes_per_second(7300);
  hot.set_shard_count(4);
  *hot.add_keys() = Key("DAY#2#0", 1250, 0.17, 0);
  *hot.add_logical_keys() = Key("DAY#2", 5000, 0.685, 0);
  *hot.add_logical_keys() = Key("DAY#3", 2000, 0.274, 0);  // needs its 4 shards
  *hot.add_logical_keys() = Key("DAY#1", 300, 0.041, 60);
  EXPECT_EQ(AdviseView(View("Days", 4), hot, {}),
            "view Days: 7300.0 entry writes/s over the last 60.0 s, sharded 4 ways (#{shard})\n"
            "  too few shards \"DAY#2\": 5000.0 writes/s, 68.5% of the view's writes, sketch "
            "error <= 0 writes in 60.0 s over all shards; over 4 x 1000 writes/s: shards: { "
            "count: 8 }\n"
            "  not hot \"DAY#1\": 300.0 writes/s, 4.1% of the view's writes, sketch error <= 60 "
            "writes in 60.0 s over all shards; fits one partition (1000 writes/s), so sharding "
            "only multiplies its reads by 4 (each Query reads 4 keys)\n");
  hot.mutable_logical_keys()->DeleteSubrange(0, 1);
  hot.mutable_logical_keys()->DeleteSubrange(1, 1);
  EXPECT_EQ(AdviseView(View("Days", 4), hot, {}),
            "view Days: 7300.0 entry writes/s over the last 60.0 s, sharded 4 ways (#{shard})\n"
            "  nothing to change: every hot key needs its shards\n");
  // A DescribeView that does not report sharding: GetHotKeys's shard count is enough.
  EXPECT_EQ(AdviseView(View("Days"), hot, {}),
            "view Days: 7300.0 entry writes/s over the last 60.0 s, sharded 4 ways\n"
            "  nothing to change: every hot key needs its shards\n");
}

TEST(AdvisorTest, NoWrites) {
  v1::HotKeysResponse hot;
  hot.set_window_seconds(1);
  EXPECT_EQ(AdviseView(View("Quiet"), hot, {}),
            "view Quiet: 0.0 entry writes/s over the last 1.0 s\n"
            "  no writes in the window\n");
}

TEST(AdvisorTest, OverTheWholeRunTheHeaderSaysSo) {
  v1::HotKeysResponse hot;
  hot.set_window_seconds(400);
  hot.set_total_writes_per_second(7.8);
  hot.set_shard_count(4);
  *hot.add_keys() = Key("DAY#2#0", 0.2, 0.03, 0);
  *hot.add_logical_keys() = Key("DAY#2", 0.8, 0.1, 0);
  EXPECT_EQ(AdviseView(View("Days", 4), hot, {}, HotKeysSpan::kWholeRun),
            "view Days: no writes in the last one to two minutes; over the whole run instead: "
            "7.8 entry writes/s over 400.0 s, sharded 4 ways (#{shard})\n"
            "  not hot \"DAY#2\": 0.8 writes/s, 10.0% of the view's writes, sketch error <= 0 "
            "writes in 400.0 s over all shards; fits one partition (1000 writes/s), so sharding "
            "only multiplies its reads by 4 (each Query reads 4 keys)\n");
  EXPECT_EQ(AdviseView(View("Quiet"), v1::HotKeysResponse(), {}, HotKeysSpan::kWholeRun),
            "view Quiet: no writes in the last one to two minutes; over the whole run instead: "
            "0.0 entry writes/s over 0.0 s\n"
            "  no writes since the start\n");
}

}  // namespace
}  // namespace cdcview
