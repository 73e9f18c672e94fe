// RecordQueue: the bounded hand-over between sources (producers) and the writer (consumer).
//
// Thread-safe: any number of producers; one consumer (the writer) pops at a time. Push
// blocks while the queue is full, so a fast source is slowed to the writer's pace instead of
// growing memory (back-pressure). Close wakes everyone up.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "daemon/sources/change_source.h"

namespace cdcview {

class RecordQueue {
 public:
  explicit RecordQueue(size_t capacity) : capacity_(capacity) {}

  // Every push sets the record's received_ms to now unless its source set it, before waiting
  // for room: the wait for a full queue is cdcviewd's delay (cdcview_apply_delay_seconds).

  // Blocks while full. False if the queue was closed (the record is dropped: shutting down,
  // and the source will resume from the stored position next time).
  bool Push(SourceRecord record);
  // Never blocks: false (leaving `record` untouched) if the queue is full or closed. For
  // sources that must keep serving their client while they wait (Kafka pauses its
  // partitions instead of blocking its poll loop).
  bool TryPush(SourceRecord&& record);

  // Like Push, but waits at most `wait` for room, so a producer can notice it is being
  // stopped even when nobody drains the queue. Moves from `*record` only when it returns
  // kPushed (its received_ms is set either way, so a retry keeps the first try's time).
  enum class PushResult { kPushed, kClosed, kFull };
  PushResult PushFor(SourceRecord* record, std::chrono::milliseconds wait);

  // Blocks while full like Push, but gives up (false) once `stopping()` says so, checked every
  // 100 ms: a source's Stop stays prompt even when nobody drains the queue any more.
  bool PushUnless(SourceRecord&& record, const std::function<bool()>& stopping);
  // PushUnless that also gives up after `limit` (kFull); kClosed if the queue closed or
  // `stopping()` said so. `*record` is moved only if pushed.
  PushResult PushWithin(SourceRecord* record, std::chrono::milliseconds limit,
                        const std::function<bool()>& stopping);

  // Moves up to `max` records into `out`: waits until at least one is there, then up to
  // `linger` for more to fill the batch. If more than `max` records wait when it starts (the
  // consumer is behind), the batch may take up to `backlog_max` instead. Returns false once
  // closed and empty.
  bool PopBatch(size_t max, std::chrono::microseconds linger, std::vector<SourceRecord>* out,
                size_t backlog_max = 0);

  // Like PopBatch but returns after at most `wait` with whatever is there (maybe nothing).
  void PopBatchFor(size_t max, std::chrono::milliseconds wait, std::vector<SourceRecord>* out);

  void Close();
  size_t size() const;
  // Records of source `source` (SourceRecord::source) pushed and not yet popped: a source
  // that says it is caught up is not, for readers, while some of it waits here.
  size_t Queued(uint32_t source) const;

 private:
  const size_t capacity_;
  mutable absl::Mutex mu_;
  absl::CondVar not_empty_;
  absl::CondVar not_full_;
  std::deque<SourceRecord> records_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> queued_ ABSL_GUARDED_BY(mu_);  // per source
  void CountIn(const SourceRecord& record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets received_ms to now unless the source set it.
  static void StampReceived(SourceRecord* record);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // Producers wake the consumer once this many records wait: 1, or the rest of a lingering
  // batch.
  size_t wake_at_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace cdcview
