// Writing aggregate deltas into the store: agg/<name> (group states) and aggm/<name> (the
// counted multisets of min/max values), inside the caller's write transaction.
//
// Used by the Applier for events and for rebuilds, on the writer thread only.
#pragma once

#include "absl/status/status.h"
#include "daemon/store/store.h"
#include "index_builders/aggregate.h"
#include "index_builders/view_spec.h"

namespace cdcview {

// The two databases of one aggregate.
struct AggregateDbs {
  MDB_dbi groups = 0;
  MDB_dbi extremes = 0;
};

// Adds or retracts one contribution: the group's state is updated (and deleted when its last
// member leaves), each min/max value's count in the multiset likewise. Errors are the
// store's (RESOURCE_EXHAUSTED when the map is full, so the caller grows it and retries) or
// DATA_LOSS for a stored state that does not decode.
absl::Status WriteAggregateDelta(WriteTxn* txn, const AggregateDbs& dbs, const AggregateSpec& spec,
                                 const AggregateDelta& delta);

}  // namespace cdcview
