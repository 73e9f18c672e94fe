// PublishedState: what the writer (Applier) publishes and readers (ViewReader, WatchHub,
// readiness, the application's ticker) observe: per-view and per-aggregate build state, the
// applied positions and counters of every source, the writer's errors, the commit count and its
// notification, the sources' health, the hot-key windows and the clock. Readers take a
// const PublishedState& and never see the writer itself.
//
// Publication: every commit publishes one immutable CommitSnapshot (commit number, per-source
// counters, applied positions, per-table events and per-view index writes), built by the writer
// off to the side (NextSnapshot) and swapped in by Publish. A reader loads the current one
// (Snapshot) and reads everything in it without any lock, so counters and positions read from
// one snapshot always describe the same commits (GetStatus). The pointer lives under
// snapshot_mu_, held only to copy or swap a shared_ptr (a reference count change): a reader
// holds it for nanoseconds and never while it formats, allocates or waits, so the writer's
// swap waits at most that long, and the previous snapshot is released after the lock.
// The snapshot is published right after the store's commit, so for an instant the store can
// be one commit ahead of it: a snapshot's positions are a lower bound of what a read
// transaction begun after loading it sees, never ahead of it.
//
// Thread-safety: the writer-side methods (marked so) are called by the writer's threads (the
// committer; SetPrepareError and CountInFlight also by the preparer); RegisterSource and
// SetFlushError before the state is shared with readers. Every const method may be called
// from any thread and takes no lock the committer waits for, with two bounded exceptions:
// WaitForCommitAfter holds commit_mu_ only to compare the count (the committer takes it to
// store the count before it signals), and hot_keys() reports hold the tracker's lock only to
// copy a snapshot pointer (HotKeyTracker).
//
// Ownership: the application owns it; it must outlive the writer and every reader. It keeps
// a reference to the Catalog.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "daemon/state/catalog.h"
#include "daemon/state/hot_keys.h"
#include "daemon/state/source_health.h"

namespace cdcview {

enum class ViewState { kBuilding, kReady };

struct SourceCounters {
  uint64_t applied = 0;
  uint64_t skipped = 0;
  uint64_t rejected = 0;
  double lag_seconds = 0;  // of the newest event of the last batch that had a creation time
  // The writer's clock at the last commit of a batch with records of this source (at
  // construction before any): with lag_seconds, how stale the source can be now.
  int64_t last_commit_ms = 0;
  // A batch with records of this source committed since start: until then lag_seconds says
  // nothing about how far behind the source is.
  bool committed = false;
};

// (source name, partition), ordered as the store orders its position keys
// ("pos/<source>/<partition>", bytewise), so positions list in the same order from either.
struct PositionKeyLess {
  using is_transparent = void;
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    return Compare(a.first, a.second, b.first, b.second) < 0;
  }
  static int Compare(std::string_view a_source, std::string_view a_partition,
                     std::string_view b_source, std::string_view b_partition);
};
using PositionMap =
    std::map<std::pair<std::string, std::string>, std::string, PositionKeyLess>;

// What one commit published; immutable once published.
struct CommitSnapshot {
  uint64_t number = 0;                   // commits since start (0: none yet)
  std::vector<SourceCounters> counters;  // by source index (Config::sources)
  PositionMap positions;                 // every stored next position, configured or not
  std::vector<uint64_t> table_events;    // events applied per table since start
  std::vector<uint64_t> view_writes;     // index writes (puts + deletes) per view since start
  // Applied events per view whose item was left out for a key attribute of the wrong type
  // (ViewSkip), since start.
  std::vector<uint64_t> view_key_type_mismatches;
};

class PublishedState {
 public:
  // `now_ms` is the writer's clock, Unix milliseconds (injected in tests; null: the wall clock).
  explicit PublishedState(const Catalog& catalog, std::function<int64_t()> now_ms = nullptr);

  // ---- Setup, before readers ----

  // Source `source`'s kind ("file", "kafka", "dynamodb") and how to ask its health. Without
  // one, SourceHealthOf answers nullopt (tests without sources).
  void RegisterSource(size_t source, std::string kind, std::function<SourceHealth()> health);
  // Why applied batches cannot reach LMDB ("" while they can): part of WriterError.
  void SetFlushError(std::function<std::string()> flush_error);

  // ---- Writer side ----

  // A copy of the current snapshot numbered as the next commit, for the writer to update.
  std::shared_ptr<CommitSnapshot> NextSnapshot() const;
  // Makes `next` the current snapshot and, if its number is past the last one, wakes
  // WaitForCommitAfter.
  void Publish(std::shared_ptr<const CommitSnapshot> next);
  // The positions as stored (recovery), without counting a commit.
  void ReplacePositions(PositionMap positions);
  void SetViewState(size_t global_view, ViewState state, double progress);
  void SetAggregateState(size_t global_aggregate, ViewState state, double progress);
  // The committer's error (`source`: the source it concerns, -1: all; "" clears it) and the
  // preparer's (it concerns all sources), kept apart so neither stage clears the other's.
  void SetCommitError(std::string error, int source);
  void SetPrepareError(std::string error);
  // The writer met a store error (lmdb_status.h: a damaged page) and stopped for good: `error`
  // says what and what to do. It stays set (WriterError says it first); health turns every
  // service NOT_SERVING.
  void SetStoreError(std::string error);
  // Records of `source` popped from the queue and not committed yet change by `delta`.
  void CountInFlight(size_t source, int64_t delta);
  // How many records of a source wait in the queue before the writer (null: none).
  void WatchQueue(std::function<size_t(size_t source)> queued);
  HotKeyTracker& hot_keys() { return hot_keys_; }
  // The writer has stopped for good (the daemon is shutting down): no commit follows. Wakes
  // WaitForCommitAfter, so a read waiting for a position not applied by now answers at once.
  void SetWriterStopped();

