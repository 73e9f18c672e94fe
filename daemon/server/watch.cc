#include "daemon/server/watch.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <optional>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "daemon/decode/attribute_value_proto.h"
#include "daemon/server/proto_convert.h"
#include "daemon/server/store_damage.h"
#include "daemon/server/token_seal.h"
#include "daemon/server/watch_snapshot.h"
#include "daemon/store/change_log.h"
#include "index_builders/coding.h"
#include "index_builders/key_codec.h"

namespace cdcview {
namespace {

constexpr char kPositionVersion = 1;
// Changes read per read transaction: short transactions, and a lag check between batches.
constexpr size_t kReadBatch = 256;
// How long a caught-up stream waits for a commit before it looks at cancellation again.
constexpr auto kPollInterval = std::chrono::milliseconds(100);
// A stream blocked in one Write this long while too far behind is ended by the watchdog.
constexpr int64_t kStuckWriteMs = 1000;
// How often the watchdog looks at blocked Writes.
constexpr auto kWatchdogInterval = absl::Milliseconds(250);
// Built change events kept per view for the other watchers of the view (newest sequences).
constexpr size_t kCachedEvents = 4096;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}


// Which entries a stream wants: all, or those of one partition key. For a write-sharded view a
// logical key also matches every physical key of its shards.
class PartitionFilter {
 public:
  static absl::StatusOr<PartitionFilter> Make(const ViewSpec& view,
                                              const v1::WatchRequest& request) {
    PartitionFilter f;
    if (request.partition_key().value_case() == v1::AttributeValue::VALUE_NOT_SET) return f;
    auto pk = FromProto(request.partition_key(), "partition_key");
    if (!pk.ok()) return pk.status();
    if (pk->type() != view.partition_type()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "partition_key: view ", view.name, " has a ",
          std::string(AttrTypeName(view.partition_type())), " partition key, got ",
          std::string(AttrTypeName(pk->type()))));
    }
    f.all_ = false;
    std::string exact;
    EncodeKeyComponent(*pk, &exact);
    f.prefixes_.push_back(exact);
    if (view.shards.enabled() && pk->type() == AttrType::kS) {
      f.logical_ = pk->scalar();
      for (uint32_t shard = 0; shard < view.shards.count; ++shard) {
        std::string physical;
        EncodeKeyComponent(AttributeValue::String(view.shards.PhysicalKey(*f.logical_, shard)), &physical);
        f.prefixes_.push_back(std::move(physical));
      }
    }
    return f;
  }

  bool all() const { return all_; }
  // Encoded partition keys whose entries match (each a complete key component).
  const std::vector<std::string>& prefixes() const { return prefixes_; }

  bool Matches(std::string_view entry_key) const {
    if (all_) return true;
    for (const std::string& p : prefixes_) {
      if (entry_key.starts_with(p)) return true;
    }
    return false;
  }

 private:
  bool all_ = true;
  std::optional<std::string> logical_;
  std::vector<std::string> prefixes_;
};

// Watch streams run below the writer's CPU priority while they stream: on a small machine N
// watchers are N busy threads against one writer, and ingestion must not pay for fan-out (a
// watcher that then lags is cut off like any slow one). The priority is restored when the
// stream ends, because the gRPC thread serves other calls next. Raising it back needs
// CAP_SYS_NICE or RLIMIT_NICE; where the process has neither, a lowered thread would stay
// slow for every later call, so streams are then not lowered at all (probed once, on a
// throwaway thread).
bool CanRestorePriority() {
  static const bool can = [] {
    bool ok = false;
    std::thread probe([&ok] {
      const id_t tid = static_cast<id_t>(syscall(SYS_gettid));
      errno = 0;
      const int old = getpriority(PRIO_PROCESS, tid);
      if (errno != 0 || old >= 19) return;
      ok = setpriority(PRIO_PROCESS, tid, old + 1) == 0 && setpriority(PRIO_PROCESS, tid, old) == 0;
    });
    probe.join();
    return ok;
  }();
  return can;
}

