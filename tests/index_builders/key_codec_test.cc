#include "index_builders/key_codec.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/index_builders/decimal_reference.h"

namespace cdcview {
namespace {

using ::cdcview::testing::RandomNumberText;
using ::cdcview::testing::RefCompare;
using ::cdcview::testing::Sign;
using ::cdcview::testing::ToFixed;
using ::testing::HasSubstr;

AttributeValue N(std::string_view text) {
  absl::StatusOr<AttributeValue> v = AttributeValue::Number(text);
  EXPECT_TRUE(v.ok()) << text << ": " << v.status();
  return v.ok() ? *std::move(v) : AttributeValue::Null();
}
AttributeValue S(std::string s) { return AttributeValue::String(std::move(s)); }
AttributeValue B(std::string s) { return AttributeValue::Binary(std::move(s)); }

std::string Enc(const AttributeValue& v) {
  std::string out;
  EncodeKeyComponent(v, &out);
  return out;
}

std::string Prefix(const AttributeValue& v) {
  std::string out;
  EncodeKeyPrefix(v, &out);
  return out;
}

// memcmp order, as LMDB's default comparator sees it.
int ByteCompare(const std::string& a, const std::string& b) {
  size_t n = std::min(a.size(), b.size());
  int c = n == 0 ? 0 : std::memcmp(a.data(), b.data(), n);
  if (c != 0) return Sign(c);
  return a.size() < b.size() ? -1 : (a.size() > b.size() ? 1 : 0);
}

// Reference order of byte strings: written out per byte, as unsigned values.
int RefBytes(const std::string& a, const std::string& b) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    unsigned x = static_cast<unsigned char>(a[i]);
    unsigned y = static_cast<unsigned char>(b[i]);
    if (x != y) return x < y ? -1 : 1;
  }
  return a.size() == b.size() ? 0 : (a.size() < b.size() ? -1 : 1);
}

// Reference order of key values: B < N < S across types (the tags), DynamoDB order within.
int RefValue(const AttributeValue& a, const AttributeValue& b) {
  auto rank = [](AttrType t) { return t == AttrType::kB ? 0 : (t == AttrType::kN ? 1 : 2); };
  if (a.type() != b.type()) return rank(a.type()) < rank(b.type()) ? -1 : 1;
  if (a.type() == AttrType::kN) return RefCompare(ToFixed(a.scalar()), ToFixed(b.scalar()));
  return RefBytes(a.scalar(), b.scalar());
}

AttributeValue Decode1(const std::string& bytes) {
  std::string_view in = bytes;
  absl::StatusOr<AttributeValue> v = DecodeKeyComponent(&in);
  EXPECT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(in.empty());
  return v.ok() ? *std::move(v) : AttributeValue::Null();
}

std::string RandomBytes(std::mt19937& rng, bool small) {
  // Alphabet rich in the bytes the escaping cares about.
  static const char kAlphabet[] = {'\x00', '\x01', '\x02', '\x03', 'a', 'b', '\x7F', '\x80', '\xFE', '\xFF'};
  std::uniform_int_distribution<int> len(0, small ? 4 : 24);
  std::uniform_int_distribution<int> pick(0, sizeof(kAlphabet) - 1);
  std::uniform_int_distribution<int> any(0, 255);
  std::uniform_int_distribution<int> coin(0, 3);
  std::string s;
  for (int n = len(rng); n > 0; --n) {
    s.push_back(small || coin(rng) != 0 ? kAlphabet[pick(rng)] : static_cast<char>(any(rng)));
  }
  return s;
}

AttributeValue RandomKeyValue(std::mt19937& rng, int type /* 0 B, 1 N, 2 S, -1 any */) {
  if (type < 0) type = std::uniform_int_distribution<int>(0, 2)(rng);
  bool small = std::uniform_int_distribution<int>(0, 2)(rng) == 0;
  if (type == 0) return B(RandomBytes(rng, small));
  if (type == 1) return N(RandomNumberText(rng, small));
  return S(RandomBytes(rng, small));
}

