// The one conversion between AttributeValue and cdcview.v1.AttributeValue: every type both
// ways, and the exact "PATH: problem" errors the decoder and the read server both return.
#include "daemon/decode/attribute_value_proto.h"

#include <string>

#include "gtest/gtest.h"

namespace cdcview {
namespace {

AttributeValue Num(const std::string& text) {
  absl::StatusOr<AttributeValue> n = AttributeValue::Number(text);
  EXPECT_TRUE(n.ok()) << n.status();
  return n.ok() ? *n : AttributeValue::Null();
}

std::string ErrorOf(const v1::AttributeValue& value, const std::string& path) {
  absl::StatusOr<AttributeValue> got = FromProto(value, path);
  if (got.ok()) return "<ok>";
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(got.status().message());
}

TEST(AttributeValueProtoTest, EveryTypeRoundTrips) {
  absl::StatusOr<AttributeValue> numbers = AttributeValue::NumberSet({"2", "10"});
  ASSERT_TRUE(numbers.ok());
  Item item = {
      {"s", AttributeValue::String("text")},
      {"n", Num("12.50")},
      {"b", AttributeValue::Binary(std::string("\0\xFF", 2))},
      {"t", AttributeValue::Bool(true)},
      {"z", AttributeValue::Null()},
      {"m", AttributeValue::Map({{"inner", AttributeValue::List({Num("1"), AttributeValue::Null()})}})},
      {"l", AttributeValue::List({})},  // empty: still a list, not an unset value
      {"em", AttributeValue::Map({})},
      {"ss", AttributeValue::StringSet({"b", "a"})},
      {"ns", *numbers},
      {"bs", AttributeValue::BinarySet({"x"})},
  };
  v1::Item proto;
  ToProto(item, &proto);
  const auto& a = proto.attributes();
  ASSERT_EQ(a.size(), item.size());
  EXPECT_EQ(a.at("s").s(), "text");
  EXPECT_EQ(a.at("n").n(), "12.5");  // the canonical form the value holds
  EXPECT_EQ(a.at("b").b(), std::string("\0\xFF", 2));
  EXPECT_TRUE(a.at("t").bool_());
  EXPECT_TRUE(a.at("z").null());
  EXPECT_EQ(a.at("m").m().fields().at("inner").l().values(0).n(), "1");
  EXPECT_TRUE(a.at("m").m().fields().at("inner").l().values(1).null());
  EXPECT_EQ(a.at("l").value_case(), v1::AttributeValue::kL);
  EXPECT_EQ(a.at("l").l().values_size(), 0);
  EXPECT_EQ(a.at("em").value_case(), v1::AttributeValue::kM);
  ASSERT_EQ(a.at("ss").ss().values_size(), 2);
  EXPECT_EQ(a.at("ss").ss().values(0), "a");
  EXPECT_EQ(a.at("ns").ns().values_size(), 2);
  EXPECT_EQ(a.at("bs").bs().values(0), "x");

  absl::StatusOr<Item> back = FromProto(proto, "item");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, item);
}

TEST(AttributeValueProtoTest, ErrorsNameThePathInsideTheMessage) {
  EXPECT_EQ(ErrorOf(v1::AttributeValue(), "partition_key"),
            "partition_key: no value set (set one of s, n, b, bool, null, m, l, ss, ns, bs)");

  v1::AttributeValue bad_number;
  bad_number.set_n("abc");
  EXPECT_EQ(ErrorOf(bad_number, "sort.value"), "sort.value: number \"abc\" is not a valid number");

  v1::AttributeValue bad_set;
  bad_set.mutable_ns()->add_values("1");
  bad_set.mutable_ns()->add_values("1e999");
  EXPECT_EQ(ErrorOf(bad_set, "v"),
            "v: number \"1e999\" is out of DynamoDB's range (magnitude 1e-130 to 1e126)");

  v1::AttributeValue nested;
  v1::AttributeValue& list = (*nested.mutable_m()->mutable_fields())["addr"];
  list.mutable_l()->add_values()->set_s("ok");
  list.mutable_l()->add_values();  // unset
  EXPECT_EQ(ErrorOf(nested, "new_image.home"),
            "new_image.home.addr[1]: no value set (set one of s, n, b, bool, null, m, l, ss, ns, bs)");

  v1::Item key;
  (*key.mutable_attributes())["PK"].set_n("1.2.3");
  absl::StatusOr<Item> item = FromProto(key, "key");
  ASSERT_FALSE(item.ok());
  EXPECT_EQ(item.status().message(), "key.PK: number \"1.2.3\" is not a valid number");
}

}  // namespace
}  // namespace cdcview