class LowerPriority {
 public:
  LowerPriority() : tid_(static_cast<id_t>(syscall(SYS_gettid))) {
    if (!CanRestorePriority()) return;
    errno = 0;
    old_ = getpriority(PRIO_PROCESS, tid_);
    lowered_ = errno == 0 && setpriority(PRIO_PROCESS, tid_, std::min(old_ + kNice, 19)) == 0;
  }
  ~LowerPriority() {
    if (lowered_) setpriority(PRIO_PROCESS, tid_, old_);
  }

 private:
  static constexpr int kNice = 10;
  id_t tid_;
  int old_ = 0;
  bool lowered_ = false;
};

}  // namespace

std::string EncodeWatchPosition(std::string_view view, std::string_view fingerprint,
                                uint64_t sequence) {
  std::string t;
  t.push_back(kPositionVersion);
  PutLengthPrefixed(view, &t);
  PutLengthPrefixed(fingerprint, &t);
  t.append(ChangeKey(sequence));
  return SealToken(std::move(t));
}

absl::StatusOr<uint64_t> DecodeWatchPosition(std::string_view token, std::string_view view,
                                             std::string_view fingerprint) {
  auto malformed = [] {
    return absl::InvalidArgumentError(
        "from_position is malformed; pass a WatchEvent.position unchanged, or watch again "
        "without from_position (with snapshot) to start over");
  };
  std::optional<std::string_view> sealed = UnsealToken(token);
  if (!sealed || sealed->size() < 1 + 8 || sealed->front() != kPositionVersion) return malformed();
  std::string_view body = *sealed;
  body.remove_prefix(1);
  std::string_view token_view, token_fp;
  if (!GetLengthPrefixed(&body, &token_view) || !GetLengthPrefixed(&body, &token_fp) ||
      body.size() != 8) {
    return malformed();
  }
  if (token_view != view) {
    return absl::InvalidArgumentError(absl::StrCat(
        "from_position belongs to view ", std::string(token_view), ", not ", std::string(view),
        "; pass a position from a Watch of this view"));
  }
  if (token_fp != fingerprint) {
    return absl::InvalidArgumentError(absl::StrCat(
        "from_position was issued for another definition of view ", std::string(view),
        " (it was rebuilt since); watch again without from_position, with snapshot"));
  }
  return DecodeBigEndian64(body.data());
}

WatchHub::SizedEvent WatchHub::EventCache::Find(uint64_t sequence) {
  absl::MutexLock lock(&mu);
  auto it = events.find(sequence);
  return it == events.end() ? SizedEvent{} : it->second;
}

void WatchHub::EventCache::Insert(uint64_t sequence, SizedEvent e) {
  absl::MutexLock lock(&mu);
  events.emplace(sequence, std::move(e));
  while (events.size() > kCachedEvents) events.erase(events.begin());
}

bool WatchHub::Watcher::CutOff(absl::Status status) {
  absl::MutexLock lock(&mu);
  if (cut_off.exchange(true)) return false;
  why = std::move(status);
  return true;
}

absl::Status WatchHub::Watcher::Why() {
  absl::MutexLock lock(&mu);
  return why;
}

WatchHub::WatchHub(const Catalog& catalog, const Store& store, const PublishedState& published,
                   const ViewReader& reader, const WatchConfig& config, WatchProbe* probe)
    : store_(store),
      published_(published),
      reader_(reader),
      config_(config),
      probe_(probe),
      watchdog_([this] { WatchdogMain(); }) {
  for (size_t i = 0; i < catalog.views().size(); ++i) {
    caches_.push_back(std::make_unique<EventCache>());
  }
}

WatchHub::~WatchHub() {
  Shutdown();
  if (watchdog_.joinable()) watchdog_.join();
}

namespace {

absl::Status ShuttingDown() {
  return absl::UnavailableError(
      "the server is shutting down; resume with from_position on another server or after the "
      "restart");
}

}  // namespace

void WatchHub::Shutdown() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  stopped_ = true;
  for (auto& [watcher, unused] : watchers_) {
    if (!watcher->ended.exchange(true)) watcher->stream->end(ShuttingDown());
  }
  wake_.SignalAll();
}

