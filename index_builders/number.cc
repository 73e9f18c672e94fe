#include "index_builders/number.h"

#include <algorithm>
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

// ---- Exact arithmetic
//
// A non-zero Decimal is the integer M (its digits) times 10^L with L = exponent - digits.size().
// Both operations work on such integers as digit strings: schoolbook addition, subtraction and
// long division. Operands have at most a few hundred digits, so there is no need for anything
// faster.

namespace {

int LowExponent(const Decimal& d) { return d.exponent - static_cast<int>(d.digits.size()); }

// M * 10^low with M given as digits (leading and trailing zeros allowed) -> normalized Decimal.
Decimal Normalize(std::string digits, bool negative, int low) {
  size_t first = digits.find_first_not_of('0');
  if (first == std::string::npos) return Decimal{};
  digits.erase(0, first);
  Decimal d;
  d.negative = negative;
  d.exponent = static_cast<int>(digits.size()) + low;
  digits.erase(digits.find_last_not_of('0') + 1);
  d.digits = std::move(digits);
  return d;
}

// The digits of |d| as an integer at scale 10^low (low <= LowExponent(d)), left-padded to width.
std::string Scaled(const Decimal& d, int low, size_t width) {
  std::string m = d.digits;
  m.append(static_cast<size_t>(LowExponent(d) - low), '0');
  m.insert(0, width - m.size(), '0');
  return m;
}

// a + b for equal-width digit strings; the result is one digit wider.
std::string AddDigits(const std::string& a, const std::string& b) {
  std::string out(a.size() + 1, '0');
  int carry = 0;
  for (size_t i = a.size(); i-- > 0;) {
    int sum = (a[i] - '0') + (b[i] - '0') + carry;
    out[i + 1] = static_cast<char>('0' + sum % 10);
    carry = sum / 10;
  }
  out[0] = static_cast<char>('0' + carry);
  return out;
}

// a - b for equal-width digit strings with a >= b.
std::string SubtractDigits(const std::string& a, const std::string& b) {
  std::string out(a.size(), '0');
  int borrow = 0;
  for (size_t i = a.size(); i-- > 0;) {
    int diff = (a[i] - '0') - (b[i] - '0') - borrow;
    borrow = diff < 0 ? 1 : 0;
    out[i] = static_cast<char>('0' + diff + 10 * borrow);
  }
  return out;
}

constexpr size_t kQuotientDigits = 38;

}  // namespace

Decimal AddDecimal(const Decimal& a, const Decimal& b) {
  if (a.is_zero()) return b;
  if (b.is_zero()) return a;
  const int low = std::min(LowExponent(a), LowExponent(b));
  const size_t width = static_cast<size_t>(std::max(a.exponent, b.exponent) - low);
  const std::string ma = Scaled(a, low, width);
  const std::string mb = Scaled(b, low, width);
  if (a.negative == b.negative) return Normalize(AddDigits(ma, mb), a.negative, low);
  // Opposite signs: the larger magnitude decides the sign; equal magnitudes cancel to zero.
  const int c = ma.compare(mb);
  if (c == 0) return Decimal{};
  return c > 0 ? Normalize(SubtractDigits(ma, mb), a.negative, low)
               : Normalize(SubtractDigits(mb, ma), b.negative, low);
}

Decimal SubtractDecimal(const Decimal& a, const Decimal& b) {
  Decimal negated = b;
  if (!negated.is_zero()) negated.negative = !negated.negative;
  return AddDecimal(a, negated);
}

Decimal DivideDecimal(const Decimal& a, uint64_t divisor) {
  if (a.is_zero() || divisor == 0) return Decimal{};
  // Long division of M by divisor, continuing into appended zeros (each lowers the scale)
  // until M is consumed and the quotient is exact or has a guard digit past 38.
  std::string quotient;
  unsigned __int128 rem = 0;
  int low = LowExponent(a);
  size_t significant = 0;
  for (size_t i = 0;; ++i) {
    const bool in_m = i < a.digits.size();
    if (!in_m && (rem == 0 || significant > kQuotientDigits)) break;
    if (!in_m) --low;
    rem = rem * 10 + static_cast<unsigned>(in_m ? a.digits[i] - '0' : 0);
    const auto q = static_cast<unsigned>(rem / divisor);
    rem %= divisor;
    if (q != 0 || significant != 0) {
      quotient.push_back(static_cast<char>('0' + q));
      ++significant;
    }
  }
  if (quotient.size() > kQuotientDigits) {
    const std::string dropped = quotient.substr(kQuotientDigits);
    quotient.resize(kQuotientDigits);
    low += static_cast<int>(dropped.size());
    const bool beyond_half_digit =
        rem != 0 || dropped.find_first_not_of('0', 1) != std::string::npos;
    const bool odd = (quotient.back() - '0') % 2 == 1;
    const bool up = dropped[0] > '5' || (dropped[0] == '5' && (beyond_half_digit || odd));
    if (up) {
      size_t i = quotient.size();
      while (i > 0 && quotient[i - 1] == '9') quotient[--i] = '0';
      if (i == 0) {
        quotient.insert(quotient.begin(), '1');  // 99..9 + 1: one digit longer, trailing zeros
      } else {
        ++quotient[i - 1];
      }
    }
  }
  return Normalize(std::move(quotient), a.negative, low);
}

}  // namespace cdcview