// Checks round trip of every value and that encodings order exactly like RefValue, both on
// random pairs and on the whole sorted sequence.
void CheckOrderAndRoundTrip(std::vector<AttributeValue> values, std::mt19937& rng) {
  std::vector<std::string> enc;
  for (const AttributeValue& v : values) {
    enc.push_back(Enc(v));
    ASSERT_EQ(Decode1(enc.back()), v) << v.scalar();
    ASSERT_EQ(enc.back(), Enc(Decode1(enc.back())));
  }
  std::uniform_int_distribution<size_t> pick(0, values.size() - 1);
  for (int i = 0; i < 20000; ++i) {
    size_t a = pick(rng), b = pick(rng);
    ASSERT_EQ(ByteCompare(enc[a], enc[b]), RefValue(values[a], values[b]))
        << values[a].scalar() << " vs " << values[b].scalar();
  }
  std::vector<size_t> order(values.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return RefValue(values[a], values[b]) < 0; });
  for (size_t i = 1; i < order.size(); ++i) {
    const size_t a = order[i - 1], b = order[i];
    ASSERT_EQ(ByteCompare(enc[a], enc[b]), RefValue(values[a], values[b]))
        << values[a].scalar() << " vs " << values[b].scalar();
  }
}

TEST(KeyCodecTest, RandomStrings) {
  std::mt19937 rng(1);
  std::vector<AttributeValue> values;
  for (int i = 0; i < 5000; ++i) values.push_back(RandomKeyValue(rng, 2));
  CheckOrderAndRoundTrip(values, rng);
}

TEST(KeyCodecTest, RandomBinaries) {
  std::mt19937 rng(2);
  std::vector<AttributeValue> values;
  for (int i = 0; i < 5000; ++i) values.push_back(RandomKeyValue(rng, 0));
  CheckOrderAndRoundTrip(values, rng);
}

TEST(KeyCodecTest, RandomNumbers) {
  std::mt19937 rng(3);
  std::vector<AttributeValue> values;
  for (int i = 0; i < 5000; ++i) values.push_back(RandomKeyValue(rng, 1));
  CheckOrderAndRoundTrip(values, rng);
}

TEST(KeyCodecTest, RandomMixedTypes) {
  std::mt19937 rng(4);
  std::vector<AttributeValue> values;
  for (int i = 0; i < 3000; ++i) values.push_back(RandomKeyValue(rng, -1));
  CheckOrderAndRoundTrip(values, rng);
}

TEST(KeyCodecTest, EqualNumbersEncodeIdentically) {
  const std::string one = Enc(N("1"));
  for (const char* t : {"1.0", "1e0", "01", "0.1E1", "+1", "10e-1"}) EXPECT_EQ(Enc(N(t)), one) << t;
  EXPECT_EQ(Enc(N("-0")), Enc(N("0")));
  EXPECT_EQ(Decode1(one).scalar(), "1");
}

TEST(KeyCodecTest, NumberEdgeOrder) {
  const std::vector<std::string> ascending = {
      "-" + std::string(38, '9') + "e88",
      "-1e125",
      "-10",
      "-9",
      "-1",
      "-0.5",
      "-1e-130",
      "0",
      "1e-130",
      "0.5",
      "1",
      "9",
      "10",
      "1e3",
      "9.99e125",
      std::string(38, '9') + "e88",
  };
  for (size_t i = 0; i < ascending.size(); ++i) {
    for (size_t j = 0; j < ascending.size(); ++j) {
      EXPECT_EQ(ByteCompare(Enc(N(ascending[i])), Enc(N(ascending[j]))), i < j ? -1 : (i > j ? 1 : 0))
          << ascending[i] << " vs " << ascending[j];
    }
  }
  for (const std::string& t : ascending) {
    EXPECT_EQ(Decode1(Enc(N(t))), N(t)) << t;
  }
}

TEST(KeyCodecTest, NumberLayout) {
  EXPECT_EQ(Enc(N("0")), std::string("\x02\x02", 2));
  // 1 = 0.1e1: positive, exponent byte 1+129, nibbles 2 (digit 1) and 0.
  EXPECT_EQ(Enc(N("1")), std::string("\x02\x03\x82\x20", 4));
  // 12 = 0.12e2: nibbles 2 3 then terminator 0 and padding 0.
  EXPECT_EQ(Enc(N("12")), std::string("\x02\x03\x83\x23\x00", 5));
  // -1: exponent byte and nibbles complemented.
  EXPECT_EQ(Enc(N("-1")), std::string("\x02\x01\x7D\xDF", 4));
  EXPECT_EQ(Enc(N("1e-130")), std::string("\x02\x03\x00\x20", 4));
  EXPECT_EQ(Enc(N("9e125")), std::string("\x02\x03\xFF\xA0", 4));
}

