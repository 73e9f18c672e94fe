#include "daemon/store/stored_item.h"

#include <cstdint>

#include "index_builders/coding.h"

namespace cdcview {
namespace {

constexpr size_t kTimeBytes = 8;
constexpr unsigned char kTombstoneFlag = 1;
constexpr unsigned char kPartitionFlag = 2;

}  // namespace

std::string EncodeStoredItem(bool tombstone, std::string_view sequence_number,
                             std::string_view image, uint32_t partition) {
  std::string out;
  out.reserve(7 + sequence_number.size() + image.size());
  const bool has_partition = partition != StoredItem::kNoPartition;
  out.push_back(static_cast<char>((tombstone ? kTombstoneFlag : 0) | (has_partition ? kPartitionFlag : 0)));
  if (has_partition) PutVarint(partition, &out);
  PutLengthPrefixed(sequence_number, &out);
  out.append(image);
  return out;
}

std::string EncodeTombstone(std::string_view sequence_number, int64_t removed_ms,
                            uint32_t partition) {
  std::string out = EncodeStoredItem(true, sequence_number, {}, partition);
  PutBigEndian64(static_cast<uint64_t>(removed_ms), &out);
  return out;
}

absl::StatusOr<StoredItem> DecodeStoredItem(std::string_view value) {
  const unsigned char flags = value.empty() ? 0xFF : static_cast<unsigned char>(value[0]);
  if ((flags & ~(kTombstoneFlag | kPartitionFlag)) != 0) {
    return absl::DataLossError("stored item has a bad flag byte");
  }
  StoredItem item;
  item.tombstone = (flags & kTombstoneFlag) != 0;
  value.remove_prefix(1);
  if ((flags & kPartitionFlag) != 0) {
    uint64_t partition = 0;
    if (!GetVarint(&value, &partition) || partition == StoredItem::kNoPartition ||
        partition > UINT32_MAX) {
      return absl::DataLossError("stored item has a bad partition id");
    }
    item.partition = static_cast<uint32_t>(partition);
  }
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
