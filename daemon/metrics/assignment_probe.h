// AssignmentProbe: the metrics of a change of the partitions this daemon holds (a cluster
// resized, or a member made standalone; Applier::ApplyAssignment).
//
//   cdcview_cluster_assignment_changes_total   counter: starts that found the store holding
//       another assignment than the configured one and changed it
//   cdcview_cluster_items_dropped_total        counter: stored items (live or tombstones) of
//       partitions this member no longer owns, dropped with their view entries and aggregate
//       contributions
//
// Thread-safe (prometheus-cpp counters are atomic); both exist from the start at 0. Owned by
// the Application.
#pragma once

#include <cstdint>

#include "daemon/metrics/metrics.h"

namespace cdcview {

class AssignmentProbe {
 public:
  explicit AssignmentProbe(MetricsRegistry& metrics);

  void RecordDropped(uint64_t items);
  void RecordChange();

 private:
  prometheus::Counter* changes_;
  prometheus::Counter* dropped_;
};

}  // namespace cdcview
