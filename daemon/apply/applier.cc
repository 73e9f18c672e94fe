#include "daemon/apply/applier.h"

#include <pthread.h>

#include <algorithm>
#include <charconv>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/log/log.h"
#include "daemon/sources/record_queue.h"
#include "daemon/store/meta_keys.h"
#include "daemon/store/stored_item.h"
#include "index_builders/item_codec.h"

namespace cdcview {
namespace {

constexpr std::string_view kReady = "READY";
constexpr std::string_view kBuilding = "BUILDING";
constexpr size_t kRebuildChunk = 2000;

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

namespace {

// A new image must carry the key it was sent under: add missing key attributes, refuse
// conflicting ones.
// Whether `image` already holds every key attribute with the same value.
bool CarriesKeys(const Item& keys, const Item& image) {
  for (const auto& [name, value] : keys) {
    auto it = image.find(name);
    if (it == image.end() || it->second != value) return false;
  }
  return true;
}

absl::Status MergeKeys(const Item& keys, Item* image) {
  for (const auto& [name, value] : keys) {
    auto [it, inserted] = image->emplace(name, value);
    if (!inserted && it->second != value) {
      return absl::InvalidArgumentError(
          absl::StrCat("NewImage attribute ", name, " differs from the record's Keys"));
    }
  }
  return absl::OkStatus();
}

// (source index, partition), compared with (source index, string_view) without a copy.
struct SourcePartitionIndexLess {
  using is_transparent = void;
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    if (a.first != b.first) return a.first < b.first;
    return std::string_view(a.second) < std::string_view(b.second);
  }
};

}  // namespace

// A batch between the stages: everything Prepare works out without a write transaction, for
// Commit to write. Reused from batch to batch (strings and vectors keep their capacity).
struct Applier::Prepared {
  // One applied event's write to items/<table>.
  struct ItemWrite {
    uint32_t table = 0;
    std::string pk;
    std::string stored;  // EncodeStoredItem: the new image, or a tombstone
    uint32_t deltas_begin = 0, deltas_end = 0;  // the event's range of aggregate_deltas
  };

  std::vector<SourceRecord>* records = nullptr;  // the batch
  std::vector<SourceRecord> owned;                // Run's batches live here

  // Item writes in event order; only the first write_count are this batch's.
  std::vector<ItemWrite> writes;
  size_t write_count = 0;
  // (table, primary key) -> index in writes of the batch's last write of the item: the old
  // image of a later event of this batch or of the next one. The key points into writes.
  absl::flat_hash_map<std::pair<uint32_t, std::string_view>, uint32_t> latest;
  // The last write of each item, by table and key: Commit puts them in this order, so
  // neighbouring puts share B-tree pages (an item written twice in a batch is put once).
  std::vector<uint32_t> write_order;

  std::vector<IndexMutation> mutations;    // IndexMutation::view holds the global view index
  std::vector<uint32_t> mutation_records;  // per mutation: its record's index in the batch
  // mutations indices by view and key, stable: several changes of one entry stay in event
  // order.
  std::vector<uint32_t> mutation_order;
  std::vector<ViewSkip> view_skips;  // ViewSkip::view holds the global view index
  std::vector<AggregateDelta> aggregate_deltas;  // AggregateDelta::aggregate is table-local

  std::vector<std::pair<size_t, absl::Status>> dead_letters;  // (record index, why)
  // Records dead-lettered already: a batch retried after a failure (map growth, a dead letter
  // that could not be written) does not write them again. Cleared once the batch commits.
  std::vector<bool> dead_lettered;
  // (source index, partition) -> the next position after this batch.
  std::map<std::pair<uint32_t, std::string>, std::string, SourcePartitionIndexLess> positions;
  // Per applied event: (table, encoded table partition key), for the hot keys. Only the first
  // hot_table_key_count are this batch's.
  std::vector<std::pair<size_t, std::string>> hot_table_keys;
  size_t hot_table_key_count = 0;
  // Per source: applied, skipped, rejected; lag_seconds holds creation times and
  // apply_delay_seconds receive times (ms) until the commit turns them into lags.
  BatchStats stats;
  // Per source: records of this batch counted in flight (PublishedState::CountInFlight).
  std::vector<size_t> in_flight;

