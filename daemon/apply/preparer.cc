// The first stage: Prepare works out a batch's writes from a read snapshot, without a write
// transaction (see Applier::Prepare).
#include "daemon/apply/applier.h"

#include <algorithm>
#include <charconv>

#include "absl/strings/str_cat.h"
#include "daemon/apply/prepared_batch.h"
#include "daemon/store/stored_item.h"
#include "index_builders/item_codec.h"

namespace cdcview {
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

}  // namespace

int64_t TombstoneTime(const ChangeEvent& event, int64_t now_ms) {
  return event.creation_time_ms > 0 ? std::min(event.creation_time_ms, now_ms) : now_ms;
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
  auto last_write = [&item_key](const Prepared* b) -> const Prepared::ItemWrite* {
    if (b == nullptr) return nullptr;
    auto it = b->latest.find(item_key);
    return it == b->latest.end() ? nullptr : &b->writes[it->second];
  };
  std::optional<std::string_view> stored_value;
  // The tombstone the store holds before this batch, whose index entry the batch's write of
  // the item replaces: known once this batch wrote the item, else the stored value's.
  std::optional<int64_t> replaced_removed_ms;
  if (const Prepared::ItemWrite* written = last_write(batch)) {
    stored_value = written->stored;
    replaced_removed_ms = written->replaced_removed_ms;
  } else if ((written = last_write(previous)) != nullptr) {
    stored_value = written->stored;
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
    if (!replaced_removed_ms) replaced_removed_ms = stored->removed_ms;
    // A stored sequence number longer than any valid one orders nothing, so the item's real
    // changes replace its state.
    if (!event.sequence_number.empty() && !stored->sequence_number.empty() &&
        stored->sequence_number.size() <= kMaxSequenceNumberDigits &&
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
  // A removed item leaves a tombstone with its sequence number and time, so a replayed older
  // event cannot resurrect it until the tombstone is compacted; a remove of an item never seen,
  // without a sequence number, writes nothing.
  if (new_item || had_record || !event.sequence_number.empty()) {
    if (batch->write_count == batch->writes.size()) batch->writes.emplace_back();
    const uint32_t w = static_cast<uint32_t>(batch->write_count++);
    Prepared::ItemWrite& write = batch->writes[w];
    write.table = static_cast<uint32_t>(table);
    write.pk = std::move(pk);
    write.removed_ms = new_item ? StoredItem::kNoTime : TombstoneTime(event, published_->NowMs());
    write.replaced_removed_ms = replaced_removed_ms.value_or(StoredItem::kNoTime);
    const uint32_t partition = PartitionIdOf(record, batch);
    write.stored = new_item ? EncodeStoredItem(false, event.sequence_number, EncodeItem(*new_item), partition)
                            : EncodeTombstone(event.sequence_number, write.removed_ms, partition);
    write.deltas_begin = static_cast<uint32_t>(deltas_begin);
    write.deltas_end = static_cast<uint32_t>(batch->aggregate_deltas.size());
    batch->latest.insert_or_assign(std::pair<uint32_t, std::string_view>(write.table, write.pk), w);
  }
  return Outcome::kApplied;
}

uint32_t Applier::PartitionIdOf(const SourceRecord& record, Prepared* batch) {
  Prepared::LastPartition& last = batch->last_partition;
  if (last.valid && last.source == record.source && last.partition == record.partition) return last.id;
  const PartitionIds::Id id =
      partition_ids_.Lookup(catalog_.config().sources[record.source].name, record.partition);
  if (!id.saved && std::find(batch->new_partition_ids.begin(), batch->new_partition_ids.end(), id.id) ==
                       batch->new_partition_ids.end()) {
    batch->new_partition_ids.push_back(id.id);
  }
  last.valid = true;
  last.source = record.source;
  last.partition.assign(record.partition);
  last.id = id.id;
  return id.id;
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
  batch->new_partition_ids.clear();
  batch->last_partition.valid = false;  // its id may have been unsaved for an earlier batch
  batch->earliest_received_ms = 0;

  auto snapshot = store_->BeginRead();
  if (!snapshot.ok()) return snapshot.status();
  for (uint32_t i = 0; i < n; ++i) {
    const SourceRecord& record = records[i];
    if (record.received_ms > 0 &&
        (batch->earliest_received_ms == 0 || record.received_ms < batch->earliest_received_ms)) {
      batch->earliest_received_ms = record.received_ms;
    }
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

}  // namespace cdcview
