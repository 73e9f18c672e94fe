#include "daemon/state/hot_keys.h"

#include "index_builders/key_codec.h"

namespace cdcview {

size_t FirstKeyComponentSize(std::string_view key) {
  if (key.empty()) return 0;
  if (key[0] == kTagString || key[0] == kTagBinary) {
    // The terminator is a 0x00 not followed by 0xFF (0x00 0xFF is an escaped NUL byte).
    for (size_t i = 1; i < key.size(); ++i) {
      if (key[i] != '\0') continue;
      if (i + 1 < key.size() && key[i + 1] == '\xFF') {
        ++i;
        continue;
      }
      return i + 1;
    }
    return 0;
  }
  std::string_view rest = key;  // numbers are rare as partition keys: decode them
  if (!DecodeKeyComponent(&rest).ok()) return 0;
  return key.size() - rest.size();
}

HotKeyTracker::HotKeyTracker(const Catalog& catalog) : view_count_(catalog.views().size()) {
  const size_t summaries = 2 * (view_count_ + catalog.config().tables.size());
  for (size_t slot = 0; slot < summaries; ++slot) {
    summaries_.emplace_back(kCapacity, slot % 2 == 0 ? kWindowMs : kRunWindowMs);
  }
  is_touched_.assign(summaries, false);
  absl::MutexLock lock(&mu_);
  for (WindowedHeavyHitters& summary : summaries_) published_.push_back(summary.Snapshot());
}

void HotKeyTracker::Add(size_t slot, std::string_view key, int64_t now_ms) {
  summaries_[slot].Add(key, 1, now_ms);
  if (!is_touched_[slot]) {
    is_touched_[slot] = true;
    touched_.push_back(slot);
  }
}

void HotKeyTracker::RecordBatch(const std::vector<IndexMutation>& mutations,
                                std::span<const std::pair<size_t, std::string>> table_keys,
                                int64_t now_ms) {
  for (const IndexMutation& m : mutations) {
    const size_t n = FirstKeyComponentSize(m.key);
    if (n == 0) continue;
    const std::string_view key = std::string_view(m.key).substr(0, n);
    Add(ViewSlot(m.view, false), key, now_ms);
    Add(ViewSlot(m.view, true), key, now_ms);
  }
  for (const auto& [table, key] : table_keys) {
    Add(TableSlot(table, false), key, now_ms);
    Add(TableSlot(table, true), key, now_ms);
  }
  if (touched_.empty()) return;
  std::vector<std::shared_ptr<const HeavyHittersSnapshot>> snapshots;
  snapshots.reserve(touched_.size());
  for (size_t slot : touched_) snapshots.push_back(summaries_[slot].Snapshot());
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < touched_.size(); ++i) published_[touched_[i]].swap(snapshots[i]);
  }
  // `snapshots` now holds the replaced ones: freed here, outside the lock, unless a report
  // still reads one (the report then frees it).
  for (size_t slot : touched_) is_touched_[slot] = false;
  touched_.clear();
}

HeavyHittersReport HotKeyTracker::Report(size_t slot, size_t limit, int64_t now_ms) const {
  std::shared_ptr<const HeavyHittersSnapshot> snapshot;
  {
    absl::ReaderMutexLock lock(&mu_);
    snapshot = published_[slot];
  }
  if (report_hook_) report_hook_();
  return snapshot->Report(limit, now_ms);
}

HeavyHittersReport HotKeyTracker::ViewReport(size_t global_view, size_t limit, int64_t now_ms,
                                             bool whole_run) const {
  return Report(ViewSlot(global_view, whole_run), limit, now_ms);
}

HeavyHittersReport HotKeyTracker::TableReport(size_t table, size_t limit, int64_t now_ms,
                                              bool whole_run) const {
  return Report(TableSlot(table, whole_run), limit, now_ms);
}

}  // namespace cdcview
