// Applier: the single writer. It takes batches of SourceRecords and applies each batch in
// one LMDB write transaction: for every event, the stored image (items/<table>) is the old
// image, the builders give the index mutations, the new image replaces the stored one, and the
// batch's source positions are written in the same transaction. So an event's effects and the
// position past it commit together: exactly once across crashes.
//
// Rejected records (undecodable, a key of the wrong type, an entry key over the store's limit)
// go to their source's DeadLetterSink before the commit and are counted; the rest of the batch
// applies and the position advances past them.
//
// Threading: ApplyBatch, Recover and RebuildViews are called from one thread (the writer).
// Positions(), Counters(), GetViewState(), GetAggregateState() and WriterError() may be called
// from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "daemon/apply/aggregate_writer.h"
#include "daemon/apply/catalog.h"
#include "daemon/apply/hot_keys.h"
#include "daemon/log/log_throttle.h"
#include "daemon/metrics/metrics.h"
#include "daemon/sources/change_source.h"
#include "daemon/store/change_log.h"
#include "daemon/store/store.h"

namespace cdcview {

class RecordQueue;

struct AppliedPositionEntry {
  std::string source;
  std::string partition;
  std::string position;
};

enum class ViewState { kBuilding, kReady };

// How long the writer waits for a partial batch to fill (group commit): as long as the last
// commit (mdb_txn_commit, with its sync) took, between kMinLinger and apply.max_delay_ms.
// Lingering saves commits, so it is worth what a commit costs; the events that arrive while a
// batch is applied pile up for the next one anyway. On tmpfs or a fast SSD a commit takes well
// under a millisecond, so the linger is one; where a sync takes tens of milliseconds, batches
// still gather max_delay_ms of events. (It used to be the whole last batch, apply included:
// the linger then grew with the batch, and from half the writer's capacity on it sat at
// max_delay_ms, which was most of the lag at half load.)
inline constexpr std::chrono::microseconds kMinLinger{1000};
std::chrono::microseconds WriterLinger(const ApplyConfig& cfg, std::chrono::microseconds last_commit);

class Applier {
 public:
  struct SourceCounters {
    uint64_t applied = 0;
    uint64_t skipped = 0;
    uint64_t rejected = 0;
    double lag_seconds = 0;   // of the newest event of the last batch that had a creation time
    // The writer's clock at the last commit of a batch with records of this source (at
    // construction before any): with lag_seconds, how stale the source can be now.
    int64_t last_commit_ms = 0;
    // A batch with records of this source committed since start: until then lag_seconds says
    // nothing about how far behind the source is.
    bool committed = false;
  };

  // `dead_letters[i]` is source i's sink. `now_ms` is the clock (injected in tests).
  Applier(const Catalog& catalog, Store* store, ApplyProbe* probe,
          std::vector<DeadLetterSink*> dead_letters,
          std::function<int64_t()> now_ms = nullptr);

  // Loads the stored positions and view and aggregate states; a view or aggregate whose
  // fingerprint differs from the stored one (or that is new) is marked BUILDING and emptied,
  // to be rebuilt.
  absl::Status Recover();
  // Rebuilds every BUILDING view, then every BUILDING aggregate, from items/<table>, in chunks
  // (each chunk one transaction, resumable after a crash), logging progress. Returns when all
  // are READY.
  absl::Status RebuildViews(const std::atomic<bool>* stop = nullptr);

  // Applies one batch in one write transaction (growing the map and retrying on
  // MDB_MAP_FULL). An error means nothing of the batch was applied (the store is unchanged):
  // a dead letter that could not be written, the map at its ceiling, an LMDB failure.
  absl::Status ApplyBatch(std::vector<SourceRecord>* batch);

  // The writer loop: rebuilds BUILDING views, then pops batches from `queue` until it is
  // closed and drained, or `stop`. A failing rebuild or batch is retried with back-off
  // (WriterError() says why meanwhile).
  void Run(RecordQueue* queue, const std::atomic<bool>* stop);
  // The queue whose records count as not applied yet (HasUnapplied); Run watches its own.
  void WatchQueue(const RecordQueue* queue) { queue_.store(queue); }
  // Whether records of source `source` are read but not committed: in the watched queue, or in
  // the batch being applied (or retried after an error). Any thread.
  bool HasUnapplied(size_t source) const;

