// ChangeSource: where change events come from (file, Kafka, DynamoDB Streams).
//
// A source reads on its own thread(s) and hands SourceRecords, in source order per
// partition, to a RecordQueue. It never touches the store: the writer applies records and
// stores each partition's next position in the same LMDB transaction, and a restarted
// source resumes from those positions. Implementations are thread-safe for Start/Stop/Health.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "daemon/state/source_health.h"
#include "index_builders/change_event.h"

namespace cdcview {

class RecordQueue;

// How long ChangeSource::Stop takes at most (plus one poll interval): Kafka waits this long to
// leave its consumer group, DynamoDB cancels a request in flight within about a second, a
// file source stops at once. Part of the daemon's drain time (Application::kMaxDrainTime).
inline constexpr std::chrono::seconds kSourceStopTimeout{5};

// The wall clock in Unix milliseconds: the scale of creation times and receive times.
inline int64_t UnixNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// One record read from a source: an event to apply, or a rejection to dead-letter.
struct SourceRecord {
  uint32_t source = 0;            // index of the source in Config::sources
  std::string partition;          // "" for a file, "topic/3" for Kafka, a shard id
  std::string next_position;      // where to resume once this record is applied (opaque)
  std::optional<ChangeEvent> event;  // absent when the record was rejected while decoding
  absl::Status rejection;         // why it was rejected (OK when `event` is set)
  std::string reason;             // metric label for a rejection: "malformed_json", "bad_record", ...
  std::string locator;            // where it came from, for messages: "line 17", "orders/3@1234"
  std::string raw;                // the record as read, for the dead-letter sink
  // The record's size when it was too large to keep: `raw` then holds only its first
  // kOversizedRecordHeadBytes (RecordHead). 0 when `raw` is the whole record.
  uint64_t raw_bytes = 0;
  // Kafka: the message's offset (-1 for other sources). The writer skips a record whose
  // offset is below its partition's stored next offset: a partition revoked and assigned
  // again is read again from the stored offset while older reads may still be queued.
  int64_t offset = -1;
  std::string raw_key;            // Kafka: the message key as read, for the dead-letter sink
  // A marker, not something read from the stream (a shard's end, a scan segment's progress):
  // only the position advances and no event is counted.
  bool position_only = false;
  // When cdcviewd received it (Unix ms): set by a source as it reads (Kafka), else by
  // RecordQueue when it is queued. Splits the replication lag into the part before cdcviewd
  // (cdcview_arrival_lag_seconds) and cdcviewd's own (cdcview_apply_delay_seconds).
  int64_t received_ms = 0;
};

// How much of a record too large to apply is kept for its dead letter: enough to tell what
// it is and where it came from, without holding or writing megabytes per rejection.
inline constexpr size_t kOversizedRecordHeadBytes = 4096;

// The first kOversizedRecordHeadBytes of `raw`, cut before a UTF-8 continuation byte so that
// a UTF-8 record stays UTF-8 (and readable) in its dead letter.
inline std::string RecordHead(std::string_view raw) {
  size_t n = std::min(raw.size(), kOversizedRecordHeadBytes);
  if (n < raw.size()) {
    while (n > 0 && (static_cast<unsigned char>(raw[n]) & 0xC0) == 0x80) --n;
  }
  return std::string(raw.substr(0, n));
}

// The writer's current stored positions of one source (partition -> next_position). Must be
// callable from the source's threads at any time.
using PositionLookup = std::function<std::map<std::string, std::string>()>;

// Where rejected records go. Write is called by the writer thread before the batch that
// contains the rejection commits (so a crash can repeat a dead letter, never lose one).
class DeadLetterSink {
 public:
  virtual ~DeadLetterSink() = default;
  // `why` names what is wrong. An error means the dead letter could not be stored; the
  // writer then stops advancing this source (nothing is dropped silently).
  virtual absl::Status Write(const SourceRecord& record, const absl::Status& why) = 0;
};

class ChangeSource {
 public:
  virtual ~ChangeSource() = default;

  // Starts reading, resuming each partition from `positions` (partition -> next_position as
  // stored by the writer; empty for a fresh store), and pushing records to `queue`.
  virtual absl::Status Start(const std::map<std::string, std::string>& positions,
                             RecordQueue* queue) = 0;
  // Stops reading and joins the source's threads, within kSourceStopTimeout. Idempotent.
  virtual void Stop() = 0;
  virtual SourceHealth Health() const = 0;
  virtual DeadLetterSink* dead_letters() = 0;
  virtual std::string_view kind() const = 0;  // "file", "kafka", "dynamodb"
  // Sources that assign partitions after Start (Kafka: each metadata read may find new ones)
  // ask `lookup` for the positions at that moment instead of using Start's snapshot. Call before Start; the
  // default ignores it.
  virtual void SetPositionLookup(PositionLookup lookup) { (void)lookup; }
};

}  // namespace cdcview
