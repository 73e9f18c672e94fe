#include "daemon/store/stored_item.h"

#include <cstdint>

#include "index_builders/coding.h"

namespace cdcview {
namespace {

constexpr size_t kTimeBytes = 8;

}  // namespace

std::string EncodeStoredItem(bool tombstone, std::string_view sequence_number,
                             std::string_view image) {
  std::string out;
  out.reserve(2 + sequence_number.size() + image.size());
  out.push_back(tombstone ? 1 : 0);
  PutLengthPrefixed(sequence_number, &out);
  out.append(image);
  return out;
}

std::string EncodeTombstone(std::string_view sequence_number, int64_t removed_ms) {
  std::string out = EncodeStoredItem(true, sequence_number, {});
  PutBigEndian64(static_cast<uint64_t>(removed_ms), &out);
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
  if (!item.tombstone) {
    item.image = value;
    return item;
  }
  if (value.size() == kTimeBytes) {
    const uint64_t ms = DecodeBigEndian64(value.data());
    if (ms > uint64_t{INT64_MAX}) return absl::DataLossError("stored tombstone has a bad time");
    item.removed_ms = static_cast<int64_t>(ms);
  } else if (!value.empty()) {
    return absl::DataLossError("stored tombstone has a bad time");
  }
  return item;
}

std::string TombstoneIndexKey(int64_t removed_ms, std::string_view pk, size_t max_key_size) {
  std::string key;
  key.reserve(kTimeBytes + pk.size());
  PutBigEndian64(static_cast<uint64_t>(removed_ms), &key);
  if (kTimeBytes + pk.size() <= max_key_size) {
    key.append(pk);
    return key;
  }
  key.append(pk.substr(0, max_key_size - 2 * kTimeBytes));
  PutBigEndian64(Fnv1a64(pk), &key);
  return key;
}

int64_t TombstoneIndexTime(std::string_view key) {
  if (key.size() < kTimeBytes) return -1;
  return static_cast<int64_t>(DecodeBigEndian64(key.data()));
}

}  // namespace cdcview
