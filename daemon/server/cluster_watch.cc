#include "daemon/server/cluster_watch.h"

#include <grpcpp/grpcpp.h>

#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/server/token_seal.h"
#include "index_builders/coding.h"

namespace cdcview {
namespace {

// The first byte of a cluster position's body. A member's own position starts with 1
// (EncodeWatchPosition), so one passed to a cluster Watch by mistake is recognised.
constexpr char kClusterPositionVersion = 2;
constexpr char kMemberPositionVersion = 1;
// How often a waiting stream looks at its client's cancellation and the start bound.
constexpr absl::Duration kPollInterval = absl::Milliseconds(100);

absl::Status Malformed() {
  return absl::InvalidArgumentError(
      "from_position is malformed; pass a WatchEvent.position unchanged, or watch again "
      "without from_position (with snapshot) to start over");
}

}  // namespace

std::string EncodeClusterWatchPosition(const std::vector<std::string>& by_member) {
  std::string body;
  body.push_back(kClusterPositionVersion);
  PutVarint(by_member.size(), &body);
  for (const std::string& position : by_member) PutLengthPrefixed(position, &body);
  return SealToken(std::move(body));
}

absl::StatusOr<std::vector<std::string>> DecodeClusterWatchPosition(std::string_view token,
                                                                    uint32_t members) {
  std::optional<std::string_view> sealed = UnsealToken(token);
  if (!sealed || sealed->empty()) return Malformed();
  std::string_view body = *sealed;
  if (body.front() == kMemberPositionVersion) {
    return absl::InvalidArgumentError(
        "from_position is one cluster member's own position (from a Watch sent with "
        "x-cdcview-local-only); pass a position from a Watch of the cluster, or watch again "
        "with snapshot");
  }
  if (body.front() != kClusterPositionVersion) return Malformed();
  body.remove_prefix(1);
  uint64_t count = 0;
  if (!GetVarint(&body, &count)) return Malformed();
  if (count != members) {
    return absl::InvalidArgumentError(absl::StrCat(
        "from_position was issued by a cluster of ", count, " members and this one has ",
        members, ", so partitions have moved between members: watch again with snapshot"));
  }
  std::vector<std::string> by_member;
  for (uint64_t i = 0; i < count; ++i) {
    std::string_view position;
    if (!GetLengthPrefixed(&body, &position) || position.empty()) return Malformed();
    by_member.emplace_back(position);
  }
  if (!body.empty()) return Malformed();
  return by_member;
}

// One merged stream: what the member readers hand over, and the handler's loop that writes
// it to the client.
class ClusterWatch::Merge {
 public:
  Merge(const ClusterPeers& peers, const WatchStream& client, size_t budget, bool snapshot)
      : peers_(peers),
        client_(client),
        budget_(budget),
        snapshot_(snapshot),
        members_(peers.members()) {}

  // ---- Member readers ----

  // What member `m` sent; false when it should stop reading (the stream is ending, or its
  // part is over). Waits while the buffer is full.
  bool Deliver(uint32_t m, v1::WatchEvent event) {
    std::optional<absl::Status> failed;
    {
      absl::MutexLock lock(&mu_);
      Member& member = members_[m];
      if (stopping_ || member.hub_ended) return false;
      if (!member.answered) {
        member.answered = true;
        changed_.SignalAll();
        if (!snapshot_) {
          if (event.event_case() == v1::WatchEvent::EVENT_NOT_SET && !event.position().empty()) {
            member.start = event.position();
            return true;
          }
          failed = absl::FailedPreconditionError(absl::StrCat(
              "cluster member ", m, " (", peers_.address(m),
              ") did not send its start position first (WatchRequest.start_position): every "
              "member must run a version that does"));
        }
      }
      if (!failed) {
        const bool behind = event.event_case() == v1::WatchEvent::kFellBehind;
        const size_t bytes = event.ByteSizeLong();
        // fell_behind is the member's last event: it never waits.
        while (!behind && !stopping_ && !member.hub_ended && queued_bytes_ > 0 &&
               queued_bytes_ + bytes > budget_) {
          room_.Wait(&mu_);
        }
        if (stopping_ || member.hub_ended) return false;
        member.behind = behind;
        queue_.push_back(Item{m, std::move(event), bytes});
        queued_bytes_ += bytes;
        changed_.SignalAll();
        return !behind;
      }
    }
    Fail(*failed);
    return false;
  }

  // Member `m`'s part ended with `status`: the stream ends with it, unless the stream is
  // ending anyway or the member fell behind (the handler ends the stream at that event).
  void Ended(uint32_t m, const absl::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (members_[m].behind) return;
    }
    Fail(status);
  }

  // This member's hub ended its part (WatchStream::end): a Deliver waiting for room returns.
  void HubEnded(uint32_t m) {
    absl::MutexLock lock(&mu_);
    members_[m].hub_ended = true;
    room_.SignalAll();
  }

  bool stopping() const {
    absl::MutexLock lock(&mu_);
    return stopping_;
  }

