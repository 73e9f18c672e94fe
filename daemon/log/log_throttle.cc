#include "daemon/log/log_throttle.h"

#include <chrono>

namespace cdcview {

LogThrottle::LogThrottle(uint32_t burst, int64_t interval_ms, std::function<int64_t()> now_ms)
    : burst_(burst), interval_ms_(interval_ms), now_ms_(std::move(now_ms)) {
  if (!now_ms_) {
    now_ms_ = [] {
      return std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::steady_clock::now().time_since_epoch())
          .count();
    };
  }
}

bool LogThrottle::Admit(const std::string& key) {
  const int64_t now = now_ms_();
  absl::MutexLock lock(&mu_);
  auto [it, added] = windows_.try_emplace(key);
  Window& w = it->second;
  if (added) w.start_ms = now;
  // A new interval starts only once the previous one's count was taken (TakeSummaries), so
  // no suppressed event goes unreported; an interval with none simply restarts.
  if (now - w.start_ms >= interval_ms_ && w.suppressed == 0) {
    w.start_ms = now;
    w.admitted = 0;
  }
  if (w.admitted < burst_) {
    ++w.admitted;
    return true;
  }
  ++w.suppressed;
  return false;
}

std::vector<LogThrottle::Summary> LogThrottle::TakeSummaries() {
  const int64_t now = now_ms_();
  std::vector<Summary> due;
  absl::MutexLock lock(&mu_);
  for (auto& [key, w] : windows_) {
    if (now - w.start_ms < interval_ms_ || w.suppressed == 0) continue;
    due.push_back({key, w.suppressed, now - w.start_ms});
    w.start_ms = now;
    w.admitted = 0;
    w.suppressed = 0;
  }
  return due;
}

}  // namespace cdcview
