// IngestionLine: the periodic info line with a source's event counts ("never a line per
// event"): what it applied, skipped and rejected since the previous line and in total, and its
// lag. The Application logs one per source every apply.log_counts_seconds. Pure function.
#pragma once

#include <cstdint>
#include <string>

#include "daemon/server/readiness.h"

namespace cdcview {

struct EventCounts {
  uint64_t applied = 0;
  uint64_t skipped = 0;
  uint64_t rejected = 0;

  bool operator==(const EventCounts&) const = default;
};

// "source app (running): +120 applied, +0 skipped, +3 rejected in the last 30 s; totals
//  3134 applied, 0 skipped, 3 rejected; lag 0.4 s". The lag is readiness's (readiness.h):
// "lag unknown (is backfilling (a snapshot scan))" when it is not known, "failed" for a source
// in error.
std::string IngestionLine(const std::string& source, const SourceProgress& progress,
                          const EventCounts& before, const EventCounts& now,
                          double interval_seconds);

}  // namespace cdcview
