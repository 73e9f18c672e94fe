// Cluster merges: one answer for the whole cluster from every member's own answer (each asked
// with the local-only marker, see cluster_peers.h), for the calls whose answer is a summary
// rather than entries in key order: GetStatus, ListViews, DescribeView and GetHotKeys.
// ClusterQueries calls them once it has every member's answer.
//
// Pure functions; thread-safe. `by_member[i]` is member i's answer (i its ordinal); every
// member must be there (a member that did not answer fails the call before a merge, except for
// GetStatus: see MarkMemberUnreachable).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cdcview/v1/view_service.pb.h"

namespace cdcview {

// The cluster's status:
//  * sources by name, in the order the members list them: events_applied / skipped /
//    rejected add; lag_seconds is the largest (the stalest member's); state is the worst by
//    SourceStateRank, progress the smallest among the members in that state (set only for
//    "backfilling"); each member's non-empty error is kept as "member N: <error>", joined
//    with "; " in ordinal order; positions are the merged `applied` entries of the source;
//  * applied: the union of the members' entries, one per (source, partition) in (source,
//    partition) order (a standalone daemon's order), and a token (EncodePositionToken) of
//    them all. A Kafka partition "<topic>/<n>" that several members have stored (a member
//    keeps a position of a partition it owned before a resize) takes its owner's
//    (OwnsPartition with by_member.size() members), else the lowest ordinal's;
//  * lmdb_map_used_bytes and lmdb_map_size_bytes add;
//  * members: one MemberStatus per member with its ordinal, reachable true, and its own
//    sources' state, lag and owned partitions (address is for the caller to fill).
// A source kind or table that differs between members (a config mismatch) keeps the lowest
// ordinal's; GetStatus answers anyway, since it is what an operator looks at to find that.
v1::StatusResponse MergeStatus(const std::vector<v1::StatusResponse>& by_member);

// Member `ordinal` did not answer GetStatus (pass an empty StatusResponse for it to
// MergeStatus, then this): its MemberStatus says reachable false with `why`, and every source
// of the merged answer is in "error" with "member N did not answer: <why>" among its errors
// and an infinite lag, because no read of the cluster is answered without that member.
void MarkMemberUnreachable(uint32_t ordinal, const std::string& why, v1::StatusResponse* merged);

// How bad a SourceStatus.state is, for MergeStatus's worst state: "error" (6) > "stopped" (5)
// > "starting" (4) > "backfilling" (3) > "running" (2) > "caught_up" (1) > "finished" (0).
// A source in error cannot advance; a stopped one will not; one starting or backfilling has
// a lag no one knows yet (readiness counts it as infinitely behind), starting being the
// further from done; running has records to read; caught_up and finished have none, but a
// caught_up source may get more while a finished one never will. A state this build does not
// know (a newer member's) ranks just below "error"; "" (no source health) ranks lowest (-1).
int SourceStateRank(const std::string& state);

// The cluster's description of a view:
//  * item_count, bytes and skipped_key_type_mismatch add; shard_item_counts add shard by
//    shard and shard_skew is recomputed from them (ShardSkew, as a member computes its own);
//  * state: BUILDING if any member is building it, else BACKFILLING if any is, else READY;
//    build_progress is the smallest among the members in that state;
//  * index_writes_per_event: the mean over the members that report a non-zero ratio. The
//    exact figure is the event-weighted mean, but a description carries no event count; the
//    members share the topic's partitions evenly, and a member that has applied nothing to
//    the table yet reports 0, which would otherwise pull the mean down;
//  * every other field (name, table, fingerprint, key schemas, projection, include, rules,
//    inverted, shard_count, shard_suffix) must be the same on every member.
// FAILED_PRECONDITION when a field of the last kind differs: the members run different
// definitions of the view, and entries merged across them would not be one view's. The
// message names the view, the field and the two members (with the values of a scalar field).
absl::StatusOr<v1::ViewDescription> MergeViewDescription(
    const std::vector<v1::ViewDescription>& by_member);

// The cluster's views: each view merged by MergeViewDescription, in the order the members
// list them. FAILED_PRECONDITION when the members do not list the same views (the message
// names a view one has and another lacks), or a view's descriptions do not merge.
absl::StatusOr<v1::ListViewsResponse> MergeListViews(
    const std::vector<v1::ListViewsResponse>& by_member);

// The cluster's hot keys: per key (the same AttributeValue), writes_per_second and
// error_bound add (a key's writes can come from several partitions, so several members);
// total_writes_per_second adds; share is recomputed as the key's merged rate over the merged
// total; the `limit` (0: 10) fastest keys are kept, equal rates ordered by the key's encoded
// form (the order a member gives equal counts). logical_keys merge the same way.
// window_seconds is the largest. A member lists only its own `limit` hottest keys, so a key
// below that on some member adds nothing from it there: ask the members for more than
// `limit` for a margin. FAILED_PRECONDITION when the members' shard_count differ.
absl::StatusOr<v1::HotKeysResponse> MergeHotKeys(
    const std::vector<v1::HotKeysResponse>& by_member, uint32_t limit);

}  // namespace cdcview
