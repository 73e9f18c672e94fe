// Debezium JSON: decoding one Kafka message (key and value) in Debezium's change-event
// envelope into a ChangeEvent.
//
// The value is the envelope {"before": {...}|null, "after": {...}|null, "op": "c"|"u"|"d"|"r",
// "source": {..., "ts_ms": n}, "ts_ms": n}, bare or inside the JsonConverter's schema wrapper
// {"schema": {...}, "payload": <envelope>}. `r` (a snapshot read) is an INSERT, `c` an
// INSERT, `u` a MODIFY, `d` a REMOVE. A tombstone (Debezium's null value after a delete,
// used for log compaction: an empty value, or JSON null) decodes to "no event": nothing to
// apply, not an error.
//
// Column values map to attributes: string -> S, number -> N (its exact text, canonicalized
// like every DynamoDB number), true/false -> BOOL, null -> NULL, object -> M, array -> L.
//
// The table key: with key_attributes configured, those columns are taken from `after` (from
// `before` for a delete); without, the message key is the key, a flat JSON object of key
// columns ({"PK": "USER#1", "SK": "PROFILE"}), bare or schema-wrapped ({"schema": ...,
// "payload": {...}}). Key attributes must be strings or numbers.
//
// The creation time is source.ts_ms (when the database made the change), else ts_ms (when the
// connector saw it), else 0. Debezium carries no sequence number cdcview can compare across
// connectors, so events have none: order comes from the Kafka partition.
//
// Errors are INVALID_ARGUMENT "<path>: <problem>", paths as in the message:
//   malformed JSON: <simdjson's error text>          (also for a key that is not JSON)
//   payload.op: expected "c", "u", "d" or "r", got "t"
//   after: is required for op "c"
//   after.total: number "1e999" is not a valid number: ...
//   key.PK: key attributes must be strings or numbers, got boolean
//   key attribute "SK": is missing from after
//
// DebeziumJsonDecoder owns a simdjson parser it reuses; NOT thread-safe (one per thread).
// Decoded events own their data.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "index_builders/change_event.h"

namespace cdcview {

class DebeziumJsonDecoder {
 public:
  // `key_attributes`: the table's key columns to take from the row images; empty to take the
  // key from the message key.
  explicit DebeziumJsonDecoder(std::vector<std::string> key_attributes = {});
  ~DebeziumJsonDecoder();
  DebeziumJsonDecoder(const DebeziumJsonDecoder&) = delete;
  DebeziumJsonDecoder& operator=(const DebeziumJsonDecoder&) = delete;

  // `key` and `value` are the Kafka message's key and value (empty when null). Returns
  // std::nullopt for a tombstone.
  absl::StatusOr<std::optional<ChangeEvent>> Decode(std::string_view key, std::string_view value);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cdcview