TEST(KeyCodecTest, StringLayoutAndSpecialBytes) {
  EXPECT_EQ(Enc(S("")), std::string("\x03\x00", 2));
  EXPECT_EQ(Enc(B("")), std::string("\x01\x00", 2));
  EXPECT_EQ(Enc(S(std::string("a\0b", 3))), std::string("\x03" "a\x00\xFF" "b\x00", 6));
  EXPECT_EQ(Enc(B("\xFF")), std::string("\x01\xFF\x00", 3));
  const std::vector<std::string> ascending = {
      "", std::string("\0", 1), std::string("\0\0", 2), std::string("\0\xFF", 2),
      std::string("\x01", 1), "a", std::string("a\0", 2), std::string("a\0\0", 2 + 1),
      std::string("a\x01", 2), "ab", "\x7F", "\x80", "\xFE", "\xFF", "\xFF\xFF"};
  for (auto make : {&S, &B}) {
    for (size_t i = 0; i < ascending.size(); ++i) {
      EXPECT_EQ(Decode1(Enc(make(ascending[i]))), make(ascending[i]));
      for (size_t j = 0; j < ascending.size(); ++j) {
        EXPECT_EQ(ByteCompare(Enc(make(ascending[i])), Enc(make(ascending[j]))),
                  i < j ? -1 : (i > j ? 1 : 0))
            << i << " vs " << j;
      }
    }
  }
  // Types order by tag: B < N < S.
  EXPECT_LT(ByteCompare(Enc(B("\xFF\xFF")), Enc(N("-1e125"))), 0);
  EXPECT_LT(ByteCompare(Enc(N("9e125")), Enc(S(""))), 0);
}

TEST(KeyCodecTest, ConcatenatedComponentsDecodeInSequenceAndOrderAsTuples) {
  std::mt19937 rng(5);
  std::vector<std::vector<AttributeValue>> tuples;
  std::vector<std::string> encodings;
  for (int i = 0; i < 3000; ++i) {
    std::vector<AttributeValue> tuple;
    std::string enc;
    int n = std::uniform_int_distribution<int>(1, 4)(rng);
    for (int k = 0; k < n; ++k) {
      // Mostly small values so tuples share prefixes.
      tuple.push_back(RandomKeyValue(rng, std::uniform_int_distribution<int>(0, 3)(rng) == 0 ? -1 : 2));
      EncodeKeyComponent(tuple.back(), &enc);
    }
    std::string_view in = enc;
    for (const AttributeValue& want : tuple) {
      absl::StatusOr<AttributeValue> got = DecodeKeyComponent(&in);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(*got, want);
    }
    ASSERT_TRUE(in.empty());
    tuples.push_back(std::move(tuple));
    encodings.push_back(std::move(enc));
  }
  auto ref_tuple = [](const std::vector<AttributeValue>& a, const std::vector<AttributeValue>& b) {
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      int c = RefValue(a[i], b[i]);
      if (c != 0) return c;
    }
    return a.size() == b.size() ? 0 : (a.size() < b.size() ? -1 : 1);
  };
  std::uniform_int_distribution<size_t> pick(0, tuples.size() - 1);
  for (int i = 0; i < 30000; ++i) {
    size_t a = pick(rng), b = pick(rng);
    ASSERT_EQ(ByteCompare(encodings[a], encodings[b]), ref_tuple(tuples[a], tuples[b])) << a << " " << b;
  }
}

TEST(KeyCodecTest, PrefixProperty) {
  std::mt19937 rng(6);
  for (int i = 0; i < 5000; ++i) {
    const bool binary = i % 2 == 1;
    const bool small = i % 3 == 0;
    std::string value = RandomBytes(rng, small);
    std::string prefix;
    if (std::uniform_int_distribution<int>(0, 1)(rng) == 0) {
      prefix = value.substr(0, std::uniform_int_distribution<size_t>(0, value.size())(rng));
    } else {
      prefix = RandomBytes(rng, true);
    }
    const bool begins = value.compare(0, prefix.size(), prefix) == 0;
    AttributeValue v = binary ? B(value) : S(value);
    AttributeValue p = binary ? B(prefix) : S(prefix);
    // A following component must not matter.
    std::string key = Enc(v);
    EncodeKeyComponent(N("7"), &key);
    const std::string lo = Prefix(p);
    const std::string hi = PrefixSuccessor(lo);
    ASSERT_FALSE(hi.empty());
    const bool in_range = ByteCompare(lo, key) <= 0 && ByteCompare(key, hi) < 0;
    ASSERT_EQ(key.compare(0, lo.size(), lo) == 0, begins);
    ASSERT_EQ(in_range, begins);
  }
  EXPECT_EQ(Prefix(S("ab")), "\x03" "ab");
  EXPECT_EQ(Prefix(S(std::string("a\0", 2))), std::string("\x03" "a\x00\xFF", 4));
  EXPECT_EQ(Prefix(B("")), "\x01");
}

