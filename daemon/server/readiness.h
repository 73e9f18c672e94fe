// Readiness of a view: the rule behind each view's health service "cdcview.view.<name>" and
// behind ReadConsistency.max_staleness_seconds (ViewReader), so both mean the same lag.
//
// A view is ready to answer "fresh enough" reads when it is READY (not being rebuilt) and
// every source feeding its table is within server.ready_max_lag_seconds. Pure functions;
// the Application's readiness ticker gathers the inputs once a second.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cdcview {

// What the ticker knows about one source of the view's table.
struct SourceProgress {
  std::string state;         // ChangeSource::Health().state
  double lag_seconds = 0;    // Applier::Counters(source).lag_seconds (of its last batch)
};

// The lag that counts for readiness: 0 for a source that has nothing more to read (its last
// batch's lag is history, not staleness), the last batch's lag while running; a failed
// source never counts as caught up, whatever its last lag was.
double EffectiveLagSeconds(const SourceProgress& source);

bool ViewCaughtUp(bool view_ready, const std::vector<SourceProgress>& table_sources,
                  uint32_t max_lag_seconds);

// "cdcview.view.<view>": the grpc.health.v1 service name of a view.
std::string ViewHealthServiceName(const std::string& view);

}  // namespace cdcview
