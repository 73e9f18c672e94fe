#include "daemon/state/source_health.h"

namespace cdcview {

std::string_view SourceStateName(SourceState state) {
  switch (state) {
    case SourceState::kStarting: return "starting";
    case SourceState::kRunning: return "running";
    case SourceState::kBackfilling: return "backfilling";
    case SourceState::kCaughtUp: return "caught_up";
    case SourceState::kFinished: return "finished";
    case SourceState::kError: return "error";
    case SourceState::kStopped: return "stopped";
  }
  return "unknown";
}

}  // namespace cdcview
