// ClusterQueries: the ViewQueries of a cluster member answering for the whole cluster. Every
// call asks every member at once, itself through its local reader (built with member_parts)
// and the others over gRPC with the local-only marker (ClusterPeers), then merges:
// - Query, Scan: the members' pages in the view's order (OrderedMerge over the entries'
//   stored keys, which the local-only answers carry), `limit` entries; the page token is the
//   one a single store gives for the last entry returned, so every member resumes after it.
//   Each member returns at most `limit`, so the first `limit` of the union are complete.
// - GetItem: the member that has the item answers (its partition's owner).
// - GetAggregate, ListAggregates: the members' partial states added (GroupTotals), per
//   logical group and per physical group of a sharded one; ListAggregates pages by group key
//   like Query.
// - Every answer's AppliedPosition: the union of the members' (each partition belongs to one
//   member; a partition two report, after a resize, is taken from its owner) with its token.
// - ListViews, DescribeView, GetStatus, GetHotKeys: cluster_merge.h.
// A member that does not answer before the deadline (the request's, else
// server.max_wait_ms) fails the whole call UNAVAILABLE naming it (ClusterPeers::PeerError);
// another error of a member is answered as it is, the lowest ordinal's first.
//
// Thread-safe: every call runs on the caller's thread with a completion queue of its own.
// `local` and `peers` must outlive it.
#pragma once

#include <string>

#include "daemon/config/config.h"
#include "daemon/server/cluster_peers.h"
#include "daemon/server/view_queries.h"
#include "daemon/server/view_reader.h"

namespace cdcview {

class ClusterQueries : public ViewQueries {
 public:
  // `local`: this member's reader with member_parts; `config`: the shared configuration (its
  // cluster block and server.max_wait_ms).
  ClusterQueries(const ViewReader& local, const ClusterPeers& peers, const Config& config);

  absl::StatusOr<v1::QueryResponse> Query(const v1::QueryRequest& request,
                                          Deadline deadline = Deadline::max()) const override;
  absl::StatusOr<v1::ScanResponse> Scan(const v1::ScanRequest& request,
                                        Deadline deadline = Deadline::max()) const override;
  absl::StatusOr<v1::GetItemResponse> GetItem(const v1::GetItemRequest& request,
                                              Deadline deadline = Deadline::max()) const override;
  absl::StatusOr<v1::AggregateGroup> GetAggregate(
      const v1::GetAggregateRequest& request, Deadline deadline = Deadline::max()) const override;
  absl::StatusOr<v1::ListAggregatesResponse> ListAggregates(
      const v1::ListAggregatesRequest& request,
      Deadline deadline = Deadline::max()) const override;
  absl::StatusOr<v1::ListViewsResponse> ListViews() const override;
  absl::StatusOr<v1::ViewDescription> DescribeView(const std::string& name) const override;
  // Status must answer while members are down: a member that does not answer is merged as
  // an empty StatusResponse and then marked unreachable (MarkMemberUnreachable).
  v1::StatusResponse GetStatus() const override;
  absl::StatusOr<v1::HotKeysResponse> GetHotKeys(
      const v1::GetHotKeysRequest& request) const override;

 private:
  // The bound of a call: `deadline`, or server.max_wait_ms from now for max().
  Deadline Bound(Deadline deadline) const;

  const ViewReader& local_;
  const ClusterPeers& peers_;
  const Config& config_;
};

// The union of members' applied positions (by ordinal), each (source, partition) once, from
// its owner when two report it, in (source, partition) order, with its token. Exposed for
// tests.
v1::AppliedPosition MergeApplied(const std::vector<const v1::AppliedPosition*>& by_member,
                                 const ClusterConfig& cluster);

}  // namespace cdcview
