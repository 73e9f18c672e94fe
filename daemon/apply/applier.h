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
// What it does is published into a PublishedState (daemon/state/published_state.h), which
// readers observe: view and aggregate states, one snapshot of counters and positions per
// commit, the commit notification, its errors, the hot keys. Readers never see the Applier.
//
// Threading: ApplyBatch, ApplyBatches, Run, Recover, ApplyAssignment and RebuildViews are called from one
// thread (the writer), one at a time; Run and ApplyBatches start a second thread for their
// first stage and join it before they return. The Publish* and Log* methods may be called
// from any thread.
//
// The class's files: applier.cc (construction, Run, ApplyBatches and the slot hand-off between
// the stages, retries), preparer.cc (the first stage), committer.cc (the second stage),
// rebuild.cc (Recover and the rebuilds), assignment_change.cc (ApplyAssignment: dropping the
// partitions a cluster member no longer owns); prepared_batch.h is the batch between the
// stages.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "daemon/apply/aggregate_writer.h"
#include "daemon/apply/tombstone_compactor.h"
#include "daemon/log/log_throttle.h"
#include "daemon/metrics/assignment_probe.h"
#include "daemon/metrics/metrics.h"
#include "daemon/sources/change_source.h"
#include "daemon/state/catalog.h"
#include "daemon/state/published_state.h"
#include "daemon/store/change_log.h"
#include "daemon/store/partition_ids.h"
#include "daemon/store/store.h"

namespace cdcview {

class RecordQueue;

// How long the writer waits for a partial batch to fill (group commit): as long as the last
// commit (mdb_txn_commit, with its sync) took, between kMinLinger and apply.max_delay_ms.
// Lingering saves commits, so it is worth what a commit costs, not what applying a batch
// costs: a linger that grew with the batch would sit at max_delay_ms from half the writer's
// capacity on. The events that arrive while a batch is applied pile up for the next one
// anyway. On tmpfs or a fast SSD a commit takes well under a millisecond, so the linger is
// one; where a sync takes tens of milliseconds, batches still gather max_delay_ms of events.
inline constexpr std::chrono::microseconds kMinLinger{1000};
std::chrono::microseconds WriterLinger(const ApplyConfig& cfg, std::chrono::microseconds last_commit);

// With write-back on, whether a batch of `events` skips the pending layers and commits to LMDB
// itself (Store::BeginWrite, which takes the layers along), given what the last commit to LMDB
// cost its thread (Store::last_lmdb_commit). Only a batch larger than apply.batch_size, which
// the writer takes when it is behind its sources (see BacklogBatchSize): it is as large as a
// flush, so recording it in a layer first would copy each write once more for nothing
// (docs/PERFORMANCE.md has the comparison). And only where that commit costs its writer at
// most kDirectCommitPerEvent per event, small against what the preparer spends on the next
// batch meanwhile: on tmpfs or a fast SSD. Where a sync takes hundreds of milliseconds (a
// slow disk) the flusher waits for it instead of the writer.
inline constexpr std::chrono::nanoseconds kDirectCommitPerEvent{2000};
// Without a last commit to go by (none since the start), buffered.
bool CommitsDirectly(const ApplyConfig& cfg, size_t events,
                     std::optional<std::chrono::microseconds> last_lmdb_commit);

// The time a REMOVE's tombstone counts from, which the tombstone horizon is measured against
// (TombstoneCompactor): the event's creation time (DynamoDB's ApproximateCreationDateTime, a
// Kafka message's timestamp), because a source's retention, which bounds the replays a
// tombstone guards against, runs from it: no change older than the removal can be replayed
// once the removal itself has left the retention window. The apply time would keep the
// tombstones of a backlog (a day of stream replayed after a snapshot) a backlog's age longer.
// Without a creation time, or with one ahead of `now_ms` (another host's clock, a producer's
// timestamp), the apply time `now_ms`.
int64_t TombstoneTime(const ChangeEvent& event, int64_t now_ms);

class Applier {
 public:
  // `dead_letters[i]` is source i's sink. Publishes into `published` (whose clock it uses),
  // which must outlive it.
  Applier(const Catalog& catalog, Store* store, ApplyProbe* probe,
          std::vector<DeadLetterSink*> dead_letters, PublishedState* published);
  ~Applier();

