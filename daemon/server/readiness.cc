#include "daemon/server/readiness.h"

#include <algorithm>
#include <limits>

namespace cdcview {

namespace {

bool Idle(const SourceProgress& source) {
  return (source.state == SourceState::kFinished || source.state == SourceState::kCaughtUp) &&
         !source.unapplied;
}

}  // namespace

std::string UnknownLagReason(const SourceProgress& source) {
  if (source.state == SourceState::kError || Idle(source)) return "";
  // Scan items have no creation time, so the lag of a snapshot's batches reads 0.
  if (source.state == SourceState::kBackfilling) return "is backfilling (a snapshot scan)";
  if (source.state == SourceState::kStarting) return "is starting";
  // last_commit_ms is the start time until the first commit: not a measure of anything.
  if (!source.committed) return "has applied no batch since the daemon started";
  return "";
}

double EffectiveLagSeconds(const SourceProgress& source) {
  if (source.state == SourceState::kError) return std::numeric_limits<double>::infinity();
  if (Idle(source)) return 0;
  if (!UnknownLagReason(source).empty()) return std::numeric_limits<double>::infinity();
  return source.lag_seconds + source.since_commit_seconds;
}

SourceProgress ProgressOf(const PublishedState& published, size_t source) {
  const SourceCounters counters = published.Counters(source);
  SourceProgress progress;
  if (std::optional<SourceHealth> health = published.SourceHealthOf(source)) {
    progress.state = health->state;
  }
  if (!published.WriterError(source).empty()) progress.state = SourceState::kError;
  progress.lag_seconds = counters.lag_seconds;
  progress.since_commit_seconds =
      std::max<int64_t>(0, published.NowMs() - counters.last_commit_ms) / 1000.0;
  progress.unapplied = published.HasUnapplied(source);
  progress.committed = counters.committed;
  return progress;
}

bool ViewCaughtUp(bool view_ready, const std::vector<SourceProgress>& table_sources,
                  uint32_t max_lag_seconds) {
  if (!view_ready) return false;
  for (const SourceProgress& source : table_sources) {
    if (EffectiveLagSeconds(source) > max_lag_seconds) return false;
  }
  return true;
}

std::string ViewHealthServiceName(const std::string& view) { return "cdcview.view." + view; }

}  // namespace cdcview
