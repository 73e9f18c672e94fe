#include "daemon/cli/advisor.h"

#include <cmath>
#include <cstdio>

#include "daemon/cli/json_output.h"

namespace cdcview {
namespace {

std::string Fixed(double v, int digits = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// A rate as given on the command line: 1000, 0.5.
std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// A key as the user would write it in a query: S as JSON text, others as their JSON form.
std::string KeyText(const v1::AttributeValue& key) { return ValueToJson(key, false); }

std::string Evidence(const v1::HotKey& key, double window_seconds) {
  return Fixed(key.writes_per_second()) + " writes/s, " + Fixed(100 * key.share()) +
         "% of the view's writes, sketch error <= " + std::to_string(key.error_bound()) +
         " writes in " + Fixed(window_seconds) + " s";
}

// The rate the key has for sure: the sketch's count minus its error bound, per second.
double SureRate(const v1::HotKey& key, double window_seconds) {
  return std::max(0.0, key.writes_per_second() - double(key.error_bound()) / window_seconds);
}

}  // namespace

uint32_t SuggestedShards(double writes_per_second, double target_writes_per_shard) {
  const double needed = std::ceil(writes_per_second / target_writes_per_shard);
  uint32_t shards = 2;
  while (shards < needed && shards < (1u << 30)) shards *= 2;
  return shards;
}

std::string AdviseView(const v1::ViewDescription& view, const v1::HotKeysResponse& hot,
                       const AdviseOptions& options, HotKeysSpan span) {
  const double target = options.target_writes_per_shard;
  const double window = hot.window_seconds();
  // GetHotKeys reports the sharding it split the keys by; DescribeView adds the suffix.
  const uint32_t shards = hot.shard_count() > 0 ? hot.shard_count() : view.shard_count();
  const bool whole_run = span == HotKeysSpan::kWholeRun;
  std::string out = "view " + view.name() + ": " +
                    (whole_run ? "no writes in the last one to two minutes; over the whole run "
                                 "instead: "
                               : "") +
                    Fixed(hot.total_writes_per_second()) + " entry writes/s over " +
                    (whole_run ? "" : "the last ") + Fixed(window) + " s";
  if (shards > 0) {
    out += ", sharded " + std::to_string(shards) + " ways";
    if (!view.shard_suffix().empty()) out += " (" + view.shard_suffix() + ")";
  }
  out += "\n";
  size_t advice = 0;
  if (shards == 0) {
    for (const v1::HotKey& key : hot.keys()) {
      const double sure = SureRate(key, window);
      if (sure <= target) continue;
      ++advice;
      out += "  shard " + KeyText(key.key()) + ": " + Evidence(key, window) + "; over " +
             Num(target) + " writes/s per partition: shards: { count: " +
             std::to_string(SuggestedShards(sure, target)) + ", suffix: \"#{shard}\" }\n";
    }
  } else {
    for (const v1::HotKey& key : hot.logical_keys()) {
      const double rate = key.writes_per_second();
      if (rate <= target) {
        ++advice;
        out += "  not hot " + KeyText(key.key()) + ": " + Evidence(key, window) +
               " over all shards; fits one partition (" + Num(target) +
               " writes/s), so sharding only multiplies its reads by " +
               std::to_string(shards) + " (each Query reads " +
               std::to_string(shards) + " keys)\n";
      } else if (SureRate(key, window) > target * shards) {
        ++advice;
        out += "  too few shards " + KeyText(key.key()) + ": " + Evidence(key, window) +
               " over all shards; over " + std::to_string(shards) + " x " +
               Num(target) + " writes/s: shards: { count: " +
               std::to_string(SuggestedShards(SureRate(key, window), target)) + " }\n";
      }
    }
  }
  if (hot.keys().empty()) {
    out += whole_run ? "  no writes since the start\n" : "  no writes in the window\n";
  } else if (advice == 0) {
    out += shards > 0
               ? "  nothing to change: every hot key needs its shards\n"
               : "  nothing to change: no key above " + Num(target) + " writes/s\n";
  }
  return out;
}

}  // namespace cdcview
