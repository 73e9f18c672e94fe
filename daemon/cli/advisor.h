// The sharding advisor behind `cdcview advise`: from a view's hot keys (GetHotKeys) and its
// description (DescribeView), which partition keys deserve write sharding and which sharded
// keys do not.
//
// The rule: one DynamoDB partition sustains about 1,000 writes/s (AdviseOptions::
// target_writes_per_shard, settable with --target-writes-per-shard). A key whose rate is above
// that for sure (the sketch's estimate minus its error bound, so a key is never called hot on
// the sketch's overestimate alone) deserves ceil(rate / target) shards, rounded up to a power
// of two so that shard numbers stay even under later doubling. A key of a sharded view whose
// summed rate over all shards fits one partition gains nothing from sharding: every Query of
// it reads `shard_count` physical keys instead of one. A sharded key still above
// shard_count * target is told to raise the count.
//
// The rates are those of the last one to two minutes; when nothing was written then (a
// stream replayed to its end, an idle source), `cdcview advise` asks for the whole run since
// the daemon started instead, and says so.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "cdcview/v1/view_service.pb.h"

namespace cdcview {

struct AdviseOptions {
  double target_writes_per_shard = 1000;
};

// Which span a HotKeysResponse covers (GetHotKeysRequest.whole_run).
enum class HotKeysSpan { kRecent, kWholeRun };

// ceil(rate / target) rounded up to a power of two, at least 2.
uint32_t SuggestedShards(double writes_per_second, double target_writes_per_shard);

// The advice for one view, several lines, each ending in '\n'.
std::string AdviseView(const v1::ViewDescription& view, const v1::HotKeysResponse& hot,
                       const AdviseOptions& options, HotKeysSpan span = HotKeysSpan::kRecent);

}  // namespace cdcview
