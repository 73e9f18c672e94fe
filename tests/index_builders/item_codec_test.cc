#include "index_builders/item_codec.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "index_builders/coding.h"
#include "tests/index_builders/decimal_reference.h"

namespace cdcview {
namespace {

using ::cdcview::testing::RandomNumberText;
using ::testing::HasSubstr;

AttributeValue N(std::string_view text) {
  absl::StatusOr<AttributeValue> v = AttributeValue::Number(text);
  EXPECT_TRUE(v.ok()) << text;
  return v.ok() ? *std::move(v) : AttributeValue::Null();
}

std::string RandomString(std::mt19937& rng, int max_len) {
  std::string s;
  for (int n = std::uniform_int_distribution<int>(0, max_len)(rng); n > 0; --n) {
    s.push_back(static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng)));
  }
  return s;
}

Item RandomItem(std::mt19937& rng, int depth);

AttributeValue RandomValue(std::mt19937& rng, int depth) {
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int t = uni(0, depth > 0 ? 9 : 4);
  if (t >= 5) t = uni(5, 9);  // kM, kL, kSS, kNS, kBS
  switch (static_cast<AttrType>(t)) {
    case AttrType::kS:
      return AttributeValue::String(RandomString(rng, 20));
    case AttrType::kN:
      return N(RandomNumberText(rng));
    case AttrType::kB:
      return AttributeValue::Binary(RandomString(rng, 300));  // lengths past one varint byte
    case AttrType::kBool:
      return AttributeValue::Bool(uni(0, 1) == 1);
    case AttrType::kNull:
      return AttributeValue::Null();
    case AttrType::kM:
      return AttributeValue::Map(RandomItem(rng, depth - 1));
    case AttrType::kL: {
      std::vector<AttributeValue> l;
      for (int n = uni(0, 4); n > 0; --n) l.push_back(RandomValue(rng, depth - 1));
      return AttributeValue::List(std::move(l));
    }
    case AttrType::kSS:
    case AttrType::kBS: {
      std::vector<std::string> m;
      for (int n = uni(0, 5); n > 0; --n) m.push_back(RandomString(rng, 6));
      return t == static_cast<int>(AttrType::kSS) ? AttributeValue::StringSet(std::move(m))
                                                   : AttributeValue::BinarySet(std::move(m));
    }
    case AttrType::kNS: {
      std::vector<std::string> m;
      for (int n = uni(0, 5); n > 0; --n) m.push_back(RandomNumberText(rng, uni(0, 1) == 1));
      absl::StatusOr<AttributeValue> ns = AttributeValue::NumberSet(m);
      EXPECT_TRUE(ns.ok());
      return *std::move(ns);
    }
  }
  return AttributeValue::Null();
}

Item RandomItem(std::mt19937& rng, int depth) {
  Item item;
  for (int n = std::uniform_int_distribution<int>(0, 6)(rng); n > 0; --n) {
    item[RandomString(rng, 8)] = RandomValue(rng, depth);
  }
  return item;
}

Item SampleItem() {
  Item inner;
  inner["x"] = N("-1.5");
  inner["y"] = AttributeValue::List({AttributeValue::Null(), AttributeValue::Bool(true)});
  Item item;
  item["pk"] = AttributeValue::String("USER#1");
  item["n"] = N("12.50");
  item["b"] = AttributeValue::Binary(std::string("\0\xFF", 2));
  item["t"] = AttributeValue::Bool(false);
  item["z"] = AttributeValue::Null();
  item["m"] = AttributeValue::Map(inner);
  item["ss"] = AttributeValue::StringSet({"b", "a"});
  item["ns"] = *AttributeValue::NumberSet({"10", "9", "1e1"});
  item["bs"] = AttributeValue::BinarySet({"\x01", "\x00"});
  item[""] = AttributeValue::String("");
  return item;
}

