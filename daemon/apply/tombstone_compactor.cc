#include "daemon/apply/tombstone_compactor.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/log/log.h"
#include "daemon/store/meta_keys.h"
#include "daemon/store/stored_item.h"

namespace cdcview {
namespace {

constexpr std::string_view kTimed = "timed";

// Runs `write` (one write transaction's work, committing it) again after growing the map when
// it ran out of room; the grow's error when the map is at its ceiling.
template <typename F>
absl::Status WithMapGrowth(Store* store, F&& write) {
  for (;;) {
    absl::Status s = write();
    if (!absl::IsResourceExhausted(s)) return s;
    if (absl::Status grown = store->GrowMap(); !grown.ok()) return grown;
  }
}

}  // namespace

TombstoneCompactor::TombstoneCompactor(const Config& config, Store* store, ApplyProbe* probe,
                                       std::function<int64_t()> now_ms)
    : store_(store),
      probe_(probe),
      now_ms_(std::move(now_ms)),
      step_(config.apply.tombstone_compaction_step) {
  for (const TableSpec& spec : config.tables) {
    Table table;
    table.name = spec.name;
    table.items = store->items(spec.name);
    table.tombstones = store->tombstones(spec.name);
    for (const SourceConfig& source : config.sources) {
      if (source.table != spec.name) continue;
      table.horizon_ms =
          std::max<int64_t>(table.horizon_ms, int64_t{TombstoneHorizonSeconds(source)} * 1000);
    }
    tables_.push_back(std::move(table));
  }
}

absl::Status TombstoneCompactor::TimeUntimed() {
  for (const Table& table : tables_) {
    {
      auto txn = store_->BeginRead();
      if (!txn.ok()) return txn.status();
      auto timed = (*txn)->Get(store_->meta(), TombstonesMetaKey(table.name, kTimed));
      if (!timed.ok()) return timed.status();
      if (*timed) continue;
    }
    const int64_t now = now_ms_();
    std::string after;
    bool started = false;
    for (bool done = false; !done;) {
      if (absl::Status s = WithMapGrowth(
              store_, [&] { return TimeChunk(table, now, &after, &started, &done); });
          !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status TombstoneCompactor::TimeChunk(const Table& table, int64_t now, std::string* after,
                                           bool* started, bool* done) {
  auto txn_or = store_->BeginWrite();
  if (!txn_or.ok()) return txn_or.status();
  WriteTxn& txn = **txn_or;
  std::vector<std::pair<std::string, std::string>> rewrites;  // (pk, timed tombstone)
  std::string last = *after;
  bool end = true;
  {
    auto cursor = txn.OpenCursor(table.items);
    bool ok = *started ? cursor->Seek(*after) : cursor->SeekFirst();
    if (ok && *started && cursor->key() == *after) ok = cursor->Next();
    for (size_t n = 0; ok; ok = cursor->Next()) {
      if (n++ == kTimingChunk) {
        end = false;
        break;
      }
      last.assign(cursor->key());
      auto stored = DecodeStoredItem(cursor->value());
      if (!stored.ok()) {
        return absl::DataLossError(absl::StrCat("items/", table.name, ": a stored item is damaged (",
                                                stored.status().message(), ")"));
      }
      if (stored->tombstone && stored->removed_ms == StoredItem::kNoTime) {
        rewrites.emplace_back(last, EncodeTombstone(stored->sequence_number, now, stored->partition));
      }
    }
  }
  for (const auto& [pk, value] : rewrites) {
    if (absl::Status s = txn.Put(table.items, pk, value); !s.ok()) return s;
    if (absl::Status s = txn.Put(table.tombstones, TombstoneIndexKey(now, pk, store_->max_key_size()), pk);
        !s.ok()) {
      return s;
    }
  }
  if (end) {
    if (absl::Status s = txn.Put(store_->meta(), TombstonesMetaKey(table.name, kTimed), "1"); !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = txn.Commit(); !s.ok()) return s;
  if (!rewrites.empty()) {
    LogInfo(absl::StrCat("items/", table.name, ": ", rewrites.size(),
                         " tombstones stored without a time count as removed now"));
  }
  *after = std::move(last);
  *started = true;
  *done = end;
  return absl::OkStatus();
}

bool TombstoneCompactor::Due() const { return now_ms_() >= next_check_ms_; }

absl::StatusOr<uint64_t> TombstoneCompactor::Step() {
  const int64_t now = now_ms_();
  if (now < next_check_ms_) return 0;
  const auto began = std::chrono::steady_clock::now();
  std::vector<uint64_t> dropped, held;
  bool more = false;
  absl::Status s = WithMapGrowth(store_, [&] { return StepOnce(now, &dropped, &held, &more); });
  if (!s.ok()) {
    next_check_ms_ = now + kRetryMs;
    return s;
  }
  next_check_ms_ = more ? now : now + kCheckIntervalMs;
  uint64_t total = 0;
  for (size_t t = 0; t < tables_.size(); ++t) {
    total += dropped[t];
    if (probe_ == nullptr) continue;
    probe_->SetTombstones(t, held[t]);
    probe_->RecordTombstoneCompaction(t, dropped[t]);
  }
  if (total > 0 && probe_ != nullptr) {
    probe_->ObserveTombstoneCompactionStep(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
  }
  return total;
}

absl::Status TombstoneCompactor::StepOnce(int64_t now, std::vector<uint64_t>* dropped,
                                          std::vector<uint64_t>* held, bool* more) {
  dropped->assign(tables_.size(), 0);
  held->assign(tables_.size(), 0);
  *more = false;
  // Buffered with write-back on, like a batch: a step then costs a pending layer, not a flush.
  auto txn_or = store_->BeginBuffered();
  if (!txn_or.ok()) return txn_or.status();
  WriteTxn& txn = **txn_or;
  size_t budget = step_;
  bool wrote = false;
  for (size_t t = 0; t < tables_.size(); ++t) {
    const Table& table = tables_[t];
    const uint64_t entries = txn.Entries(table.tombstones);
    if (table.horizon_ms == 0 || budget == 0) {
      (*held)[t] = entries;
      continue;
    }
    // A buffered transaction's cursor merges its own writes: read first, then delete.
    std::vector<std::pair<std::string, std::string>> old;  // (index key, pk)
    {
      auto cursor = txn.OpenCursor(table.tombstones);
      for (bool ok = cursor->SeekFirst(); ok; ok = cursor->Next()) {
        if (TombstoneIndexTime(cursor->key()) > now - table.horizon_ms) break;
        if (old.size() == budget) {
          *more = true;
          break;
        }
        old.emplace_back(cursor->key(), cursor->value());
      }
    }
    budget -= old.size();
    uint64_t removed = 0;
    for (const auto& [index_key, pk] : old) {
      auto value = txn.Get(table.items, pk);
      if (!value.ok()) return value.status();
      if (*value) {
        auto stored = DecodeStoredItem(**value);
        if (!stored.ok()) {
          return absl::DataLossError(absl::StrCat("items/", table.name, ": a stored item is damaged (",
                                                  stored.status().message(), ")"));
        }
        // Only the tombstone this entry indexes: the item may have been written since.
        if (stored->tombstone &&
            stored->removed_ms == TombstoneIndexTime(index_key)) {
          if (absl::Status s = txn.Delete(table.items, pk); !s.ok()) return s;
          ++removed;
        }
      }
      if (absl::Status s = txn.Delete(table.tombstones, index_key); !s.ok()) return s;
      wrote = true;
    }
    (*dropped)[t] = removed;
    (*held)[t] = entries > old.size() ? entries - old.size() : 0;
  }
  if (!wrote) return absl::OkStatus();  // the transaction aborts: nothing to commit or sync
  return txn.Commit();
}

}  // namespace cdcview
