// WatchHub: serves Watch streams, a view's entry changes as the writer commits them.
//
// Pull model: each stream reads the change log (daemon/store/change_log.h) after its own
// cursor in short read transactions and, once caught up, waits for the writer's next commit
// (PublishedState::WaitForCommitAfter). The writer never waits for a watcher and keeps no per-watcher
// state; a watcher costs the writer nothing but the log it writes anyway.
//
// Bounds:
//  * at most watch.max_streams streams are open; one more is RESOURCE_EXHAUSTED;
//  * a stream prepares at most about watch.max_stream_buffer_bytes of events ahead of its
//    client's reads (a snapshot chunk, a batch of changes) and prepares the next only once
//    gRPC has taken them all; gRPC's own buffering per stream is its flow-control window;
//  * a stream more than watch.max_lag_changes behind the log's head gets a fell_behind event
//    with the position of the last change it was sent, and ends with ABORTED. A stream resumed
//    from an older position starts further behind than that; it may stay that far behind (the
//    bound is the smallest lag it has had), so it is cut off only when it loses ground;
//  * a stream whose client stopped reading blocks in its gRPC Write (flow control). The hub's
//    watchdog ends it, with a status the client receives, once it has been blocked for a
//    second while behind by more than max_lag_changes (ABORTED), or for
//    watch.stalled_stream_timeout_ms at all (RESOURCE_EXHAUSTED), freeing its thread and buffer;
//  * no read transaction is held while writing to a client (a snapshot is read a chunk at a
//    time, see watch_snapshot.h), so a stalled client never pins old pages nor holds off a map
//    resize;
//  * Shutdown() ends every stream at once, so the server drains without waiting for them.
//
// Thread-safe: Run is called concurrently from gRPC's handler threads; Shutdown from any.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cdcview/v1/view_service.pb.h"
#include "daemon/config/config.h"
#include "daemon/metrics/watch_probe.h"
#include "daemon/server/view_reader.h"
#include "daemon/state/catalog.h"
#include "daemon/state/published_state.h"
#include "daemon/store/store.h"

namespace cdcview {

// Where a Watch stream writes. Write blocks while the client does not read (gRPC flow
// control) and returns false once the stream is gone. End may be called from another thread:
// it ends the call at once with `status` (what the client receives), and a blocked Write
// returns false.
struct WatchStream {
  std::function<bool(const v1::WatchEvent&)> write;
  std::function<bool()> cancelled;
  std::function<void(const absl::Status& status)> end;
};

class WatchHub {
 public:
  // `probe` may be null (tests).
  WatchHub(const Catalog& catalog, const Store& store, const PublishedState& published,
           const ViewReader& reader, const WatchConfig& config, WatchProbe* probe);
  ~WatchHub();

  // Serves one stream until the client leaves (CANCELLED), it falls behind (ABORTED, after a
  // fell_behind event unless still in its snapshot), it reads nothing for
  // stalled_stream_timeout_ms (RESOURCE_EXHAUSTED) or Shutdown (UNAVAILABLE). Before the first
  // event: RESOURCE_EXHAUSTED with max_streams open, NOT_FOUND for an unknown view,
  // UNAVAILABLE while it is rebuilt, INVALID_ARGUMENT for a partition key of the wrong type or
  // a malformed or foreign from_position, OUT_OF_RANGE for a position whose following changes
  // are no longer retained.
  //
  // A snapshot is entries and, for entries already sent that changed while later chunks were
  // read, their changes (without a position: a snapshot cannot be resumed), then
  // snapshot_done with the position it is exact at. Without a snapshot, start_position sends
  // the position the stream starts at first (an event with nothing else set).
  absl::Status Run(const v1::WatchRequest& request, const WatchStream& stream);

  // Cancels every open stream and refuses new ones; Run returns promptly everywhere.
  void Shutdown();

 private:
  struct Watcher {
    const WatchStream* stream;
    size_t view;
    std::atomic<uint64_t> cursor{0};            // the last change log sequence read
    std::atomic<uint64_t> allowed_lag{0};       // cut off beyond this lag (see Run)
    std::atomic<int64_t> write_started_ms{0};   // 0: not inside a Write
    std::atomic<uint64_t> pending_bytes{0};     // prepared for the client, not taken by gRPC yet
    std::atomic<bool> in_snapshot{false};
    std::atomic<bool> cut_off{false};           // the server decided to end it: see `why`
    std::atomic<bool> ended{false};             // stream->end was called
    absl::Mutex mu;
    absl::Status why ABSL_GUARDED_BY(mu);

    // Records why the server ends the stream; false if it had decided so before.
    bool CutOff(absl::Status status);
    absl::Status Why();
  };
  // A built change event and its serialized size.
  struct SizedEvent {
    std::shared_ptr<const v1::WatchEvent> event;
    size_t bytes = 0;
  };
  // The change events recently built for a view, by sequence: N watchers of a view decode a
  // change and build its event once, not N times (the fan-out's main cost). Thread-safe.
  struct EventCache {
    SizedEvent Find(uint64_t sequence);
    void Insert(uint64_t sequence, SizedEvent event);
    absl::Mutex mu;
    std::map<uint64_t, SizedEvent> events ABSL_GUARDED_BY(mu);
  };
  void WatchdogMain();
  absl::Status StalledStatus(const Watcher& w) const;

  const Store& store_;
  const PublishedState& published_;
  const ViewReader& reader_;
  const WatchConfig config_;
  WatchProbe* probe_;

  absl::Mutex mu_;
  absl::CondVar wake_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint32_t streams_ ABSL_GUARDED_BY(mu_) = 0;  // inside Run, against max_streams
  std::map<Watcher*, bool> watchers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<EventCache>> caches_;  // by global view index
  std::atomic<bool> stopped_{false};
  std::thread watchdog_;
};

// Watch positions (exposed for tests): a change log sequence number bound to one view and its
// definition, with a checksum.
std::string EncodeWatchPosition(std::string_view view, std::string_view fingerprint,
                                uint64_t sequence);
// INVALID_ARGUMENT saying what to do for a damaged token or one of another view or definition.
absl::StatusOr<uint64_t> DecodeWatchPosition(std::string_view token, std::string_view view,
                                             std::string_view fingerprint);

}  // namespace cdcview
