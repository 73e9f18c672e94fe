#include "daemon/metrics/assignment_probe.h"

#include <prometheus/counter.h>
#include <prometheus/registry.h>

namespace cdcview {

AssignmentProbe::AssignmentProbe(MetricsRegistry& metrics) {
  changes_ = &prometheus::BuildCounter()
                  .Name("cdcview_cluster_assignment_changes_total")
                  .Help("Starts that found the store holding other partitions than the "
                        "configured cluster assignment gives this member, and changed it.")
                  .Register(metrics.registry())
                  .Add({});
  dropped_ = &prometheus::BuildCounter()
                  .Name("cdcview_cluster_items_dropped_total")
                  .Help("Stored items of partitions this member no longer owns, dropped with "
                        "their view entries and aggregate contributions.")
                  .Register(metrics.registry())
                  .Add({});
}

void AssignmentProbe::RecordDropped(uint64_t items) { dropped_->Increment(static_cast<double>(items)); }

void AssignmentProbe::RecordChange() { changes_->Increment(); }

}  // namespace cdcview
