// PartitionIds: the small numbers stored items name their source partition by
// (StoredItem::partition), and their meta keys: partition/<source>/<partition> -> the id in
// decimal (meta_keys.h). A partition gets the next free id, from 1, the first time an event of
// it is applied; an id is never given to another partition while an item may hold it.
//
// The writer saves a new id with the first batch that uses it: Lookup says whether the id is
// saved yet; a batch using an unsaved one writes its meta key (Save) in its transaction and,
// once committed, marks it saved. A batch that never commits leaves the id unsaved, so the
// next batch that uses it writes it; ids that no committed item holds may be given again after
// a restart.
//
// Thread-safety: thread-safe (the preparer looks ids up while the committer marks them saved).
// Ownership: copies what it is given.
#pragma once

#include <lmdb.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "daemon/store/txn.h"

namespace cdcview {

class PartitionIds {
 public:
  // Replaces what this holds with the ids stored in `meta` as `txn` sees them, all saved.
  // DATA_LOSS naming the key for one that is not a positive number.
  absl::Status Load(const Txn& txn, MDB_dbi meta) ABSL_LOCKS_EXCLUDED(mu_);

  struct Id {
    uint32_t id = 0;
    bool saved = false;  // its meta key is committed
  };
  // The id of `partition` of source `source`: a new one, not saved, if it has none.
  Id Lookup(std::string_view source, std::string_view partition) ABSL_LOCKS_EXCLUDED(mu_);
  // Puts the meta key of `id` (one Lookup gave) into `txn`.
  absl::Status Save(WriteTxn* txn, MDB_dbi meta, uint32_t id) const ABSL_LOCKS_EXCLUDED(mu_);
  // `id`'s meta key is committed.
  void MarkSaved(uint32_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // The source and partition of `id`; nullopt for an id none was given.
  std::optional<std::pair<std::string, std::string>> Find(uint32_t id) const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    std::string source;
    std::string partition;
    bool saved = false;
  };
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, uint32_t> by_key_ ABSL_GUARDED_BY(mu_);  // PartitionIdKey -> id
  std::vector<std::optional<Entry>> by_id_ ABSL_GUARDED_BY(mu_);             // [id - 1]
};

}  // namespace cdcview