  // A peer call's context, cancelled when the stream ends; false if it has ended already.
  bool Register(grpc::ClientContext* ctx) {
    absl::MutexLock lock(&mu_);
    if (stopping_) return false;
    contexts_.insert(ctx);
    return true;
  }
  void Unregister(grpc::ClientContext* ctx) {
    absl::MutexLock lock(&mu_);
    contexts_.erase(ctx);
  }

  // ---- The handler ----

  // Writes the merged stream until it ends; returns the status it ends with. `positions`:
  // every member's from_position when resuming, else empty.
  absl::Status Serve(std::vector<std::string> positions,
                     std::chrono::steady_clock::time_point start_bound, bool client_start,
                     std::chrono::milliseconds start_wait) {
    const uint32_t n = peers_.members();
    if (positions.empty()) positions.resize(n);
    uint32_t snapshots_pending = snapshot_ ? n : 0;
    std::vector<bool> snapshot_done(n, false);  // a member's second one is a broken stream
    bool started = snapshot_;  // every member's start position is known (no snapshot)
    for (;;) {
      std::optional<Item> item;
      {
        absl::MutexLock lock(&mu_);
        for (;;) {
          if (stopping_) return failure_;
          if (client_.cancelled()) return StopLocked(CancelledByClient());
          const int unanswered = FirstUnanswered();
          if (!started && unanswered < 0) break;
          if (unanswered >= 0 && std::chrono::steady_clock::now() >= start_bound) {
            return StopLocked(peers_.PeerError(
                unanswered, grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                         absl::StrCat("its Watch stream sent nothing within ",
                                                      start_wait.count(), " ms"))));
          }
          if (started && !queue_.empty()) break;
          changed_.WaitWithTimeout(&mu_, kPollInterval);
        }
        if (!started) {
          for (uint32_t m = 0; m < n; ++m) positions[m] = members_[m].start;
        } else {
          item = std::move(queue_.front());
          queue_.pop_front();
          queued_bytes_ -= item->bytes;
          room_.SignalAll();
        }
      }
      if (!started) {
        started = true;
        if (client_start) {
          v1::WatchEvent start;
          start.set_position(EncodeClusterWatchPosition(positions));
          if (!client_.write(start)) return WriteFailed();
        }
        continue;
      }
      const uint32_t m = item->member;
      v1::WatchEvent& e = item->event;
      switch (e.event_case()) {
        case v1::WatchEvent::kSnapshotEntry:
          break;
        case v1::WatchEvent::kChange:
          if (!e.position().empty()) positions[m] = e.position();
          if (snapshots_pending > 0) {
            e.clear_position();  // a snapshot cannot be resumed
          } else {
            e.set_position(EncodeClusterWatchPosition(positions));
          }
          break;
        case v1::WatchEvent::kSnapshotDone:
          if (!snapshot_ || snapshot_done[m]) {
            absl::MutexLock lock(&mu_);
            return StopLocked(absl::InternalError(absl::StrCat(
                "cluster member ", m, " sent a snapshot_done the stream did not ask for; watch "
                "again")));
          }
          snapshot_done[m] = true;
          positions[m] = e.position();
          if (--snapshots_pending > 0) continue;
          e.set_position(EncodeClusterWatchPosition(positions));
          break;
        case v1::WatchEvent::kFellBehind: {
          {
            absl::MutexLock lock(&mu_);
            // The handler ends the stream: the member's end after fell_behind is not news.
            StopLocked(absl::OkStatus()).IgnoreError();
          }
          if (snapshots_pending > 0) {
            return absl::AbortedError(absl::StrCat(
                "watcher fell behind on cluster member ", m,
                " during the cluster's snapshot, which cannot be resumed; watch again with "
                "snapshot"));
          }
          positions[m] = e.position();
          e.set_position(EncodeClusterWatchPosition(positions));
          client_.write(e);
          return absl::AbortedError(absl::StrCat(
              "watcher fell behind on cluster member ", m,
              "; resume with from_position set to the fell_behind event's position"));
        }
        default:
          continue;  // a start position after the first event: nothing to tell
      }
      if (!client_.write(e)) return WriteFailed();
    }
  }

  // Ends the stream (the handler is done): readers stop, peer calls are cancelled.
  void Stop() {
    absl::MutexLock lock(&mu_);
    StopLocked(absl::OkStatus()).IgnoreError();  // the handler's own status is returned
  }

 private:
  struct Member {
    bool answered = false;   // sent its first event
    bool behind = false;     // sent fell_behind
    bool hub_ended = false;  // this member's hub ended its part
    std::string start;       // its start position (without snapshot)
  };
  struct Item {
    uint32_t member = 0;
    v1::WatchEvent event;
    size_t bytes = 0;
  };

  static absl::Status CancelledByClient() {
    return absl::CancelledError("the client cancelled the stream");
  }

  // The first member that has sent nothing yet, or -1.
  int FirstUnanswered() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (size_t m = 0; m < members_.size(); ++m) {
      if (!members_[m].answered) return static_cast<int>(m);
    }
    return -1;
  }

  // The stream ends with `status` (if it had not ended before); returns the status it ends
  // with.
  [[nodiscard]] absl::Status StopLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!stopping_) {
      stopping_ = true;
      failure_ = std::move(status);
      for (grpc::ClientContext* ctx : contexts_) ctx->TryCancel();
      changed_.SignalAll();
      room_.SignalAll();
    }
    return failure_;
  }

  // A member failed: the stream ends with `status`, which the client receives at once even
  // while the handler is blocked writing to it.
  void Fail(const absl::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      StopLocked(status).IgnoreError();  // it is `status`
    }
    client_.end(status);
  }

  // The client's Write failed: it left, or a member's failure ended the call meanwhile.
  absl::Status WriteFailed() {
    absl::MutexLock lock(&mu_);
    return StopLocked(CancelledByClient());
  }

  const ClusterPeers& peers_;
  const WatchStream& client_;
  const size_t budget_;
  const bool snapshot_;

  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // an event queued, a member answered, the stream ending
  absl::CondVar room_;     // the buffer has room, the stream ending
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  std::vector<Member> members_ ABSL_GUARDED_BY(mu_);
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<grpc::ClientContext*> contexts_ ABSL_GUARDED_BY(mu_);
};

