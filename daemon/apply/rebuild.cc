// Recovery and rebuilds: Recover compares stored view and aggregate definitions with the
// catalog; RebuildViews fills what is BUILDING from items/<table> (see Applier::Recover).
#include "daemon/apply/applier.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/log/log.h"
#include "daemon/store/meta_keys.h"
#include "daemon/store/stored_item.h"
#include "index_builders/item_codec.h"

namespace cdcview {
namespace {

constexpr std::string_view kReady = kStateReady;
constexpr std::string_view kBuilding = kStateBuilding;
constexpr size_t kRebuildChunk = 2000;

}  // namespace

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
  if (absl::Status s = partition_ids_.Load(txn, store_->meta()); !s.ok()) return s;
  if (absl::Status s = PublishStoredPositions(txn); !s.ok()) return s;
  if (absl::Status s = txn.Commit(); !s.ok()) return s;
  if (absl::Status s = compactor_.TimeUntimed(); !s.ok()) return s;
  PublishSizes();
  return absl::OkStatus();
}

absl::Status Applier::PublishStoredPositions(const Txn& txn) {
  PositionMap positions;
  if (absl::Status s = ForEachPosition(
          txn, store_->meta(),
          [&](std::string_view source, std::string_view partition, std::string_view at) {
            positions[{std::string(source), std::string(partition)}] = std::string(at);
          });
      !s.ok()) {
    return s;
  }
  published_->ReplacePositions(std::move(positions));
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
      if (!cursor->status().ok()) return cursor->status();
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
    if (status.ok()) status = cursor->status();  // a walk cut short by a store error
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

}  // namespace cdcview
