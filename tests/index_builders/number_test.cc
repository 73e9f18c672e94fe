#include "index_builders/number.h"

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
using ::cdcview::testing::RefCanonical;
using ::cdcview::testing::RefCompare;
using ::cdcview::testing::Sign;
using ::cdcview::testing::ToFixed;

std::string Canon(std::string_view text) {
  absl::StatusOr<std::string> c = CanonicalNumber(text);
  EXPECT_TRUE(c.ok()) << text << ": " << c.status();
  return c.ok() ? *c : "<error>";
}

int Cmp(std::string_view a, std::string_view b) {
  absl::StatusOr<Decimal> da = ParseDecimal(a);
  absl::StatusOr<Decimal> db = ParseDecimal(b);
  EXPECT_TRUE(da.ok()) << a;
  EXPECT_TRUE(db.ok()) << b;
  return Sign(CompareDecimal(*da, *db));
}

TEST(NumberTest, EqualSpellingsOfOne) {
  for (const char* t : {"1", "1.0", "1e0", "01", "0.1E1", "+1", "1.", "10e-1", "100E-2",
                        "0.01e+2", "001.000", "1E+0", "1e-0", ".1e1"}) {
    EXPECT_EQ(Canon(t), "1") << t;
    EXPECT_EQ(Cmp(t, "1"), 0) << t;
  }
  absl::StatusOr<Decimal> d = ParseDecimal("0.1E1");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, (Decimal{false, "1", 1}));
}

TEST(NumberTest, CanonicalText) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"0", "0"},          {"-0", "0"},           {"+0", "0"},         {"0.000", "0"},
      {"-0.0e5", "0"},     {"00", "0"},           {".0", "0"},         {"0.", "0"},
      {"1E+2", "100"},     {"-0.50", "-0.5"},     {".5", "0.5"},       {"5.", "5"},
      {"1000", "1000"},    {"0.00012", "0.00012"}, {"1.2e-4", "0.00012"}, {"-12.345", "-12.345"},
      {"12.345e1", "123.45"}, {"12.345e5", "1234500"}, {"-123.45e-2", "-1.2345"},
      {"1e125", "1" + std::string(125, '0')},
      {"1e-130", "0." + std::string(129, '0') + "1"},
      {"-1e-130", "-0." + std::string(129, '0') + "1"},
      {"0.00000000000000000000000000000000000000000000000000000000000000000000000000001",
       "0.00000000000000000000000000000000000000000000000000000000000000000000000000001"},
  };
  for (const auto& [in, want] : cases) EXPECT_EQ(Canon(in), want) << in;
}

TEST(NumberTest, ZeroIsTheZeroDecimal) {
  for (const char* t : {"0", "-0", "0e99999999999999999999", "-0.000e-99999"}) {
    absl::StatusOr<Decimal> d = ParseDecimal(t);
    ASSERT_TRUE(d.ok()) << t;
    EXPECT_EQ(*d, Decimal{}) << t;
    EXPECT_TRUE(d->is_zero());
  }
}

TEST(NumberTest, Comparisons) {
  EXPECT_LT(Cmp("9", "10"), 0);
  EXPECT_LT(Cmp("-1", "0.5"), 0);
  EXPECT_LT(Cmp("0.5", "1e3"), 0);
  EXPECT_LT(Cmp("-10", "-9"), 0);
  EXPECT_LT(Cmp("0.12", "0.123"), 0);
  EXPECT_LT(Cmp("-0.123", "-0.12"), 0);
  EXPECT_EQ(Cmp("-0", "0"), 0);
  const std::vector<std::string> ascending = {
      "-" + std::string(38, '9') + "e88",  // -9.99..e125
      "-1e125", "-1", "-1e-130", "0", "1e-130", "1", "9.99e125", std::string(38, '9') + "e88"};
  for (size_t i = 0; i < ascending.size(); ++i) {
    for (size_t j = 0; j < ascending.size(); ++j) {
      EXPECT_EQ(Cmp(ascending[i], ascending[j]), i < j ? -1 : (i > j ? 1 : 0))
          << ascending[i] << " vs " << ascending[j];
    }
  }
}

void ExpectError(std::string_view text, const std::string& message) {
  absl::StatusOr<Decimal> d = ParseDecimal(text);
  ASSERT_FALSE(d.ok()) << text;
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << text;
  EXPECT_EQ(d.status().message(), message) << text;
  absl::StatusOr<std::string> c = CanonicalNumber(text);
  ASSERT_FALSE(c.ok()) << text;
  EXPECT_EQ(c.status(), d.status());
}

