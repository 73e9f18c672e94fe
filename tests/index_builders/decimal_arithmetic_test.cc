// Exact sums, differences and averages of DynamoDB numbers (AddDecimal, SubtractDecimal,
// DivideDecimal), against exact expectations and an independent fixed-point reference.
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "index_builders/number.h"
#include "tests/index_builders/decimal_reference.h"

namespace cdcview {
namespace {

using ::cdcview::testing::Fixed;
using ::cdcview::testing::RandomNumberText;
using ::cdcview::testing::RefCanonical;
using ::cdcview::testing::ToFixed;

Decimal D(std::string_view text) {
  absl::StatusOr<Decimal> d = ParseDecimal(text);
  EXPECT_TRUE(d.ok()) << text << ": " << d.status();
  return d.ok() ? *d : Decimal{};
}

std::string Sum(std::string_view a, std::string_view b) { return CanonicalText(AddDecimal(D(a), D(b))); }
std::string Diff(std::string_view a, std::string_view b) {
  return CanonicalText(SubtractDecimal(D(a), D(b)));
}
std::string Avg(std::string_view sum, uint64_t count) {
  return CanonicalText(DivideDecimal(D(sum), count));
}

TEST(DecimalArithmeticTest, SmallSumsAreExact) {
  EXPECT_EQ(Sum("0.1", "0.2"), "0.3");
  EXPECT_EQ(Sum("1", "2"), "3");
  EXPECT_EQ(Sum("9.99", "0.01"), "10");
  EXPECT_EQ(Sum("0", "-4.5"), "-4.5");
  EXPECT_EQ(Sum("-4.5", "0"), "-4.5");
  EXPECT_EQ(Sum("100", "0.001"), "100.001");
}

TEST(DecimalArithmeticTest, NegativesAndCancellation) {
  EXPECT_EQ(Sum("-1.5", "-2.25"), "-3.75");
  EXPECT_EQ(Sum("-1.5", "2"), "0.5");
  EXPECT_EQ(Sum("1.5", "-2"), "-0.5");
  EXPECT_EQ(Sum("123.456", "-123.456"), "0");
  EXPECT_TRUE(AddDecimal(D("123.456"), D("-123.456")).is_zero());
  EXPECT_EQ(AddDecimal(D("5"), D("-5")), Decimal{});  // normalized zero: no sign, no digits
  EXPECT_EQ(Diff("0.3", "0.1"), "0.2");
  EXPECT_EQ(Diff("1", "1"), "0");
  EXPECT_EQ(Diff("-1", "-3"), "2");
  EXPECT_EQ(Diff("0", "7"), "-7");
  EXPECT_EQ(Diff("10", "0.0000000001"), "9.9999999999");
}

TEST(DecimalArithmeticTest, SumsOutgrowThirtyEightDigits) {
  const std::string max38(38, '9');  // 99..9 (38 nines)
  EXPECT_EQ(Sum(max38, "1"), "1" + std::string(38, '0'));
  EXPECT_EQ(Sum(max38, max38), "1" + std::string(37, '9') + "8");
  // 1e125 + 1e-129: 255 significant digits, kept exactly.
  const std::string huge_plus_tiny = Sum("1e125", "1e-129");
  EXPECT_EQ(huge_plus_tiny, "1" + std::string(125, '0') + "." + std::string(128, '0') + "1");
  EXPECT_EQ(CanonicalText(SubtractDecimal(AddDecimal(D("1e125"), D("1e-129")), D("1e125"))),
            "0." + std::string(128, '0') + "1");
  // Beyond DynamoDB's range: 9.99..e125 * 20 has exponent 127.
  Decimal big = D("9.9999999999999999999999999999999999999e125");
  Decimal total;
  for (int i = 0; i < 20; ++i) total = AddDecimal(total, big);
  EXPECT_EQ(total.exponent, 128);
  EXPECT_EQ(CanonicalText(total), "199999999999999999999999999999999999998" + std::string(89, '0'));
  for (int i = 0; i < 20; ++i) total = SubtractDecimal(total, big);
  EXPECT_TRUE(total.is_zero());
}

TEST(DecimalArithmeticTest, AverageRoundsToThirtyEightDigitsHalfEven) {
  EXPECT_EQ(Avg("6", 3), "2");
  EXPECT_EQ(Avg("1", 4), "0.25");
  EXPECT_EQ(Avg("-7", 2), "-3.5");
  EXPECT_EQ(Avg("1", 3), "0." + std::string(38, '3'));
  EXPECT_EQ(Avg("2", 3), "0." + std::string(37, '6') + "7");
  EXPECT_EQ(Avg("-2", 3), "-0." + std::string(37, '6') + "7");
  // Ties: 39 significant digits ending in 5 (sums, since a parsed number has at most 38),
  // rounded back to 38 digits towards the even neighbour.
  auto avg = [](const Decimal& sum, uint64_t n) { return CanonicalText(DivideDecimal(sum, n)); };
  const Decimal odd_tie = AddDecimal(D("1e38"), D("15"));   // 10..015 -> 10..02|0
  const Decimal even_tie = AddDecimal(D("1e38"), D("25"));  // 10..025 -> 10..02|0
  EXPECT_EQ(avg(odd_tie, 1), "1" + std::string(36, '0') + "20");
  EXPECT_EQ(avg(even_tie, 1), "1" + std::string(36, '0') + "20");
  EXPECT_EQ(avg(AddDecimal(D("1e38"), D("35")), 1), "1" + std::string(36, '0') + "40");
  // Just above a tie rounds up, just below down.
  EXPECT_EQ(avg(AddDecimal(D("1e39"), D("251")), 1), "1" + std::string(36, '0') + "300");
  EXPECT_EQ(avg(AddDecimal(D("1e39"), D("249")), 1), "1" + std::string(36, '0') + "200");
  // A carry through every digit: 39 nines -> 1e39.
  EXPECT_EQ(avg(AddDecimal(D("1e39"), D("-1")), 1), "1" + std::string(39, '0'));
  // Sums over 38 digits divide exactly where the quotient fits.
  EXPECT_EQ(Avg("2" + std::string(40, '0'), 2), "1" + std::string(40, '0'));
  EXPECT_EQ(Avg("0", 5), "0");
  EXPECT_EQ(Avg("1e-129", 2), "0." + std::string(129, '0') + "5");  // below DynamoDB's range
  // Largest divisor: 38 digits, the last one rounded (checked with Python's decimal module,
  // prec=38, ROUND_HALF_EVEN).
  EXPECT_EQ(Avg("9.9999999999999999999999999999999999999e125", UINT64_MAX),
            "54210108624275221703311375920552804341" + std::string(69, '0'));
}

// Fixed-point reference sum: equal-width digit arrays, signed.
std::string RefSum(const std::string& a, const std::string& b) {
  Fixed x = ToFixed(a), y = ToFixed(b);
  auto add = [](const std::string& p, const std::string& q) {
    std::string out(p.size(), '0');
    int carry = 0;
    for (size_t i = p.size(); i-- > 0;) {
      int s = (p[i] - '0') + (q[i] - '0') + carry;
      out[i] = static_cast<char>('0' + s % 10);
      carry = s / 10;
    }
    return out;  // the reference is wide enough that two valid numbers never carry out
  };
  auto sub = [](const std::string& p, const std::string& q) {
    std::string out(p.size(), '0');
    int borrow = 0;
    for (size_t i = p.size(); i-- > 0;) {
      int s = (p[i] - '0') - (q[i] - '0') - borrow;
      borrow = s < 0;
      out[i] = static_cast<char>('0' + s + 10 * borrow);
    }
    return out;
  };
  Fixed r;
  if (x.negative == y.negative) {
    r.digits = add(x.digits, y.digits);
    r.negative = x.negative;
  } else if (x.digits >= y.digits) {
    r.digits = sub(x.digits, y.digits);
    r.negative = x.negative;
  } else {
    r.digits = sub(y.digits, x.digits);
    r.negative = y.negative;
  }
  if (r.digits.find_first_not_of('0') == std::string::npos) r.negative = false;
  return RefCanonical(r);
}

TEST(DecimalArithmeticTest, RandomSumsMatchFixedPointReference) {
  std::mt19937 rng(20251129);
  for (int i = 0; i < 20000; ++i) {
    const bool small = i % 2 == 0;
    const std::string a = RandomNumberText(rng, small);
    const std::string b = RandomNumberText(rng, small);
    ASSERT_EQ(Sum(a, b), RefSum(a, b)) << a << " + " << b;
    // Exactness: adding then subtracting gives the operand back.
    ASSERT_EQ(SubtractDecimal(AddDecimal(D(a), D(b)), D(b)), D(a)) << a << " + " << b << " - " << b;
  }
}

}  // namespace
}  // namespace cdcview