TEST(ItemCodecTest, SampleRoundTrip) {
  const Item item = SampleItem();
  std::string bytes = EncodeItem(item);
  absl::StatusOr<Item> back = DecodeItem(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, item);
  // Appending form appends.
  std::string out = "prefix";
  EncodeItem(item, &out);
  EXPECT_EQ(out, "prefix" + bytes);
  // Empty item.
  EXPECT_EQ(EncodeItem(Item{}), std::string(1, '\0'));
  absl::StatusOr<Item> empty = DecodeItem(std::string(1, '\0'));
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(ItemCodecTest, Layout) {
  Item item;
  item["a"] = AttributeValue::String("hi");
  item["b"] = AttributeValue::Bool(true);
  item["c"] = AttributeValue::List({AttributeValue::Null()});
  const std::string want = std::string("\x03", 1) + "\x01" "a" + std::string(1, '\0') + "\x02" "hi" +
                           "\x01" "b" + "\x03\x01" + "\x01" "c" + "\x06\x01\x04";
  EXPECT_EQ(EncodeItem(item), want);
}

TEST(ItemCodecTest, RandomRoundTrips) {
  std::mt19937 rng(42);
  for (int i = 0; i < 3000; ++i) {
    const Item item = RandomItem(rng, 3);
    const std::string bytes = EncodeItem(item);
    absl::StatusOr<Item> back = DecodeItem(bytes);
    ASSERT_TRUE(back.ok()) << back.status();
    ASSERT_EQ(*back, item);
    ASSERT_EQ(EncodeItem(*back), bytes);
  }
}

TEST(ItemCodecTest, EveryTruncationIsDataLoss) {
  std::mt19937 rng(43);
  for (int i = 0; i < 300; ++i) {
    const std::string bytes = EncodeItem(i == 0 ? SampleItem() : RandomItem(rng, 3));
    for (size_t len = 0; len < bytes.size(); ++len) {
      absl::StatusOr<Item> r = DecodeItem(std::string_view(bytes.data(), len));
      ASSERT_FALSE(r.ok()) << len;
      ASSERT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
      ASSERT_THAT(r.status().message(), HasSubstr("at byte ")) << r.status();
    }
    // Heap copies of exact length, so sanitizers see any overread.
    for (size_t len = 0; len < bytes.size(); len += 7) {
      std::vector<char> copy(bytes.begin(), bytes.begin() + len);
      ASSERT_FALSE(DecodeItem(std::string_view(copy.data(), copy.size())).ok());
    }
  }
}

TEST(ItemCodecTest, CorruptionNeverCrashes) {
  std::mt19937 rng(44);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int ok = 0, bad = 0;
  for (int i = 0; i < 5000; ++i) {
    std::string bytes = EncodeItem(RandomItem(rng, 2));
    for (int k = uni(1, 3); k > 0; --k) {
      int op = uni(0, 2);
      size_t at = std::uniform_int_distribution<size_t>(0, bytes.size() - 1)(rng);
      if (op == 0) {
        bytes[at] = static_cast<char>(uni(0, 255));
      } else if (op == 1) {
        bytes.erase(at, 1);
        if (bytes.empty()) bytes.push_back('\x01');
      } else {
        bytes.insert(at, 1, static_cast<char>(uni(0, 255)));
      }
    }
    absl::StatusOr<Item> r = DecodeItem(bytes);
    if (r.ok()) {
      ++ok;
      ASSERT_EQ(EncodeItem(*r), bytes);  // only canonical encodings decode
    } else {
      ++bad;
      ASSERT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
    }
  }
  EXPECT_GT(bad, 1000);
  // Pure garbage.
  for (int i = 0; i < 20000; ++i) {
    std::string bytes = RandomString(rng, 40);
    absl::StatusOr<Item> r = DecodeItem(bytes);
    if (!r.ok()) {
      ASSERT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
    }
  }
}

void ExpectDataLoss(const std::string& bytes, std::string_view needle) {
  absl::StatusOr<Item> r = DecodeItem(bytes);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr(needle)) << r.status();
}