  // Stored next positions of source `source` (partition -> position), for ChangeSource::Start.
  std::map<std::string, std::string> PositionsOf(size_t source) const;
  // The stored next position of one partition of source `source`, "" if none: one lookup,
  // copying only the answer (readers waiting for a position call it on every commit, and the
  // writer takes the same lock per batch).
  std::string PositionOf(size_t source, const std::string& partition) const;
  std::vector<AppliedPositionEntry> Positions() const;
  SourceCounters Counters(size_t source) const;
  // While the returned lock is held no batch becomes visible: an LMDB snapshot begun under it
  // agrees with Counters() and Positions() read under it (GetStatus). Otherwise a reader could
  // see a batch's positions committed while the counters do not count its events yet. Hold it
  // briefly: the writer waits for it before each commit.
  std::shared_lock<std::shared_mutex> HoldCommits() const {
    return std::shared_lock(commit_visibility_mu_);
  }
  ViewState GetViewState(size_t global_view, double* progress = nullptr) const;
  // The same for aggregates (Catalog::aggregates() index).
  ViewState GetAggregateState(size_t global_aggregate, double* progress = nullptr) const;
  // Events applied to each table since start, and index writes per view: write amplification.
  double IndexWritesPerEvent(size_t global_view) const;
  // Why the writer is not applying (empty while it is): a batch or a rebuild that keeps
  // failing. WriterError(source) is the error that concerns that source (a batch failing on
  // another source's dead letter does not).
  std::string WriterError() const;
  std::string WriterError(size_t source) const;

  // Waiting for the writer: returns once the batch committed after `since` (a commit count)
  // or the deadline passes. commit_count() is incremented after every commit.
  uint64_t commit_count() const { return commits_.load(); }
  bool WaitForCommitAfter(uint64_t since, std::chrono::steady_clock::time_point deadline) const;

  // The heaviest partition keys per view and table, updated after every commit.
  const HotKeyTracker& hot_keys() const { return hot_keys_; }
  // The writer's clock (injected in tests), for reports over the hot-key windows.
  int64_t NowMs() const { return now_ms_(); }
  // Sets cdcview_view_hot_key_share_ratio and cdcview_view_hot_key_writes_per_second of every
  // view from the windows as of now (the readiness ticker calls it once a second, so the gauges
  // fall as a window slides past writes even when no batch comes). Any thread.
  void PublishHotKeyMetrics() const;
  // Logs one summary line per source (rejected records) and per view or aggregate (items left
  // out of a rebuild) whose warnings were throttled in the interval that ended: only the first
  // kLoggedPerInterval of each are logged in full per kLogIntervalMs. Any thread; the
  // readiness ticker calls it once a second.
  void LogThrottledSummaries();
  static constexpr uint32_t kLoggedPerInterval = 5;
  static constexpr int64_t kLogIntervalMs = 10000;

 private:
  enum class Outcome { kApplied, kSkipped, kRejected };
  absl::Status TryBatch(std::vector<SourceRecord>* batch, WriteTxn* txn,
                        std::map<std::string, std::string>* positions);
  // Applies one event; a non-OK *rejection means the event was rejected (nothing written).
  absl::StatusOr<Outcome> ApplyEvent(WriteTxn* txn, const SourceRecord& record,
                                     absl::Status* rejection, std::string* reason);
  // A record with a Kafka offset below its partition's stored next offset (this batch's
  // positions first, then the committed ones): it was applied already and is skipped.
  bool IsStale(const SourceRecord& record,
               const std::map<std::string, std::string>& batch_positions) const;
  // Walks items/<table> from the stored cursor (meta `cursor_key`) in chunks, one transaction
  // each: `add` puts each live item into what is rebuilt (or sets *left_out, having logged
  // why); the cursor commits with the chunk, and at the end `state_key` becomes READY.
  // `progressed` is told after each commit, with the last items key done.
  using RebuildItemFn = std::function<absl::Status(WriteTxn*, const Item&, bool* left_out)>;
  using RebuildProgressFn = std::function<void(bool finished, double progress, std::string_view last)>;
  absl::Status RebuildFromItems(const std::string& what, MDB_dbi items,
                                const std::string& cursor_key, const std::string& state_key,
                                const RebuildItemFn& add, const RebuildProgressFn& progressed,
                                const std::atomic<bool>* stop);
  absl::Status RebuildView(const ViewRef& view, const std::atomic<bool>* stop);
  // Compares a view's or aggregate's stored fingerprint and state with `fingerprint`: true when
  // it is READY; otherwise it is marked BUILDING (emptied first if new or changed, its cursor
  // reset; else *cursor is the stored resume point) and false.
  using MetaKeyFn = std::function<std::string(std::string_view)>;
  absl::StatusOr<bool> RecoverBuildState(WriteTxn* txn, const std::string& what,
                                         const MetaKeyFn& meta_key, const std::string& fingerprint,
                                         const std::string& table,
                                         std::initializer_list<MDB_dbi> contents, std::string* cursor);
  // Rebuilds what is BUILDING, retrying with back-off; false when stopped.
  bool RebuildWithRetries(const std::atomic<bool>* stop);
  // An aggregate whose state contradicts a change (DATA_LOSS `why`): emptied and marked
  // BUILDING in `txn`, logged, counted; the writer rebuilds it after the batch commits.
  absl::Status ResetInconsistentAggregate(WriteTxn* txn, size_t global, const absl::Status& why);
  absl::Status RebuildAggregate(const AggregateRef& aggregate, const std::atomic<bool>* stop);
  // Writes the aggregate deltas of the event on item `pk` of `table` (aggregate_deltas_).
  absl::Status ApplyAggregateDeltas(WriteTxn* txn, size_t table, std::string_view pk);
  void SetAggregateState(size_t global_aggregate, ViewState state, double progress);
  // Writes the batch's view mutations, sorted by view and key, and logs each one that changed
  // a view in the change log with the record that caused it.
  absl::Status ApplyViewMutations(WriteTxn* txn, const std::vector<SourceRecord>& batch);
  // Sets the size gauges (view items and bytes, map use) from the store as it is: at start-up
  // and after rebuilds, when no batch has reported them yet.
  void PublishSizes();
  void SetViewState(size_t global_view, ViewState state, double progress);
  void SetWriterError(const absl::Status& s, int source);

