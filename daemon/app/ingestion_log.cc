#include "daemon/app/ingestion_log.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cdcview {

std::string IngestionLine(const std::string& source, const SourceProgress& progress,
                          const EventCounts& before, const EventCounts& now,
                          double interval_seconds) {
  std::string lag;
  if (progress.state == SourceState::kError) {
    lag = "failed (see GetStatus)";
  } else if (std::string unknown = UnknownLagReason(progress); !unknown.empty()) {
    lag = absl::StrCat("lag unknown (source ", unknown, ")");
  } else {
    lag = absl::StrFormat("lag %.1f s", EffectiveLagSeconds(progress));
  }
  return absl::StrFormat(
      "source %s (%s): +%d applied, +%d skipped, +%d rejected in the last %.0f s; totals %d "
      "applied, %d skipped, %d rejected; %s",
      source, SourceStateName(progress.state), now.applied - before.applied, now.skipped - before.skipped,
      now.rejected - before.rejected, interval_seconds, now.applied, now.skipped, now.rejected,
      lag);
}

}  // namespace cdcview
