// ViewQueries: the read path's one interface, what both gRPC ports (view_service.cc for the
// main port, h2_read_server.cc for the fast read port) serve. ViewReader answers from the local
// store; a remote fan-out (a cluster coordinator) can answer the same calls from other nodes,
// and the ports sit on top of either unchanged. Watch is not here: it streams from the local
// change log (WatchHub).
//
// Thread-safety: implementations are safe to call from many threads at once. Ownership: a
// port holds a reference; the implementation must outlive it.
#pragma once

#include <chrono>
#include <string>

#include "absl/status/statusor.h"
#include "cdcview/v1/view_service.pb.h"

namespace cdcview {

class ViewQueries {
 public:
  // When a read with ReadConsistency must be answered by; max(): the request has none, and a
  // wait for a position is capped at server.max_wait_ms.
  using Deadline = std::chrono::steady_clock::time_point;
  // A wait that ran out answers DEADLINE_EXCEEDED "<what>: " + kNotAppliedInTime, then, when
  // the request had no deadline, CappedWaitNote(server.max_wait_ms), then ": <where it stands>".
  static constexpr char kNotAppliedInTime[] = "min_position not applied before the deadline";
  // A wait for a position not applied when the daemon stops answers UNAVAILABLE "<what>:
  // consistency cannot be reached here (<where it stands>) because " + kStopping.
  static constexpr char kStopping[] =
      "cdcviewd is shutting down and applies nothing more; retry against another replica or "
      "after its restart";
  static std::string CappedWaitNote(std::chrono::milliseconds cap);

  virtual ~ViewQueries() = default;

  // Every call below: a view, table or aggregate name longer than any can have is
  // INVALID_ARGUMENT, not NOT_FOUND, and is not echoed; an unknown name is quoted in part.

  // NOT_FOUND: unknown view. INVALID_ARGUMENT: missing or wrongly typed key or condition
  // value, BETWEEN bounds out of order, begins_with on a number, a malformed or foreign page
  // token. UNAVAILABLE: the view is being rebuilt. And the consistency wait's errors (see
  // ViewReader::AwaitConsistency).
  virtual absl::StatusOr<v1::QueryResponse> Query(const v1::QueryRequest& request,
                                                  Deadline deadline = Deadline::max()) const = 0;
  virtual absl::StatusOr<v1::ScanResponse> Scan(const v1::ScanRequest& request,
                                                Deadline deadline = Deadline::max()) const = 0;
  // NOT_FOUND: unknown table. INVALID_ARGUMENT: key attributes missing or of the wrong type.
  virtual absl::StatusOr<v1::GetItemResponse> GetItem(const v1::GetItemRequest& request,
                                                      Deadline deadline = Deadline::max()) const = 0;
  // NOT_FOUND: unknown aggregate (the message lists them). INVALID_ARGUMENT: a group or prefix
  // of the wrong type, a malformed or foreign page token. UNAVAILABLE: the aggregate is being
  // rebuilt. A group without members answers members 0, count 0 and the other measures unset.
  virtual absl::StatusOr<v1::AggregateGroup> GetAggregate(
      const v1::GetAggregateRequest& request, Deadline deadline = Deadline::max()) const = 0;
  virtual absl::StatusOr<v1::ListAggregatesResponse> ListAggregates(
      const v1::ListAggregatesRequest& request, Deadline deadline = Deadline::max()) const = 0;
  // Every view as DescribeView describes it, except that shard_item_counts and shard_skew are
  // left unset. INTERNAL if the store cannot be read.
  virtual absl::StatusOr<v1::ListViewsResponse> ListViews() const = 0;
  // NOT_FOUND: unknown view.
  virtual absl::StatusOr<v1::ViewDescription> DescribeView(const std::string& name) const = 0;
  // The sources' state, counters and applied positions, all of one commit.
  virtual v1::StatusResponse GetStatus() const = 0;
  // NOT_FOUND: unknown view or table. INVALID_ARGUMENT: neither or both of view and table.
  virtual absl::StatusOr<v1::HotKeysResponse> GetHotKeys(
      const v1::GetHotKeysRequest& request) const = 0;
};

}  // namespace cdcview
