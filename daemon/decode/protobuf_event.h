// Protobuf change events: one Kafka message value holding a serialized cdcview.v1.ChangeEvent
// (proto/cdcview/v1/change_event.proto) decoded into a ChangeEvent.
//
// Errors are INVALID_ARGUMENT:
//   malformed protobuf: <n> bytes are not a cdcview.v1.ChangeEvent   (IsMalformedProtobuf)
//   kind: expected INSERT, MODIFY or REMOVE, got KIND_UNSPECIFIED
//   keys: is required
//   keys.PK: key attributes must be S, N or B, got BOOL
//   new_image: is required for INSERT
//   new_image.total: number "abc" is not a valid number
//   sequence_number: expected decimal digits, got "12a"
//   sequence_number: expected at most 40 decimal digits, got 1000
// Pure functions; thread-safe. Decoded events own their data.
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "index_builders/change_event.h"

namespace cdcview {

absl::StatusOr<ChangeEvent> DecodeProtobufEvent(std::string_view bytes);

// True if `status` came from DecodeProtobufEvent because the bytes do not parse at all (the
// "bad_protobuf" rejection reason), as opposed to a message that parses but is not valid.
bool IsMalformedProtobuf(const absl::Status& status);

}  // namespace cdcview
