// Watch positions: bound to one view and its definition; anything else is INVALID_ARGUMENT
// saying what to do.
#include <string>

#include "daemon/server/watch.h"
#include "gtest/gtest.h"

namespace cdcview {
namespace {

TEST(WatchPositionTest, RoundTripsTheSequence) {
  for (uint64_t seq : {0ull, 1ull, 255ull, 1ull << 40}) {
    auto back = DecodeWatchPosition(EncodeWatchPosition("OpenOrders", "fp1", seq), "OpenOrders", "fp1");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, seq);
  }
}

TEST(WatchPositionTest, ForeignOrDamagedPositionsAreInvalidArguments) {
  const std::string token = EncodeWatchPosition("OpenOrders", "fp1", 42);
  EXPECT_EQ(DecodeWatchPosition(token, "GSI1", "fp1").status(),
            absl::InvalidArgumentError("from_position belongs to view OpenOrders, not GSI1; pass a "
                                       "position from a Watch of this view"));
  EXPECT_EQ(DecodeWatchPosition(token, "OpenOrders", "fp2").status(),
            absl::InvalidArgumentError(
                "from_position was issued for another definition of view OpenOrders (it was "
                "rebuilt since); watch again without from_position, with snapshot"));
  const absl::Status malformed = absl::InvalidArgumentError(
      "from_position is malformed; pass a WatchEvent.position unchanged, or watch again without "
      "from_position (with snapshot) to start over");
  std::string flipped = token;
  flipped[flipped.size() - 6] ^= 1;  // a sequence byte: the checksum no longer matches
  EXPECT_EQ(DecodeWatchPosition(flipped, "OpenOrders", "fp1").status(), malformed);
  EXPECT_EQ(DecodeWatchPosition("junk", "OpenOrders", "fp1").status(), malformed);
  EXPECT_EQ(DecodeWatchPosition(token.substr(1), "OpenOrders", "fp1").status(), malformed);
}

}  // namespace
}  // namespace cdcview
