// What the Applier's own files share and nothing outside daemon/apply/ includes: the batch
// between the two stages (Applier::Prepared), which preparer.cc fills and committer.cc writes.
//
// Thread-safety: none of its own. A Prepared belongs to one stage at a time: the slot hand-off
// in ApplyBatches (slot_state_, under slot_mu_) says which; while the writer commits batch N,
// the preparer reads N's `latest` and `positions` but does not change them.
// Ownership: a Prepared owns its records (Run's batches) or points at the caller's
// (ApplyBatch's); `latest` points into its own `writes`.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "daemon/apply/applier.h"
#include "daemon/store/stored_item.h"

namespace cdcview {
namespace apply_internal {

// (source index, partition), compared with (source index, string_view) without a copy.
struct SourcePartitionIndexLess {
  using is_transparent = void;
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    if (a.first != b.first) return a.first < b.first;
    return std::string_view(a.second) < std::string_view(b.second);
  }
};

}  // namespace apply_internal

// A batch between the stages: everything Prepare works out without a write transaction, for
// Commit to write. Reused from batch to batch (strings and vectors keep their capacity).
struct Applier::Prepared {
  // One applied event's write to items/<table>.
  struct ItemWrite {
    uint32_t table = 0;
    std::string pk;
    std::string stored;  // EncodeStoredItem: the new image, or a tombstone
    // A tombstone's time (its tombstones/<table> entry), and that of the tombstone the store
    // holds for the item before this batch (its entry goes); StoredItem::kNoTime for none.
    int64_t removed_ms = StoredItem::kNoTime;
    int64_t replaced_removed_ms = StoredItem::kNoTime;
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
  // Partition ids (PartitionIds) the batch's item writes use that were not saved when it was
  // prepared: the batch writes their meta keys. And the last record's partition and its id,
  // which the next record of the same partition reuses without a lookup.
  std::vector<uint32_t> new_partition_ids;
  struct LastPartition {
    bool valid = false;
    uint32_t source = 0;
    std::string partition;
    uint32_t id = 0;
  } last_partition;
  // (source index, partition) -> the next position after this batch.
  std::map<std::pair<uint32_t, std::string>, std::string, apply_internal::SourcePartitionIndexLess>
      positions;
  // Per applied event: (table, encoded table partition key), for the hot keys. Only the first
  // hot_table_key_count are this batch's.
  std::vector<std::pair<size_t, std::string>> hot_table_keys;
  size_t hot_table_key_count = 0;
  // Per source: applied, skipped, rejected; lag_seconds holds creation times and
  // apply_delay_seconds receive times (ms) until the commit turns them into lags.
  BatchStats stats;
  // Per source: records of this batch counted in flight (PublishedState::CountInFlight).
  std::vector<size_t> in_flight;
  // The earliest receive time (Unix ms) of the batch's records, 0 if none has one: the queue
  // stage (stats.stages) counts from it. And when the batch was prepared: the writer's
  // hand-off counts from then.
  int64_t earliest_received_ms = 0;
  std::chrono::steady_clock::time_point prepared_at;

  explicit Prepared(size_t sources) : stats(sources), in_flight(sources, 0) {}
};

}  // namespace cdcview
