// LogThrottle: keeps a warning that can repeat per event (a rejected record, an item left out
// of a rebuild) to a few lines per interval, so the log never carries a line per event.
//
// Per key (a source or view name), the first `burst` events of each interval are admitted (the
// caller logs them in full); the rest are only counted, and TakeSummaries returns the count
// once the interval has ended, for one summary line. Thread-safe: the writer admits, another
// thread (the Application's once-a-second ticker) takes the summaries. The clock is injected.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace cdcview {

class LogThrottle {
 public:
  struct Summary {
    std::string key;
    uint64_t suppressed = 0;  // events not logged in the interval
    int64_t interval_ms = 0;  // how long the interval was
  };

  // `now_ms` defaults to the steady clock.
  LogThrottle(uint32_t burst, int64_t interval_ms, std::function<int64_t()> now_ms = nullptr);

  // True when this event of `key` may be logged in full; false when it is only counted.
  bool Admit(const std::string& key);
  // The keys whose interval has ended with events counted but not logged, with their counts
  // (which start again from 0). In key order.
  std::vector<Summary> TakeSummaries();

 private:
  struct Window {
    int64_t start_ms = 0;
    uint32_t admitted = 0;
    uint64_t suppressed = 0;
  };
  const uint32_t burst_;
  const int64_t interval_ms_;
  std::function<int64_t()> now_ms_;
  absl::Mutex mu_;
  std::map<std::string, Window> windows_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cdcview