  const Catalog& catalog_;
  Store* store_;
  ApplyProbe* probe_;
  std::vector<DeadLetterSink*> dead_letters_;
  std::function<int64_t()> now_ms_;
  // Warnings that would repeat per event: by source name (rejections), and by "view V" /
  // "aggregate A" (items left out of a rebuild).
  LogThrottle rejected_log_;
  LogThrottle left_out_log_;
  std::vector<MDB_dbi> view_dbis_;  // by global view index
  std::vector<AggregateDbs> aggregate_dbs_;  // by global aggregate index

  // Writer-thread scratch, reused across batches.
  BatchStats stats_;
  // The batch's view mutations (IndexMutation::view holds the global view index here).
  std::vector<IndexMutation> mutations_;
  std::vector<uint32_t> mutation_records_;  // per mutation: its record's index in the batch
  std::vector<uint32_t> mutation_order_;    // mutations_ indices sorted by view and key
  std::string old_value_;                   // a deleted entry's value, for the change log
  ChangeLogWriter change_log_;
  std::vector<std::pair<size_t, absl::Status>> pending_dead_letters_;
  std::vector<bool> stale_;  // per batch record: a Kafka offset below the stored next offset
  // Per applied event of the batch: (table, encoded table partition key), for hot_keys_.
  // Only the first hot_table_key_count_ are this batch's.
  std::vector<std::pair<size_t, std::string>> hot_table_keys_;
  size_t hot_table_key_count_ = 0;
  std::vector<AggregateDelta> aggregate_deltas_;  // one event's
  std::vector<size_t> inconsistent_;  // this batch's aggregates found inconsistent (global index)
  // Writer thread: per aggregate being rebuilt, the last items key the rebuild counted. Events
  // on items up to it are maintained incrementally; later items are counted by the rebuild
  // from their image at that time, so nothing is counted twice or missed.
  std::vector<std::string> aggregate_build_cursors_;

  mutable std::mutex mu_;
  // Held exclusively by the writer from a batch's commit until its counters and positions are
  // published (HoldCommits). Taken before mu_ when both are.
  mutable std::shared_mutex commit_visibility_mu_;
  // (source, partition) pairs, compared as string views so PositionOf looks up without
  // copying either string.
  struct SourcePartitionLess {
    using is_transparent = void;
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      const std::string_view a1 = a.first, b1 = b.first;
      if (a1 != b1) return a1 < b1;
      return std::string_view(a.second) < std::string_view(b.second);
    }
  };
  std::map<std::pair<std::string, std::string>, std::string, SourcePartitionLess>
      positions_;  // guarded by mu_
  std::vector<SourceCounters> counters_;                                 // guarded by mu_
  std::vector<uint64_t> table_events_;                                   // guarded by mu_
  std::vector<uint64_t> view_writes_;                                    // guarded by mu_
  std::string writer_error_;                                             // guarded by mu_
  int writer_error_source_ = -1;  // the source the error concerns, -1: all; guarded by mu_
  int failed_source_ = -1;        // writer thread: the source whose dead letter failed
  // Writer thread: how long the last successful txn.Commit() took (WriterLinger).
  std::chrono::microseconds last_commit_{0};
  // Writer thread: which records of the current batch were dead-lettered already, so a retried
  // batch (map growth, back-off) does not write them again.
  std::vector<bool> dead_lettered_;
  std::vector<std::unique_ptr<std::atomic<int>>> view_states_;
  std::vector<std::unique_ptr<std::atomic<double>>> view_progress_;
  std::vector<std::unique_ptr<std::atomic<int>>> aggregate_states_;
  std::vector<std::unique_ptr<std::atomic<double>>> aggregate_progress_;
  std::atomic<uint64_t> commits_{0};
  std::atomic<const RecordQueue*> queue_{nullptr};
  std::vector<size_t> in_flight_;  // per source: records of the batch not committed; guarded by mu_
  mutable std::mutex commit_mu_;
  mutable std::condition_variable committed_;
  HotKeyTracker hot_keys_;
};

}  // namespace cdcview
