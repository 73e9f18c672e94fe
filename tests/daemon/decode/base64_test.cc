#include "daemon/decode/base64.h"

#include <string>

#include "gtest/gtest.h"

namespace cdcview {
namespace {

TEST(Base64Test, EncodesRfc4648Vectors) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("foob"), "Zm9vYg==");
  EXPECT_EQ(Base64Encode("fooba"), "Zm9vYmE=");
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(Base64Encode(std::string("\x00\x01\x02\xff", 4)), "AAEC/w==");
}

TEST(Base64Test, DecodesPaddedAndUnpadded) {
  std::string out;
  ASSERT_TRUE(Base64Decode("Zm9vYmE=", &out));
  EXPECT_EQ(out, "fooba");
  ASSERT_TRUE(Base64Decode("Zm9vYmE", &out));
  EXPECT_EQ(out, "fooba");
  ASSERT_TRUE(Base64Decode("Zg==", &out));
  EXPECT_EQ(out, "f");
  ASSERT_TRUE(Base64Decode("", &out));
  EXPECT_EQ(out, "");
  ASSERT_TRUE(Base64Decode("AAEC/w==", &out));
  EXPECT_EQ(out, std::string("\x00\x01\x02\xff", 4));
}

TEST(Base64Test, RoundTripsEveryByte) {
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  for (size_t len = 0; len <= all.size(); len += 37) {
    std::string out;
    ASSERT_TRUE(Base64Decode(Base64Encode(all.substr(0, len)), &out)) << len;
    EXPECT_EQ(out, all.substr(0, len));
  }
}

TEST(Base64Test, RejectsMalformedInput) {
  std::string out;
  EXPECT_FALSE(Base64Decode("Z", &out));         // 6 bits
  EXPECT_FALSE(Base64Decode("Zm9vY", &out));     // 4n+1 characters
  EXPECT_FALSE(Base64Decode("Zg=", &out));       // padded but not a whole group
  EXPECT_FALSE(Base64Decode("Z===", &out));      // three '='
  EXPECT_FALSE(Base64Decode("Zg==Zg==", &out));  // '=' inside
  EXPECT_FALSE(Base64Decode("Zm9v!A==", &out));  // outside the alphabet
  EXPECT_FALSE(Base64Decode("Zm9-", &out));      // URL-safe alphabet is not DynamoDB's
}

}  // namespace
}  // namespace cdcview
