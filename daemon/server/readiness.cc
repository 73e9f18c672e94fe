#include "daemon/server/readiness.h"

#include <algorithm>
#include <limits>

#include "daemon/apply/applier.h"
#include "daemon/sources/change_source.h"

namespace cdcview {

double EffectiveLagSeconds(const SourceProgress& source) {
  if (source.state == "error") return std::numeric_limits<double>::infinity();
  if ((source.state == "finished" || source.state == "caught_up") && !source.unapplied) return 0;
  return source.lag_seconds + source.since_commit_seconds;
}

SourceProgress ProgressOf(const Applier& applier, size_t source, const ChangeSource* change_source) {
  const Applier::SourceCounters counters = applier.Counters(source);
  SourceProgress progress;
  progress.state = change_source != nullptr ? change_source->Health().state : "running";
  if (!applier.WriterError(source).empty()) progress.state = "error";
  progress.lag_seconds = counters.lag_seconds;
  progress.since_commit_seconds =
      std::max<int64_t>(0, applier.NowMs() - counters.last_commit_ms) / 1000.0;
  progress.unapplied = applier.HasUnapplied(source);
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