  // Loads the stored positions and view and aggregate states; a view or aggregate whose
  // fingerprint differs from the stored one (or that is new) is marked BUILDING and emptied,
  // to be rebuilt. Tombstones stored without a time get the time now (once per table, see
  // TombstoneCompactor::TimeUntimed).
  absl::Status Recover();
  // Rebuilds every BUILDING view, then every BUILDING aggregate, from items/<table>, in chunks
  // (each chunk one transaction, resumable after a crash), logging progress. Returns when all
  // are READY.
  absl::Status RebuildViews(const std::atomic<bool>* stop = nullptr);

  // What ApplyAssignment did.
  struct AssignmentChange {
    bool changed = false;  // the store held another assignment than the configured one
    std::string from, to;  // "standalone", "member 0 of 3"
    uint64_t items_dropped = 0;  // live items and tombstones
    std::vector<std::string> positions_dropped;  // "<source>/<partition>", in key order
  };
  struct AssignmentOptions {
    size_t batch_items = 10000;  // items dropped per write transaction
    AssignmentProbe* probe = nullptr;  // counts the change and the items dropped
    // Called after each committed batch of drops; false stops there with CANCELLED, as a kill
    // would (tests).
    std::function<bool()> after_batch;
  };
  // After Recover, before anything is applied: compares the partitions the store holds (meta
  // cluster/assignment; a store without one holds a standalone's) with those `cluster` gives
  // this member (OwnsPartition; members 0 or 1: every one). When they differ, it drops every
  // stored item whose last event came from a Kafka partition this member no longer owns, as a
  // REMOVE of it would (view entries, aggregate contributions, a delete in the change log
  // whose cause is the partition with an empty position) but leaving no tombstone (should the
  // partition come back, its history is read again from the beginning), in batches of
  // options.batch_items per write transaction, logging progress; then removes those
  // partitions' stored positions and stores the new assignment, in one transaction. An item
  // without a partition id (written before the store recorded them) goes too, and with it
  // the positions of every partition of its table's sources, which are then read again from
  // the beginning.
  //
  // Crash-safe: the assignment is stored last, and dropping is idempotent, so a start after a
  // crash (or a CANCELLED) walks again and finishes. A new assignment that owns every
  // partition (standalone) drops nothing: partitions never consumed have no position and are
  // read from the beginning. A new store (no positions) stores the assignment as no change.
  absl::StatusOr<AssignmentChange> ApplyAssignment(const ClusterConfig& cluster,
                                                   const AssignmentOptions& options);

  // Applies one batch in one write transaction (growing the map and retrying on
  // MDB_MAP_FULL): both of Run's stages in turn, on the calling thread. An error means nothing
  // of the batch was applied (the store is unchanged): a dead letter that could not be
  // written, the map at its ceiling, an LMDB failure. Not while Run runs.
  absl::Status ApplyBatch(std::vector<SourceRecord>* batch);

  // The writer loop: rebuilds BUILDING views, then applies batches from `queue` until it is
  // closed and drained, or `stop`. A failing rebuild or batch is retried with back-off
  // (WriterError() says why meanwhile), except on a store error (IsStoreError: a damaged
  // page), which no retry gets past: Run logs it, publishes it (SetStoreError) and returns.
  //
  // Two stages, each on its own thread, one batch apart: a preparer pops batch N+1 and works
  // out everything that needs no write transaction (old images, view mutations sorted by key,
  // aggregate deltas, encoded items) while the calling thread writes and commits batch N. The
  // old images come from a read snapshot, overlaid with the items of batch N (which may not
  // have committed yet) and of N+1's earlier events: the same images one thread applying the
  // batches in turn would read. See docs/ARCHITECTURE.md, "The writer".
  void Run(RecordQueue* queue, const std::atomic<bool>* stop);
  // Run's two stages over the batches `next` gives (it fills its argument, an empty vector,
  // and returns false when there are no more; called on the preparer's thread). Returns once
  // every batch is committed, or after `stop` (batches not committed then are dropped).
  // Not while Run runs; benchmarks drive the writer with it.
  // A failing batch is retried with back-off, WriterError() saying why (kRetry, as Run), or
  // ends the run: the error is returned, and neither that batch nor any later one is applied
  // (kStop); a store error ends it under either. Returns OK once every batch is committed;
  // CANCELLED if stopped before.
  using BatchSource = std::function<bool(std::vector<SourceRecord>*)>;
  enum class OnFailure { kRetry, kStop };
  absl::Status ApplyBatches(const BatchSource& next, OnFailure on_failure,
                            const std::atomic<bool>* stop = nullptr) ABSL_LOCKS_EXCLUDED(slot_mu_);
  // The queue whose records count as not applied yet (PublishedState::HasUnapplied); Run
  // watches its own. Not while Run runs.
  void WatchQueue(const RecordQueue* queue);
  // Sets cdcview_view_hot_key_share_ratio and cdcview_view_hot_key_writes_per_second of every
  // view from the windows as of now (the readiness ticker calls it once a second, so the gauges
  // fall as a window slides past writes even when no batch comes). Any thread.
  void PublishHotKeyMetrics() const;
  // With write-back on, sets the view and aggregate size gauges from LMDB as it is now. The
  // batches do not set them then (LMDB trails the published layers); the readiness ticker
  // calls this once a second, so they are right up to the last flush. Any thread.
  void PublishFlushedSizes() const;
  // Logs one summary line per source (rejected records) and per view or aggregate (items left
  // out of a rebuild) whose warnings were throttled in the interval that ended: only the first
  // kLoggedPerInterval of each are logged in full per kLogIntervalMs. Any thread; the
  // readiness ticker calls it once a second.
  void LogThrottledSummaries();
  static constexpr uint32_t kLoggedPerInterval = 5;
  static constexpr int64_t kLogIntervalMs = 10000;