TEST(KeyCodecTest, PrefixSuccessor) {
  EXPECT_EQ(PrefixSuccessor("abc"), "abd");
  EXPECT_EQ(PrefixSuccessor("a\xFF"), "b");
  EXPECT_EQ(PrefixSuccessor("a\xFE\xFF\xFF"), "a\xFF");
  EXPECT_EQ(PrefixSuccessor(std::string("\x00", 1)), "\x01");
  EXPECT_EQ(PrefixSuccessor("\xFF\xFF"), "");
  EXPECT_EQ(PrefixSuccessor(""), "");
}

void ExpectDecodeError(const std::string& bytes, const std::string& offset_text) {
  std::string_view in = bytes;
  absl::StatusOr<AttributeValue> v = DecodeKeyComponent(&in);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(v.status().message(), HasSubstr(offset_text)) << v.status();
  EXPECT_EQ(in.size(), bytes.size());  // not advanced on error
}

TEST(KeyCodecTest, DecodeErrorsNameTheOffset) {
  ExpectDecodeError("", "byte 0");
  ExpectDecodeError("\x07", "byte 0");                           // unknown tag
  ExpectDecodeError("\x03" "abc", "byte 4");                     // no terminator
  ExpectDecodeError(std::string("\x01" "a\x00\xFF", 4), "byte 4");
  ExpectDecodeError("\x02", "byte 1");                           // no class byte
  ExpectDecodeError("\x02\x04", "byte 1");                       // bad class byte
  ExpectDecodeError("\x02\x03", "byte 2");                       // no exponent byte
  ExpectDecodeError("\x02\x03\x82", "byte 3");                   // no digits
  ExpectDecodeError("\x02\x03\x82\x23", "byte 4");               // no terminator
  ExpectDecodeError("\x02\x03\x82\xB0", "byte 3");               // nibble 11
  ExpectDecodeError("\x02\x03\x82\x05", "byte 3");               // padding not zero
  ExpectDecodeError(std::string("\x02\x03\x82\x00", 4), "byte 3");  // no digits
  ExpectDecodeError(std::string("\x02\x03\x82\x12\x00", 5), "byte 4");           // leading zero digit
  ExpectDecodeError(std::string("\x02\x03\x82\x21\x00", 5), "byte 4");  // trailing zero digit
  // 39 digits.
  std::string long_n = "\x02\x03\x82";
  for (int i = 0; i < 20; ++i) long_n.push_back('\x22');
  ExpectDecodeError(long_n, "more than 38");
  // Errors in a later component name the offset within what was passed in.
  std::string two = Enc(S("hello"));
  two += "\x02\x03";
  std::string_view in = two;
  ASSERT_TRUE(DecodeKeyComponent(&in).ok());
  ExpectDecodeError(std::string(in), "byte 2");
}

TEST(KeyCodecTest, TruncatedNumbersAreRejected) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    const std::string enc = Enc(N(RandomNumberText(rng)));
    for (size_t len = 0; len < enc.size(); ++len) {
      std::string_view in(enc.data(), len);
      ASSERT_FALSE(DecodeKeyComponent(&in).ok()) << len;
    }
  }
}

TEST(KeyCodecTest, GarbageNeverCrashes) {
  std::mt19937 rng(8);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int i = 0; i < 20000; ++i) {
    std::string bytes;
    bytes.push_back(static_cast<char>(1 + i % 3));
    for (int n = std::uniform_int_distribution<int>(0, 12)(rng); n > 0; --n) {
      bytes.push_back(static_cast<char>(byte(rng)));
    }
    std::string_view in = bytes;
    absl::StatusOr<AttributeValue> v = DecodeKeyComponent(&in);
    if (v.ok()) {
      // Whatever decodes re-encodes to exactly the bytes consumed.
      ASSERT_EQ(Enc(*v), bytes.substr(0, bytes.size() - in.size()));
    }
  }
}

}  // namespace
}  // namespace cdcview
