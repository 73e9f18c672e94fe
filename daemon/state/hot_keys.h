// HotKeyTracker: the partition keys written most often, per view and per table, over the last
// one to two minutes (two alternating windows of 60 s; see index_builders/heavy_hitters.h),
// and over the whole run since the first write (one window that never ends), for when the
// recent windows are empty (a replayed stream that finished, an idle source).
//
// A view counts the partition key of every entry put or deleted (physical, as written: a
// write-sharded view's keys carry their shard suffix); a table counts the table partition key
// of every applied event. Keys are kept encoded (key_codec.h), so the writer decodes nothing.
// Memory: kCapacity counters per view and per table in each of its three summaries (two
// windows and the run), whatever the key count.
//
// Threading: RecordBatch is called by the writer once per committed batch (one lock for the
// whole batch); ViewReport and TableReport from any thread (the lock is held while the two
// windows are merged: at most 2 * kCapacity keys).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "daemon/state/catalog.h"
#include "index_builders/heavy_hitters.h"
#include "index_builders/view_builder.h"

namespace cdcview {

class HotKeyTracker {
 public:
  static constexpr size_t kCapacity = 64;
  static constexpr int64_t kWindowMs = 60000;
  // The whole run's window: longer than any run, so it never rotates.
  static constexpr int64_t kRunWindowMs = int64_t{1} << 60;

  explicit HotKeyTracker(const Catalog& catalog);

  // `mutations`: the batch's view mutations (IndexMutation::view the global view index);
  // `table_keys`: (table, encoded table partition key) per applied event.
  void RecordBatch(const std::vector<IndexMutation>& mutations,
                   std::span<const std::pair<size_t, std::string>> table_keys, int64_t now_ms);
  // HeavyHitter::key is an encoded key component (DecodeKeyComponent reads it). `whole_run`:
  // since the first write instead of the last one to two minutes.
  HeavyHittersReport ViewReport(size_t global_view, size_t limit, int64_t now_ms,
                                bool whole_run = false) const;
  HeavyHittersReport TableReport(size_t table, size_t limit, int64_t now_ms,
                                 bool whole_run = false) const;

 private:
  mutable absl::Mutex mu_;
  std::vector<WindowedHeavyHitters> views_ ABSL_GUARDED_BY(mu_);
  std::vector<WindowedHeavyHitters> tables_ ABSL_GUARDED_BY(mu_);
  std::vector<WindowedHeavyHitters> views_run_ ABSL_GUARDED_BY(mu_);
  std::vector<WindowedHeavyHitters> tables_run_ ABSL_GUARDED_BY(mu_);
};

// The length of the first key component of `key` (an entry or primary key), 0 if malformed.
size_t FirstKeyComponentSize(std::string_view key);

}  // namespace cdcview
