#include "daemon/sources/record_queue.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace cdcview {
namespace {

// Moves up to `max` records from the front of `from` to the back of `out`, counting them
// out of `queued`.
size_t MoveFront(std::deque<SourceRecord>* from, size_t max, std::vector<SourceRecord>* out,
                 std::vector<size_t>* queued) {
  size_t n = std::min(max, from->size());
  for (size_t i = 0; i < n; ++i) {
    --(*queued)[from->front().source];
    out->push_back(std::move(from->front()));
    from->pop_front();
  }
  return n;
}

}  // namespace

void RecordQueue::CountIn(const SourceRecord& record) {
  if (record.source >= queued_.size()) queued_.resize(record.source + 1, 0);
  ++queued_[record.source];
}

// Before any wait for room: a full queue is cdcviewd's own delay, not the source's.
void RecordQueue::StampReceived(SourceRecord* record) {
  if (record->received_ms == 0) record->received_ms = UnixNowMs();
}

size_t RecordQueue::Queued(uint32_t source) const {
  absl::MutexLock lock(&mu_);
  return source < queued_.size() ? queued_[source] : 0;
}

bool RecordQueue::Push(SourceRecord record) {
  StampReceived(&record);
  absl::MutexLock lock(&mu_);
  // A capacity of 0 would block forever; it behaves as 1.
  const size_t capacity = std::max<size_t>(capacity_, 1);
  while (!closed_ && records_.size() >= capacity) not_full_.Wait(&mu_);
  if (closed_) return false;
  CountIn(record);
  records_.push_back(std::move(record));
  if (records_.size() >= wake_at_) not_empty_.Signal();
  return true;
}

RecordQueue::PushResult RecordQueue::PushFor(SourceRecord* record,
                                             std::chrono::milliseconds wait) {
  StampReceived(record);  // kept across PushWithin's retries: the first try's time
  const absl::Time deadline = absl::Now() + absl::FromChrono(wait);
  absl::MutexLock lock(&mu_);
  const size_t capacity = std::max<size_t>(capacity_, 1);
  while (!closed_ && records_.size() >= capacity) {
    if (not_full_.WaitWithDeadline(&mu_, deadline)) break;  // timed out
  }
  if (closed_) return PushResult::kClosed;
  if (records_.size() >= capacity) return PushResult::kFull;
  CountIn(*record);
  records_.push_back(std::move(*record));
  if (records_.size() >= wake_at_) not_empty_.Signal();
  return PushResult::kPushed;
}

bool RecordQueue::TryPush(SourceRecord&& record) {
  absl::MutexLock lock(&mu_);
  if (closed_ || records_.size() >= std::max<size_t>(capacity_, 1)) return false;
  StampReceived(&record);
  CountIn(record);
  records_.push_back(std::move(record));
  if (records_.size() >= wake_at_) not_empty_.Signal();
  return true;
}

bool RecordQueue::PopBatch(size_t max, std::chrono::microseconds linger,
                           std::vector<SourceRecord>* out, size_t backlog_max) {
  if (max == 0) return true;
  absl::MutexLock lock(&mu_);
  while (!closed_ && records_.empty()) not_empty_.Wait(&mu_);
  if (records_.empty()) return false;  // closed and drained
  // A writer behind its sources takes the backlog in larger transactions, so it pays the
  // per-commit sync less often per event; without a backlog, batches stay small for latency.
  if (records_.size() > max && backlog_max > max) max = backlog_max;
  size_t taken = MoveFront(&records_, max, out, &queued_);
  not_full_.SignalAll();
  if (taken < max && linger.count() > 0) {
    // Waiting a little for a fuller batch makes each write transaction carry more events.
    // Producers wake this thread once the rest of the batch is there (or the queue is as full
    // as it gets), not once per record: on a busy machine those wake-ups cost a context
    // switch each.
    const size_t capacity = std::max<size_t>(capacity_, 1);
    const absl::Time deadline = absl::Now() + absl::FromChrono(linger);
    while (taken < max && !closed_) {
      wake_at_ = std::min(max - taken, capacity);
      while (!closed_ && records_.size() < wake_at_) {
        if (not_empty_.WaitWithDeadline(&mu_, deadline)) break;  // timed out
      }
      const bool filled = closed_ || records_.size() >= wake_at_;
      wake_at_ = 1;
      if (!filled) break;  // linger is over
      taken += MoveFront(&records_, max - taken, out, &queued_);
      not_full_.SignalAll();
    }
    taken += MoveFront(&records_, max - taken, out, &queued_);  // what arrived meanwhile, or with Close
    not_full_.SignalAll();
  }
  return true;
}

void RecordQueue::PopBatchFor(size_t max, std::chrono::milliseconds wait,
                              std::vector<SourceRecord>* out) {
  if (max == 0) return;
  const absl::Time deadline = absl::Now() + absl::FromChrono(wait);
  absl::MutexLock lock(&mu_);
  while (!closed_ && records_.empty()) {
    if (not_empty_.WaitWithDeadline(&mu_, deadline)) break;  // timed out
  }
  if (MoveFront(&records_, max, out, &queued_) > 0) not_full_.SignalAll();
}

void RecordQueue::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  not_empty_.SignalAll();
  not_full_.SignalAll();
}

size_t RecordQueue::size() const {
  absl::MutexLock lock(&mu_);
  return records_.size();
}

bool RecordQueue::PushUnless(SourceRecord&& record, const std::function<bool()>& stopping) {
  return PushWithin(&record, std::chrono::milliseconds::max(), stopping) == PushResult::kPushed;
}

RecordQueue::PushResult RecordQueue::PushWithin(SourceRecord* record,
                                                std::chrono::milliseconds limit,
                                                const std::function<bool()>& stopping) {
  constexpr std::chrono::milliseconds kSlice(100);
  using Clock = std::chrono::steady_clock;
  // Measured on the steady clock, not by the slices asked for: a slice may end a little early.
  const bool forever = limit == std::chrono::milliseconds::max();
  const Clock::time_point deadline = forever ? Clock::time_point::max() : Clock::now() + limit;
  for (;;) {
    std::chrono::milliseconds slice = kSlice;
    if (!forever) {
      const auto left = deadline - Clock::now();
      if (left <= Clock::duration::zero()) return PushResult::kFull;
      slice = std::min(slice, std::chrono::ceil<std::chrono::milliseconds>(left));
    }
    const PushResult result = PushFor(record, slice);
    if (result != PushResult::kFull) return result;
    if (stopping()) return PushResult::kClosed;
  }
}

}  // namespace cdcview
