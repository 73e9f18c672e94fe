#include "index_builders/attribute_value.h"
#include "index_builders/item_size.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cdcview {
namespace {

using ::testing::ElementsAre;

AttributeValue N(std::string_view text) {
  absl::StatusOr<AttributeValue> v = AttributeValue::Number(text);
  EXPECT_TRUE(v.ok()) << text;
  return v.ok() ? *std::move(v) : AttributeValue::Null();
}

TEST(AttrTypeTest, NamesRoundTrip) {
  const std::vector<std::pair<AttrType, std::string>> all = {
      {AttrType::kS, "S"},       {AttrType::kN, "N"},       {AttrType::kB, "B"},
      {AttrType::kBool, "BOOL"}, {AttrType::kNull, "NULL"}, {AttrType::kM, "M"},
      {AttrType::kL, "L"},       {AttrType::kSS, "SS"},     {AttrType::kNS, "NS"},
      {AttrType::kBS, "BS"}};
  for (const auto& [type, name] : all) {
    EXPECT_EQ(AttrTypeName(type), name);
    AttrType parsed = AttrType::kNull;
    ASSERT_TRUE(ParseAttrType(name, &parsed)) << name;
    EXPECT_EQ(parsed, type);
  }
  for (const char* bad : {"", "s", "n", "Bool", "BOOLEAN", "null", "STRING", "SS ", " S", "MAP"}) {
    AttrType parsed = AttrType::kS;
    EXPECT_FALSE(ParseAttrType(bad, &parsed)) << bad;
    EXPECT_EQ(parsed, AttrType::kS);  // untouched
  }
}

TEST(AttributeValueTest, ScalarsAndDefaults) {
  AttributeValue null;
  EXPECT_EQ(null.type(), AttrType::kNull);
  EXPECT_EQ(null, AttributeValue::Null());
  EXPECT_TRUE(null.map().empty());
  EXPECT_EQ(AttributeValue::String("x").scalar(), "x");
  EXPECT_EQ(AttributeValue::Binary(std::string("\0\1", 2)).scalar(), std::string("\0\1", 2));
  EXPECT_TRUE(AttributeValue::Bool(true).boolean());
  EXPECT_EQ(AttributeValue::Bool(true).type(), AttrType::kBool);
  EXPECT_NE(AttributeValue::Bool(true), AttributeValue::Bool(false));
  EXPECT_TRUE(AttributeValue::String("x").map().empty());
  EXPECT_TRUE(AttributeValue::String("x").set().empty());
  EXPECT_TRUE(AttributeValue::String("x").list().empty());
}

TEST(AttributeValueTest, NumbersAreCanonical) {
  EXPECT_EQ(N("1.0").scalar(), "1");
  EXPECT_EQ(N("1E+2").scalar(), "100");
  EXPECT_EQ(N("-0.50").scalar(), "-0.5");
  EXPECT_EQ(N("-0").scalar(), "0");
  EXPECT_EQ(N("1"), N("0.1e1"));
  EXPECT_EQ(N("1").type(), AttrType::kN);
  // Same text, different type: not equal.
  EXPECT_NE(N("1"), AttributeValue::String("1"));
  EXPECT_NE(AttributeValue::String("a"), AttributeValue::Binary("a"));
  absl::StatusOr<AttributeValue> bad = AttributeValue::Number("1x");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "number \"1x\" is not a valid number");
  EXPECT_EQ(AttributeValue::Number("1e126").status().message(),
            "number \"1e126\" is out of DynamoDB's range (magnitude 1e-130 to 1e126)");
}

