#include "index_builders/number.h"

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace cdcview {
namespace {

constexpr int kMaxDigits = 38;
// value = 0.d1d2.. * 10^exponent with d1 != 0, so 1e-130 has exponent -129 and
// 9.99..e125 has exponent 126.
constexpr int kMinExponent = -129;
constexpr int kMaxExponent = 126;
// Exponents written in the text are clamped to this magnitude while parsing: far outside
// the range above, far inside int64.
constexpr int64_t kExponentClamp = int64_t{1} << 40;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

absl::Status SyntaxError(std::string_view text) {
  return absl::InvalidArgumentError(absl::StrCat("number \"", std::string(text), "\" is not a valid number"));
}

}  // namespace

absl::StatusOr<Decimal> ParseDecimal(std::string_view text) {
  size_t i = 0;
  const size_t n = text.size();
  bool negative = false;
  if (i < n && (text[i] == '+' || text[i] == '-')) {
    negative = text[i] == '-';
    ++i;
  }
  // Mantissa: all digits, integer part then fraction part.
  std::string all_digits;
  int64_t int_digits = 0;
  size_t mantissa_digits = 0;
  while (i < n && IsDigit(text[i])) {
    all_digits.push_back(text[i]);
    ++int_digits;
    ++mantissa_digits;
    ++i;
  }
  if (i < n && text[i] == '.') {
    ++i;
    while (i < n && IsDigit(text[i])) {
      all_digits.push_back(text[i]);
      ++mantissa_digits;
      ++i;
    }
  }
  if (mantissa_digits == 0) return SyntaxError(text);
  int64_t exp10 = 0;
  if (i < n && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    bool exp_negative = false;
    if (i < n && (text[i] == '+' || text[i] == '-')) {
      exp_negative = text[i] == '-';
      ++i;
    }
    size_t exp_digits = 0;
    while (i < n && IsDigit(text[i])) {
      if (exp10 < kExponentClamp) exp10 = exp10 * 10 + (text[i] - '0');
      ++exp_digits;
      ++i;
    }
    if (exp_digits == 0) return SyntaxError(text);
    if (exp10 > kExponentClamp) exp10 = kExponentClamp;
    if (exp_negative) exp10 = -exp10;
  }
  if (i != n) return SyntaxError(text);

  // Strip leading zeros (each moves the decimal point) and trailing zeros.
  size_t first = 0;
  while (first < all_digits.size() && all_digits[first] == '0') ++first;
  if (first == all_digits.size()) return Decimal{};  // zero, whatever its sign or exponent
  size_t last = all_digits.size();
  while (all_digits[last - 1] == '0') --last;

  Decimal d;
  d.negative = negative;
  d.digits = all_digits.substr(first, last - first);
  // all_digits = 0.<all_digits> * 10^int_digits; dropping `first` leading zeros.
  const int64_t exponent = int_digits - static_cast<int64_t>(first) + exp10;
  if (d.digits.size() > static_cast<size_t>(kMaxDigits)) {
    return absl::InvalidArgumentError(
        absl::StrCat("number \"", std::string(text), "\" has more than 38 significant digits"));
  }
  if (exponent < kMinExponent || exponent > kMaxExponent) {
    return absl::InvalidArgumentError(absl::StrCat(
        "number \"", std::string(text), "\" is out of DynamoDB's range (magnitude 1e-130 to 1e126)"));
  }
  d.exponent = static_cast<int>(exponent);
  return d;
}

std::string CanonicalText(const Decimal& d) {
  if (d.is_zero()) return "0";
  std::string out;
  if (d.negative) out.push_back('-');
  const int len = static_cast<int>(d.digits.size());
  if (d.exponent <= 0) {
    out.append("0.");
    out.append(static_cast<size_t>(-d.exponent), '0');
    out.append(d.digits);
  } else if (d.exponent < len) {
    out.append(d.digits, 0, static_cast<size_t>(d.exponent));
    out.push_back('.');
    out.append(d.digits, static_cast<size_t>(d.exponent), std::string::npos);
  } else {
    out.append(d.digits);
    out.append(static_cast<size_t>(d.exponent - len), '0');
  }
  return out;
}

absl::StatusOr<std::string> CanonicalNumber(std::string_view text) {
  absl::StatusOr<Decimal> d = ParseDecimal(text);
  if (!d.ok()) return d.status();
  return CanonicalText(*d);
}

int CompareDecimal(const Decimal& a, const Decimal& b) {
  // Signum: -1, 0, +1.
  const int sa = a.is_zero() ? 0 : (a.negative ? -1 : 1);
  const int sb = b.is_zero() ? 0 : (b.negative ? -1 : 1);
  if (sa != sb) return sa < sb ? -1 : 1;
  if (sa == 0) return 0;
  // Same sign, both non-zero: compare magnitudes (normalized, so exponent first).
  int magnitude;
  if (a.exponent != b.exponent) {
    magnitude = a.exponent < b.exponent ? -1 : 1;
  } else {
    const int c = a.digits.compare(b.digits);  // no trailing zeros: a prefix is smaller
    magnitude = c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  return sa > 0 ? magnitude : -magnitude;
}

}  // namespace cdcview
