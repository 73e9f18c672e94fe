// HotKeyTracker: the partition keys written most often, per view and per table, over the last
// one to two minutes (two alternating windows of 60 s; see index_builders/heavy_hitters.h),
// and over the whole run since the first write (one window that never ends), for when the
// recent windows are empty (a replayed stream that finished, an idle source).
//
// A view counts the partition key of every entry put or deleted (physical, as written: a
// write-sharded view's keys carry their shard suffix); a table counts the table partition key
// of every applied event. Keys are kept encoded (key_codec.h), so the writer decodes nothing.
// Memory: kCapacity counters per view and per table in each of its three summaries (two
// windows and the run), whatever the key count, plus the published copies below.
//
// Threading: one writer, any number of readers, and the writer never waits for a report.
// RecordBatch (the writer, once per committed batch; never concurrently with itself) updates
// summaries that only it touches, without a lock. After the batch it takes an immutable
// snapshot (HeavyHittersSnapshot) of each summary the batch changed and publishes them all
// under mu_, which it holds only to swap those pointers; a report holds mu_ (shared) only to
// copy one pointer, then merges the snapshot's windows (up to 2 * kCapacity keys) with no lock
// held. So a report is exactly what the summary would have reported after the last batch
// published before it began (batches are published whole), and a storm of reports costs the
// writer at most a wait behind pointer copies. A snapshot shares the previous window's copy
// with the snapshots before it (that window no longer changes), so a batch copies at most
// kCapacity counters per summary it touched.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
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
                   std::span<const std::pair<size_t, std::string>> table_keys, int64_t now_ms)
      ABSL_LOCKS_EXCLUDED(mu_);
  // HeavyHitter::key is an encoded key component (DecodeKeyComponent reads it). `whole_run`:
  // since the first write instead of the last one to two minutes.
  HeavyHittersReport ViewReport(size_t global_view, size_t limit, int64_t now_ms,
                                bool whole_run = false) const ABSL_LOCKS_EXCLUDED(mu_);
  HeavyHittersReport TableReport(size_t table, size_t limit, int64_t now_ms,
                                 bool whole_run = false) const ABSL_LOCKS_EXCLUDED(mu_);

  // Tests only: `hook` runs in the middle of every report, after it took its snapshot. Set
  // while no report runs.
  void SetReportHookForTest(std::function<void()> hook) { report_hook_ = std::move(hook); }

 private:
  // Where a summary sits in summaries_ and published_: each view, then each table, as the
  // pair (recent windows, whole run).
  size_t ViewSlot(size_t view, bool whole_run) const { return 2 * view + (whole_run ? 1 : 0); }
  size_t TableSlot(size_t table, bool whole_run) const {
    return 2 * (view_count_ + table) + (whole_run ? 1 : 0);
  }
  // Adds one write of `key` to the summary at `slot` (the writer's).
  void Add(size_t slot, std::string_view key, int64_t now_ms);
  HeavyHittersReport Report(size_t slot, size_t limit, int64_t now_ms) const
      ABSL_LOCKS_EXCLUDED(mu_);

  size_t view_count_ = 0;
  // The writer's own (RecordBatch only): no reader touches them, so they need no lock.
  std::vector<WindowedHeavyHitters> summaries_;
  std::vector<size_t> touched_;     // slots the batch being recorded changed
  std::vector<bool> is_touched_;    // per slot: listed in touched_
  std::function<void()> report_hook_;

  // Held only to swap snapshot pointers (the writer) or copy one (a report, shared).
  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<const HeavyHittersSnapshot>> published_ ABSL_GUARDED_BY(mu_);
};

// The length of the first key component of `key` (an entry or primary key), 0 if malformed.
size_t FirstKeyComponentSize(std::string_view key);

}  // namespace cdcview