  // ---- Readers ----

  std::shared_ptr<const CommitSnapshot> Snapshot() const;
  // Waiting for the writer: returns once a commit after `since` (a commit_count) is
  // published, true, or when the deadline passes or the writer has stopped, false: once it
  // has stopped, at once, so a loop around it checks writer_stopped() rather than spin.
  uint64_t commit_count() const { return commits_.load(); }
  bool WaitForCommitAfter(uint64_t since, std::chrono::steady_clock::time_point deadline) const;
  // Whether SetWriterStopped was called. Read before the positions: every commit precedes it.
  bool writer_stopped() const { return writer_stopped_.load(std::memory_order_acquire); }

  ViewState GetViewState(size_t global_view, double* progress = nullptr) const;
  ViewState GetAggregateState(size_t global_aggregate, double* progress = nullptr) const;

  // From the current snapshot.
  SourceCounters Counters(size_t source) const;
  // The next position of one partition of source `source`, "" if none.
  std::string PositionOf(size_t source, std::string_view partition) const;
  // Source `source`'s next positions (partition -> position), for ChangeSource::Start.
  std::map<std::string, std::string> PositionsOf(size_t source) const;
  // Index writes per event applied to the view's table since start: write amplification.
  double IndexWritesPerEvent(size_t global_view) const;
  // CommitSnapshot::view_key_type_mismatches of the view (DescribeView reports it).
  uint64_t KeyTypeMismatches(size_t global_view) const;

  // Why the writer is not applying ("" while it is): a batch or a rebuild that keeps failing,
  // or a flush. WriterError(source) is the error that concerns that source (a batch failing on
  // another source's dead letter does not).
  std::string WriterError() const;
  std::string WriterError(size_t source) const;
  // SetStoreError's error, "" while the writer has met none.
  std::string StoreError() const;
  // Whether records of `source` are read but not committed: in the watched queue, or in a
  // batch being prepared, applied or retried.
  bool HasUnapplied(size_t source) const;

  // Source `source`'s health as it reports it now; nullopt if none is registered.
  std::optional<SourceHealth> SourceHealthOf(size_t source) const;
  std::string_view SourceKind(size_t source) const;  // "" if none is registered

  // The heaviest partition keys per view and table, updated after every commit.
  const HotKeyTracker& hot_keys() const { return hot_keys_; }
  // The writer's clock.
  int64_t NowMs() const { return now_ms_(); }
  const Catalog& catalog() const { return catalog_; }

 private:
  struct Source {
    std::string kind;
    std::function<SourceHealth()> health;
  };
  const Catalog& catalog_;
  const std::function<int64_t()> now_ms_;
  std::vector<Source> sources_;  // set before readers, then read-only
  std::function<std::string()> flush_error_;

  mutable absl::Mutex snapshot_mu_;
  std::shared_ptr<const CommitSnapshot> snapshot_ ABSL_GUARDED_BY(snapshot_mu_);
  std::atomic<uint64_t> commits_{0};
  mutable absl::Mutex commit_mu_;  // only for the wait below; the count is commits_
  mutable absl::CondVar committed_;
  std::atomic<bool> writer_stopped_{false};  // stored under commit_mu_, read without it

  // Built once; each element updated atomically (state and progress are read separately).
  std::unique_ptr<std::atomic<int>[]> view_states_;
  std::unique_ptr<std::atomic<double>[]> view_progress_;
  std::unique_ptr<std::atomic<int>[]> aggregate_states_;
  std::unique_ptr<std::atomic<double>[]> aggregate_progress_;
  std::unique_ptr<std::atomic<int64_t>[]> in_flight_;  // by source

  // Set only when a stage starts or stops failing, never per commit.
  mutable absl::Mutex error_mu_;
  std::string commit_error_ ABSL_GUARDED_BY(error_mu_);
  int commit_error_source_ ABSL_GUARDED_BY(error_mu_) = -1;
  std::string prepare_error_ ABSL_GUARDED_BY(error_mu_);
  std::string store_error_ ABSL_GUARDED_BY(error_mu_);

  // Set when the writer starts Run, read by HasUnapplied.
  mutable absl::Mutex queue_mu_;
  std::function<size_t(size_t)> queued_ ABSL_GUARDED_BY(queue_mu_);

  HotKeyTracker hot_keys_;
};

}  // namespace cdcview
