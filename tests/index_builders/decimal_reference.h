// Test-only reference for DynamoDB numbers, written independently of index_builders/number.cc:
// numbers become a fixed-point digit array wide enough for every valid value, and are
// compared and printed from that. Also a generator of random valid number texts in many
// spellings (exponents, leading/trailing zeros, signs).
#pragma once

#include <cstdint>
#include <random>
#include <string>

namespace cdcview::testing {

// Weights 10^(kIntWidth-1) .. 10^(-kFracWidth). Valid numbers need 10^125 .. 10^-167.
inline constexpr int kIntWidth = 140;
inline constexpr int kFracWidth = 180;

struct Fixed {
  bool negative = false;  // never set for zero
  std::string digits = std::string(kIntWidth + kFracWidth, '0');
};

// Parses [+-]digits[.digits][(e|E)[+-]digits] of a value known to be valid. Each mantissa
// digit is put at its absolute position.
inline Fixed ToFixed(const std::string& text) {
  Fixed f;
  size_t i = 0;
  bool neg = false;
  if (text[i] == '+' || text[i] == '-') neg = text[i++] == '-';
  size_t mant_begin = i;
  while (i < text.size() && text[i] != 'e' && text[i] != 'E') ++i;
  std::string mant = text.substr(mant_begin, i - mant_begin);
  long exp = 0;
  if (i < text.size()) exp = std::stol(text.substr(i + 1));  // stol accepts "+007", "-3"
  size_t point = mant.find('.');
  std::string int_part = point == std::string::npos ? mant : mant.substr(0, point);
  std::string frac_part = point == std::string::npos ? "" : mant.substr(point + 1);
  // Digit j of int_part (from the left) has weight 10^(len-1-j+exp); frac digit j has
  // weight 10^(-1-j+exp). Index of weight w in the array: kIntWidth-1-w.
  bool any = false;
  auto put = [&](char c, long weight) {
    if (c == '0') return;
    long idx = kIntWidth - 1 - weight;
    if (idx < 0 || idx >= static_cast<long>(f.digits.size())) std::abort();  // test bug
    f.digits[idx] = c;
    any = true;
  };
  for (size_t j = 0; j < int_part.size(); ++j) {
    put(int_part[j], static_cast<long>(int_part.size()) - 1 - static_cast<long>(j) + exp);
  }
  for (size_t j = 0; j < frac_part.size(); ++j) put(frac_part[j], -1 - static_cast<long>(j) + exp);
  f.negative = neg && any;
  return f;
}

inline int RefCompare(const Fixed& a, const Fixed& b) {
  bool za = a.digits.find_first_not_of('0') == std::string::npos;
  bool zb = b.digits.find_first_not_of('0') == std::string::npos;
  int sa = za ? 0 : (a.negative ? -1 : 1);
  int sb = zb ? 0 : (b.negative ? -1 : 1);
  if (sa != sb) return sa < sb ? -1 : 1;
  int c = a.digits.compare(b.digits);  // equal widths: string order is numeric order
  c = c < 0 ? -1 : (c > 0 ? 1 : 0);
  return sa < 0 ? -c : c;
}

inline std::string RefCanonical(const Fixed& f) {
  std::string int_part = f.digits.substr(0, kIntWidth);
  std::string frac_part = f.digits.substr(kIntWidth);
  int_part.erase(0, int_part.find_first_not_of('0') == std::string::npos
                        ? int_part.size()
                        : int_part.find_first_not_of('0'));
  size_t last = frac_part.find_last_not_of('0');
  frac_part.erase(last == std::string::npos ? 0 : last + 1);
  if (int_part.empty() && frac_part.empty()) return "0";
  std::string out = f.negative ? "-" : "";
  out += int_part.empty() ? "0" : int_part;
  if (!frac_part.empty()) out += "." + frac_part;
  return out;
}

inline int Sign(int c) { return c < 0 ? -1 : (c > 0 ? 1 : 0); }

// A random valid DynamoDB number, spelled in a random way. Mixes zero, tiny and huge
// exponents, negatives and 38-digit mantissas; `small_alphabet` makes digits mostly 0/1/9
// and lengths short so that equal and adjacent values are common.
inline std::string RandomNumberText(std::mt19937& rng, bool small_alphabet = false) {
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  bool negative = uni(0, 1) == 1;
  std::string sign = negative ? "-" : (uni(0, 4) == 0 ? "+" : "");
  if (uni(0, 19) == 0) {  // zero
    const char* zeros[] = {"0", "0.0", "00", "0e10", ".0", "0.", "0E-500", "000.000e+3"};
    return sign + zeros[uni(0, 7)];
  }
  int n;
  int e;  // value = 0.d1..dn * 10^e, -129 <= e <= 126
  if (small_alphabet) {
    n = uni(1, 3);
    e = uni(-2, 3);
    if (uni(0, 9) == 0) e = uni(0, 1) ? uni(-129, -127) : uni(124, 126);
  } else {
    int shape = uni(0, 3);
    n = shape == 0 ? 38 : uni(1, 38);
    int range = uni(0, 3);
    if (range == 0) {
      e = uni(-129, -115);
    } else if (range == 1) {
      e = uni(112, 126);
    } else if (range == 2) {
      e = uni(-5, 8);
    } else {
      e = uni(-129, 126);
    }
  }
  std::string digits;
  const char small[] = {'0', '1', '9'};
  for (int i = 0; i < n; ++i) {
    char c = small_alphabet ? small[uni(0, 2)] : static_cast<char>('0' + uni(0, 9));
    if ((i == 0 || i == n - 1) && c == '0') c = small_alphabet ? '1' : static_cast<char>('1' + uni(0, 8));
    digits.push_back(c);
  }
  std::string lead(uni(0, 2) == 0 ? uni(1, 3) : 0, '0');
  std::string trail(uni(0, 2) == 0 ? uni(1, 3) : 0, '0');
  if (uni(0, 1) == 0) {
    // Scientific: digits[0:s] "." digits[s:] times 10^(e-s).
    int s = uni(0, n);
    std::string mant = lead + digits.substr(0, s);
    std::string frac = digits.substr(s) + trail;
    if (!frac.empty()) {
      mant += "." + frac;
    } else if (uni(0, 1)) {
      mant += ".";
    }
    if (mant.empty() || mant == ".") mant = "0" + mant;
    int x = e - s;
    std::string exp_sign = x < 0 ? "-" : (uni(0, 1) ? "+" : "");
    std::string exp_zeros(uni(0, 3) == 0 ? 1 : 0, '0');
    return sign + mant + (uni(0, 1) ? "e" : "E") + exp_sign + exp_zeros + std::to_string(x < 0 ? -x : x);
  }
  // Plain decimal.
  std::string body;
  if (e <= 0) {
    body = lead + (uni(0, 3) == 0 ? "" : "0") + "." + std::string(-e, '0') + digits + trail;
  } else if (e < n) {
    body = lead + digits.substr(0, e) + "." + digits.substr(e) + trail;
  } else {
    body = lead + digits + std::string(e - n, '0');
    if (uni(0, 2) == 0) body += "." + trail;
  }
  return sign + body;
}

}  // namespace cdcview::testing
