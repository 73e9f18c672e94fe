// DynamoDB numbers: parsing, canonical text and comparison.
//
// A DynamoDB number has up to 38 significant digits and a magnitude of 1e-130 to
// 9.99..e125 (or zero). `1`, `1.0`, `01`, `1e0` and `0.1E1` are the same number; its
// canonical text is the plain decimal form without exponent, leading or trailing zeros
// ("1", "-0.5", "1000", "0.00012"), which is also the form DynamoDB returns.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace cdcview {

// A number as sign, significant digits and exponent: value = (-1)^negative * 0.d1d2..dn * 10^exponent.
// Zero is {negative=false, digits="", exponent=0}. digits has no leading or trailing '0'.
struct Decimal {
  bool negative = false;
  std::string digits;
  int exponent = 0;

  bool is_zero() const { return digits.empty(); }
  friend bool operator==(const Decimal&, const Decimal&) = default;
};

// Parses DynamoDB number text: [+-]digits[.digits][(e|E)[+-]digits], also ".5" and "5.".
// Errors (INVALID_ARGUMENT) name the text and the rule broken, e.g.
// "number \"1e200\" is out of DynamoDB's range (magnitude 1e-130 to 1e126)".
absl::StatusOr<Decimal> ParseDecimal(std::string_view text);

// Plain decimal text of a parsed number (see the header comment).
std::string CanonicalText(const Decimal& d);

// Convenience: ParseDecimal then CanonicalText.
absl::StatusOr<std::string> CanonicalNumber(std::string_view text);

// Numeric comparison: <0, 0, >0.
int CompareDecimal(const Decimal& a, const Decimal& b);

}  // namespace cdcview

namespace cdcview {

// Exact arithmetic for aggregates. Sums and differences are exact whatever their length:
// the result may have more than 38 significant digits and lie outside DynamoDB's range (a
// sum of many large numbers), which is why it is a Decimal and not re-parsed text.
Decimal AddDecimal(const Decimal& a, const Decimal& b);
Decimal SubtractDecimal(const Decimal& a, const Decimal& b);

// a / divisor (divisor > 0) rounded to 38 significant digits, ties to even (IEEE 754's
// roundTiesToEven, so repeated averaging has no upward drift): avg = sum / count.
Decimal DivideDecimal(const Decimal& a, uint64_t divisor);

}  // namespace cdcview