 private:
  enum class Outcome { kApplied, kSkipped, kRejected };
  // A batch between the two stages (defined in prepared_batch.h).
  struct Prepared;
  // The first stage: works out `batch`'s writes from a read snapshot overlaid with the items
  // `previous` writes (the batch before, which may not have committed yet; null if there is
  // none in flight). Any thread, one at a time. An error (an LMDB read, a damaged stored item)
  // means `batch` must be prepared again.
  absl::Status Prepare(Prepared* batch, const Prepared* previous);
  // One event of Prepare; a non-OK *rejection means the event was rejected (nothing written).
  absl::StatusOr<Outcome> PrepareEvent(const ReadTxn& snapshot, Prepared* batch,
                                       const Prepared* previous, uint32_t index,
                                       absl::Status* rejection, std::string* reason);
  // The second stage (the writer thread): writes a prepared batch in one write transaction
  // with its dead letters, commits it (growing the map as needed) and publishes counters and
  // positions, with the stages' times (the first ones as the batch's stats.stages hold them).
  // An error leaves the store unchanged and `batch` ready to be committed again.
  absl::Status Commit(Prepared* batch);
  absl::Status WriteBatch(const Prepared& batch, WriteTxn* txn);
  // Counts the batch's records in in_flight_ (HasUnapplied) until it commits, replacing what
  // an earlier try of it counted.
  void CountInFlight(Prepared* batch);
  // Run's first stage, on its own thread: pops and prepares batches into slots_ in turn.
  void PrepareLoop(const BatchSource& next, OnFailure on_failure, const std::atomic<bool>* stop,
                   absl::Status* error) ABSL_LOCKS_EXCLUDED(slot_mu_);
  // Calls `attempt` (Prepare or Commit of one batch, `what` in the log) until it succeeds,
  // under `on_failure`; meanwhile WriterError() says why, from the `stage`'s own error (the
  // committer's names the source *error_source, null: all), so neither stage clears the
  // other's.
  // False if it did not succeed: *error says why (stopped, or the error under kStop).
  enum class Stage { kPrepare, kCommit };
  bool Attempt(Stage stage, const std::function<absl::Status()>& attempt, const std::string& what,
               OnFailure on_failure, const std::atomic<bool>* stop, const int* error_source,
               absl::Status* error);
  // The partition id of `record`'s partition, noting in `batch` an id it must save.
  uint32_t PartitionIdOf(const SourceRecord& record, Prepared* batch);
  // ApplyAssignment's walk of table `table`: drops the items of partitions `owned` rejects.
  // *unknown_partition is set when one had no partition id.
  using OwnedFn = std::function<bool(std::string_view source, std::string_view partition)>;
  absl::Status DropUnowned(size_t table, const OwnedFn& owned, const AssignmentOptions& options,
                           AssignmentChange* change, bool* unknown_partition);
  // One dropped item: its view entries, aggregate contributions and tombstone index entry.
  absl::Status DropItem(WriteTxn* txn, size_t table, std::string_view pk, std::string_view value,
                        std::string_view source, std::string_view partition);
  // Publishes the positions stored in `txn` (PublishedState::ReplacePositions).
  absl::Status PublishStoredPositions(const Txn& txn);
  // A record with a Kafka offset below its partition's next offset (this batch's positions,
  // then `previous`'s, then the committed ones): it was applied already and is skipped.
  bool IsStale(const SourceRecord& record, const Prepared& batch, const Prepared* previous) const;
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
  // Rebuilds what is BUILDING, retrying with back-off; false when stopped, or on a store
  // error (StopOnStoreError).
  bool RebuildWithRetries(const std::atomic<bool>* stop);
  // A tombstone compaction step if one is due (the writer thread, between batches); a failing
  // one is logged and tried again later (TombstoneCompactor::kRetryMs).
  void CompactTombstones();
  // A store error (IsStoreError) while trying to `what`: logged and published
  // (PublishedState::SetStoreError); the caller stops applying for good.
  void StopOnStoreError(const absl::Status& s, const std::string& what);
  // An aggregate whose state contradicts a change (DATA_LOSS `why`): emptied and marked
  // BUILDING in `txn`, logged, counted; the writer rebuilds it after the batch commits.
  absl::Status ResetInconsistentAggregate(WriteTxn* txn, size_t global, const absl::Status& why);
  absl::Status RebuildAggregate(const AggregateRef& aggregate, const std::atomic<bool>* stop);
  // Writes the aggregate deltas of the event on item `pk` of `table`.
  absl::Status ApplyAggregateDeltas(WriteTxn* txn, size_t table, std::string_view pk,
                                    std::span<const AggregateDelta> deltas);
  void SetAggregateState(size_t global_aggregate, ViewState state, double progress);
  // Writes the batch's view mutations in the order Prepare sorted them (by view and key), and
  // logs each one that changed a view in the change log with the record that caused it.
  absl::Status ApplyViewMutations(WriteTxn* txn, const Prepared& batch);
  // Sets the size gauges (view items and bytes, map use) from the store as it is: at start-up
  // and after rebuilds, when no batch has reported them yet.
  void PublishSizes();
  void SetViewState(size_t global_view, ViewState state, double progress);
  void SetWriterError(const absl::Status& s, int source);
  void SetPrepareError(const absl::Status& s);  // the preparer's, beside the committer's

