#include "daemon/store/stored_item.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"

namespace cdcview {
namespace {

TEST(StoredItemTest, RoundTrips) {
  const std::string live = EncodeStoredItem(false, "000123", std::string("img\0bytes", 9));
  absl::StatusOr<StoredItem> item = DecodeStoredItem(live);
  ASSERT_TRUE(item.ok()) << item.status();
  EXPECT_FALSE(item->tombstone);
  EXPECT_EQ(item->sequence_number, "000123");
  EXPECT_EQ(item->image, std::string_view("img\0bytes", 9));

  const std::string tomb = EncodeStoredItem(true, "9", "");
  EXPECT_EQ(tomb, std::string("\x01\x01" "9", 3));
  item = DecodeStoredItem(tomb);
  ASSERT_TRUE(item.ok()) << item.status();
  EXPECT_TRUE(item->tombstone);
  EXPECT_EQ(item->sequence_number, "9");
  EXPECT_EQ(item->image, "");

  const std::string no_sequence = EncodeStoredItem(false, "", "x");
  EXPECT_EQ(no_sequence, std::string("\x00\x00x", 3));
  item = DecodeStoredItem(no_sequence);
  ASSERT_TRUE(item.ok()) << item.status();
  EXPECT_EQ(item->sequence_number, "");
  EXPECT_EQ(item->image, "x");

  // A sequence number longer than 127 bytes takes a two-byte varint.
  const std::string long_seq(200, '7');
  const std::string long_item = EncodeStoredItem(false, long_seq, "i");  // the item points into it
  item = DecodeStoredItem(long_item);
  ASSERT_TRUE(item.ok()) << item.status();
  EXPECT_EQ(item->sequence_number, long_seq);
  EXPECT_EQ(item->image, "i");
}

TEST(StoredItemTest, ATombstoneCarriesItsTimeAndOneWithoutDecodesAsUntimed) {
  const std::string timed = EncodeTombstone("9", 0x0102030405060708);
  EXPECT_EQ(timed, std::string("\x01\x01" "9" "\x01\x02\x03\x04\x05\x06\x07\x08", 11));
  absl::StatusOr<StoredItem> item = DecodeStoredItem(timed);
  ASSERT_TRUE(item.ok()) << item.status();
  EXPECT_TRUE(item->tombstone);
  EXPECT_EQ(item->sequence_number, "9");
  EXPECT_EQ(item->removed_ms, 0x0102030405060708);
  EXPECT_EQ(item->image, "");
  EXPECT_EQ(DecodeStoredItem(EncodeTombstone("", 0))->removed_ms, 0);

  // What a cdcviewd without tombstone times wrote: the flag and the sequence number only.
  const std::string untimed("\x01\x03" "200", 5);  // the item points into it
  item = DecodeStoredItem(untimed);
  ASSERT_TRUE(item.ok()) << item.status();
  EXPECT_TRUE(item->tombstone);
  EXPECT_EQ(item->sequence_number, "200");
  EXPECT_EQ(item->removed_ms, StoredItem::kNoTime);

  // A live item has no time, whatever its image's length.
  const std::string live_item = EncodeStoredItem(false, "1", "12345678");
  item = DecodeStoredItem(live_item);
  ASSERT_TRUE(item.ok()) << item.status();
  EXPECT_EQ(item->removed_ms, StoredItem::kNoTime);
  EXPECT_EQ(item->image, "12345678");
}

TEST(StoredItemTest, TheTombstoneIndexIsInTimeOrderAndKeepsLongKeysUnique) {
  const std::string a = TombstoneIndexKey(1000, "pk-b", 511);
  EXPECT_EQ(a, std::string("\0\0\0\0\0\0\x03\xe8" "pk-b", 12));
  EXPECT_EQ(TombstoneIndexTime(a), 1000);
  EXPECT_LT(a, TombstoneIndexKey(1001, "pk-a", 511));  // time first, then the key
  EXPECT_LT(TombstoneIndexKey(1000, "pk-a", 511), a);
  EXPECT_EQ(TombstoneIndexTime("short"), -1);

  // Keys that share their first bytes beyond the limit differ by their hash.
  const std::string long_a = std::string(600, 'x') + "a";
  const std::string long_b = std::string(600, 'x') + "b";
  const std::string ka = TombstoneIndexKey(7, long_a, 511);
  const std::string kb = TombstoneIndexKey(7, long_b, 511);
  EXPECT_EQ(ka.size(), 511u);
  EXPECT_EQ(kb.size(), 511u);
  EXPECT_NE(ka, kb);
  EXPECT_EQ(ka.substr(0, 503), kb.substr(0, 503));
  EXPECT_EQ(TombstoneIndexTime(ka), 7);
  EXPECT_EQ(TombstoneIndexKey(7, std::string(503, 'y'), 511).size(), 511u);  // fits as it is
  EXPECT_EQ(TombstoneIndexKey(7, std::string(503, 'y'), 511).substr(8), std::string(503, 'y'));
}

// A value records the partition whose event wrote it: after the flag byte, which says so, so
// a value written without one (schema 1) reads as before, with kNoPartition.
TEST(StoredItemTest, AValueCarriesItsPartitionIdAndOneWithoutReadsAsNone) {
  const std::string live = EncodeStoredItem(false, "12", "img", 300);
  EXPECT_EQ(live, std::string("\x02\xac\x02\x02" "12" "img", 9));
  absl::StatusOr<StoredItem> item = DecodeStoredItem(live);
  ASSERT_TRUE(item.ok()) << item.status();
  EXPECT_FALSE(item->tombstone);
  EXPECT_EQ(item->partition, 300u);
  EXPECT_EQ(item->sequence_number, "12");
  EXPECT_EQ(item->image, "img");

  item = DecodeStoredItem(EncodeTombstone("9", 5, UINT32_MAX));
  ASSERT_TRUE(item.ok()) << item.status();
  EXPECT_TRUE(item->tombstone);
  EXPECT_EQ(item->partition, UINT32_MAX);
  EXPECT_EQ(item->sequence_number, "9");
  EXPECT_EQ(item->removed_ms, 5);

  const std::string before = EncodeStoredItem(false, "12", "img");
  EXPECT_EQ(before, std::string("\x00\x02" "12" "img", 7));
  item = DecodeStoredItem(before);
  ASSERT_TRUE(item.ok()) << item.status();
  EXPECT_EQ(item->partition, StoredItem::kNoPartition);
  EXPECT_EQ(item->image, "img");
}

TEST(StoredItemTest, GarbageIsDataLoss) {
  struct Case {
    std::string value;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"", "stored item has a bad flag byte"},
      {std::string("\x04\x00", 2), "stored item has a bad flag byte"},
      {std::string("\x02\x00\x00", 3), "stored item has a bad partition id"},
      {"\x02", "stored item has a bad partition id"},
      {std::string("\x03\x80", 2), "stored item has a bad partition id"},
      {std::string("\x02\x80\x80\x80\x80\x10\x00", 7), "stored item has a bad partition id"},
      {std::string("\x02\x07", 2), "stored item has a truncated sequence number"},
      {"\xff", "stored item has a bad flag byte"},
      {std::string("\x00", 1), "stored item has a truncated sequence number"},
      {std::string("\x00\x05" "abc", 5), "stored item has a truncated sequence number"},
      {std::string("\x01\x80", 2), "stored item has a truncated sequence number"},
      {std::string("\x01\x00" "1234567", 9), "stored tombstone has a bad time"},
      {std::string("\x01\x00" "123456789", 11), "stored tombstone has a bad time"},
      {std::string("\x01\x00" "\x80\0\0\0\0\0\0\0", 10), "stored tombstone has a bad time"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<StoredItem> item = DecodeStoredItem(c.value);
    ASSERT_FALSE(item.ok()) << testing::PrintToString(c.value);
    EXPECT_EQ(item.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(std::string(item.status().message()), c.message) << testing::PrintToString(c.value);
  }
}

}  // namespace
}  // namespace cdcview
