// StoredItem: what the items database (items/<table>) keeps per primary key: the item's last
// image, the sequence number of the change that produced it, and a tombstone flag for a
// removed item (kept for its sequence number).
//
// Value layout: a flag byte (1: tombstone), the varint-length-prefixed sequence number, then
// the EncodeItem bytes of the image (none for a tombstone).
//
// Thread-safety: pure functions. Ownership: a decoded StoredItem's image points into the value
// it was decoded from (LMDB's map: valid only inside the transaction that read it).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace cdcview {

struct StoredItem {
  bool tombstone = false;       // the item was removed; kept for its sequence number
  std::string sequence_number;  // of the change that produced this state; may be empty
  std::string_view image;       // EncodeItem bytes (empty for a tombstone); points into the value
};
std::string EncodeStoredItem(bool tombstone, std::string_view sequence_number,
                             std::string_view image);
// DATA_LOSS if the value is not a StoredItem.
absl::StatusOr<StoredItem> DecodeStoredItem(std::string_view value);

}  // namespace cdcview