ClusterWatch::ClusterWatch(WatchHub& local, const ClusterPeers& peers, const WatchConfig& watch,
                           uint32_t max_wait_ms)
    : local_(local), peers_(peers), watch_(watch), max_wait_(max_wait_ms) {}

absl::Status ClusterWatch::Run(const v1::WatchRequest& request, const WatchStream& stream,
                               std::chrono::steady_clock::time_point deadline) {
  const uint32_t n = peers_.members();
  std::vector<std::string> from;
  if (!request.from_position().empty()) {
    auto decoded = DecodeClusterWatchPosition(request.from_position(), n);
    if (!decoded.ok()) return decoded.status();
    from = *std::move(decoded);
  }
  const bool snapshot = request.snapshot() && from.empty();
  std::vector<v1::WatchRequest> parts(n, request);
  for (uint32_t m = 0; m < n; ++m) {
    parts[m].set_from_position(from.empty() ? "" : from[m]);
    parts[m].set_snapshot(snapshot);
    parts[m].set_start_position(!snapshot);
  }
  const auto now = std::chrono::steady_clock::now();
  const auto start_bound = std::min(deadline, now + max_wait_);

  Merge merge(peers_, stream, watch_.max_stream_buffer_bytes, snapshot);
  std::vector<std::thread> readers;
  readers.reserve(n);
  // A thread that cannot be started (the process is at its limit) ends this stream, not the
  // daemon: the readers already started are stopped and joined before the error goes out.
  auto refused = [&](const std::system_error& e) {
    merge.Stop();
    for (std::thread& reader : readers) reader.join();
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot start a thread for this cluster Watch (", e.what(), "); watch again later"));
  };
  for (uint32_t m = 0; m < n; ++m) try {
    if (m == peers_.ordinal()) {
      readers.emplace_back([this, &merge, &parts, m] {
        WatchStream part{[&merge, m](const v1::WatchEvent& e) { return merge.Deliver(m, e); },
                         [&merge] { return merge.stopping(); },
                         [&merge, m](const absl::Status&) { merge.HubEnded(m); }};
        merge.Ended(m, local_.Run(parts[m], part));
      });
      continue;
    }
    readers.emplace_back([this, &merge, &parts, m, deadline] {
      grpc::ClientContext ctx;
      peers_.Prepare(&ctx, deadline);
      if (!merge.Register(&ctx)) return;
      std::unique_ptr<grpc::ClientReader<v1::WatchEvent>> reader =
          peers_.stub(m)->Watch(&ctx, parts[m]);
      const auto opened = std::chrono::steady_clock::now();
      std::optional<std::chrono::steady_clock::time_point> answered;
      v1::WatchEvent e;
      bool reading = true;
      while (reading && reader->Read(&e)) {
        if (!answered) answered = std::chrono::steady_clock::now();
        reading = merge.Deliver(m, std::move(e));
      }
      if (!reading) ctx.TryCancel();
      const grpc::Status status = reader->Finish();
      merge.Unregister(&ctx);
      // The fan-out metrics: how long the member took to answer (its first event), and the
      // stream's end when the member ended it (not when this side cancelled it).
      const bool ours = !reading || merge.stopping();
      peers_.Observe(m,
                     std::chrono::duration<double>(
                         answered.value_or(std::chrono::steady_clock::now()) - opened)
                         .count(),
                     ours ? grpc::Status::OK : status);
      merge.Ended(m, peers_.PeerError(
                         m, status.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                                       "its Watch stream ended")
                                        : status));
    });
  } catch (const std::system_error& e) {
    return refused(e);
  }
  absl::Status result = merge.Serve(
      std::move(from), start_bound, request.start_position(),
      std::chrono::duration_cast<std::chrono::milliseconds>(start_bound - now));
  merge.Stop();
  for (std::thread& reader : readers) reader.join();
  return result;
}

}  // namespace cdcview