absl::Status WatchHub::StalledStatus(const Watcher& w) const {
  return absl::ResourceExhaustedError(absl::StrCat(
      "watch stream cut off: the client read nothing for ", config_.stalled_stream_timeout_ms,
      " ms (watch.stalled_stream_timeout_ms) while ", w.pending_bytes.load(),
      " bytes were waiting for it (watch.max_stream_buffer_bytes: ",
      config_.max_stream_buffer_bytes, "); read faster, or ",
      w.in_snapshot ? "watch again with snapshot (a snapshot cannot be resumed)"
                    : "resume with from_position set to the last position received"));
}

void WatchHub::WatchdogMain() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    wake_.WaitWithTimeout(&mu_, kWatchdogInterval);
    if (stopping_ || watchers_.empty()) continue;
    mu_.Unlock();
    std::optional<ChangeLogBounds> bounds;
    if (auto txn = store_.BeginRead(); txn.ok()) {
      // A damaged log ends each stream with the error when it reads; nothing to cut off here.
      if (auto read = ReadChangeLogBounds(**txn, store_.changes()); read.ok()) bounds = *read;
    }
    mu_.Lock();
    const int64_t now = NowMs();
    for (auto& [w, unused] : watchers_) {
      const int64_t started = w->write_started_ms.load();
      if (started == 0) continue;
      const int64_t blocked = now - started;
      const bool lagging = blocked >= kStuckWriteMs && bounds &&
                           bounds->newest - w->cursor.load() > w->allowed_lag.load();
      const bool stalled = blocked >= static_cast<int64_t>(config_.stalled_stream_timeout_ms);
      if (!lagging && !stalled) continue;
      if (lagging) {
        if (w->CutOff(absl::AbortedError(
                "watcher stopped reading while more than watch.max_lag_changes changes behind; "
                "resume with from_position set to the last position received")) &&
            probe_ != nullptr) {
          probe_->CutOff(w->view, WatchProbe::CutOffReason::kFellBehind);
        }
      } else if (w->CutOff(StalledStatus(*w)) && probe_ != nullptr) {
        probe_->CutOff(w->view, WatchProbe::CutOffReason::kStalled);
      }
      // A stream cut off before (its fell_behind event blocked) ends with that first reason.
      if (!w->ended.exchange(true)) w->stream->end(w->Why());
    }
  }
}

