#include "daemon/cli/json_output.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace cdcview {
namespace {

v1::AttributeValue Number(const std::string& text) {
  v1::AttributeValue v;
  v.set_n(text);
  return v;
}

TEST(JsonOutputTest, NumbersADoubleHoldsArePlainJsonNumbers) {
  for (const char* n : {"0", "-0.5", "25.5", "1000", "123456789012345", "0.000123456789012345",
                        "-999999999999999000", "1E+307", "1e-307", "1.5E3"}) {
    EXPECT_EQ(ValueToJson(Number(n), false), n) << n;
  }
}

TEST(JsonOutputTest, NumbersADoubleWouldRoundArePlainJsonStrings) {
  // 16 significant digits and more (2^53 + 1 among them), and exponents past a double's.
  for (const char* n : {"1234567890123456", "9007199254740993", "0.1234567890123456",
                        "-12345678901234567890123456789012345678", "1E+308", "1e-308",
                        "1E+400"}) {
    EXPECT_EQ(ValueToJson(Number(n), false), std::string("\"") + n + "\"") << n;
  }
  // Exact sums may lie beyond DynamoDB's range: one digit at 10^200 is still a double's, at
  // 10^320 it is not.
  const std::string in_range = "1" + std::string(200, '0');
  EXPECT_EQ(ValueToJson(Number(in_range), false), in_range);
  const std::string beyond = "1" + std::string(320, '0');
  EXPECT_EQ(ValueToJson(Number(beyond), false), "\"" + beyond + "\"");
}

TEST(JsonOutputTest, NumberSetsAndMapsMixBothFormsAndDynamoDbJsonIsUnchanged) {
  v1::Item item;
  v1::AttributeValue& ns = (*item.mutable_attributes())["ns"];
  ns.mutable_ns()->add_values("1.5");
  ns.mutable_ns()->add_values("12345678901234567");
  (*item.mutable_attributes())["big"] = Number("12345678901234567");
  (*item.mutable_attributes())["small"] = Number("42");
  EXPECT_EQ(ItemToJson(item, false),
            R"({"big":"12345678901234567","ns":[1.5,"12345678901234567"],"small":42})");
  EXPECT_EQ(ItemToJson(item, true),
            R"({"big":{"N":"12345678901234567"},"ns":{"NS":["1.5","12345678901234567"]},)"
            R"("small":{"N":"42"}})");
}

}  // namespace
}  // namespace cdcview
