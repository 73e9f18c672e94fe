// The cluster merges of GetStatus, ListViews, DescribeView and GetHotKeys: exact merged
// answers from members' answers written out as text protos.
#include "daemon/server/cluster_merge.h"

#include <google/protobuf/text_format.h>
#include <google/protobuf/util/message_differencer.h>

#include <limits>
#include <string>
#include <vector>

#include "daemon/server/read_consistency.h"
#include "gtest/gtest.h"

namespace cdcview {
namespace {

template <typename T>
T Parse(const std::string& text) {
  T message;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &message)) << text;
  return message;
}

template <typename T>
::testing::AssertionResult EqualsProto(const T& got, const std::string& want_text) {
  const T want = Parse<T>(want_text);
  if (google::protobuf::util::MessageDifferencer::Equals(got, want)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "got:\n" << got.DebugString() << "want:\n"
                                       << want.DebugString();
}

// ---- GetStatus ----

// Two members of a 2-member cluster reading topic t (partitions 0..3: 0 and 2 are member 0's,
// 1 and 3 member 1's). Member 1 still has t/0 stored from before a resize, behind member 0's.
std::vector<v1::StatusResponse> TwoMembers() {
  return {Parse<v1::StatusResponse>(R"pb(
            sources {
              name: "orders" kind: "kafka" table: "App" state: "caught_up"
              events_applied: 10 events_skipped: 1 events_rejected: 2 lag_seconds: 0
              positions { source: "orders" partition: "t/0" position: "5" }
              positions { source: "orders" partition: "t/2" position: "7" }
            }
            sources {
              name: "audit" kind: "kafka" table: "Audit" state: "error"
              error: "topic audit is gone" lag_seconds: inf
            }
            applied {
              entries { source: "orders" partition: "t/0" position: "5" }
              entries { source: "orders" partition: "t/2" position: "7" }
            }
            lmdb_map_used_bytes: 100 lmdb_map_size_bytes: 1000
          )pb"),
          Parse<v1::StatusResponse>(R"pb(
            sources {
              name: "orders" kind: "kafka" table: "App" state: "backfilling" progress: 0.25
              events_applied: 20 events_skipped: 3 events_rejected: 4 lag_seconds: 7.5
              positions { source: "orders" partition: "t/0" position: "2" }
              positions { source: "orders" partition: "t/1" position: "3" }
              positions { source: "orders" partition: "t/3" position: "9" }
            }
            sources {
              name: "audit" kind: "kafka" table: "Audit" state: "error"
              error: "broker unreachable" lag_seconds: inf
            }
            applied {
              entries { source: "orders" partition: "t/0" position: "2" }
              entries { source: "orders" partition: "t/1" position: "3" }
              entries { source: "orders" partition: "t/3" position: "9" }
            }
            lmdb_map_used_bytes: 200 lmdb_map_size_bytes: 2000
          )pb")};
}

constexpr char kMergedEntries[] = R"pb(
  entries { source: "orders" partition: "t/0" position: "5" }
  entries { source: "orders" partition: "t/1" position: "3" }
  entries { source: "orders" partition: "t/2" position: "7" }
  entries { source: "orders" partition: "t/3" position: "9" }
)pb";

TEST(MergeStatusTest, CountersAddTheStalestLagTheWorstStateEachPartitionFromItsOwner) {
  v1::StatusResponse merged = MergeStatus(TwoMembers());
  // The token is checked on its own below; the rest compares as a whole.
  const std::string token = merged.applied().token();
  merged.mutable_applied()->clear_token();
  EXPECT_TRUE(EqualsProto(merged, R"pb(
    sources {
      name: "orders" kind: "kafka" table: "App" state: "backfilling" progress: 0.25
      events_applied: 30 events_skipped: 4 events_rejected: 6 lag_seconds: 7.5
      positions { source: "orders" partition: "t/0" position: "5" }
      positions { source: "orders" partition: "t/1" position: "3" }
      positions { source: "orders" partition: "t/2" position: "7" }
      positions { source: "orders" partition: "t/3" position: "9" }
    }
    sources {
      name: "audit" kind: "kafka" table: "Audit" state: "error"
      error: "member 0: topic audit is gone; member 1: broker unreachable" lag_seconds: inf
    }
    applied {
      entries { source: "orders" partition: "t/0" position: "5" }
      entries { source: "orders" partition: "t/1" position: "3" }
      entries { source: "orders" partition: "t/2" position: "7" }
      entries { source: "orders" partition: "t/3" position: "9" }
    }
    lmdb_map_used_bytes: 300 lmdb_map_size_bytes: 3000
    members {
      ordinal: 0 reachable: true
      sources { name: "orders" state: "caught_up" lag_seconds: 0 partitions: "t/0" partitions: "t/2" }
      sources { name: "audit" state: "error" lag_seconds: inf }
    }
    members {
      ordinal: 1 reachable: true
      sources { name: "orders" state: "backfilling" lag_seconds: 7.5 partitions: "t/1" partitions: "t/3" }
      sources { name: "audit" state: "error" lag_seconds: inf }
    }
  )pb"));
  // One token of every member's partitions, as a standalone daemon's token of them.
  const v1::AppliedPosition want = Parse<v1::AppliedPosition>(kMergedEntries);
  EXPECT_EQ(token, EncodePositionToken(want));
  absl::StatusOr<std::vector<v1::AppliedPosition::Entry>> decoded = DecodePositionToken(token);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->size(), 4u);
  EXPECT_EQ((*decoded)[0].partition(), "t/0");
  EXPECT_EQ((*decoded)[0].position(), "5");
}

TEST(MergeStatusTest, TheStateIsTheWorstOfTheMembers) {
  const std::vector<std::string> best_first = {"finished", "caught_up", "running", "backfilling",
                                               "starting", "stopped",   "error"};
  for (size_t better = 0; better < best_first.size(); ++better) {
    for (size_t worse = better; worse < best_first.size(); ++worse) {
      for (bool worse_first : {false, true}) {
        v1::StatusResponse a, b;
        a.add_sources()->set_name("s");
        b.add_sources()->set_name("s");
        a.mutable_sources(0)->set_state(best_first[worse_first ? worse : better]);
        b.mutable_sources(0)->set_state(best_first[worse_first ? better : worse]);
        EXPECT_EQ(MergeStatus({a, b}).sources(0).state(), best_first[worse])
            << best_first[better] << " and " << best_first[worse];
      }
    }
  }
  // A state this build does not know ranks below error only.
  EXPECT_EQ(SourceStateRank("resyncing"), SourceStateRank("stopped"));
  EXPECT_LT(SourceStateRank("resyncing"), SourceStateRank("error"));
  EXPECT_EQ(SourceStateRank(""), -1);
}

// The progress of a backfill is the smallest among the members backfilling: a caught-up
// member's unset progress does not count, and a worse state clears it.
TEST(MergeStatusTest, ProgressIsTheSmallestOfTheMembersInTheMergedState) {
  auto member = [](const std::string& state, double progress) {
    v1::StatusResponse r;
    v1::SourceStatus* s = r.add_sources();
    s->set_name("s");
    s->set_state(state);
    s->set_progress(progress);
    return r;
  };
  v1::StatusResponse merged = MergeStatus(
      {member("caught_up", 0), member("backfilling", 0.5), member("backfilling", 0.75)});
  EXPECT_EQ(merged.sources(0).state(), "backfilling");
  EXPECT_EQ(merged.sources(0).progress(), 0.5);
  merged = MergeStatus({member("backfilling", 0.5), member("starting", 0)});
  EXPECT_EQ(merged.sources(0).state(), "starting");
  EXPECT_EQ(merged.sources(0).progress(), 0);
}

TEST(MergeStatusTest, AnUnreachableMemberPutsEverySourceInError) {
  std::vector<v1::StatusResponse> members = TwoMembers();
  members[1] = v1::StatusResponse();
  v1::StatusResponse merged = MergeStatus(members);
  MarkMemberUnreachable(1, "connection refused", &merged);
  merged.mutable_applied()->clear_token();
  EXPECT_TRUE(EqualsProto(merged, R"pb(
    sources {
      name: "orders" kind: "kafka" table: "App" state: "error"
      error: "member 1 did not answer: connection refused"
      events_applied: 10 events_skipped: 1 events_rejected: 2 lag_seconds: inf
      positions { source: "orders" partition: "t/0" position: "5" }
      positions { source: "orders" partition: "t/2" position: "7" }
    }
    sources {
      name: "audit" kind: "kafka" table: "Audit" state: "error"
      error: "member 0: topic audit is gone; member 1 did not answer: connection refused"
      lag_seconds: inf
    }
    applied {
      entries { source: "orders" partition: "t/0" position: "5" }
      entries { source: "orders" partition: "t/2" position: "7" }
    }
    lmdb_map_used_bytes: 100 lmdb_map_size_bytes: 1000
    members {
      ordinal: 0 reachable: true
      sources { name: "orders" state: "caught_up" lag_seconds: 0 partitions: "t/0" partitions: "t/2" }
      sources { name: "audit" state: "error" lag_seconds: inf }
    }
    members { ordinal: 1 reachable: false error: "connection refused" }
  )pb"));
}

// ---- ListViews / DescribeView ----

constexpr char kView[] = R"pb(
  name: "ByDay" table: "App" fingerprint: "f1"
  partition_key { attribute: "day" type: "S" } sort_key { attribute: "ts" type: "N" }
  projection: "ALL" rules: 1 shard_count: 3 shard_suffix: "#"
)pb";

v1::ViewDescription View(const std::string& extra) {
  return Parse<v1::ViewDescription>(std::string(kView) + extra);
}

TEST(MergeViewDescriptionTest, CountsAddShardsAddAndTheSkewIsRecomputed) {
  absl::StatusOr<v1::ViewDescription> merged = MergeViewDescription({
      View(R"pb(state: READY build_progress: 1 item_count: 10 bytes: 4096
               index_writes_per_event: 1.5 skipped_key_type_mismatch: 1
               shard_item_counts: [ 5, 3, 2 ] shard_skew: 1.5)pb"),
      View(R"pb(state: READY build_progress: 1 item_count: 20 bytes: 8192
               index_writes_per_event: 2.5 skipped_key_type_mismatch: 2
               shard_item_counts: [ 7, 4, 9 ] shard_skew: 1.35)pb"),
      // A member that has applied nothing to the table yet: ratio 0, left out of the mean.
      View(R"pb(state: READY build_progress: 1 shard_item_counts: [ 0, 0, 0 ] shard_skew: 1)pb"),
  });
  ASSERT_TRUE(merged.ok()) << merged.status();
  // Shards 12, 7, 11: the largest over the mean, 12 / 10.
  EXPECT_TRUE(EqualsProto(*merged, std::string(kView) + R"pb(
    state: READY build_progress: 1 item_count: 30 bytes: 12288 index_writes_per_event: 2
    skipped_key_type_mismatch: 3 shard_item_counts: [ 12, 7, 11 ] shard_skew: 1.2)pb"));
}

TEST(MergeViewDescriptionTest, BuildingIfAnyElseBackfillingIfAnyWithTheSmallestProgress) {
  auto state = [](std::vector<v1::ViewDescription> members) {
    absl::StatusOr<v1::ViewDescription> merged = MergeViewDescription(members);
    EXPECT_TRUE(merged.ok()) << merged.status();
    return std::make_pair(v1::ViewDescription::State_Name(merged->state()),
                          merged->build_progress());
  };
  const auto ready = View("state: READY build_progress: 1");
  const auto backfilling = [](double p) {
    return View("state: BACKFILLING build_progress: " + std::to_string(p));
  };
  const auto building = [](double p) {
    return View("state: BUILDING build_progress: " + std::to_string(p));
  };
  EXPECT_EQ(state({ready, ready}), std::make_pair(std::string("READY"), 1.0));
  EXPECT_EQ(state({ready, backfilling(0.5), backfilling(0.25)}),
            std::make_pair(std::string("BACKFILLING"), 0.25));
  EXPECT_EQ(state({backfilling(0.125), building(0.75), ready, building(0.5)}),
            std::make_pair(std::string("BUILDING"), 0.5));
}

const std::string kSameConfig =
    "; every member must run the same config (while a rolling update replaces them, members "
    "of both versions disagree until it ends)";

TEST(MergeViewDescriptionTest, MembersWithAnotherDefinitionAreAConfigMismatch) {
  v1::ViewDescription other = View("");
  other.set_fingerprint("f2");
  EXPECT_EQ(MergeViewDescription({View(""), View(""), other}).status(),
            absl::FailedPreconditionError(
                "the cluster's members disagree on view ByDay: member 0 has fingerprint \"f1\", "
                "member 2 has \"f2\"; every member must run the same config (while a rolling "
                "update replaces them, members of both versions disagree until it ends)"));
  other = View("");
  other.set_shard_count(4);
  EXPECT_EQ(MergeViewDescription({View(""), other}).status().message(),
            "the cluster's members disagree on view ByDay: member 0 has shard_count 3, member 1 "
            "has 4" + kSameConfig);
  other = View("");
  other.mutable_sort_key()->set_type("S");
  EXPECT_EQ(MergeViewDescription({View(""), other}).status().message(),
            "the cluster's members disagree on view ByDay: member 0 and member 1 differ in its "
            "sort_key" + kSameConfig);
}

TEST(MergeListViewsTest, EachViewMergedInTheMembersOrder) {
  auto list = [](uint64_t items) {
    v1::ListViewsResponse r;
    *r.add_views() = View("state: READY item_count: " + std::to_string(items));
    v1::ViewDescription* second = r.add_views();
    second->set_name("Alpha");
    second->set_table("App");
    second->set_state(v1::ViewDescription::READY);
    second->set_item_count(items * 2);
    return r;
  };
  absl::StatusOr<v1::ListViewsResponse> merged = MergeListViews({list(1), list(2)});
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_TRUE(EqualsProto(*merged, std::string("views { ") + kView + R"pb(
      state: READY item_count: 3 }
    views { name: "Alpha" table: "App" state: READY item_count: 6 })pb"));

  v1::ListViewsResponse fewer = list(1);
  fewer.mutable_views()->RemoveLast();
  EXPECT_EQ(MergeListViews({list(1), fewer}).status(),
            absl::FailedPreconditionError(
                "the cluster's members disagree on view Alpha: member 0 has it, member 1 does "
                "not; every member must run the same config (while a rolling update replaces "
                "them, members of both versions disagree until it ends)"));
  EXPECT_EQ(MergeListViews({fewer, list(1)}).status().message(),
            "the cluster's members disagree on view Alpha: member 1 has it, member 0 does not" +
                kSameConfig);
}

// ---- GetHotKeys ----

TEST(MergeHotKeysTest, RatesAndBoundsAddSharesFromTheMergedTotalTopLimitTiesByKey) {
  absl::StatusOr<v1::HotKeysResponse> merged = MergeHotKeys(
      {Parse<v1::HotKeysResponse>(R"pb(
         keys { key { s: "a" } writes_per_second: 10 share: 0.5 error_bound: 1 }
         keys { key { s: "c" } writes_per_second: 6 share: 0.3 error_bound: 0 }
         keys { key { s: "b" } writes_per_second: 4 share: 0.2 error_bound: 2 }
         window_seconds: 60 total_writes_per_second: 20 shard_count: 2
         logical_keys { key { s: "a" } writes_per_second: 10 share: 0.5 error_bound: 1 }
       )pb"),
       Parse<v1::HotKeysResponse>(R"pb(
         keys { key { s: "b" } writes_per_second: 6 share: 0.2 error_bound: 3 }
         keys { key { s: "d" } writes_per_second: 1 share: 0.1 error_bound: 0 }
         window_seconds: 90 total_writes_per_second: 30 shard_count: 2
         logical_keys { key { s: "z" } writes_per_second: 10 share: 0.3 error_bound: 0 }
       )pb")},
      3);
  ASSERT_TRUE(merged.ok()) << merged.status();
  // a and b both at 10/s: "a" first by key; c 6/s third; d cut by the limit.
  EXPECT_TRUE(EqualsProto(*merged, R"pb(
    keys { key { s: "a" } writes_per_second: 10 share: 0.2 error_bound: 1 }
    keys { key { s: "b" } writes_per_second: 10 share: 0.2 error_bound: 5 }
    keys { key { s: "c" } writes_per_second: 6 share: 0.12 error_bound: 0 }
    window_seconds: 90 total_writes_per_second: 50 shard_count: 2
    logical_keys { key { s: "a" } writes_per_second: 10 share: 0.2 error_bound: 1 }
    logical_keys { key { s: "z" } writes_per_second: 10 share: 0.2 error_bound: 0 }
  )pb"));
}

TEST(MergeHotKeysTest, KeysOfOtherTypesAreOtherKeysAndLimitZeroIsTen) {
  std::vector<v1::HotKeysResponse> members(2);
  for (int i = 0; i < 12; ++i) {
    v1::HotKey* k = members[i % 2].add_keys();
    k->mutable_key()->set_n(std::to_string(i));
    k->set_writes_per_second(i);
  }
  v1::HotKey* s = members[0].add_keys();
  s->mutable_key()->set_s("11");  // an S "11", not the N 11
  s->set_writes_per_second(100);
  absl::StatusOr<v1::HotKeysResponse> merged = MergeHotKeys(members, 0);
  ASSERT_TRUE(merged.ok()) << merged.status();
  ASSERT_EQ(merged->keys_size(), 10);
  EXPECT_EQ(merged->keys(0).key().s(), "11");
  EXPECT_EQ(merged->keys(1).key().n(), "11");
  EXPECT_EQ(merged->keys(9).key().n(), "3");
}

TEST(MergeHotKeysTest, MembersWithAnotherShardingAreAConfigMismatch) {
  std::vector<v1::HotKeysResponse> members(3);
  members[2].set_shard_count(4);
  EXPECT_EQ(MergeHotKeys(members, 10).status(),
            absl::FailedPreconditionError(
                "the cluster's members disagree on the hot keys' write sharding: member 0 has "
                "shard_count 0, member 2 has 4; every member must run the same config (while a "
                "rolling update replaces them, members of both versions disagree until it "
                "ends)"));
}

}  // namespace
}  // namespace cdcview
