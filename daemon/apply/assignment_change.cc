// A change of the partitions this store holds: ApplyAssignment drops what a cluster member no
// longer owns (see Applier::ApplyAssignment).
#include <algorithm>
#include <chrono>
#include <functional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "daemon/apply/applier.h"
#include "daemon/log/log.h"
#include "daemon/store/meta_keys.h"
#include "daemon/store/stored_item.h"
#include "index_builders/item_codec.h"

namespace cdcview {
namespace {

// Walked items per dropped one a batch may look at: a batch that finds little to drop still
// ends, so progress is logged and no transaction runs long.
constexpr size_t kWalkedPerDropped = 10;
constexpr auto kProgressInterval = std::chrono::seconds(10);

// The partitions a store holds: member `ordinal` of `members` (OwnsPartition); every one for
// members 1.
struct Assignment {
  uint32_t members = 1;
  uint32_t ordinal = 0;

  static Assignment Of(const ClusterConfig& cluster) {
    if (cluster.members <= 1) return {};
    return {cluster.members, cluster.ordinal};
  }
  // "<members>/<ordinal>" (meta kAssignmentKey); nullopt for anything else.
  static std::optional<Assignment> Parse(std::string_view text) {
    std::pair<absl::string_view, absl::string_view> parts =
        absl::StrSplit(absl::string_view(text.data(), text.size()), absl::MaxSplits('/', 1));
    Assignment a;
    if (!absl::SimpleAtoi(parts.first, &a.members) || !absl::SimpleAtoi(parts.second, &a.ordinal) ||
        a.members == 0 || a.ordinal >= a.members) {
      return std::nullopt;
    }
    return a;
  }
  std::string Text() const { return absl::StrCat(members, "/", ordinal); }
  std::string Describe() const {
    return members <= 1 ? "standalone" : absl::StrCat("member ", ordinal, " of ", members);
  }
  bool OwnsAll() const { return members <= 1; }
  bool operator==(const Assignment&) const = default;
};


// Deletes in `txn` the stored positions `drop(source, partition)` selects, appending their
// names ("<source>/<partition>") to `deleted`.
absl::Status DeletePositions(WriteTxn& txn, MDB_dbi meta,
                             const std::function<bool(std::string_view, std::string_view)>& drop,
                             std::vector<std::string>* deleted) {
  std::vector<std::string> found;
  if (absl::Status s = ForEachPosition(
          txn, meta,
          [&](std::string_view source, std::string_view partition, std::string_view) {
            if (drop(source, partition)) found.push_back(std::string(source).append("/").append(partition));
          });
      !s.ok()) {
    return s;
  }
  for (const std::string& position : found) {
    if (absl::Status s = txn.Delete(meta, std::string(kPositionPrefix).append(position)); !s.ok()) {
      return s;
    }
  }
  deleted->insert(deleted->end(), found.begin(), found.end());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Applier::AssignmentChange> Applier::ApplyAssignment(const ClusterConfig& cluster,
                                                                   const AssignmentOptions& options) {
  const Assignment to = Assignment::Of(cluster);
  Assignment from;
  bool fresh = false;
  {
    auto txn = store_->BeginRead();
    if (!txn.ok()) return txn.status();
    auto stored = (*txn)->Get(store_->meta(), kAssignmentKey);
    if (!stored.ok()) return stored.status();
    if (*stored) {
      std::optional<Assignment> parsed = Assignment::Parse(**stored);
      if (!parsed) {
        return absl::DataLossError(absl::StrCat("meta key ", std::string(kAssignmentKey), " holds \"",
                                                std::string(**stored),
                                                "\", not <members>/<ordinal>"));
      }
      from = *parsed;
    } else {
      fresh = true;
      if (absl::Status s = ForEachPosition(**txn, store_->meta(),
                                           [&](std::string_view, std::string_view, std::string_view) {
                                             fresh = false;
                                           });
          !s.ok()) {
        return s;
      }
    }
  }
  AssignmentChange change;
  change.from = from.Describe();
  change.to = to.Describe();
  if (from == to && !fresh) return change;
  change.changed = !fresh;

  // Whether this member keeps the items of `partition` of source `source`: a Kafka partition
  // it owns, or anything not a Kafka partition (a cluster has Kafka sources only).
  const std::vector<SourceConfig>& sources = catalog_.config().sources;
  auto owned = [&](std::string_view source, std::string_view partition) {
    for (const SourceConfig& config : sources) {
      if (config.name != source) continue;
      if (config.kind != SourceConfig::Kind::kKafka) return true;
      std::optional<int32_t> n = KafkaPartitionNumber(partition);
      return !n || OwnsPartition(*n, to.members, to.ordinal);
    }
    return true;  // a source no longer configured: its items stay, as they always did
  };
  std::vector<bool> reread_table(catalog_.config().tables.size(), false);
  if (change.changed) {
    LogInfo(absl::StrCat("cluster assignment: the store holds the partitions of ", change.from,
                         ", this daemon is ", change.to,
                         to.OwnsAll() ? ": nothing to drop; partitions never read are read from the beginning"
                                      : ": dropping the items of partitions it no longer owns"));
  }
  std::vector<std::string> deleted;  // positions removed before the drops
  if (change.changed && !to.OwnsAll()) {
    // The positions of what is dropped go first, in a transaction of their own: a drop cut
    // short (a kill, then maybe another assignment) leaves partitions without a position,
    // which are read again from their start, never dropped items behind a kept position.
    for (;;) {
      auto txn_or = store_->BeginWrite();
      if (!txn_or.ok()) return txn_or.status();
      WriteTxn& txn = **txn_or;
      std::vector<std::string> found;
      absl::Status s = DeletePositions(
          txn, store_->meta(),
          [&](std::string_view source, std::string_view partition) { return !owned(source, partition); },
          &found);
      if (s.ok()) s = txn.Commit();
      if (absl::IsResourceExhausted(s)) {
        txn.Abort();
        if (absl::Status grown = store_->GrowMap(); !grown.ok()) return grown;
        continue;
      }
      if (!s.ok()) return s;
      deleted = std::move(found);
      break;
    }
    for (size_t table = 0; table < reread_table.size(); ++table) {
      bool unknown = false;
      if (absl::Status s = DropUnowned(table, owned, options, &change, &unknown); !s.ok()) return s;
      reread_table[table] = unknown;
    }
  }

  // The positions of what was dropped, and the new assignment, in one transaction.
  for (;;) {
    auto txn_or = store_->BeginWrite();
    if (!txn_or.ok()) return txn_or.status();
    WriteTxn& txn = **txn_or;
    std::vector<std::string> dropped;
    if (absl::Status s = ForEachPosition(
            txn, store_->meta(),
            [&](std::string_view source, std::string_view partition, std::string_view) {
              bool reread = false;
              for (size_t i = 0; i < sources.size(); ++i) {
                if (sources[i].name == source) reread = reread_table[catalog_.TableOfSource(i)];
              }
              if (to.OwnsAll() || (!reread && owned(source, partition))) return;
              dropped.push_back(std::string(source).append("/").append(partition));
            });
        !s.ok()) {
      return s;
    }
    absl::Status s;
    for (const std::string& position : dropped) {
      s = txn.Delete(store_->meta(), std::string(kPositionPrefix).append(position));
      if (!s.ok()) break;
    }
    if (s.ok()) s = txn.Put(store_->meta(), kAssignmentKey, to.Text());
    if (s.ok()) s = PublishStoredPositions(txn);
    if (s.ok()) s = txn.Commit();
    if (absl::IsResourceExhausted(s)) {
      txn.Abort();
      if (absl::Status grown = store_->GrowMap(); !grown.ok()) return grown;
      continue;
    }
    if (!s.ok()) return s;
    deleted.insert(deleted.end(), dropped.begin(), dropped.end());
    deleted.insert(deleted.end(), change.positions_dropped.begin(), change.positions_dropped.end());
    std::sort(deleted.begin(), deleted.end());
    deleted.erase(std::unique(deleted.begin(), deleted.end()), deleted.end());
    change.positions_dropped = std::move(deleted);
    break;
  }
  PublishSizes();
  if (change.changed) {
    if (options.probe != nullptr) options.probe->RecordChange();
    LogInfo(absl::StrCat("cluster assignment: now ", change.to, "; dropped ", change.items_dropped,
                         " items and the positions of ", change.positions_dropped.size(),
                         " partitions"));
  }
  return change;
}

absl::Status Applier::DropUnowned(size_t table, const OwnedFn& owned, const AssignmentOptions& options,
                                  AssignmentChange* change, bool* unknown_partition) {
  const std::string& name = catalog_.config().tables[table].name;
  const MDB_dbi items = item_dbis_[table];
  const auto started = std::chrono::steady_clock::now();
  auto logged = started;
  uint64_t walked = 0, dropped = 0;
  std::string after;  // the last key walked; "" before the first
  for (bool finished = false; !finished;) {
    auto txn_or = store_->BeginWrite();
    if (!txn_or.ok()) return txn_or.status();
    WriteTxn& txn = **txn_or;
    stats_.Clear();
    inconsistent_.clear();
    change_log_.Rollback();
    // The batch's items first, then their drops: no cursor is open while they are deleted.
    struct Drop {
      std::string pk, value, source, partition;
    };
    std::vector<Drop> drops;
    std::string last = after;
    uint64_t batch_walked = 0;
    {
      auto cursor = txn.OpenCursor(items);
      bool ok = last.empty() ? cursor->SeekFirst() : cursor->Seek(last);
      if (ok && !last.empty() && cursor->key() == last) ok = cursor->Next();
      for (; ok && drops.size() < options.batch_items &&
             batch_walked < options.batch_items * kWalkedPerDropped;
           ok = cursor->Next()) {
        ++batch_walked;
        last.assign(cursor->key());
        absl::StatusOr<StoredItem> stored = DecodeStoredItem(cursor->value());
        if (!stored.ok()) {
          return absl::DataLossError(absl::StrCat("items/", name, ": a stored item is damaged (",
                                                  stored.status().message(), ")"));
        }
        std::optional<std::pair<std::string, std::string>> partition =
            partition_ids_.Find(stored->partition);
        if (!partition) {
          *unknown_partition = true;
          drops.push_back(Drop{last, std::string(cursor->value()), "", ""});
        } else if (!owned(partition->first, partition->second)) {
          drops.push_back(
              Drop{last, std::string(cursor->value()), partition->first, partition->second});
        }
      }
      if (!cursor->status().ok()) return cursor->status();
      finished = !ok;
    }
    absl::Status s;
    for (const Drop& drop : drops) {
      s = DropItem(&txn, table, drop.pk, drop.value, drop.source, drop.partition);
      if (!s.ok()) break;
    }
    // An item of no known partition is dropped even if its partition is still owned: the
    // table's sources then read everything again, so their positions go in the same
    // transaction (a kill after it must not keep them).
    const bool unknown = std::any_of(drops.begin(), drops.end(),
                                     [](const Drop& d) { return d.source.empty(); });
    std::vector<std::string> reread;
    if (s.ok() && unknown) {
      s = DeletePositions(
          txn, store_->meta(),
          [&](std::string_view source, std::string_view) {
            for (size_t i = 0; i < catalog_.config().sources.size(); ++i) {
              if (catalog_.config().sources[i].name == source) return catalog_.TableOfSource(i) == table;
            }
            return false;
          },
          &reread);
    }
    if (s.ok()) s = change_log_.Finish(&txn);
    if (s.ok()) s = txn.Commit();
    if (absl::IsResourceExhausted(s)) {
      txn.Abort();
      change_log_.Rollback();
      if (absl::Status grown = store_->GrowMap(); !grown.ok()) return grown;
      finished = false;
      continue;  // the same batch again
    }
    if (!s.ok()) return s;
    change->positions_dropped.insert(change->positions_dropped.end(), reread.begin(), reread.end());
    change_log_.Committed();
    for (size_t global : inconsistent_) {
      aggregate_build_cursors_[global].clear();
      SetAggregateState(global, ViewState::kBuilding, 0.0);
    }
    after = std::move(last);
    walked += batch_walked;
    dropped += drops.size();
    change->items_dropped += drops.size();
    if (options.probe != nullptr && !drops.empty()) options.probe->RecordDropped(drops.size());
    const auto now = std::chrono::steady_clock::now();
    if (finished || now - logged >= kProgressInterval) {
      logged = now;
      LogInfo(absl::StrFormat("cluster assignment: items/%s: %s, %d items walked, %d dropped in %.1fs",
                              name, finished ? "done" : "in progress", walked, dropped,
                              std::chrono::duration<double>(now - started).count()));
    }
    if (options.after_batch && !options.after_batch()) {
      return absl::CancelledError("stopped while dropping the partitions this member no longer owns");
    }
  }
  return absl::OkStatus();
}

absl::Status Applier::DropItem(WriteTxn* txn, size_t table, std::string_view pk, std::string_view value,
                               std::string_view source, std::string_view partition) {
  absl::StatusOr<StoredItem> stored = DecodeStoredItem(value);
  if (!stored.ok()) return stored.status();
  if (stored->tombstone) {
    if (stored->removed_ms != StoredItem::kNoTime) {
      if (absl::Status s = txn->Delete(tombstone_dbis_[table],
                                       TombstoneIndexKey(stored->removed_ms, pk, store_->max_key_size()));
          !s.ok()) {
        return s;
      }
    }
    return txn->Delete(item_dbis_[table], pk);
  }
  absl::StatusOr<Item> item = DecodeItem(stored->image);
  if (!item.ok()) return item.status();
  // What a REMOVE of the item gives: its entries' deletes and its contributions' retractions.
  std::vector<IndexMutation> mutations;
  std::vector<ViewSkip> skips;
  if (absl::Status s = catalog_.builder(table).Diff(&*item, nullptr, &mutations, &skips); !s.ok()) {
    return s;
  }
  for (const IndexMutation& m : mutations) {
    const size_t global = catalog_.GlobalView(table, m.view);
    absl::StatusOr<bool> removed = txn->Remove(view_dbis_[global], m.key);
    if (!removed.ok()) return removed.status();
    if (!*removed) continue;  // a view being rebuilt that has not reached the item
    if (absl::Status s = change_log_.Append(txn, catalog_.views()[global].spec->name, ChangeOp::kDelete,
                                            m.key, m.value, source, partition, "");
        !s.ok()) {
      return s;
    }
  }
  std::vector<AggregateDelta> deltas;
  if (absl::Status s = catalog_.aggregate_builder(table).Diff(&*item, nullptr, &deltas); !s.ok()) {
    return s;
  }
  if (absl::Status s = ApplyAggregateDeltas(txn, table, pk, deltas); !s.ok()) return s;
  return txn->Delete(item_dbis_[table], pk);
}

}  // namespace cdcview