TEST(NumberTest, SyntaxErrors) {
  for (const char* t : {"", "+", "-", ".", "e5", "1e", "1e+", "1e-", "abc", "1a", " 1", "1 ",
                        "--1", "+-1", "1..2", "1.2.3", "1e5.5", "1e5e5", "0x10", "Infinity",
                        "NaN", "-inf", "1,000", "٣", "1_000", "e", "-.", ".e1", "1ee2"}) {
    ExpectError(t, "number \"" + std::string(t) + "\" is not a valid number");
  }
}

TEST(NumberTest, TooManyDigits) {
  const std::string d39 = "123456789012345678901234567890123456789";
  ExpectError(d39, "number \"" + d39 + "\" has more than 38 significant digits");
  const std::string f39 = "0.00" + d39 + "00";
  ExpectError(f39, "number \"" + f39 + "\" has more than 38 significant digits");
  const std::string mid = "1." + std::string(37, '0') + "1";  // 39 significant digits
  ExpectError(mid, "number \"" + mid + "\" has more than 38 significant digits");
  // 38 significant digits are fine, and leading/trailing zeros do not count.
  EXPECT_EQ(Canon(d39.substr(0, 38)), d39.substr(0, 38));
  EXPECT_EQ(Canon("1" + std::string(50, '0')), "1" + std::string(50, '0'));
  EXPECT_EQ(Canon("0." + std::string(60, '0') + "5"), "0." + std::string(60, '0') + "5");
  EXPECT_EQ(Canon("000" + d39.substr(0, 38) + ".000000000000000000000000000000000000"),
            d39.substr(0, 38));
  EXPECT_EQ(Canon("1." + std::string(36, '0') + "1"), "1." + std::string(36, '0') + "1");
}

TEST(NumberTest, OutOfRange) {
  auto range_msg = [](const std::string& t) {
    return "number \"" + t + "\" is out of DynamoDB's range (magnitude 1e-130 to 1e126)";
  };
  for (std::string t : {"1e126", "-1e126", "1e-131", "-1e-131", "9e-131", "0.99e-130", "10e125",
                        "1e200", "1e99999999999999999999999", "1e-99999999999999999999999",
                        "-5e-200"}) {
    ExpectError(t, range_msg(t));
  }
  const std::string big = "1" + std::string(126, '0');
  ExpectError(big, range_msg(big));
  // The extremes that do fit.
  EXPECT_EQ(Canon("1e-130"), "0." + std::string(129, '0') + "1");
  EXPECT_EQ(Canon("-1e-130"), "-0." + std::string(129, '0') + "1");
  EXPECT_EQ(Canon("10e-131"), "0." + std::string(129, '0') + "1");
  const std::string max38 = std::string(38, '9');
  EXPECT_EQ(Canon("0." + max38 + "e126"), max38 + std::string(88, '0'));
  EXPECT_EQ(Canon("-9.99e125"), "-999" + std::string(123, '0'));
  EXPECT_EQ(Canon("1" + std::string(125, '0')), "1" + std::string(125, '0'));
}

TEST(NumberTest, RandomAgainstReference) {
  std::mt19937 rng(20240601);
  std::vector<std::string> texts;
  for (int i = 0; i < 4000; ++i) texts.push_back(RandomNumberText(rng, /*small_alphabet=*/i % 4 == 0));
  std::vector<Decimal> decimals;
  std::vector<testing::Fixed> fixed;
  for (const std::string& t : texts) {
    absl::StatusOr<Decimal> d = ParseDecimal(t);
    ASSERT_TRUE(d.ok()) << t << ": " << d.status();
    fixed.push_back(ToFixed(t));
    const std::string canonical = CanonicalText(*d);
    ASSERT_EQ(canonical, RefCanonical(fixed.back())) << t;
    // Canonical text parses back to the same Decimal.
    absl::StatusOr<Decimal> again = ParseDecimal(canonical);
    ASSERT_TRUE(again.ok()) << canonical;
    ASSERT_EQ(*again, *d) << t;
    decimals.push_back(*std::move(d));
  }
  std::uniform_int_distribution<size_t> pick(0, texts.size() - 1);
  for (int i = 0; i < 40000; ++i) {
    size_t a = pick(rng), b = pick(rng);
    ASSERT_EQ(Sign(CompareDecimal(decimals[a], decimals[b])), RefCompare(fixed[a], fixed[b]))
        << texts[a] << " vs " << texts[b];
  }
  int equal_pairs = 0;
  for (size_t a = 0; a < 1000; ++a) {
    for (size_t b = 0; b < 1000; ++b) {
      if (RefCompare(fixed[a], fixed[b]) == 0) ++equal_pairs;
      ASSERT_EQ(Sign(CompareDecimal(decimals[a], decimals[b])), RefCompare(fixed[a], fixed[b]))
          << texts[a] << " vs " << texts[b];
    }
  }
  EXPECT_GT(equal_pairs, 1000);  // the generator does produce equal values in different spellings
}

}  // namespace
}  // namespace cdcview
