// The second stage: Commit writes a prepared batch in one write transaction and publishes
// what it did (see Applier::Commit).
#include "daemon/apply/applier.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "daemon/apply/prepared_batch.h"
#include "daemon/log/log.h"
#include "daemon/store/lmdb_status.h"
#include "daemon/store/meta_keys.h"

namespace cdcview {

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
    if (absl::IsDataLoss(s) && !IsStoreError(s)) {  // a state that contradicts the change
      s = ResetInconsistentAggregate(txn, global, s);
    } else if (s.ok()) {
      stats_.aggregates[global].updates += (retract != nullptr) + (add != nullptr);
    }
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Applier::ApplyViewMutations(WriteTxn* txn, const Prepared& batch) {
  // The views are written in key order (see Prepare), the change log in event order: a
  // watcher sees the changes as they happened, each partition's causes in stream order.
  for (const ViewSkip& skip : batch.view_skips) ++stats_.views[skip.view].skipped_key_type_mismatch;
  std::vector<bool>& changed = mutation_changed_;
  changed.assign(batch.mutations.size(), true);
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

absl::Status Applier::WriteBatch(const Prepared& batch, WriteTxn* txn) {
  stats_.Clear();
  change_log_.Rollback();  // a retried batch reuses the sequence numbers of the failed try
  inconsistent_.clear();
  for (uint32_t index : batch.write_order) {
    const Prepared::ItemWrite& write = batch.writes[index];
    if (absl::Status s = txn->Put(item_dbis_[write.table], write.pk, write.stored); !s.ok()) return s;
    if (write.replaced_removed_ms != StoredItem::kNoTime) {
      if (absl::Status s = txn->Delete(
              tombstone_dbis_[write.table],
              TombstoneIndexKey(write.replaced_removed_ms, write.pk, store_->max_key_size()));
          !s.ok()) {
        return s;
      }
    }
    if (write.removed_ms != StoredItem::kNoTime) {
      if (absl::Status s = txn->Put(
              tombstone_dbis_[write.table],
              TombstoneIndexKey(write.removed_ms, write.pk, store_->max_key_size()), write.pk);
          !s.ok()) {
        return s;
      }
    }
  }
  for (uint32_t id : batch.new_partition_ids) {
    if (absl::Status s = partition_ids_.Save(txn, store_->meta(), id); !s.ok()) return s;
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

absl::Status Applier::Commit(Prepared* batch) {
  const std::vector<SourceRecord>& records = *batch->records;
  failed_source_ = -1;
  double write_seconds = 0, commit_seconds = 0;
  const auto writing = std::chrono::steady_clock::now();  // a grown map's retry included
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
      write_seconds = std::chrono::duration<double>(committing - writing).count();
      s = txn.Commit();
      if (s.ok()) {
        const auto committed = std::chrono::steady_clock::now();
        commit_seconds = std::chrono::duration<double>(committed - committing).count();
        int64_t took = std::chrono::duration_cast<std::chrono::microseconds>(committed - committing)
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
  for (uint32_t id : batch->new_partition_ids) partition_ids_.MarkSaved(id);
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
  stats_.stages = batch->stats.stages;
  stats_.stages.write = write_seconds;
  stats_.stages.commit = commit_seconds;
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

}  // namespace cdcview
