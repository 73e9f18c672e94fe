// StoredItem: what the items database (items/<table>) keeps per primary key: the item's last
// image, the sequence number of the change that produced it, and a tombstone flag for a
// removed item (kept for its sequence number, so that a replayed older change is skipped).
// And the key of tombstones/<table>, the index of a table's tombstones by their time, which
// finds the tombstones a compaction may drop without walking the table.
//
// Value layout: a flag byte (bit 0: tombstone; bit 1: a partition id follows), the partition
// id as a varint when bit 1 is set, the varint-length-prefixed sequence number, then for a
// live item the EncodeItem bytes of the image, for a tombstone its time: nothing (a tombstone
// written before tombstones had a time) or 8 bytes, big-endian Unix milliseconds. A cdcviewd
// that predates the time reads a timed tombstone as a tombstone (it never looks at a
// tombstone's image), so a store stays readable by it.
//
// The partition id (partition_ids.h) names the source partition whose event wrote this state,
// so a cluster member can drop the items of partitions it no longer owns. Values written
// before the store recorded partitions (schema 1) have none: StoredItem::kNoPartition. A
// cdcviewd that predates the id refuses the store by its schema version (store.h) instead of
// taking bit 1 for damage.
//
// Thread-safety: pure functions. Ownership: a decoded StoredItem's image points into the value
// it was decoded from (LMDB's map: valid only inside the transaction that read it).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace cdcview {

struct StoredItem {
  bool tombstone = false;       // the item was removed; kept for its sequence number
  std::string sequence_number;  // of the change that produced this state; may be empty
  std::string_view image;       // EncodeItem bytes (empty for a tombstone); points into the value
  // A tombstone's time (Unix ms, see TombstoneTime in the applier); kNoTime for a live item
  // and for a tombstone stored without one.
  int64_t removed_ms = kNoTime;
  // The id of the partition whose event wrote this state (PartitionIds); kNoPartition for a
  // value written before the store recorded partitions.
  uint32_t partition = kNoPartition;
  static constexpr int64_t kNoTime = -1;
  static constexpr uint32_t kNoPartition = 0;
};
std::string EncodeStoredItem(bool tombstone, std::string_view sequence_number,
                             std::string_view image,
                             uint32_t partition = StoredItem::kNoPartition);
// A tombstone with its time (`removed_ms` >= 0).
std::string EncodeTombstone(std::string_view sequence_number, int64_t removed_ms,
                            uint32_t partition = StoredItem::kNoPartition);
// DATA_LOSS if the value is not a StoredItem.
absl::StatusOr<StoredItem> DecodeStoredItem(std::string_view value);

// The key of the tombstone of item `pk` removed at `removed_ms` in tombstones/<table>:
// big-endian `removed_ms` then `pk`, so the index is in time order. Its value is `pk`. A key
// that would exceed `max_key_size` keeps pk's first bytes and ends with pk's 64-bit FNV-1a
// hash instead, so it stays unique (the value holds the whole pk).
std::string TombstoneIndexKey(int64_t removed_ms, std::string_view pk, size_t max_key_size);
// The time at the start of a TombstoneIndexKey; -1 for a key shorter than 8 bytes.
int64_t TombstoneIndexTime(std::string_view key);

}  // namespace cdcview
