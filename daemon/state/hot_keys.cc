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

HotKeyTracker::HotKeyTracker(const Catalog& catalog) {
  for (size_t i = 0; i < catalog.views().size(); ++i) {
    views_.emplace_back(kCapacity, kWindowMs);
    views_run_.emplace_back(kCapacity, kRunWindowMs);
  }
  for (size_t i = 0; i < catalog.config().tables.size(); ++i) {
    tables_.emplace_back(kCapacity, kWindowMs);
    tables_run_.emplace_back(kCapacity, kRunWindowMs);
  }
}

void HotKeyTracker::RecordBatch(const std::vector<IndexMutation>& mutations,
                                std::span<const std::pair<size_t, std::string>> table_keys,
                                int64_t now_ms) {
  absl::MutexLock lock(&mu_);
  for (const IndexMutation& m : mutations) {
    const size_t n = FirstKeyComponentSize(m.key);
    if (n == 0) continue;
    views_[m.view].Add(std::string_view(m.key).substr(0, n), 1, now_ms);
    views_run_[m.view].Add(std::string_view(m.key).substr(0, n), 1, now_ms);
  }
  for (const auto& [table, key] : table_keys) {
    tables_[table].Add(key, 1, now_ms);
    tables_run_[table].Add(key, 1, now_ms);
  }
}

HeavyHittersReport HotKeyTracker::ViewReport(size_t global_view, size_t limit, int64_t now_ms,
                                             bool whole_run) const {
  absl::MutexLock lock(&mu_);
  return (whole_run ? views_run_ : views_)[global_view].Report(limit, now_ms);
}

HeavyHittersReport HotKeyTracker::TableReport(size_t table, size_t limit, int64_t now_ms,
                                              bool whole_run) const {
  absl::MutexLock lock(&mu_);
  return (whole_run ? tables_run_ : tables_)[table].Report(limit, now_ms);
}

}  // namespace cdcview
