// The byte coding every stored format and token is built from: exact bytes at the edges,
// refusal of truncated input, and the published FNV-1a test vectors.
#include "index_builders/coding.h"

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace cdcview {
namespace {

constexpr uint64_t kMax64 = std::numeric_limits<uint64_t>::max();

std::string Varint(uint64_t v) {
  std::string out;
  PutVarint(v, &out);
  return out;
}

TEST(CodingTest, VarintBytesAtTheEdges) {
  EXPECT_EQ(Varint(0), std::string(1, '\0'));
  EXPECT_EQ(Varint(1), "\x01");
  EXPECT_EQ(Varint(127), "\x7F");
  EXPECT_EQ(Varint(128), "\x80\x01");
  EXPECT_EQ(Varint(300), "\xAC\x02");
  EXPECT_EQ(Varint(16383), "\xFF\x7F");
  EXPECT_EQ(Varint(16384), std::string("\x80\x80\x01", 3));
  EXPECT_EQ(Varint(kMax64), std::string(9, '\xFF') + "\x01");
}

TEST(CodingTest, VarintRoundTrips) {
  const std::vector<uint64_t> values = {0,         1,          127,        128,        300,
                                        16383,     16384,      1u << 31,   1ull << 32, 1ull << 63,
                                        kMax64 - 1, kMax64};
  std::string all;
  for (uint64_t v : values) PutVarint(v, &all);
  std::string_view in = all;
  for (uint64_t want : values) {
    uint64_t got = 0;
    ASSERT_TRUE(GetVarint(&in, &got));
    EXPECT_EQ(got, want);
  }
  EXPECT_TRUE(in.empty());

  std::mt19937_64 rng(9);
  for (int i = 0; i < 10000; ++i) {
    const uint64_t v = rng() >> std::uniform_int_distribution<int>(0, 63)(rng);
    std::string s = Varint(v) + "tail";
    std::string_view sv = s;
    uint64_t got = 0;
    ASSERT_TRUE(GetVarint(&sv, &got));
    ASSERT_EQ(got, v);
    ASSERT_EQ(sv, "tail");
  }
}

TEST(CodingTest, TruncatedAndOverlongVarintsAreRefusedWithoutAdvancing) {
  const std::vector<std::string> bad = {
      "",                                    // nothing
      "\x80",                                // continuation bit, then the end
      "\xFF\xFF",                            // the same, longer
      Varint(kMax64).substr(0, 9),           // 2^64-1 without its last byte
      std::string(10, '\xFF') + "\x01",      // an eleventh byte
      std::string(9, '\xFF') + "\x02",       // a tenth byte beyond bit 63
  };
  for (const std::string& b : bad) {
    std::string_view in = b;
    uint64_t v = 7;
    EXPECT_FALSE(GetVarint(&in, &v)) << ::testing::PrintToString(b);
    EXPECT_EQ(in.size(), b.size());
    EXPECT_EQ(v, 7u);
  }
}

TEST(CodingTest, LengthPrefixedRoundTrips) {
  const std::string long_bytes(200, 'x');  // a two-byte length
  std::string out;
  PutLengthPrefixed("", &out);
  PutLengthPrefixed(std::string_view("a\0b", 3), &out);
  PutLengthPrefixed(long_bytes, &out);
  EXPECT_EQ(out.substr(0, 5), std::string("\x00\x03" "a\0b", 5));
  EXPECT_EQ(out.substr(5, 2), "\xC8\x01");

  std::string_view in = out;
  std::string_view got;
  ASSERT_TRUE(GetLengthPrefixed(&in, &got));
  EXPECT_EQ(got, "");
  ASSERT_TRUE(GetLengthPrefixed(&in, &got));
  EXPECT_EQ(got, std::string_view("a\0b", 3));
  ASSERT_TRUE(GetLengthPrefixed(&in, &got));
  EXPECT_EQ(got, long_bytes);
  EXPECT_TRUE(in.empty());
}

TEST(CodingTest, LengthPrefixesLongerThanTheInputAreRefusedWithoutAdvancing) {
  const std::vector<std::string> bad = {
      "",                   // no length
      "\x80",               // a truncated length
      "\x01",               // one byte promised, none there
      "\x04" "abc",         // four promised, three there
      Varint(kMax64) + "x", // a length beyond any input
  };
  for (const std::string& b : bad) {
    std::string_view in = b;
    std::string_view got = "untouched";
    EXPECT_FALSE(GetLengthPrefixed(&in, &got)) << ::testing::PrintToString(b);
    EXPECT_EQ(in.size(), b.size());
    EXPECT_EQ(got, "untouched");
  }
  // Exactly the promised bytes are taken; what follows stays.
  std::string_view in = "\x03" "abcd";
  std::string_view got;
  ASSERT_TRUE(GetLengthPrefixed(&in, &got));
  EXPECT_EQ(got, "abc");
  EXPECT_EQ(in, "d");
}

TEST(CodingTest, FixedWidthBytes) {
  std::string be32;
  PutBigEndian32(0x01020304u, &be32);
  EXPECT_EQ(be32, "\x01\x02\x03\x04");
  EXPECT_EQ(DecodeBigEndian32(be32.data()), 0x01020304u);
  char at[4];
  EncodeBigEndian32(0xFFFFFFFEu, at);
  EXPECT_EQ(std::string(at, 4), "\xFF\xFF\xFF\xFE");
  EXPECT_EQ(DecodeBigEndian32(at), 0xFFFFFFFEu);

  std::string be64;
  PutBigEndian64(0x0102030405060708ull, &be64);
  EXPECT_EQ(be64, "\x01\x02\x03\x04\x05\x06\x07\x08");
  EXPECT_EQ(DecodeBigEndian64(be64.data()), 0x0102030405060708ull);
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{255}, uint64_t{256}, kMax64}) {
    std::string s;
    PutBigEndian64(v, &s);
    ASSERT_EQ(s.size(), 8u);
    EXPECT_EQ(DecodeBigEndian64(s.data()), v);
  }
  // Big-endian keys sort as their numbers do.
  std::string a, b;
  PutBigEndian64(255, &a);
  PutBigEndian64(256, &b);
  EXPECT_LT(a, b);

  std::string le32;
  PutLittleEndian32(0x01020304u, &le32);
  EXPECT_EQ(le32, "\x04\x03\x02\x01");
  EXPECT_EQ(DecodeLittleEndian32(le32.data()), 0x01020304u);
}

TEST(CodingTest, Fnv1aKnownVectors) {
  EXPECT_EQ(Fnv1a32(""), 0x811c9dc5u);
  EXPECT_EQ(Fnv1a32("a"), 0xe40c292cu);
  EXPECT_EQ(Fnv1a32("foobar"), 0xbf9cf968u);
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ull);
  // Bytes above 0x7F count as unsigned.
  EXPECT_EQ(Fnv1a32("\xFF"), (0x811c9dc5u ^ 0xFFu) * 16777619u);
}

}  // namespace
}  // namespace cdcview
