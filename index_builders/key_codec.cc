#include "index_builders/key_codec.h"

#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "index_builders/number.h"

namespace cdcview {
namespace {

constexpr unsigned char kClassNegative = 0x01;
constexpr unsigned char kClassZero = 0x02;
constexpr unsigned char kClassPositive = 0x03;
constexpr int kExponentBias = 129;  // exponents -129 .. 126 -> bytes 0 .. 255
constexpr size_t kMaxDigits = kMaxNumberKeyDigits;

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "cdcview key codec: %s\n", what);
  std::abort();
}

// Appends whole runs between NULs: byte-by-byte push_back was the writer's top cost
// (tests/bench/apply_bench under callgrind).
void AppendEscaped(std::string_view bytes, std::string* out) {
  for (size_t nul; (nul = bytes.find('\0')) != std::string_view::npos;
       bytes.remove_prefix(nul + 1)) {
    out->append(bytes.data(), nul);
    out->append("\0\xFF", 2);
  }
  out->append(bytes);
}

void EncodeNumber(const Decimal* d, std::string* out) {  // d: within DynamoDB's range
  if (d->is_zero()) {
    out->push_back(static_cast<char>(kClassZero));
    return;
  }
  out->push_back(static_cast<char>(d->negative ? kClassNegative : kClassPositive));
  const size_t start = out->size();
  out->push_back(static_cast<char>(d->exponent + kExponentBias));
  // Nibbles digit+1 (1..10), then a 0 nibble; the final byte's low nibble is 0 padding
  // when the terminator lands in a high nibble.
  const std::string& digits = d->digits;
  for (size_t i = 0; i <= digits.size(); i += 2) {
    const unsigned hi = i < digits.size() ? static_cast<unsigned>(digits[i] - '0' + 1) : 0;
    const unsigned lo = i + 1 < digits.size() ? static_cast<unsigned>(digits[i + 1] - '0' + 1) : 0;
    out->push_back(static_cast<char>((hi << 4) | lo));
  }
  if (d->negative) {
    for (size_t i = start; i < out->size(); ++i) (*out)[i] = static_cast<char>(~(*out)[i]);
  }
}

absl::Status Malformed(size_t offset, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed key component at byte ", offset, ": ", std::string(what)));
}

// Decodes the escaped bytes of an S or B from in[pos..]; on success sets *end just past the
// terminator.
absl::Status DecodeBytes(std::string_view in, size_t pos, std::string* bytes, size_t* end) {
  while (true) {
    if (pos >= in.size()) return Malformed(pos, "truncated string or binary (no terminator)");
    const char c = in[pos];
    if (c != '\0') {
      bytes->push_back(c);
      ++pos;
      continue;
    }
    if (pos + 1 < in.size() && in[pos + 1] == '\xFF') {
      bytes->push_back('\0');
      pos += 2;
      continue;
    }
    *end = pos + 1;
    return absl::OkStatus();
  }
}

