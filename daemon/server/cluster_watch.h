// ClusterWatch: a cluster member's Watch for the whole cluster: one stream merging every
// member's own Watch of the view (this member's from the local WatchHub, the others' over
// gRPC with the local-only marker, see cluster_peers.h).
//
// The merged stream:
//  * changes from every member, interleaved as they arrive (each member's in its order);
//  * with snapshot, every member's snapshot entries (and their changes during it, without a
//    position, as a single member sends them), then one snapshot_done once every member has
//    finished its snapshot; a member's changes after its own snapshot_done and before the
//    cluster's also carry no position (a snapshot cannot be resumed);
//  * every position (on changes, snapshot_done, fell_behind, the start event) is a cluster
//    position: each member's latest position (EncodeClusterWatchPosition), so from_position
//    resumes every member strictly after what it had sent. Without snapshot every member is
//    asked for its start position first (WatchRequest.start_position), and no change is
//    forwarded before every member has answered with it: a member that has sent no change
//    resumes from where it started, missing nothing;
//  * a member that fails or does not answer ends the stream with ClusterPeers::PeerError (the
//    "cluster member N (ADDRESS) did not answer" UNAVAILABLE, or its own error); one that sends
//    nothing within the bound (the request's deadline, else server.max_wait_ms) after the
//    stream opens ends it the same way. A member's fell_behind ends the stream with
//    fell_behind at the cluster position (ABORTED), except during the cluster's snapshot,
//    which cannot be resumed (ABORTED, watch again with snapshot).
//
// Bounds: the events received from members and not yet written to the client are at most
// watch.max_stream_buffer_bytes (one event beyond if it alone is larger); a member's reader
// waits while it is full, so a slow client slows the members' streams, whose own bounds
// (max_lag_changes, stalled_stream_timeout_ms) then end them and this stream with their
// status. One reader thread per member (this member's included), started and joined within
// Run; every member counts the stream against its watch.max_streams.
//
// Thread-safe: Run is called concurrently from gRPC's handler threads. Owns nothing; the hub
// and the peers must outlive it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "cdcview/v1/view_service.pb.h"
#include "daemon/config/config.h"
#include "daemon/server/cluster_peers.h"
#include "daemon/server/watch.h"

namespace cdcview {

class ClusterWatch {
 public:
  // `local` serves this member's part (peers.ordinal()), `peers` the others'.
  ClusterWatch(WatchHub& local, const ClusterPeers& peers, const WatchConfig& watch,
               uint32_t max_wait_ms);

  // Serves one merged stream until the client leaves (CANCELLED), a member fails (its error
  // as above), a member falls behind (ABORTED after the fell_behind event), or this member's
  // hub ends its part (its status: UNAVAILABLE at shutdown, RESOURCE_EXHAUSTED for a stalled
  // client). Before the first event: INVALID_ARGUMENT for a from_position that is not a
  // cluster position of this many members, and every member's own refusals (NOT_FOUND,
  // RESOURCE_EXHAUSTED, OUT_OF_RANGE, ...). `deadline`: the call's, max() without one.
  absl::Status Run(const v1::WatchRequest& request, const WatchStream& stream,
                   std::chrono::steady_clock::time_point deadline);

 private:
  class Merge;

  WatchHub& local_;
  const ClusterPeers& peers_;
  const WatchConfig watch_;
  const std::chrono::milliseconds max_wait_;
};

// Cluster watch positions: every member's own position (WatchEvent.position of its local
// Watch), by ordinal, in one sealed token (token_seal.h).
std::string EncodeClusterWatchPosition(const std::vector<std::string>& by_member);
// INVALID_ARGUMENT for a damaged token, one member's own position (from a Watch with the
// local-only marker), or one of a cluster with another number of members; each says what to
// do.
absl::StatusOr<std::vector<std::string>> DecodeClusterWatchPosition(std::string_view token,
                                                                    uint32_t members);

}  // namespace cdcview
