#include "daemon/store/meta_keys.h"

#include "gtest/gtest.h"

namespace cdcview {
namespace {

TEST(MetaKeysTest, Layout) {
  EXPECT_EQ(PositionKey("sample", "orders/3"), "pos/sample/orders/3");
  EXPECT_EQ(PositionKey("sample", ""), "pos/sample/");
  EXPECT_TRUE(PositionKey("a", "b").starts_with(kPositionPrefix));
  EXPECT_EQ(ViewMetaKey("GSI1", "fingerprint"), "view/GSI1/fingerprint");
  EXPECT_EQ(ViewMetaKey("GSI1", "state"), "view/GSI1/state");
}

}  // namespace
}  // namespace cdcview