  explicit Prepared(size_t sources) : stats(sources), in_flight(sources, 0) {}
};

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
      stats_(catalog.config().sources.size(), catalog.views().size()),
      change_log_(store->changes(), catalog.config().watch.retain_changes) {
  const size_t sources = catalog.config().sources.size();
  sync_batch_ = std::make_unique<Prepared>(sources);
  for (auto& slot : slots_) slot = std::make_unique<Prepared>(sources);
  for (const TableSpec& table : catalog.config().tables) item_dbis_.push_back(store->items(table.name));
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

absl::StatusOr<bool> Applier::RecoverBuildState(WriteTxn* txn, const std::string& what,
                                                const MetaKeyFn& meta_key,
                                                const std::string& fingerprint,
                                                const std::string& table,
                                                std::initializer_list<MDB_dbi> contents,
                                                std::string* cursor) {
  auto stored_fp = txn->Get(store_->meta(), meta_key("fingerprint"));
  auto stored_state = txn->Get(store_->meta(), meta_key("state"));
  auto stored_cursor = txn->Get(store_->meta(), meta_key("build_cursor"));
  for (const auto* got : {&stored_fp, &stored_state, &stored_cursor}) {
    if (!got->ok()) return got->status();
  }
  if (*stored_fp && **stored_fp == fingerprint && *stored_state && **stored_state == kReady) {
    return true;
  }
  if (!*stored_fp || **stored_fp != fingerprint) {
    LogInfo(absl::StrCat(what, ": definition ", *stored_fp ? "changed" : "is new", " (fingerprint ",
                         fingerprint, "); rebuilding it from items/", table));
    for (MDB_dbi dbi : contents) {
      if (absl::Status s = txn->Clear(dbi); !s.ok()) return s;
    }
    for (absl::Status s : {txn->Put(store_->meta(), meta_key("fingerprint"), fingerprint),
                           txn->Put(store_->meta(), meta_key("state"), kBuilding),
                           txn->Delete(store_->meta(), meta_key("build_cursor"))}) {
      if (!s.ok()) return s;
    }
    cursor->clear();
  } else {
    LogInfo(absl::StrCat(what, ": resuming an interrupted rebuild"));
    *cursor = *stored_cursor ? std::string(**stored_cursor) : "";
  }
  return false;
}

absl::Status Applier::Recover() {
  auto txn_or = store_->BeginWrite();
  if (!txn_or.ok()) return txn_or.status();
  WriteTxn& txn = **txn_or;
  for (const ViewRef& view : catalog_.views()) {
    const std::string& name = view.spec->name;
    std::string unused_cursor;  // a view rebuild reads its cursor from meta
    absl::StatusOr<bool> ready = RecoverBuildState(
        &txn, absl::StrCat("view ", name), [&](std::string_view key) { return ViewMetaKey(name, key); },
        view.fingerprint, view.spec->table, {store_->view(name)}, &unused_cursor);
    if (!ready.ok()) return ready.status();
    SetViewState(view.global, *ready ? ViewState::kReady : ViewState::kBuilding, *ready ? 1.0 : 0.0);
  }
  for (const AggregateRef& aggregate : catalog_.aggregates()) {
    const std::string& name = aggregate.spec->name;
    const AggregateDbs& dbs = aggregate_dbs_[aggregate.global];
    absl::StatusOr<bool> ready = RecoverBuildState(
        &txn, absl::StrCat("aggregate ", name),
        [&](std::string_view key) { return AggregateMetaKey(name, key); }, aggregate.fingerprint,
        aggregate.spec->table, {dbs.groups, dbs.extremes}, &aggregate_build_cursors_[aggregate.global]);
    if (!ready.ok()) return ready.status();
    SetAggregateState(aggregate.global, *ready ? ViewState::kReady : ViewState::kBuilding,
                      *ready ? 1.0 : 0.0);
  }

  if (absl::Status s = change_log_.Load(txn); !s.ok()) return s;
  PositionMap positions;
  ForEachPosition(txn, store_->meta(),
                  [&](std::string_view source, std::string_view partition, std::string_view at) {
                    positions[{std::string(source), std::string(partition)}] = std::string(at);
                  });
  if (absl::Status s = txn.Commit(); !s.ok()) return s;
  published_->ReplacePositions(std::move(positions));
  PublishSizes();
  return absl::OkStatus();
}

void Applier::PublishSizes() {
  auto txn = store_->BeginRead();
  if (!txn.ok() || probe_ == nullptr) return;
  stats_.Clear();
  for (const ViewRef& view : catalog_.views()) {
    MDB_dbi dbi = store_->view(view.spec->name);
    stats_.views[view.global].items = (*txn)->Entries(dbi);
    stats_.views[view.global].bytes = (*txn)->Bytes(dbi);
  }
  for (const AggregateRef& aggregate : catalog_.aggregates()) {
    stats_.aggregates[aggregate.global].groups = (*txn)->Entries(aggregate_dbs_[aggregate.global].groups);
  }
  txn->reset();
  stats_.sizes = true;
  stats_.change_log_entries = change_log_.entries();
  stats_.map_used_bytes = store_->map_used_bytes();
  stats_.map_size_bytes = store_->map_size();
  probe_->RecordBatch(stats_, published_->NowMs());
}

absl::Status Applier::RebuildViews(const std::atomic<bool>* stop) {
  bool rebuilt = false;
  for (const ViewRef& view : catalog_.views()) {
    if (published_->GetViewState(view.global) == ViewState::kReady) continue;
    if (absl::Status s = RebuildView(view, stop); !s.ok()) return s;
    rebuilt = true;
  }
  for (const AggregateRef& aggregate : catalog_.aggregates()) {
    if (published_->GetAggregateState(aggregate.global) == ViewState::kReady) continue;
    if (absl::Status s = RebuildAggregate(aggregate, stop); !s.ok()) return s;
    rebuilt = true;
  }
  if (rebuilt) PublishSizes();
  return absl::OkStatus();
}

absl::Status Applier::RebuildFromItems(const std::string& what, MDB_dbi items,
                                       const std::string& cursor_key, const std::string& state_key,
                                       const RebuildItemFn& add, const RebuildProgressFn& progressed,
                                       const std::atomic<bool>* stop) {
  uint64_t total = 0, done = 0, skipped = 0;
  {
    auto rtxn = store_->BeginRead();
    if (!rtxn.ok()) return rtxn.status();
    total = (*rtxn)->Entries(items);
    // A resumed rebuild counts what the interrupted one already did, so progress stays true.
    auto resume = (*rtxn)->Get(store_->meta(), cursor_key);
    if (!resume.ok()) return resume.status();
    if (*resume) {
      auto cursor = (*rtxn)->OpenCursor(items);
      for (bool ok = cursor->SeekFirst(); ok && cursor->key() <= **resume; ok = cursor->Next()) ++done;
    }
  }
  auto started = std::chrono::steady_clock::now();
  bool finished = false;
  while (!finished) {
    if (stop != nullptr && stop->load()) return absl::CancelledError("stopping");
    auto txn_or = store_->BeginWrite();
    if (!txn_or.ok()) return txn_or.status();
    WriteTxn& txn = **txn_or;
    auto resume = txn.Get(store_->meta(), cursor_key);
    if (!resume.ok()) return resume.status();
    std::string last = *resume ? std::string(**resume) : std::string();
    auto cursor = txn.OpenCursor(items);
    bool ok = last.empty() ? cursor->SeekFirst() : cursor->Seek(last);
    if (ok && !last.empty() && cursor->key() == last) ok = cursor->Next();
    size_t n = 0;
    uint64_t chunk_done = 0, chunk_skipped = 0;
    absl::Status status;
    for (; ok && n < kRebuildChunk; ok = cursor->Next(), ++n) {
      auto stored = DecodeStoredItem(cursor->value());
      if (!stored.ok()) return stored.status();
      last.assign(cursor->key());
      ++chunk_done;
      if (stored->tombstone) continue;
      auto item = DecodeItem(stored->image);
      if (!item.ok()) return item.status();
      bool left_out = false;
      status = add(&txn, *item, &left_out);
      if (!status.ok()) break;
      if (left_out) ++chunk_skipped;
    }
    cursor.reset();
    finished = status.ok() && !ok;
    if (status.ok()) {
      status = finished ? txn.Delete(store_->meta(), cursor_key)
                        : txn.Put(store_->meta(), cursor_key, last);
    }
    if (status.ok() && finished) status = txn.Put(store_->meta(), state_key, kReady);
    if (status.ok()) status = txn.Commit();
    if (absl::IsResourceExhausted(status)) {
      txn.Abort();
      if (absl::Status g = store_->GrowMap(); !g.ok()) return g;
      finished = false;
      continue;
    }
    if (!status.ok()) return status;
    done += chunk_done;
    skipped += chunk_skipped;
    double progress = finished ? 1.0 : total ? std::min(0.99, double(done) / double(total)) : 0.0;
    progressed(finished, progress, last);
    if (finished || done % (kRebuildChunk * 25) == 0) {
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      LogInfo(absl::StrFormat("%s: rebuild %s, %d of %d items (%.0f%%) in %.1fs%s", what,
                              finished ? "done" : "in progress", done, total, progress * 100, secs,
                              skipped ? absl::StrCat(", ", skipped, " left out (the first ", kLoggedPerInterval,
                                                     " per ", kLogIntervalMs / 1000,
                                                     " s logged as warnings)")
                                      : ""));
    }
  }
  return absl::OkStatus();
}

absl::Status Applier::RebuildView(const ViewRef& view, const std::atomic<bool>* stop) {
  const std::string& name = view.spec->name;
  const ViewBuilder& builder = catalog_.builder(view.table);
  MDB_dbi dbi = store_->view(name);
  return RebuildFromItems(
      absl::StrCat("view ", name), store_->items(view.spec->table), ViewMetaKey(name, "build_cursor"),
      ViewMetaKey(name, "state"),
      [&](WriteTxn* txn, const Item& item, bool* left_out) {
        auto entry = builder.EntryFor(view.in_table, item);
        if (!entry.ok()) {
          *left_out = true;
          if (left_out_log_.Admit(absl::StrCat("view ", name))) {
            LogWarning(absl::StrCat("view ", name, ": item left out of the rebuild: ",
                                    entry.status().message()));
          }
          return absl::OkStatus();
        }
        if (!*entry) return absl::OkStatus();
        return txn->Put(dbi, (*entry)->key, (*entry)->value);
      },
      [&](bool finished, double progress, std::string_view) {
        SetViewState(view.global, finished ? ViewState::kReady : ViewState::kBuilding, progress);
      },
      stop);
}

absl::StatusOr<Applier::Outcome> Applier::PrepareEvent(const ReadTxn& snapshot, Prepared* batch,
                                                       const Prepared* previous, uint32_t index,
                                                       absl::Status* rejection, std::string* reason) {
  const SourceRecord& record = (*batch->records)[index];
  const ChangeEvent& event = *record.event;
  const size_t table = catalog_.TableOfSource(record.source);
  const ViewBuilder& builder = catalog_.builder(table);

  if (absl::Status s = builder.ValidateTableKey(event.keys); !s.ok()) {
    *rejection = s;
    *reason = "bad_key";
    return Outcome::kRejected;
  }
  std::string pk = builder.PrimaryKey(event.keys);
  // The item as the batches before left it: this batch's last write of it, else the previous
  // batch's (committed or not), else the snapshot's.
  const std::pair<uint32_t, std::string_view> item_key(static_cast<uint32_t>(table), pk);
  auto last_write = [&item_key](const Prepared* b) -> const std::string* {
    if (b == nullptr) return nullptr;
    auto it = b->latest.find(item_key);
    return it == b->latest.end() ? nullptr : &b->writes[it->second].stored;
  };
  std::optional<std::string_view> stored_value;
  if (const std::string* written = last_write(batch)) {
    stored_value = *written;
  } else if ((written = last_write(previous)) != nullptr) {
    stored_value = *written;
  } else {
    auto got = snapshot.Get(item_dbis_[table], pk);
    if (!got.ok()) return got.status();
    stored_value = *got;
  }

  std::optional<Item> old_item;
  bool had_record = false;
  if (stored_value) {
    auto stored = DecodeStoredItem(*stored_value);
    if (!stored.ok()) {
      return absl::DataLossError(absl::StrCat(
          "items/", builder.table().name, ": a stored item is damaged (", stored.status().message(),
          "); stop cdcviewd and restore the store from a backup, or delete it so that the "
          "sources replay into a new one"));
    }
    had_record = true;
    if (!event.sequence_number.empty() && !stored->sequence_number.empty() &&
        CompareSequenceNumbers(event.sequence_number, stored->sequence_number) <= 0) {
      return Outcome::kSkipped;
    }
    if (!stored->tombstone) {
      auto decoded = DecodeItem(stored->image);
      if (!decoded.ok()) return decoded.status();
      old_item = std::move(*decoded);
    }
  }

  // The new image is used in place unless the record's Keys must be merged into it.
  const Item* new_item = nullptr;
  std::optional<Item> merged;
  if (event.kind != ChangeEvent::Kind::kRemove) {
    if (!event.new_image) {
      *rejection = absl::InvalidArgumentError(
          absl::StrCat(std::string(ChangeKindName(event.kind)), " event without a new image"));
      *reason = "bad_record";
      return Outcome::kRejected;
    }
    new_item = &*event.new_image;
    if (!CarriesKeys(event.keys, *new_item)) {
      merged = *new_item;
      if (absl::Status s = MergeKeys(event.keys, &*merged); !s.ok()) {
        *rejection = s;
        *reason = "bad_record";
        return Outcome::kRejected;
      }
      new_item = &*merged;
    }
  }

  const size_t first = batch->mutations.size();
  const size_t first_skip = batch->view_skips.size();
  if (absl::Status s = builder.Diff(old_item ? &*old_item : nullptr, new_item, &batch->mutations,
                                    &batch->view_skips);
      !s.ok()) {
    *rejection = s;
    *reason = "key_too_large";
    return Outcome::kRejected;
  }
  for (size_t i = first; i < batch->mutations.size(); ++i) {
    batch->mutations[i].view = catalog_.GlobalView(table, batch->mutations[i].view);
  }
  for (size_t i = first_skip; i < batch->view_skips.size(); ++i) {
    batch->view_skips[i].view = catalog_.GlobalView(table, batch->view_skips[i].view);
  }
  const size_t deltas_begin = batch->aggregate_deltas.size();
  if (absl::Status s = catalog_.aggregate_builder(table).Diff(
          old_item ? &*old_item : nullptr, new_item, &batch->aggregate_deltas);
      !s.ok()) {
    batch->mutations.resize(first);  // the event is rejected as a whole
    batch->view_skips.resize(first_skip);
    batch->aggregate_deltas.resize(deltas_begin);
    *rejection = s;
    *reason = "key_too_large";
    return Outcome::kRejected;
  }
  // Slots are reused across batches: assign keeps a slot's capacity, so a key no longer than
  // one seen before allocates nothing.
  if (batch->hot_table_key_count == batch->hot_table_keys.size()) batch->hot_table_keys.emplace_back();
  auto& [hot_table, hot_key] = batch->hot_table_keys[batch->hot_table_key_count++];
  hot_table = table;
  hot_key.assign(pk, 0, FirstKeyComponentSize(pk));
  // A removed item leaves a tombstone with its sequence number, so a replayed older event
  // cannot resurrect it; a remove of an item never seen, without a sequence number, writes
  // nothing.
  if (new_item || had_record || !event.sequence_number.empty()) {
    if (batch->write_count == batch->writes.size()) batch->writes.emplace_back();
    const uint32_t w = static_cast<uint32_t>(batch->write_count++);
    Prepared::ItemWrite& write = batch->writes[w];
    write.table = static_cast<uint32_t>(table);
    write.pk = std::move(pk);
    write.stored = new_item ? EncodeStoredItem(false, event.sequence_number, EncodeItem(*new_item))
                            : EncodeStoredItem(true, event.sequence_number, {});
    write.deltas_begin = static_cast<uint32_t>(deltas_begin);
    write.deltas_end = static_cast<uint32_t>(batch->aggregate_deltas.size());
    batch->latest.insert_or_assign(std::pair<uint32_t, std::string_view>(write.table, write.pk), w);
  }
  return Outcome::kApplied;
}

// ---- aggregates

void Applier::SetAggregateState(size_t global_aggregate, ViewState state, double progress) {
  published_->SetAggregateState(global_aggregate, state, progress);
}

absl::Status Applier::RebuildAggregate(const AggregateRef& aggregate, const std::atomic<bool>* stop) {
  const std::string& name = aggregate.spec->name;
  const AggregateBuilder& builder = catalog_.aggregate_builder(aggregate.table);
  const AggregateDbs& dbs = aggregate_dbs_[aggregate.global];
  return RebuildFromItems(
      absl::StrCat("aggregate ", name), store_->items(aggregate.spec->table),
      AggregateMetaKey(name, "build_cursor"), AggregateMetaKey(name, "state"),
      [&](WriteTxn* txn, const Item& item, bool* left_out) {
        auto contribution = builder.ContributionOf(aggregate.in_table, item);
        if (!contribution.ok()) {
          *left_out = true;
          if (left_out_log_.Admit(absl::StrCat("aggregate ", name))) {
            LogWarning(absl::StrCat("aggregate ", name, ": item left out of the rebuild: ",
                                    contribution.status().message()));
          }
          return absl::OkStatus();
        }
        if (!*contribution) return absl::OkStatus();
        return WriteAggregateChange(txn, dbs, *aggregate.spec, nullptr, &**contribution);
      },
      [&](bool finished, double progress, std::string_view last) {
        aggregate_build_cursors_[aggregate.global].assign(last);
        SetAggregateState(aggregate.global, finished ? ViewState::kReady : ViewState::kBuilding,
                          progress);
      },
      stop);
}

absl::Status Applier::ApplyAggregateDeltas(WriteTxn* txn, size_t table, std::string_view pk,
                                           std::span<const AggregateDelta> deltas) {
  for (size_t i = 0; i < deltas.size(); ++i) {
    const AggregateDelta& delta = deltas[i];
    const size_t global = catalog_.GlobalAggregate(table, delta.aggregate);
    // While rebuilding, only items the rebuild already counted are maintained here; an
    // aggregate found inconsistent in this batch is rebuilt from scratch after it.
    if (std::find(inconsistent_.begin(), inconsistent_.end(), global) != inconsistent_.end() ||
        (published_->GetAggregateState(global) != ViewState::kReady && pk > aggregate_build_cursors_[global])) {
      continue;
    }
    // Diff gives an item staying in its group as retract then add of that group: one
    // read-modify-write of the group state for both.
    const AggregateContribution* retract = delta.retract ? &delta.contribution : nullptr;
    const AggregateContribution* add = delta.retract ? nullptr : &delta.contribution;
    if (retract != nullptr && i + 1 < deltas.size()) {
      const AggregateDelta& next = deltas[i + 1];
      if (next.aggregate == delta.aggregate && !next.retract &&
          next.contribution.group == delta.contribution.group) {
        add = &next.contribution;
        ++i;
      }
    }
    const AggregateSpec& spec = *catalog_.aggregates()[global].spec;
    absl::Status s = WriteAggregateChange(txn, aggregate_dbs_[global], spec, retract, add);
    if (absl::IsDataLoss(s)) {
      s = ResetInconsistentAggregate(txn, global, s);
    } else if (s.ok()) {
      stats_.aggregates[global].updates += (retract != nullptr) + (add != nullptr);
    }
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Applier::ResetInconsistentAggregate(WriteTxn* txn, size_t global,
                                                 const absl::Status& why) {
  // The state contradicts the items (a bug, or a store edited by hand). Retrying the batch
  // cannot help and crashing would loop, so the aggregate is emptied and rebuilt from
  // items/<table> as after a definition change; the rest of the batch applies.
  const std::string& name = catalog_.aggregates()[global].spec->name;
  const AggregateDbs& dbs = aggregate_dbs_[global];
  for (absl::Status s : {txn->Clear(dbs.groups), txn->Clear(dbs.extremes),
                         txn->Put(store_->meta(), AggregateMetaKey(name, "state"), kBuilding),
                         txn->Delete(store_->meta(), AggregateMetaKey(name, "build_cursor"))}) {
    if (!s.ok()) return s;
  }
  LogError(absl::StrCat(why.message(), "; the aggregate's state contradicts items/",
                        catalog_.aggregates()[global].spec->table,
                        ", so it is emptied and rebuilt from them (queries of it answer "
                        "UNAVAILABLE meanwhile)"));
  inconsistent_.push_back(global);
  ++stats_.aggregates[global].inconsistencies;
  return absl::OkStatus();
}

bool Applier::IsStale(const SourceRecord& record, const Prepared& batch,
                      const Prepared* previous) const {
  if (record.offset < 0) return false;
  const std::pair<uint32_t, std::string_view> key(record.source, record.partition);
  auto next_of = [&key](const Prepared* b) -> const std::string* {
    if (b == nullptr) return nullptr;
    auto it = b->positions.find(key);
    return it == b->positions.end() ? nullptr : &it->second;
  };
  auto below = [&record](std::string_view stored) {
    int64_t next = 0;
    auto [end, error] = std::from_chars(stored.data(), stored.data() + stored.size(), next);
    return error == std::errc() && end == stored.data() + stored.size() && record.offset < next;
  };
  if (const std::string* next = next_of(&batch)) return below(*next);
  if (const std::string* next = next_of(previous)) return below(*next);
  const std::string committed = published_->PositionOf(record.source, record.partition);
  return !committed.empty() && below(committed);
}

absl::Status Applier::ApplyViewMutations(WriteTxn* txn, const Prepared& batch) {
  // The views are written in key order (see Prepare), the change log in event order: a
  // watcher sees the changes as they happened, each partition's causes in stream order.
  for (const ViewSkip& skip : batch.view_skips) ++stats_.views[skip.view].skipped_key_type_mismatch;
  std::vector<bool> changed(batch.mutations.size(), true);
  for (uint32_t index : batch.mutation_order) {
    const IndexMutation& m = batch.mutations[index];
    BatchStats::View& vs = stats_.views[m.view];
    if (m.op == IndexMutation::Op::kPut) {
      if (absl::Status s = txn->Put(view_dbis_[m.view], m.key, m.value); !s.ok()) return s;
      ++vs.puts;
    } else {
      ++vs.deletes;
      auto removed = txn->Remove(view_dbis_[m.view], m.key);
      if (!removed.ok()) return removed.status();
      changed[index] = *removed;  // nothing to delete, nothing changed
    }
  }
  for (uint32_t index = 0; index < batch.mutations.size(); ++index) {
    if (!changed[index]) continue;
    const IndexMutation& m = batch.mutations[index];
    const SourceRecord& record = (*batch.records)[batch.mutation_records[index]];
    // A delete's entry value is its last one (a watcher of a work queue needs to know what
    // left): the mutation carries it, the stored image's projection, so no search reads it
    // (with write-back, none searches LMDB at all: WriteTxn::Remove).
    if (absl::Status s = change_log_.Append(
            txn, catalog_.views()[m.view].spec->name,
            m.op == IndexMutation::Op::kPut ? ChangeOp::kPut : ChangeOp::kDelete, m.key, m.value,
            catalog_.config().sources[record.source].name, record.partition,
            record.next_position);
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = change_log_.Finish(txn); !s.ok()) return s;
  stats_.change_log_entries = change_log_.pending_entries();
  return absl::OkStatus();
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

absl::Status Applier::Prepare(Prepared* batch, const Prepared* previous) {
  const std::vector<SourceRecord>& records = *batch->records;
  const size_t n = records.size();
  batch->stats.Clear();
  batch->write_count = 0;
  batch->writes.reserve(n);  // `latest` points into the writes' keys: no reallocation below
  batch->latest.clear();
  batch->latest.reserve(n);
  batch->write_order.clear();
  batch->mutations.clear();
  batch->mutation_records.clear();
  batch->view_skips.clear();
  batch->aggregate_deltas.clear();
  batch->dead_letters.clear();
  // Kept across tries of this batch (see dead_lettered), cleared once it commits.
  if (batch->dead_lettered.size() != n) batch->dead_lettered.assign(n, false);
  batch->positions.clear();
  batch->hot_table_key_count = 0;

  auto snapshot = store_->BeginRead();
  if (!snapshot.ok()) return snapshot.status();
  for (uint32_t i = 0; i < n; ++i) {
    const SourceRecord& record = records[i];
    BatchStats::Source& src = batch->stats.sources[record.source];
    if (IsStale(record, *batch, previous)) {  // read again after a rebalance: applied already
      ++src.skipped;
      continue;
    }
    absl::Status rejection = record.rejection;
    std::string reason = record.reason;
    if (record.event) {
      auto outcome = PrepareEvent(**snapshot, batch, previous, i, &rejection, &reason);
      if (!outcome.ok()) return outcome.status();
      batch->mutation_records.resize(batch->mutations.size(), i);
      if (*outcome == Outcome::kApplied) {
        ++src.applied;
        if (record.event->ttl_delete) ++src.ttl_deletes;
        const int64_t created = record.event->creation_time_ms;
        if (created > 0) {
          src.newest_creation_ms = std::max(src.newest_creation_ms, created);
          batch->stats.lag_seconds.push_back(static_cast<double>(created));
        }
        if (record.received_ms > 0) {
          batch->stats.apply_delay_seconds.push_back(static_cast<double>(record.received_ms));
          if (created > 0) {  // clocks of different hosts: never below zero
            batch->stats.arrival_lag_seconds.push_back(
                static_cast<double>(std::max<int64_t>(0, record.received_ms - created)) / 1000.0);
          }
        }
      } else if (*outcome == Outcome::kSkipped) {
        ++src.skipped;
      }
    } else if (rejection.ok() && !record.position_only) {
      ++src.skipped;  // read, but nothing to apply (a Debezium tombstone)
    }
    if (!rejection.ok()) {
      // Decoders name the record's place themselves; the writer's own rejections gain it here.
      if (record.event && !record.locator.empty()) {
        rejection = absl::Status(rejection.code(),
                                 absl::StrCat(record.locator, ": ", rejection.message()));
      }
      ++src.rejected;
      ++src.rejected_by_reason[reason.empty() ? "bad_record" : reason];
      batch->dead_letters.emplace_back(i, std::move(rejection));
    }
    const std::pair<uint32_t, std::string_view> key(record.source, record.partition);
    if (auto it = batch->positions.find(key); it != batch->positions.end()) {
      it->second = record.next_position;
    } else {
      batch->positions.emplace(std::pair<uint32_t, std::string>(record.source, record.partition),
                               record.next_position);
    }
  }
  snapshot->reset();  // the sorting needs no snapshot

  // In key order: neighbouring writes land on the same B-tree pages, so a batch copies
  // (copy-on-write) far fewer pages than in event order, and LMDB's cursor often finds the
  // next key on the page it stands on. Sorting indices keeps the key and value strings where
  // they are.
  for (const auto& [item, index] : batch->latest) batch->write_order.push_back(index);
  std::sort(batch->write_order.begin(), batch->write_order.end(), [&](uint32_t a, uint32_t b) {
    const Prepared::ItemWrite& x = batch->writes[a];
    const Prepared::ItemWrite& y = batch->writes[b];
    return x.table != y.table ? x.table < y.table : x.pk < y.pk;
  });
  batch->mutation_order.resize(batch->mutations.size());
  for (uint32_t i = 0; i < batch->mutation_order.size(); ++i) batch->mutation_order[i] = i;
  std::stable_sort(batch->mutation_order.begin(), batch->mutation_order.end(),
                   [&](uint32_t a, uint32_t b) {
                     const IndexMutation& x = batch->mutations[a];
                     const IndexMutation& y = batch->mutations[b];
                     return x.view != y.view ? x.view < y.view : x.key < y.key;
                   });
  return absl::OkStatus();
}

absl::Status Applier::WriteBatch(const Prepared& batch, WriteTxn* txn) {
  stats_.Clear();
  change_log_.Rollback();  // a retried batch reuses the sequence numbers of the failed try
  inconsistent_.clear();
  for (uint32_t index : batch.write_order) {
    const Prepared::ItemWrite& write = batch.writes[index];
    if (absl::Status s = txn->Put(item_dbis_[write.table], write.pk, write.stored); !s.ok()) return s;
  }
  // Aggregates in event order: an item's retraction follows the addition it takes back.
  const std::span<const AggregateDelta> deltas(batch.aggregate_deltas);
  for (size_t i = 0; i < batch.write_count; ++i) {
    const Prepared::ItemWrite& write = batch.writes[i];
    if (write.deltas_begin == write.deltas_end) continue;
    if (absl::Status s = ApplyAggregateDeltas(
            txn, write.table, write.pk,
            deltas.subspan(write.deltas_begin, write.deltas_end - write.deltas_begin));
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = ApplyViewMutations(txn, batch); !s.ok()) return s;
  for (const auto& [key, position] : batch.positions) {
    if (absl::Status s = txn->Put(store_->meta(),
                                  PositionKey(catalog_.config().sources[key.first].name, key.second),
                                  position);
        !s.ok()) {
      return s;
    }
  }
  // With write-back LMDB trails this batch: the readiness ticker sets the size gauges.
  stats_.sizes = !store_->write_back();
  if (!stats_.sizes) return absl::OkStatus();
  for (const ViewRef& view : catalog_.views()) {
    stats_.views[view.global].items = txn->Entries(view_dbis_[view.global]);
    stats_.views[view.global].bytes = txn->Bytes(view_dbis_[view.global]);
  }
  for (const AggregateRef& aggregate : catalog_.aggregates()) {
    stats_.aggregates[aggregate.global].groups = txn->Entries(aggregate_dbs_[aggregate.global].groups);
  }
  return absl::OkStatus();
}

absl::Status Applier::ApplyBatch(std::vector<SourceRecord>* batch) {
  Prepared& prepared = *sync_batch_;
  prepared.records = batch;
  CountInFlight(&prepared);
  if (absl::Status s = Prepare(&prepared, nullptr); !s.ok()) return s;
  return Commit(&prepared);
}

absl::Status Applier::Commit(Prepared* batch) {
  const std::vector<SourceRecord>& records = *batch->records;
  failed_source_ = -1;
  for (;;) {
    // With write-back on, the commit publishes the batch in memory (see Store), but for a
    // large batch where LMDB commits cheaply (CommitsDirectly).
    auto txn_or = store_->write_back() && CommitsDirectly(catalog_.config().apply, records.size(),
                                                          store_->last_lmdb_commit())
                      ? store_->BeginWrite()
                      : store_->BeginBuffered();
    if (!txn_or.ok()) return txn_or.status();
    WriteTxn& txn = **txn_or;
    absl::Status s = WriteBatch(*batch, &txn);
    if (s.ok()) {
      for (const auto& [index, why] : batch->dead_letters) {
        if (batch->dead_lettered[index]) continue;
        const SourceRecord& record = records[index];
        s = dead_letters_[record.source]->Write(record, why);
        if (!s.ok()) {
          failed_source_ = static_cast<int>(record.source);
          s = absl::UnavailableError(absl::StrCat(
              "source ", catalog_.config().sources[record.source].name,
              ": cannot write a dead letter, so the source does not advance past ",
              record.locator, ": ", s.message()));
          break;
        }
        batch->dead_lettered[index] = true;
        const std::string& source = catalog_.config().sources[record.source].name;
        if (rejected_log_.Admit(source)) {
          LogWarning(absl::StrCat("source ", source, ": rejected ", why.message()));
        }
      }
    }
    if (s.ok()) {
      const auto committing = std::chrono::steady_clock::now();
      s = txn.Commit();
      if (s.ok()) {
        int64_t took = std::chrono::duration_cast<std::chrono::microseconds>(
                           std::chrono::steady_clock::now() - committing)
                           .count();
        // A publication takes microseconds, but each one is a layer that reads look through
        // until a flush: lingering a share of the last flush (its sync included) keeps about
        // kFlushLayers of them while a slow flush runs.
        if (store_->write_back()) {
          took = std::max<int64_t>(took, store_->last_flush().count() / Store::kFlushLayers);
        }
        last_commit_us_.store(took);
      }
    }
    if (absl::IsResourceExhausted(s)) {
      txn.Abort();
      absl::Status grown = store_->GrowMap();
      if (!grown.ok()) return grown;
      LogInfo(absl::StrCat("LMDB map grown to ", store_->map_size(), " bytes"));
      continue;
    }
    if (!s.ok()) return s;
    break;
  }
  change_log_.Committed();
  batch->dead_lettered.clear();
  for (size_t global : inconsistent_) {
    aggregate_build_cursors_[global].clear();
    SetAggregateState(global, ViewState::kBuilding, 0.0);
  }

  const int64_t now = published_->NowMs();
  stats_.sources.swap(batch->stats.sources);
  stats_.lag_seconds.swap(batch->stats.lag_seconds);
  for (double& created : stats_.lag_seconds) created = static_cast<double>(now - int64_t(created)) / 1000.0;
  stats_.arrival_lag_seconds.swap(batch->stats.arrival_lag_seconds);
  stats_.apply_delay_seconds.swap(batch->stats.apply_delay_seconds);
  for (double& received : stats_.apply_delay_seconds) {
    received = static_cast<double>(std::max<int64_t>(0, now - int64_t(received))) / 1000.0;
  }
  stats_.events = records.size();
  stats_.map_used_bytes = store_->map_used_bytes();
  stats_.map_size_bytes = store_->map_size();
  if (probe_ != nullptr) probe_->RecordBatch(stats_, now);
  published_->hot_keys().RecordBatch(
      batch->mutations, {batch->hot_table_keys.data(), batch->hot_table_key_count}, now);
  // The batch's counters and positions, published together as one snapshot.
  std::shared_ptr<CommitSnapshot> next = published_->NextSnapshot();
  for (const auto& [key, position] : batch->positions) {
    next->positions[{catalog_.config().sources[key.first].name, key.second}] = position;
  }
  for (size_t i = 0; i < stats_.sources.size(); ++i) {
    const BatchStats::Source& s = stats_.sources[i];
    SourceCounters& c = next->counters[i];
    c.applied += s.applied;
    c.skipped += s.skipped;
    c.rejected += s.rejected;
    if (s.newest_creation_ms > 0) c.lag_seconds = double(now - s.newest_creation_ms) / 1000.0;
    if (batch->in_flight[i] > 0) {
      c.last_commit_ms = now;
      c.committed = true;
    }
    next->table_events[catalog_.TableOfSource(i)] += s.applied;
  }
  for (size_t v = 0; v < stats_.views.size(); ++v) {
    next->view_writes[v] += stats_.views[v].puts + stats_.views[v].deletes;
    next->view_key_type_mismatches[v] += stats_.views[v].skipped_key_type_mismatch;
  }
  published_->Publish(std::move(next));
  // After the snapshot: a reader that sees nothing in flight sees the batch counted.
  for (size_t i = 0; i < batch->in_flight.size(); ++i) {
    if (batch->in_flight[i] > 0) published_->CountInFlight(i, -int64_t(batch->in_flight[i]));
    batch->in_flight[i] = 0;
  }
  return absl::OkStatus();
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

bool Applier::RebuildWithRetries(const std::atomic<bool>* stop) {
  for (auto backoff = kFirstBackoff;; backoff = std::min(backoff * 2, kMaxBackoff)) {
    absl::Status s = RebuildViews(stop);
    if (s.ok()) break;
    if (absl::IsCancelled(s)) return false;
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
      std::unique_lock lock(slot_mu_);
      slot_changed_.wait(lock, [&] { return slot_state_[slot] == SlotState::kFree || writer_done_; });
      if (writer_done_) break;
    }
    Prepared& batch = *slots_[slot];
    batch.owned.clear();
    batch.records = &batch.owned;
    if (!next(&batch.owned)) break;
    CountInFlight(&batch);
    if (!Attempt(Stage::kPrepare, [&] { return Prepare(&batch, previous); },
                 absl::StrCat("prepare a batch of ", batch.owned.size(), " events"), on_failure, stop,
                 nullptr, error)) {
      break;
    }
    {
      std::lock_guard lock(slot_mu_);
      slot_state_[slot] = SlotState::kPrepared;
    }
    slot_changed_.notify_all();
    previous = &batch;  // its items are the next batch's old images until it commits
  }
  {
    std::lock_guard lock(slot_mu_);
    preparer_done_ = true;
  }
  slot_changed_.notify_all();
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
    std::lock_guard lock(slot_mu_);
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
    {
      // The preparer publishes the slots in turn, so once it is done and this one is not
      // prepared, there are no more. `stop` is raised after the queue closed, when a batch
      // keeps failing: checked every 100 ms.
      std::unique_lock lock(slot_mu_);
      while (slot_state_[slot] != SlotState::kPrepared && !preparer_done_ && !stopped()) {
        slot_changed_.wait_for(lock, std::chrono::milliseconds(100));
      }
      if (slot_state_[slot] != SlotState::kPrepared) break;
    }
    Prepared& batch = *slots_[slot];
    if (!Attempt(Stage::kCommit, [&] { return Commit(&batch); },
                 absl::StrCat("apply a batch of ", batch.owned.size(), " events"), on_failure, stop,
                 &failed_source_, &commit_error)) {
      break;
    }
    {
      std::lock_guard lock(slot_mu_);
      slot_state_[slot] = SlotState::kFree;
    }
    slot_changed_.notify_all();
    // An aggregate found inconsistent by this batch is rebuilt before the next one.
    if (!inconsistent_.empty() && !RebuildWithRetries(stop)) break;
  }
  {
    std::lock_guard lock(slot_mu_);
    writer_done_ = true;
  }
  slot_changed_.notify_all();
  preparer.join();
  if (!commit_error.ok()) return commit_error;
  if (!prepare_error.ok()) return prepare_error;
  if (stopped()) return absl::CancelledError("stopped before every batch was applied");
  return absl::OkStatus();
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
