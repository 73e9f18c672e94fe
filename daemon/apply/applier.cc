#include "daemon/apply/applier.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/apply/prepared_batch.h"
#include "daemon/log/log.h"
#include "daemon/sources/record_queue.h"
#include "daemon/store/lmdb_status.h"

namespace cdcview {
namespace {

// A writer behind its sources (more than batch_size queued) commits up to this many events
// at once: on a disk, each commit waits for a sync (tens of ms), so catching up in batches of
// batch_size would be bound by syncs, not by the work.
size_t BacklogBatchSize(const ApplyConfig& cfg) {
  constexpr size_t kBacklogBatches = 8;
  return std::min<size_t>(size_t{cfg.batch_size} * kBacklogBatches,
                          std::max<size_t>(cfg.queue_capacity, cfg.batch_size));
}

}  // namespace

std::chrono::microseconds WriterLinger(const ApplyConfig& cfg, std::chrono::microseconds last_commit) {
  const std::chrono::microseconds most = std::chrono::milliseconds(cfg.max_delay_ms);
  return std::clamp<std::chrono::microseconds>(last_commit, std::min(kMinLinger, most), most);
}

bool CommitsDirectly(const ApplyConfig& cfg, size_t events,
                     std::optional<std::chrono::microseconds> last_lmdb_commit) {
  return events > cfg.batch_size && last_lmdb_commit.has_value() &&
         *last_lmdb_commit <= kDirectCommitPerEvent * static_cast<int64_t>(events);
}

Applier::~Applier() = default;

Applier::Applier(const Catalog& catalog, Store* store, ApplyProbe* probe,
                 std::vector<DeadLetterSink*> dead_letters, PublishedState* published)
    : catalog_(catalog),
      store_(store),
      probe_(probe),
      dead_letters_(std::move(dead_letters)),
      published_(published),
      rejected_log_(kLoggedPerInterval, kLogIntervalMs, [this] { return published_->NowMs(); }),
      left_out_log_(kLoggedPerInterval, kLogIntervalMs, [this] { return published_->NowMs(); }),
      compactor_(catalog.config(), store, probe, [published] { return published->NowMs(); }),
      stats_(catalog.config().sources.size(), catalog.views().size()),
      change_log_(store->changes(), catalog.config().watch.retain_changes) {
  const size_t sources = catalog.config().sources.size();
  sync_batch_ = std::make_unique<Prepared>(sources);
  for (auto& slot : slots_) slot = std::make_unique<Prepared>(sources);
  for (const TableSpec& table : catalog.config().tables) {
    item_dbis_.push_back(store->items(table.name));
    tombstone_dbis_.push_back(store->tombstones(table.name));
  }
  for (const ViewRef& view : catalog.views()) view_dbis_.push_back(store->view(view.spec->name));
  for (const AggregateRef& a : catalog.aggregates()) {
    aggregate_dbs_.push_back(
        AggregateDbs{store->aggregate(a.spec->name), store->aggregate_extremes(a.spec->name)});
  }
  aggregate_build_cursors_.resize(catalog.aggregates().size());
  stats_.aggregates.resize(catalog.aggregates().size());
  // The store's flush error, with what it holds back ("" while flushes succeed). It asks the
  // store, not this writer, so it stays right while readers outlive the Applier.
  published_->SetFlushError([store] {
    std::string error = store->flush_error();
    if (error.empty()) return error;
    return absl::StrCat("applied events cannot be flushed to LMDB (", store->pending_bytes(),
                        " bytes wait in memory; retrying): ", error);
  });
}

void Applier::SetViewState(size_t global_view, ViewState state, double progress) {
  published_->SetViewState(global_view, state, progress);
  if (probe_ != nullptr) probe_->SetViewBuildProgress(global_view, progress);
}

void Applier::SetAggregateState(size_t global_aggregate, ViewState state, double progress) {
  published_->SetAggregateState(global_aggregate, state, progress);
}

void Applier::CountInFlight(Prepared* batch) {
  std::vector<size_t> before = batch->in_flight;  // a batch tried before and failed
  std::fill(batch->in_flight.begin(), batch->in_flight.end(), 0);
  for (const SourceRecord& record : *batch->records) ++batch->in_flight[record.source];
  for (size_t i = 0; i < batch->in_flight.size(); ++i) {
    if (batch->in_flight[i] != before[i]) {
      published_->CountInFlight(i, int64_t(batch->in_flight[i]) - int64_t(before[i]));
    }
  }
}

absl::Status Applier::ApplyBatch(std::vector<SourceRecord>* batch) {
  Prepared& prepared = *sync_batch_;
  prepared.records = batch;
  CountInFlight(&prepared);
  const auto start = std::chrono::steady_clock::now();
  if (absl::Status s = Prepare(&prepared, nullptr); !s.ok()) return s;
  // No queue and no hand-off: those stages stay unset.
  prepared.stats.stages.prepare =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return Commit(&prepared);
}

namespace {

// Sleeps `backoff` in small steps; false if `stop` was raised meanwhile.
bool BackOff(std::chrono::milliseconds backoff, const std::atomic<bool>* stop) {
  for (auto waited = std::chrono::milliseconds(0); waited < backoff;
       waited += std::chrono::milliseconds(50)) {
    if (stop != nullptr && stop->load()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

}  // namespace

void Applier::SetWriterError(const absl::Status& s, int source) {
  published_->SetCommitError(std::string(s.message()), source);
}

void Applier::SetPrepareError(const absl::Status& s) {
  published_->SetPrepareError(std::string(s.message()));
}

namespace {
constexpr auto kFirstBackoff = std::chrono::milliseconds(250);
constexpr auto kMaxBackoff = std::chrono::milliseconds(30000);
}  // namespace

void Applier::StopOnStoreError(const absl::Status& s, const std::string& what) {
  const std::string error = absl::StrCat(
      "the writer stopped: cannot ", what, ": ", s.message(),
      "; the store is damaged: stop cdcviewd, run cdcviewd --verify-store, and restore the "
      "store from a backup or delete it so that the sources replay into a new one");
  LogError(error);
  published_->SetStoreError(error);
}

bool Applier::RebuildWithRetries(const std::atomic<bool>* stop) {
  for (auto backoff = kFirstBackoff;; backoff = std::min(backoff * 2, kMaxBackoff)) {
    absl::Status s = RebuildViews(stop);
    if (s.ok()) break;
    if (absl::IsCancelled(s)) return false;
    if (IsStoreError(s)) {
      StopOnStoreError(s, "rebuild views");
      return false;
    }
    SetWriterError(absl::Status(s.code(), absl::StrCat("rebuilding views: ", s.message(),
                                                       "; the rebuild resumes where it stopped")),
                   -1);
    LogError(absl::StrCat("cannot rebuild views, retrying in ", backoff.count(), "ms: ",
                          s.message()));
    if (!BackOff(backoff, stop)) return false;
  }
  SetWriterError(absl::OkStatus(), -1);
  return true;
}

bool Applier::Attempt(Stage stage, const std::function<absl::Status()>& attempt,
                      const std::string& what, OnFailure on_failure,
                      const std::atomic<bool>* stop, const int* error_source,
                      absl::Status* error) {
  bool failed = false;
  for (auto backoff = kFirstBackoff;; backoff = std::min(backoff * 2, kMaxBackoff)) {
    absl::Status s = attempt();
    if (s.ok()) break;
    if (probe_ != nullptr) probe_->RecordBatchFailure();
    if (IsStoreError(s)) {
      // A retry would meet the same damaged page: no batch can be applied any more.
      StopOnStoreError(s, what);
      *error = std::move(s);
      return false;
    }
    if (on_failure == OnFailure::kStop) {
      *error = std::move(s);
      return false;
    }
    failed = true;
    if (stage == Stage::kPrepare) {
      SetPrepareError(s);
    } else {
      SetWriterError(s, error_source != nullptr ? *error_source : -1);
    }
    LogError(absl::StrCat("cannot ", what, ", retrying in ", backoff.count(), "ms: ", s.message()));
    if (!BackOff(backoff, stop)) {
      *error = absl::CancelledError(absl::StrCat("stopped while retrying to ", what, ": ", s.message()));
      return false;
    }
  }
  if (failed) stage == Stage::kPrepare ? SetPrepareError(absl::OkStatus())
                                      : SetWriterError(absl::OkStatus(), -1);
  return true;
}

void Applier::PrepareLoop(const BatchSource& next, OnFailure on_failure,
                          const std::atomic<bool>* stop, absl::Status* error) {
  pthread_setname_np(pthread_self(), "cdcview-prepare");  // for top -H, perf and the benches
  const Prepared* previous = nullptr;
  for (uint64_t n = 0; !(stop != nullptr && stop->load()); ++n) {
    const size_t slot = n % 2;
    {
      absl::MutexLock lock(&slot_mu_);
      while (slot_state_[slot] != SlotState::kFree && !writer_done_) slot_changed_.Wait(&slot_mu_);
      if (writer_done_) break;
    }
    Prepared& batch = *slots_[slot];
    batch.owned.clear();
    batch.records = &batch.owned;
    if (!next(&batch.owned)) break;
    const auto taken = std::chrono::steady_clock::now();
    const int64_t taken_ms = published_->NowMs();
    CountInFlight(&batch);
    if (!Attempt(Stage::kPrepare, [&] { return Prepare(&batch, previous); },
                 absl::StrCat("prepare a batch of ", batch.owned.size(), " events"), on_failure, stop,
                 nullptr, error)) {
      break;
    }
    batch.prepared_at = std::chrono::steady_clock::now();
    BatchStats::Stages& stages = batch.stats.stages;  // Prepare cleared them
    stages.prepare = std::chrono::duration<double>(batch.prepared_at - taken).count();
    if (batch.earliest_received_ms > 0) {
      stages.queue = double(std::max<int64_t>(0, taken_ms - batch.earliest_received_ms)) / 1000.0;
    }
    {
      absl::MutexLock lock(&slot_mu_);
      slot_state_[slot] = SlotState::kPrepared;
    }
    slot_changed_.SignalAll();
    previous = &batch;  // its items are the next batch's old images until it commits
  }
  {
    absl::MutexLock lock(&slot_mu_);
    preparer_done_ = true;
  }
  slot_changed_.SignalAll();
}

void Applier::Run(RecordQueue* queue, const std::atomic<bool>* stop) {
  if (!RebuildWithRetries(stop)) return;

  WatchQueue(queue);
  const ApplyConfig& cfg = catalog_.config().apply;
  // Until the first commit says what one costs, batches gather as long as configured.
  last_commit_us_.store(int64_t{cfg.max_delay_ms} * 1000);
  ApplyBatches(
      [&](std::vector<SourceRecord>* out) {
        const auto linger = std::chrono::microseconds(last_commit_us_.load());
        return queue->PopBatch(cfg.batch_size, WriterLinger(cfg, linger), out,
                               BacklogBatchSize(cfg));  // false: closed and drained
      },
      OnFailure::kRetry, stop)
      .IgnoreError();  // an error here is a stop, which the caller asked for
}

absl::Status Applier::ApplyBatches(const BatchSource& next, OnFailure on_failure,
                                   const std::atomic<bool>* stop) {
  {
    absl::MutexLock lock(&slot_mu_);
    slot_state_[0] = slot_state_[1] = SlotState::kFree;
    preparer_done_ = writer_done_ = false;
  }
  // What a run that stopped left in the slots (a batch that failed under kStop, or was
  // dropped at `stop`) belongs to batches this run may never see again: their records are no
  // longer in flight, and their dead-letter marks must not apply to other batches.
  for (auto& slot : slots_) {
    slot->dead_lettered.clear();
    slot->records = &slot->owned;
    slot->owned.clear();
    CountInFlight(slot.get());
  }
  absl::Status prepare_error, commit_error;
  std::thread preparer([&] { PrepareLoop(next, on_failure, stop, &prepare_error); });
  auto stopped = [stop] { return stop != nullptr && stop->load(); };
  for (uint64_t n = 0; !stopped(); ++n) {
    const size_t slot = n % 2;
    bool prepared = false;
    for (;;) {
      // The preparer publishes the slots in turn, so once it is done and this one is not
      // prepared, there are no more. `stop` is raised after the queue closed, when a batch
      // keeps failing: checked every 100 ms. Meanwhile the writer is idle: tombstone
      // compaction steps run then, one at a time between looks at the slot.
      {
        absl::MutexLock lock(&slot_mu_);
        if (slot_state_[slot] != SlotState::kPrepared && !preparer_done_ && !stopped()) {
          slot_changed_.WaitWithTimeout(
              &slot_mu_, compactor_.Due() ? absl::ZeroDuration() : absl::Milliseconds(100));
        }
        prepared = slot_state_[slot] == SlotState::kPrepared;
        if (prepared || preparer_done_ || stopped()) break;
      }
      CompactTombstones();
    }
    if (!prepared) break;
    Prepared& batch = *slots_[slot];
    batch.stats.stages.handoff =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - batch.prepared_at).count();
    if (!Attempt(Stage::kCommit, [&] { return Commit(&batch); },
                 absl::StrCat("apply a batch of ", batch.owned.size(), " events"), on_failure, stop,
                 &failed_source_, &commit_error)) {
      break;
    }
    {
      absl::MutexLock lock(&slot_mu_);
      slot_state_[slot] = SlotState::kFree;
    }
    slot_changed_.SignalAll();
    // An aggregate found inconsistent by this batch is rebuilt before the next one.
    if (!inconsistent_.empty() && !RebuildWithRetries(stop)) break;
    CompactTombstones();
  }
  {
    absl::MutexLock lock(&slot_mu_);
    writer_done_ = true;
  }
  slot_changed_.SignalAll();
  preparer.join();
  if (!commit_error.ok()) return commit_error;
  if (!prepare_error.ok()) return prepare_error;
  if (stopped()) return absl::CancelledError("stopped before every batch was applied");
  return absl::OkStatus();
}

void Applier::CompactTombstones() {
  absl::StatusOr<uint64_t> dropped = compactor_.Step();
  if (!dropped.ok()) {
    LogError(absl::StrCat("cannot compact tombstones, retrying in ",
                          TombstoneCompactor::kRetryMs / 1000, " s: ", dropped.status().message()));
  }
}

void Applier::WatchQueue(const RecordQueue* queue) {
  if (queue == nullptr) {
    published_->WatchQueue(nullptr);
    return;
  }
  published_->WatchQueue([queue](size_t source) { return queue->Queued(source); });
}

void Applier::PublishFlushedSizes() const {
  if (probe_ == nullptr || !store_->write_back()) return;
  auto txn = store_->BeginRead();
  if (!txn.ok()) return;
  for (const ViewRef& view : catalog_.views()) {
    probe_->SetViewSize(view.global, (*txn)->Entries(view_dbis_[view.global]),
                        (*txn)->Bytes(view_dbis_[view.global]));
  }
  for (const AggregateRef& aggregate : catalog_.aggregates()) {
    probe_->SetAggregateGroups(aggregate.global,
                               (*txn)->Entries(aggregate_dbs_[aggregate.global].groups));
  }
}

void Applier::PublishHotKeyMetrics() const {
  if (probe_ == nullptr) return;
  const int64_t now = published_->NowMs();
  for (const ViewRef& view : catalog_.views()) {
    HeavyHittersReport report = published_->hot_keys().ViewReport(view.global, 1, now);
    const uint64_t top = report.keys.empty() ? 0 : report.keys.front().count;
    probe_->SetHotKey(view.global, report.total ? double(top) / double(report.total) : 0.0,
                      report.PerSecond(top));
  }
}

namespace {

std::string DeadLetterPlace(const SourceConfig& source) {
  if (source.kind == SourceConfig::Kind::kKafka && !source.kafka.dead_letter_topic.empty()) {
    return absl::StrCat("the dead-letter topic ", source.kafka.dead_letter_topic);
  }
  return absl::StrCat("the dead-letter file ", DeadLetterPath(source));
}

}  // namespace

void Applier::LogThrottledSummaries() {
  for (const LogThrottle::Summary& s : rejected_log_.TakeSummaries()) {
    std::string place = "the dead letters";
    for (const SourceConfig& source : catalog_.config().sources) {
      if (source.name == s.key) place = DeadLetterPlace(source);
    }
    LogWarning(absl::StrCat("source ", s.key, ": ", s.suppressed,
                            " more rejected records in the last ", (s.interval_ms + 500) / 1000,
                            " s (see ", place, " and cdcview_events_total{result=\"rejected\"})"));
  }
  for (const LogThrottle::Summary& s : left_out_log_.TakeSummaries()) {
    LogWarning(absl::StrCat(s.key, ": ", s.suppressed,
                            " more items left out of the rebuild in the last ",
                            (s.interval_ms + 500) / 1000, " s"));
  }
}

}  // namespace cdcview
