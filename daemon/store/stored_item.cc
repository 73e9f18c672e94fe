#include "daemon/store/stored_item.h"

#include "index_builders/coding.h"

namespace cdcview {

std::string EncodeStoredItem(bool tombstone, std::string_view sequence_number,
                             std::string_view image) {
  std::string out;
  out.reserve(2 + sequence_number.size() + image.size());
  out.push_back(tombstone ? 1 : 0);
  PutLengthPrefixed(sequence_number, &out);
  out.append(image);
  return out;
}

absl::StatusOr<StoredItem> DecodeStoredItem(std::string_view value) {
  if (value.empty() || static_cast<unsigned char>(value[0]) > 1) {
    return absl::DataLossError("stored item has a bad flag byte");
  }
  StoredItem item;
  item.tombstone = value[0] == 1;
  value.remove_prefix(1);
  std::string_view sequence_number;
  if (!GetLengthPrefixed(&value, &sequence_number)) {
    return absl::DataLossError("stored item has a truncated sequence number");
  }
  item.sequence_number.assign(sequence_number);
  item.image = value;
  return item;
}

}  // namespace cdcview