TEST(AttributeValueTest, SetsAreSortedAndUnique) {
  AttributeValue ss = AttributeValue::StringSet({"b", "a", "c", "a", ""});
  EXPECT_EQ(ss.type(), AttrType::kSS);
  EXPECT_THAT(ss.set(), ElementsAre("", "a", "b", "c"));
  EXPECT_EQ(ss, AttributeValue::StringSet({"c", "", "b", "a"}));

  // Unsigned byte order.
  AttributeValue bs = AttributeValue::BinarySet({"\xFF", "\x01", std::string("\0", 1), "\x01"});
  EXPECT_EQ(bs.type(), AttrType::kBS);
  EXPECT_THAT(bs.set(), ElementsAre(std::string("\0", 1), "\x01", "\xFF"));
  EXPECT_NE(bs, AttributeValue::StringSet({"\xFF", "\x01", std::string("\0", 1)}));

  absl::StatusOr<AttributeValue> ns = AttributeValue::NumberSet({"1", "1.0", "1e0", "-2", "10", "0.1E1", "2"});
  ASSERT_TRUE(ns.ok());
  EXPECT_EQ(ns->type(), AttrType::kNS);
  ASSERT_EQ(ns->set().size(), 4u);
  std::vector<std::string> members = ns->set();
  std::sort(members.begin(), members.end());
  EXPECT_THAT(members, ElementsAre("-2", "1", "10", "2"));
  EXPECT_EQ(members, ns->set());  // deterministic order
  EXPECT_EQ(*ns, *AttributeValue::NumberSet({"2", "10.00", "-2.0", "01"}));

  absl::StatusOr<AttributeValue> bad = AttributeValue::NumberSet({"1", "two"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "number \"two\" is not a valid number");
}

TEST(AttributeValueTest, MapsAreDeepCopies) {
  Item inner;
  inner["n"] = N("5");
  inner["l"] = AttributeValue::List({AttributeValue::String("x")});
  Item outer;
  outer["inner"] = AttributeValue::Map(inner);
  AttributeValue a = AttributeValue::Map(outer);
  AttributeValue b = a;  // copy
  EXPECT_EQ(a, b);
  EXPECT_NE(&a.map(), &b.map());
  EXPECT_NE(&a.map().at("inner").map(), &b.map().at("inner").map());
  a = AttributeValue::String("gone");  // the copy does not depend on the original
  ASSERT_EQ(b.type(), AttrType::kM);
  EXPECT_EQ(b.map().at("inner").map().at("n"), N("5"));
  EXPECT_EQ(b.map().at("inner").map().at("l").list()[0].scalar(), "x");

  AttributeValue c;
  c = b;  // copy assignment
  EXPECT_EQ(c, b);
  const AttributeValue& self = c;
  c = self;  // self-assignment
  EXPECT_EQ(c, b);
  AttributeValue d = std::move(c);
  EXPECT_EQ(d, b);

  std::vector<AttributeValue> copies(3, b);
  for (const AttributeValue& v : copies) EXPECT_EQ(v, b);
}

TEST(AttributeValueTest, EqualityIsDeep) {
  auto make = [](std::string_view leaf) {
    Item deepest;
    deepest["leaf"] = AttributeValue::String(std::string(leaf));
    Item mid;
    mid["list"] = AttributeValue::List({AttributeValue::Null(), AttributeValue::Map(deepest)});
    return AttributeValue::Map(mid);
  };
  EXPECT_EQ(make("a"), make("a"));
  EXPECT_NE(make("a"), make("b"));
  EXPECT_NE(AttributeValue::Map({}), AttributeValue::List({}));
  EXPECT_EQ(AttributeValue::Map({}), AttributeValue::Map({}));
  Item one{{"a", AttributeValue::Null()}};
  Item other{{"b", AttributeValue::Null()}};
  EXPECT_NE(AttributeValue::Map(one), AttributeValue::Map(other));
  EXPECT_NE(AttributeValue::List({AttributeValue::Null()}),
            AttributeValue::List({AttributeValue::Null(), AttributeValue::Null()}));
}

TEST(AttributeValueTest, ItemSize) {
  EXPECT_EQ(ItemSize(Item{}), 0u);
  Item item;
  item["name"] = AttributeValue::String("abcdef");
  EXPECT_EQ(ItemSize(item), 4u + 6u);
  item["bin"] = AttributeValue::Binary("xyz");
  EXPECT_EQ(ItemSize(item), 10u + 3u + 3u);
  const uint64_t before = ItemSize(item);
  item["n"] = N("12345");
  item["t"] = AttributeValue::Bool(true);
  item["z"] = AttributeValue::Null();
  const uint64_t scalars = ItemSize(item);
  EXPECT_GT(scalars, before + 3);
  item["m"] = AttributeValue::Map(item);
  EXPECT_GT(ItemSize(item), 2 * scalars);
  // A long string dominates.
  Item big;
  big["s"] = AttributeValue::String(std::string(100000, 'x'));
  EXPECT_GE(ItemSize(big), 100000u);
  EXPECT_LE(ItemSize(big), 100100u);
}

}  // namespace
}  // namespace cdcview
