#include "daemon/server/readiness.h"

#include <limits>

namespace cdcview {

double EffectiveLagSeconds(const SourceProgress& source) {
  if (source.state == "finished" || source.state == "caught_up") return 0;
  if (source.state == "error") return std::numeric_limits<double>::infinity();
  return source.lag_seconds;
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
