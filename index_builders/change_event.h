// ChangeEvent: one item change, whatever the source format (DynamoDB Streams record,
// Debezium envelope, cdcview.v1.ChangeEvent protobuf). A plain value type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "index_builders/attribute_value.h"

namespace cdcview {

struct ChangeEvent {
  enum class Kind { kInsert, kModify, kRemove };

  Kind kind = Kind::kInsert;
  Item keys;                      // the table's primary key attributes
  std::optional<Item> new_image;  // INSERT/MODIFY with NEW_IMAGE or NEW_AND_OLD_IMAGES
  std::optional<Item> old_image;  // informational: the applier diffs against its stored image
  // Ordering of this change among the item's changes (DynamoDB SequenceNumber: decimal
  // digits); empty when the source has none. An event whose sequence number is not greater
  // than the stored one for the item was already applied and is skipped.
  std::string sequence_number;
  int64_t creation_time_ms = 0;   // event creation time (ApproximateCreationDateTime); 0 if unknown
  bool ttl_delete = false;        // REMOVE made by DynamoDB's TTL process
};

std::string_view ChangeKindName(ChangeEvent::Kind kind);  // "INSERT", "MODIFY", "REMOVE"

// Compares two sequence numbers (decimal digit strings, no sign) numerically.
int CompareSequenceNumbers(std::string_view a, std::string_view b);

// The most digits a sequence number may have: DynamoDB's have 21 to 40. Decoders reject a
// longer one: it would order after every real change of its item, so that each of them
// would be skipped as already applied. Shorter ones are accepted (hand-written files, other
// producers).
inline constexpr size_t kMaxSequenceNumberDigits = 40;

}  // namespace cdcview