absl::Status DecodeNumber(std::string_view in, size_t pos, std::string* text, size_t* end) {
  if (pos >= in.size()) return Malformed(pos, "truncated number (no class byte)");
  const auto cls = static_cast<unsigned char>(in[pos]);
  ++pos;
  if (cls == kClassZero) {
    *text = "0";
    *end = pos;
    return absl::OkStatus();
  }
  if (cls != kClassNegative && cls != kClassPositive) {
    return Malformed(pos - 1, absl::StrCat("invalid number class byte ", static_cast<int>(cls)));
  }
  const unsigned char flip = cls == kClassNegative ? 0xFF : 0x00;
  if (pos >= in.size()) return Malformed(pos, "truncated number (no exponent byte)");
  Decimal d;
  d.negative = cls == kClassNegative;
  d.exponent = static_cast<int>(static_cast<unsigned char>(in[pos]) ^ flip) - kExponentBias;
  ++pos;
  while (true) {
    if (pos >= in.size()) return Malformed(pos, "truncated number (no digit terminator)");
    const unsigned char byte = static_cast<unsigned char>(in[pos]) ^ flip;
    const unsigned nibbles[2] = {static_cast<unsigned>(byte >> 4), static_cast<unsigned>(byte & 0xF)};
    bool done = false;
    for (int k = 0; k < 2; ++k) {
      const unsigned nib = nibbles[k];
      if (nib == 0) {
        if (k == 0 && nibbles[1] != 0) return Malformed(pos, "non-zero padding after digits");
        done = true;
        break;
      }
      if (nib > 10) return Malformed(pos, absl::StrCat("invalid digit nibble ", nib));
      d.digits.push_back(static_cast<char>('0' + nib - 1));
    }
    if (d.digits.size() > kMaxDigits) return Malformed(pos, "number has more than 38 digits");
    if (done) break;
    ++pos;
  }
  if (d.digits.empty()) return Malformed(pos, "number without digits");
  if (d.digits.front() == '0') return Malformed(pos, "number digits have a leading zero");
  if (d.digits.back() == '0') return Malformed(pos, "number digits have a trailing zero");
  *text = CanonicalText(d);
  *end = pos + 1;
  return absl::OkStatus();
}

}  // namespace

void EncodeKeyComponent(const AttributeValue& value, std::string* out) {
  switch (value.type()) {
    case AttrType::kS:
      out->push_back(kTagString);
      AppendEscaped(value.scalar(), out);
      out->push_back('\0');
      return;
    case AttrType::kB:
      out->push_back(kTagBinary);
      AppendEscaped(value.scalar(), out);
      out->push_back('\0');
      return;
    case AttrType::kN: {
      absl::StatusOr<Decimal> d = ParseDecimal(value.scalar());
      if (!d.ok()) Die("N key value is not a valid number");
      EncodeNumberKeyComponent(*d, out);
      return;
    }
    default:
      Die("key values must be S, N or B");
  }
}

void EncodeNumberKeyComponent(const Decimal& value, std::string* out) {
  out->push_back(kTagNumber);
  EncodeNumber(&value, out);
}

void EncodeKeyPrefix(const AttributeValue& prefix, std::string* out) {
  switch (prefix.type()) {
    case AttrType::kS:
      out->push_back(kTagString);
      break;
    case AttrType::kB:
      out->push_back(kTagBinary);
      break;
    default:
      Die("key prefixes must be S or B");
  }
  AppendEscaped(prefix.scalar(), out);
}

absl::StatusOr<AttributeValue> DecodeKeyComponent(std::string_view* in) {
  const std::string_view data = *in;
  if (data.empty()) return Malformed(0, "empty input (no type tag)");
  const char tag = data[0];
  size_t end = 0;
  if (tag == kTagString || tag == kTagBinary) {
    std::string bytes;
    if (absl::Status s = DecodeBytes(data, 1, &bytes, &end); !s.ok()) return s;
    in->remove_prefix(end);
    return tag == kTagString ? AttributeValue::String(std::move(bytes))
                             : AttributeValue::Binary(std::move(bytes));
  }
  if (tag == kTagNumber) {
    std::string text;
    if (absl::Status s = DecodeNumber(data, 1, &text, &end); !s.ok()) return s;
    absl::StatusOr<AttributeValue> v = AttributeValue::Number(text);
    if (!v.ok()) return Malformed(1, std::string(v.status().message()));
    in->remove_prefix(end);
    return v;
  }
  return Malformed(0, absl::StrCat("unknown type tag ", static_cast<int>(static_cast<unsigned char>(tag))));
}

std::string PrefixSuccessor(std::string_view prefix) {
  std::string s(prefix);
  while (!s.empty() && static_cast<unsigned char>(s.back()) == 0xFF) s.pop_back();
  if (!s.empty()) s.back() = static_cast<char>(static_cast<unsigned char>(s.back()) + 1);
  return s;
}

}  // namespace cdcview
