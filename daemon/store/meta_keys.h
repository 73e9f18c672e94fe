// Keys of the meta database: source positions, and the fingerprint, state and build cursor of
// each view and aggregate.
//
//   pos/<source>/<partition>   the source's position past the last applied event
//   view/<view>/<field>        fingerprint, state, build_cursor
//   agg/<aggregate>/<field>    the same for an aggregate
//   tombstones/<table>/timed   set once every tombstone of the table has a time and is indexed
//   partition/<source>/<partition>  the id stored items name that partition by, in decimal
//                              (partition_ids.h)
//   cluster/assignment         the partitions the store holds: "<members>/<ordinal>" (a
//                              standalone store "1/0"; absent: written before clusters, a
//                              standalone's) (Applier::ApplyAssignment)
//
// Thread-safety: pure functions, and ForEachPosition reads through the caller's transaction.
// Ownership: the string_views ForEachPosition passes point into LMDB's map.
#pragma once

#include <lmdb.h>

#include <functional>
#include <string>
#include <string_view>

#include "daemon/store/txn.h"

namespace cdcview {

std::string PositionKey(std::string_view source, std::string_view partition);
inline constexpr std::string_view kPositionPrefix = "pos/";
std::string ViewMetaKey(std::string_view view, std::string_view field);
// agg/<name>/<field>: an aggregate's fingerprint, state and build cursor, as for views.
std::string AggregateMetaKey(std::string_view aggregate, std::string_view field);
// tombstones/<table>/<field>: the state of a table's tombstone index (TombstoneCompactor).
std::string TombstonesMetaKey(std::string_view table, std::string_view field);
// partition/<source>/<partition>: a partition's id (PartitionIds).
std::string PartitionIdKey(std::string_view source, std::string_view partition);
inline constexpr std::string_view kPartitionIdPrefix = "partition/";
inline constexpr std::string_view kAssignmentKey = "cluster/assignment";
// The values of a view's or aggregate's state.
inline constexpr std::string_view kStateReady = "READY";
inline constexpr std::string_view kStateBuilding = "BUILDING";

// Calls fn(source, partition, position) for every stored source position, in key order.
// The views point into LMDB's map: valid only during the call. A store error (DATA_LOSS, see
// lmdb_status.h) if the walk met one.
absl::Status ForEachPosition(
    const Txn& txn, MDB_dbi meta,
    const std::function<void(std::string_view, std::string_view, std::string_view)>& fn);

}  // namespace cdcview
