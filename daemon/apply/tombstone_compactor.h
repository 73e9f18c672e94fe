// TombstoneCompactor: drops the tombstones of removed items from items/<table> once they are
// older than the table's horizon, so that a table with churn stops growing.
//
// A tombstone keeps a removed item's sequence number so that a replayed older change of the
// item is skipped (see Applier::PrepareEvent). Replays come from the source's retention
// window, so a tombstone is needed until its removal has left that window: the horizon is the
// longest tombstone_horizon_seconds of the table's sources (SourceConfig), counted from the
// tombstone's time (the removal's creation time, see the preparer). The tombstones/<table>
// index (stored_item.h) holds the table's tombstones in time order, so a step finds the old
// ones with one cursor walk from its start and never reads the rest of the table.
//
// The writer thread runs it between batches (Applier::ApplyBatches): Step is one short write
// transaction dropping at most apply.tombstone_compaction_step tombstones, so a backlog of old
// tombstones is worked off in steps that hold the next batch up no longer than a small batch.
//
// Thread-safety: one thread at a time (the writer's: Step and TimeUntimed begin write
// transactions, of which LMDB allows one). Ownership: borrows the store, the probe (may be
// null) and the clock, which must outlive it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/config/config.h"
#include "daemon/metrics/metrics.h"
#include "daemon/store/store.h"

namespace cdcview {

class TombstoneCompactor {
 public:
  // `now_ms` is the writer's clock (Unix ms), the clock tombstone times are compared with.
  TombstoneCompactor(const Config& config, Store* store, ApplyProbe* probe,
                     std::function<int64_t()> now_ms);

  // Once per table (until meta `tombstones/<table>/timed` is set): gives each tombstone stored
  // without a time (by a cdcviewd that kept tombstones forever) the time now, and indexes it.
  // Walks items/<table> in chunks of kTimingChunk items, one write transaction each; a crash
  // walks again from the start, skipping what has a time. Before the first batch.
  absl::Status TimeUntimed();

  // Whether Step looks for tombstones now: every kCheckIntervalMs, or at once while the last
  // step stopped at its bound with more past the horizon (after kRetryMs following an error).
  bool Due() const;
  // When due, one write transaction dropping at most `step` (apply.tombstone_compaction_step)
  // tombstones past their table's horizon, oldest first, with their index entries; sets
  // cdcview_tombstones. Returns how many it dropped (0 when not due). A tombstone the
  // preparer has read for a batch not committed yet may be dropped meanwhile: the batch's
  // write still lands, and its delete of the index entry finds none. Errors are the store's;
  // a full map is grown and the step retried.
  absl::StatusOr<uint64_t> Step();

  static constexpr size_t kTimingChunk = 2000;
  static constexpr int64_t kCheckIntervalMs = 1000;
  static constexpr int64_t kRetryMs = 10000;

 private:
  struct Table {
    std::string name;
    MDB_dbi items = 0;
    MDB_dbi tombstones = 0;
    int64_t horizon_ms = 0;  // 0: no source feeds the table, nothing to compact
  };
  // One try of Step's transaction: drops up to the step's bound, *more when it stopped there.
  absl::Status StepOnce(int64_t now, std::vector<uint64_t>* dropped, std::vector<uint64_t>* held,
                        bool* more);
  // Times and indexes the untimed tombstones among up to kTimingChunk items after `*after`
  // (exclusive; "" with *started false: from the first); *done at the table's end.
  absl::Status TimeChunk(const Table& table, int64_t now, std::string* after, bool* started,
                         bool* done);

  Store* store_;
  ApplyProbe* probe_;
  std::function<int64_t()> now_ms_;
  uint32_t step_;
  std::vector<Table> tables_;  // by table index
  int64_t next_check_ms_ = 0;
};

}  // namespace cdcview