absl::Status WatchHub::Run(const v1::WatchRequest& request, const WatchStream& stream) {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return ShuttingDown();
    if (streams_ >= config_.max_streams) {
      if (probe_ != nullptr) probe_->Refused();
      return absl::ResourceExhaustedError(absl::StrCat(
          "too many Watch streams: ", config_.max_streams,
          " are open (watch.max_streams); close one, retry later, or raise watch.max_streams"));
    }
    ++streams_;
  }
  absl::Cleanup release = [this] {
    absl::MutexLock lock(&mu_);
    --streams_;
  };

  auto view_or = reader_.ReadyView(request.view());
  if (!view_or.ok()) return view_or.status();
  const ViewRef& view = **view_or;
  const ViewSpec& spec = *view.spec;
  auto filter_or = PartitionFilter::Make(spec, request);
  if (!filter_or.ok()) return filter_or.status();
  const PartitionFilter& filter = *filter_or;
  auto position = [&](uint64_t sequence) {
    return EncodeWatchPosition(spec.name, view.fingerprint, sequence);
  };

  // Where the stream starts: after from_position, or at the log's head (a snapshot starts
  // there too, and its chunks catch up with the changes logged while they are read).
  uint64_t cursor = 0;
  std::optional<WatchSnapshot> snapshot;
  {
    auto txn = store_.BeginRead();
    if (!txn.ok()) return txn.status();
    auto bounds_or = ReadChangeLogBounds(**txn, store_.changes());
    if (!bounds_or.ok()) return bounds_or.status();
    const std::optional<ChangeLogBounds>& bounds = *bounds_or;
    const uint64_t head = bounds ? bounds->newest : 0;
    if (!request.from_position().empty()) {
      auto from = DecodeWatchPosition(request.from_position(), spec.name, view.fingerprint);
      if (!from.ok()) return from.status();
      if (*from > head) {
        return absl::InvalidArgumentError(absl::StrCat(
            "from_position is ahead of this server's change log (position ", *from, ", head ",
            head, "); was the store replaced? Watch again with snapshot"));
      }
      // Changes (from, oldest) were trimmed: the stream could not replay them.
      if (*from < head && (!bounds || *from + 1 < bounds->oldest)) {
        return absl::OutOfRangeError(absl::StrCat(
            "from_position is older than the retained change log (it keeps the last ",
            config_.retain_changes,
            " changes, watch.retain_changes); watch again with snapshot to start over"));
      }
      cursor = *from;
    } else {
      cursor = head;
      if (request.snapshot()) {
        snapshot.emplace(filter.all() ? std::vector<std::string>{""} : filter.prefixes());
      }
    }
  }

  LowerPriority lower;
  Watcher watcher;
  watcher.stream = &stream;
  watcher.view = view.global;
  watcher.cursor = cursor;
  watcher.allowed_lag = config_.max_lag_changes;
  watcher.in_snapshot = snapshot.has_value();
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return ShuttingDown();
    watchers_[&watcher] = true;
  }
  if (probe_ != nullptr) probe_->Opened(view.global);
  uint64_t sent = 0;
  // Every exit goes through here: unregister (under mu_, so the watchdog never sees a
  // dangling watcher) and publish what was sent.
  auto finish = [&](absl::Status s) {
    {
      absl::MutexLock lock(&mu_);
      watchers_.erase(&watcher);
    }
    if (probe_ != nullptr) {
      probe_->Sent(view.global, sent);
      probe_->Closed(view.global);
    }
    return s;
  };
  auto write = [&](const v1::WatchEvent& e, size_t bytes) {
    watcher.write_started_ms = NowMs();
    bool ok = stream.write(e);
    watcher.write_started_ms = 0;
    watcher.pending_bytes -= std::min<uint64_t>(bytes, watcher.pending_bytes.load());
    if (ok) ++sent;
    return ok;
  };
  auto gone = [&] {
    if (stopped_) return finish(ShuttingDown());
    if (watcher.cut_off) return finish(watcher.Why());
    return finish(absl::CancelledError("the client cancelled the stream"));
  };

  if (request.start_position() && !snapshot) {
    v1::WatchEvent start;
    start.set_position(position(cursor));
    const size_t start_bytes = start.ByteSizeLong();
    watcher.pending_bytes = start_bytes;
    if (!write(start, start_bytes)) return gone();
  }

  const size_t budget = config_.max_stream_buffer_bytes;
  std::vector<SizedEvent> batch;        // changes to write
  std::vector<v1::WatchEvent> entries;  // or a snapshot chunk
  EventCache& cache = *caches_[view.global];
  uint64_t closest = UINT64_MAX;  // the smallest lag seen so far
  for (;;) {
    if (stopped_ || stream.cancelled() || watcher.cut_off) return gone();
    // Read the commit count before the log: a commit after this read wakes the wait below.
    const uint64_t commits = published_.commit_count();
    batch.clear();
    entries.clear();
    size_t bytes = 0;
    uint64_t lag = 0;
    {
      auto txn = store_.BeginRead();
      if (!txn.ok()) return finish(txn.status());
      auto bounds = ReadChangeLogBounds(**txn, store_.changes());
      if (!bounds.ok()) return finish(bounds.status());
      const uint64_t head = *bounds ? (*bounds)->newest : 0;
      lag = head > cursor ? head - cursor : 0;
      // A stream resumed from an old position starts far behind; it is cut off only when it
      // loses ground: beyond max_lag_changes and beyond the closest it has been to the head.
      closest = std::min(closest, lag);
      const uint64_t allowed = std::max<uint64_t>(config_.max_lag_changes, closest);
      watcher.allowed_lag = allowed;
      if (lag > allowed && snapshot) {
        // No position to resume from: positions start at snapshot_done.
        if (watcher.CutOff(absl::AbortedError(absl::StrCat(
                "watcher fell behind during its snapshot: ", lag,
                " changes behind the change log's head (limit ", allowed,
                ", watch.max_lag_changes); watch again with snapshot"))) &&
            probe_ != nullptr) {
          probe_->CutOff(view.global, WatchProbe::CutOffReason::kFellBehind);
        }
        return finish(watcher.Why());
      }
      if (lag > allowed) {
        // Everything up to `cursor` was written to the client, and max_lag_changes <
        // retain_changes keeps the changes after it in the log.
        v1::WatchEvent behind;
        behind.set_fell_behind(true);
        behind.set_position(position(cursor));
        if (watcher.CutOff(absl::AbortedError(absl::StrCat(
                "watcher fell behind: ", lag, " changes behind the change log's head (limit ",
                allowed, ", watch.max_lag_changes or the lag it started with); resume with "
                "from_position set to the fell_behind event's position"))) &&
            probe_ != nullptr) {
          probe_->CutOff(view.global, WatchProbe::CutOffReason::kFellBehind);
        }
        const size_t behind_bytes = behind.ByteSizeLong();
        watcher.pending_bytes = behind_bytes;
        write(behind, behind_bytes);
        return finish(watcher.Why());
      }
      if (lag > 0) {
        ChangeLogReader log(**txn, store_.changes());
        size_t n = 0;
        absl::StatusOr<bool> ok = log.Seek(cursor + 1);
        for (; ok.ok() && *ok && n < kReadBatch && bytes < budget; ok = log.Next(), ++n) {
          const ChangeView* change = &log.change();
          cursor = change->sequence;
          if (change->view != spec.name || !filter.Matches(change->key)) continue;
          // During a snapshot, only changes to entries already sent: the chunks still to be
          // read hold the others' changes.
          if (snapshot && !snapshot->Covers(change->key)) continue;
          SizedEvent event = cache.Find(change->sequence);
          if (event.event == nullptr) {
            auto e = std::make_shared<v1::WatchEvent>();
            v1::EntryChange* c = e->mutable_change();
            c->set_op(change->op == ChangeOp::kPut ? v1::EntryChange::PUT
                                                   : v1::EntryChange::DELETE);
            if (absl::Status s = EntryToProto(spec, change->key, change->value, c->mutable_entry());
                !s.ok()) {
              return finish(s);
            }
            c->mutable_cause()->set_source(std::string(change->source));
            c->mutable_cause()->set_partition(std::string(change->partition));
            c->mutable_cause()->set_position(std::string(change->position));
            e->set_position(position(change->sequence));
            event = SizedEvent{e, e->ByteSizeLong()};
            cache.Insert(change->sequence, event);
          }
          if (snapshot) {
            // A snapshot cannot be resumed: its changes carry no position.
            auto e = std::make_shared<v1::WatchEvent>(*event.event);
            e->clear_position();
            event = SizedEvent{e, e->ByteSizeLong()};
          }
          bytes += event.bytes;
          batch.push_back(std::move(event));
        }
        if (!ok.ok()) return finish(ok.status());
      }
      // Caught up with the log in this transaction (a writer committing all the time leaves
      // no step with nothing to read): the next chunk, read at `head`, is exact together with
      // what was sent before and the changes above.
      if (snapshot && cursor == head && bytes < budget) {
        auto read = snapshot->ReadChunk(spec, **txn, store_.view(spec.name), budget - bytes,
                                        &entries);
        if (!read.ok()) return finish(read.status());
        bytes += *read;
        if (snapshot->done()) {
          v1::WatchEvent& done = entries.emplace_back();
          done.set_snapshot_done(true);
          done.set_position(position(head));
          bytes += done.ByteSizeLong();
        }
      }
    }
    watcher.pending_bytes = bytes;
    for (const SizedEvent& e : batch) {
      if (!write(*e.event, e.bytes)) return gone();
    }
    for (const v1::WatchEvent& e : entries) {
      if (!write(e, e.GetCachedSize())) return gone();
    }
    watcher.cursor = cursor;
    if (snapshot && snapshot->done()) {
      snapshot.reset();
      watcher.in_snapshot = false;
      continue;
    }
    if (lag == 0 && !snapshot) {
      // A stopped writer commits nothing more, and the wait would return at once: poll.
      if (published_.writer_stopped()) {
        std::this_thread::sleep_for(kPollInterval);
      } else {
        published_.WaitForCommitAfter(commits, std::chrono::steady_clock::now() + kPollInterval);
      }
    }
  }
}

}  // namespace cdcview
