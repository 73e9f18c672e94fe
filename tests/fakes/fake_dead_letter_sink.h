// FakeDeadLetterSink: a DeadLetterSink that keeps what it is given in memory, and can be
// told to fail, so tests see exactly which records were dead-lettered and why.
//
// Thread-safe (the writer calls Write; a test thread may inspect letters() meanwhile).
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "daemon/sources/change_source.h"

namespace cdcview {

class FakeDeadLetterSink : public DeadLetterSink {
 public:
  struct Letter {
    std::string locator;
    std::string raw;
    std::string partition;
    absl::Status why;
  };

  absl::Status Write(const SourceRecord& record, const absl::Status& why) override {
    if (auto delay = delay_.load(); delay.count() > 0) std::this_thread::sleep_for(delay);
    absl::MutexLock lock(&mu_);
    ++attempts_;
    if (!failure_.ok() && succeed_first_ == 0) return failure_;
    if (succeed_first_ > 0) --succeed_first_;
    letters_.push_back(Letter{record.locator, record.raw, record.partition, why});
    return absl::OkStatus();
  }

  // Every later Write returns `failure` (OK: succeed again) and records nothing.
  void FailWith(absl::Status failure) {
    absl::MutexLock lock(&mu_);
    failure_ = std::move(failure);
  }

  // The next `n` writes succeed, every later one returns `failure`.
  void FailAfter(int n, absl::Status failure) {
    absl::MutexLock lock(&mu_);
    succeed_first_ = n;
    failure_ = std::move(failure);
  }

  // Every later Write takes `delay` first: a commit that takes that long (the writer writes
  // a batch's dead letters just before it commits), for tests of what happens meanwhile.
  void DelayWrites(std::chrono::milliseconds delay) { delay_.store(delay); }

  std::vector<Letter> letters() const {
    absl::MutexLock lock(&mu_);
    return letters_;
  }
  // Write calls, including failed ones.
  int attempts() const {
    absl::MutexLock lock(&mu_);
    return attempts_;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  std::vector<Letter> letters_ ABSL_GUARDED_BY(mu_);
  int attempts_ ABSL_GUARDED_BY(mu_) = 0;
  int succeed_first_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<std::chrono::milliseconds> delay_{std::chrono::milliseconds(0)};
};

}  // namespace cdcview
