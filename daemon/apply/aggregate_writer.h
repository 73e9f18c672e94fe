// Writing aggregate deltas into the store: agg/<name> (group states) and aggm/<name> (the
// counted multisets of min/max values), inside the caller's write transaction.
//
// Used by the Applier for events and for rebuilds, on the writer thread only.
#pragma once

#include "absl/status/status.h"
#include "daemon/store/txn.h"
#include "index_builders/aggregate.h"
#include "index_builders/view_spec.h"

namespace cdcview {

// The two databases of one aggregate.
struct AggregateDbs {
  MDB_dbi groups = 0;
  MDB_dbi extremes = 0;
};

// Takes `retract` out of its group and adds `add` to its group (either may be null; when both
// are given they must be of the same group): one read-modify-write of the group's state, which
// is deleted when its last member leaves, and the min/max multiset counts of the values that
// changed. So an item changing within its group costs one state write, not two.
// Errors are the store's (RESOURCE_EXHAUSTED when the map is full, so the caller grows it and
// retries) or DATA_LOSS naming the aggregate and the group when the stored state contradicts
// the change (does not decode, or lacks what is retracted): the caller rebuilds the aggregate.
absl::Status WriteAggregateChange(WriteTxn* txn, const AggregateDbs& dbs, const AggregateSpec& spec,
                                  const AggregateContribution* retract,
                                  const AggregateContribution* add);

}  // namespace cdcview
