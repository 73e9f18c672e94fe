// Readiness of a view: the rule behind each view's health service "cdcview.view.<name>" and
// behind ReadConsistency.max_staleness_seconds (ViewReader), so both mean the same lag.
//
// A view is ready to answer "fresh enough" reads when it is READY (not being rebuilt) and
// every source feeding its table is within server.ready_max_lag_seconds. A source whose lag
// is unknown counts as infinitely behind: one reading a DynamoDB snapshot (its Scan items
// carry no creation time, and the table is partial until the scan ends), one still starting,
// and one with records to read that has committed none since the daemon started. The rules are pure
// functions; ProgressOf gathers their inputs, for the Application's readiness ticker (once a
// second) and for ViewReader alike.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/state/published_state.h"
#include "daemon/state/source_health.h"

namespace cdcview {

// What is known about one source of the view's table.
struct SourceProgress {
  SourceState state = SourceState::kRunning;  // SourceHealth::state; kError if the writer fails it
  double lag_seconds = 0;    // SourceCounters::lag_seconds (of its last batch)
  double since_commit_seconds = 0;  // since the last commit with records of the source
  bool unapplied = false;    // records read but not committed (PublishedState::HasUnapplied)
  bool committed = false;    // a batch with its records committed since start
};

// The lag that counts for readiness:
//   * 0 for a source that has nothing more to read ("finished", "caught_up") and nothing read
//     but not applied: it is idle, not behind, and its last batch's lag is history;
//   * otherwise (running, or caught up with records still queued or retried) the last batch's
//     lag plus the time since that commit: what was behind then is at least that much behind
//     now if nothing newer arrived, so a source that stops delivering without an error does
//     not stay "fresh" forever;
//   * infinite for a failed source, whatever its last lag was, and for one whose lag is not
//     known yet (UnknownLagReason).
double EffectiveLagSeconds(const SourceProgress& source);

// Why the source's lag is not known yet ("" when it is known, or the source is idle or failed):
// "is backfilling (a snapshot scan)", "is starting", "has records to read and has applied
// none since the start". Used in messages next to EffectiveLagSeconds's infinity.
std::string UnknownLagReason(const SourceProgress& source);

// Source `source`'s progress as the writer and the source report it now (running if no
// source is registered: tests without sources).
SourceProgress ProgressOf(const PublishedState& published, size_t source);

bool ViewCaughtUp(bool view_ready, const std::vector<SourceProgress>& table_sources,
                  uint32_t max_lag_seconds);

// "cdcview.view.<view>": the grpc.health.v1 service name of a view.
std::string ViewHealthServiceName(const std::string& view);

// The grpc.health.v1 service that is SERVING while every view's is: what a startup probe waits
// for, so a new pod takes traffic once caught up without its manifest naming a view.
inline constexpr char kAllViewsHealthService[] = "cdcview.views";

}  // namespace cdcview