  const Catalog& catalog_;
  Store* store_;
  ApplyProbe* probe_;
  std::vector<DeadLetterSink*> dead_letters_;
  PublishedState* published_;
  // Warnings that would repeat per event: by source name (rejections), and by "view V" /
  // "aggregate A" (items left out of a rebuild).
  LogThrottle rejected_log_;
  LogThrottle left_out_log_;
  std::vector<MDB_dbi> view_dbis_;  // by global view index
  std::vector<AggregateDbs> aggregate_dbs_;  // by global aggregate index

  // The ids items record their partition by: looked up by the preparer, saved by the committer.
  PartitionIds partition_ids_;
  std::vector<MDB_dbi> item_dbis_;  // by table index
  std::vector<MDB_dbi> tombstone_dbis_;  // by table index: tombstones/<table>
  // Run between batches on the writer thread (ApplyBatches); Recover times old tombstones.
  TombstoneCompactor compactor_;

  // Batches between the stages, reused: ApplyBatch's, and Run's two, which the preparer fills
  // in turn (slot N % 2) while the writer commits the other. slot_state_ says whose each is.
  std::unique_ptr<Prepared> sync_batch_;
  std::unique_ptr<Prepared> slots_[2];
  enum class SlotState { kFree, kPrepared };
  absl::Mutex slot_mu_;
  absl::CondVar slot_changed_;  // signalled when a slot_state_ or either _done_ changes
  SlotState slot_state_[2] ABSL_GUARDED_BY(slot_mu_) = {SlotState::kFree, SlotState::kFree};
  bool preparer_done_ ABSL_GUARDED_BY(slot_mu_) = false;  // no more batches will be prepared
  bool writer_done_ ABSL_GUARDED_BY(slot_mu_) = false;    // the writer stopped taking batches

  // Writer-thread scratch, reused across batches.
  BatchStats stats_;
  ChangeLogWriter change_log_;
  std::vector<size_t> inconsistent_;  // this batch's aggregates found inconsistent (global index)
  // Writer thread: per mutation of the batch being written, whether it changed its view (a
  // delete of an absent entry does not), so the change log skips it (ApplyViewMutations).
  std::vector<bool> mutation_changed_;
  // Writer thread: per aggregate being rebuilt, the last items key the rebuild counted. Events
  // on items up to it are maintained incrementally; later items are counted by the rebuild
  // from their image at that time, so nothing is counted twice or missed.
  std::vector<std::string> aggregate_build_cursors_;

  int failed_source_ = -1;        // writer thread: the source whose dead letter failed
  // How long the last successful txn.Commit() took, in microseconds (WriterLinger): written
  // by the writer, read by the preparer.
  std::atomic<int64_t> last_commit_us_{0};
};

}  // namespace cdcview