std::string Attr(std::string_view name, char type, std::string payload) {
  std::string out;
  PutVarint(name.size(), &out);
  out += name;
  out.push_back(type);
  return out + payload;
}

TEST(ItemCodecTest, SpecificCorruptions) {
  ExpectDataLoss("", "byte 0");
  ExpectDataLoss("\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF", "byte 0");  // overlong varint
  ExpectDataLoss("\x80", "byte 0");                                          // truncated varint
  ExpectDataLoss(std::string("\x80\x00", 2), "shortest form");
  ExpectDataLoss("\x01" + Attr("a", '\x00', std::string("\x81\x00", 2) + "x"), "shortest form");
  ExpectDataLoss("\xFF\xFF\xFF\xFF\x0F", "exceeds");                          // huge count
  ExpectDataLoss("\x01" + Attr("a", '\x0A', ""), "invalid type byte 10");
  ExpectDataLoss("\x01" + Attr("a", '\xFF', ""), "byte 3");
  ExpectDataLoss("\x01" + Attr("a", '\x00', "\x7F" "abc"), "byte 4");  // length past the end
  ExpectDataLoss("\x01" + Attr("a", '\x03', std::string(1, '\x02')), "BOOL");
  ExpectDataLoss("\x01" + Attr("a", '\x01', "\x03" "1.0"), "not canonical");
  ExpectDataLoss("\x01" + Attr("a", '\x01', "\x03" "abc"), "not canonical");
  ExpectDataLoss("\x01" + Attr("a", '\x01', std::string("\x00", 1)), "not canonical");
  ExpectDataLoss("\x02" + Attr("b", '\x04', "") + Attr("a", '\x04', ""), "increasing");
  ExpectDataLoss("\x02" + Attr("a", '\x04', "") + Attr("a", '\x04', ""), "increasing");
  ExpectDataLoss("\x01" + Attr("s", '\x07', "\x02\x01" "b\x01" "a"), "increasing");
  ExpectDataLoss("\x01" + Attr("s", '\x09', "\x02\x01" "a\x01" "a"), "increasing");
  ExpectDataLoss("\x01" + Attr("s", '\x08', "\x01\x02" "01"), "not canonical");
  ExpectDataLoss("\x01" + Attr("s", '\x08', "\x02\x01" "2\x02" "10"), "increasing");  // "10" < "2"
  ExpectDataLoss(Attr("", '\x04', ""), "byte 1");  // count 0 then trailing bytes
  ExpectDataLoss(std::string("\x00\x00", 2), "trailing");
  // Valid forms of the same shapes decode.
  ASSERT_TRUE(DecodeItem("\x01" + Attr("s", '\x08', "\x02\x02" "10\x01" "2")).ok());
  ASSERT_TRUE(DecodeItem("\x01" + Attr("a", '\x03', std::string(1, '\x01'))).ok());
}

TEST(ItemCodecTest, DeepNestingIsRejectedNotACrash) {
  // 100000 nested one-element lists: an attacker-sized input.
  std::string bytes = "\x01" + Attr("a", '\x06', "");
  for (int i = 0; i < 100000; ++i) bytes += "\x01\x06";
  bytes.push_back('\0');  // the innermost list is empty
  ExpectDataLoss(bytes, "too deep");
  // Same with maps.
  std::string maps = "\x01";
  for (int i = 0; i < 100000; ++i) maps += Attr("m", '\x05', "\x01");
  ExpectDataLoss(maps, "too deep");
  // DynamoDB's own limit (32 levels) is fine.
  AttributeValue v = AttributeValue::Null();
  for (int i = 0; i < 40; ++i) v = AttributeValue::List({v});
  Item item;
  item["deep"] = v;
  absl::StatusOr<Item> back = DecodeItem(EncodeItem(item));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, item);
}

}  // namespace
}  // namespace cdcview
