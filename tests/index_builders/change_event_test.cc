#include "index_builders/change_event.h"

#include "gtest/gtest.h"

namespace cdcview {
namespace {

TEST(ChangeEventTest, KindNames) {
  EXPECT_EQ(ChangeKindName(ChangeEvent::Kind::kInsert), "INSERT");
  EXPECT_EQ(ChangeKindName(ChangeEvent::Kind::kModify), "MODIFY");
  EXPECT_EQ(ChangeKindName(ChangeEvent::Kind::kRemove), "REMOVE");
}

TEST(ChangeEventTest, SequenceNumbersCompareNumerically) {
  EXPECT_EQ(CompareSequenceNumbers("1", "1"), 0);
  EXPECT_LT(CompareSequenceNumbers("9", "10"), 0);
  EXPECT_GT(CompareSequenceNumbers("10", "9"), 0);
  EXPECT_EQ(CompareSequenceNumbers("0001", "1"), 0);
  EXPECT_LT(CompareSequenceNumbers("0009", "10"), 0);
  EXPECT_EQ(CompareSequenceNumbers("", "0"), 0);
  EXPECT_LT(CompareSequenceNumbers("", "1"), 0);
  // DynamoDB Streams sequence numbers: 21+ digits, beyond 64 bits.
  EXPECT_LT(CompareSequenceNumbers("111111111111111111111111111", "111111111111111111111111112"), 0);
  EXPECT_GT(CompareSequenceNumbers("400000000000000000000000000001", "39999999999999999999999999999"), 0);
  EXPECT_LT(CompareSequenceNumbers("99999999999999999999", "100000000000000000000"), 0);
}

}  // namespace
}  // namespace cdcview
