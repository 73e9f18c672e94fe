#include "daemon/store/stored_item.h"

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
  item = DecodeStoredItem(EncodeStoredItem(false, long_seq, "i"));
  ASSERT_TRUE(item.ok()) << item.status();
  EXPECT_EQ(item->sequence_number, long_seq);
  EXPECT_EQ(item->image, "i");
}

TEST(StoredItemTest, GarbageIsDataLoss) {
  struct Case {
    std::string value;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"", "stored item has a bad flag byte"},
      {std::string("\x02\x00", 2), "stored item has a bad flag byte"},
      {"\xff", "stored item has a bad flag byte"},
      {std::string("\x00", 1), "stored item has a truncated sequence number"},
      {std::string("\x00\x05" "abc", 5), "stored item has a truncated sequence number"},
      {std::string("\x01\x80", 2), "stored item has a truncated sequence number"},
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
