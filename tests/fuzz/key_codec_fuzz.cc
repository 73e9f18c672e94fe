// The key codec (index_builders/key_codec.h) on arbitrary bytes and values:
// - DecodeKeyComponent on any bytes returns a value or INVALID_ARGUMENT, never aborts, and
//   re-encoding what it decoded gives back exactly the bytes it consumed (one encoding per
//   value: two would be two keys for one item);
// - order: for two S, B or N values made from the input, their encodings compare as the values
//   do (bytes unsigned for S and B, numerically for N), and the encoding of a prefix of an S or
//   B value is a byte prefix of the value's encoding (begins_with as a range scan).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "index_builders/key_codec.h"
#include "index_builders/number.h"
#include "tests/fuzz/fuzz_support.h"

namespace cdcview {
namespace {

int Sign(int v) { return (v > 0) - (v < 0); }

std::string Encoded(const AttributeValue& v) {
  std::string out;
  EncodeKeyComponent(v, &out);
  return out;
}

void DecodeAll(std::string_view in) {
  while (!in.empty()) {
    std::string_view before = in;
    absl::StatusOr<AttributeValue> v = DecodeKeyComponent(&in);
    if (!v.ok()) {
      fuzz::RequireRejectedAs(v.status(), absl::StatusCode::kInvalidArgument,
                              "a malformed key component is INVALID_ARGUMENT");
      fuzz::Require(in == before, "a failed decode does not advance");
      return;
    }
    fuzz::Require(in.size() < before.size(), "a decoded component consumed bytes");
    const std::string_view consumed = before.substr(0, before.size() - in.size());
    fuzz::Require(Encoded(*v) == consumed, "encode(decode(bytes)) == bytes");
  }
}

// Two values of one type from the halves of `rest`, split at its first byte's position.
void CheckOrder(uint8_t selector, std::string_view rest) {
  const size_t cut = rest.empty() ? 0 : static_cast<uint8_t>(rest[0]) % rest.size();
  if (!rest.empty()) rest.remove_prefix(1);
  const std::string_view a = rest.substr(0, std::min(cut, rest.size()));
  const std::string_view b = rest.substr(a.size());
  switch (selector % 3) {
    case 0:
    case 1: {
      const bool binary = selector % 3 == 1;
      auto make = [binary](std::string_view s) {
        return binary ? AttributeValue::Binary(std::string(s)) : AttributeValue::String(std::string(s));
      };
      const std::string ea = Encoded(make(a)), eb = Encoded(make(b));
      fuzz::Require(Sign(a.compare(b)) == Sign(ea.compare(eb)),
                    "S/B encodings order as their bytes do");
      std::string prefix;
      EncodeKeyPrefix(make(a.substr(0, a.size() / 2)), &prefix);
      fuzz::Require(ea.compare(0, prefix.size(), prefix) == 0,
                    "a prefix's encoding is a byte prefix of the value's");
      std::string_view in = ea;
      absl::StatusOr<AttributeValue> back = DecodeKeyComponent(&in);
      fuzz::Require(back.ok() && in.empty() && *back == make(a), "decode(encode(v)) == v");
      return;
    }
    default: {
      absl::StatusOr<AttributeValue> na = AttributeValue::Number(a);
      absl::StatusOr<AttributeValue> nb = AttributeValue::Number(b);
      if (!na.ok() || !nb.ok()) return;
      const std::string ea = Encoded(*na), eb = Encoded(*nb);
      fuzz::Require(ea.size() <= kMaxNumberKeyComponentBytes,
                    "an N component fits kMaxNumberKeyComponentBytes");
      const int want = CompareDecimal(*ParseDecimal(na->scalar()), *ParseDecimal(nb->scalar()));
      fuzz::Require(Sign(want) == Sign(ea.compare(eb)), "N encodings order numerically");
      std::string_view in = ea;
      absl::StatusOr<AttributeValue> back = DecodeKeyComponent(&in);
      fuzz::Require(back.ok() && in.empty() && *back == *na, "decode(encode(n)) == n");
      return;
    }
  }
}


// Seeds: components and whole keys as the writer encodes them.
void WriteSeeds(const std::string& dir) {
  const std::vector<AttributeValue> values = {
      AttributeValue::String("USER#1"), AttributeValue::String(std::string("a\0b", 3)),
      AttributeValue::String(""), AttributeValue::Binary(std::string("\0\xff\x01", 3)),
      *AttributeValue::Number("0"), *AttributeValue::Number("-1.5"),
      *AttributeValue::Number("12345678901234567890123456789012345678"),
      *AttributeValue::Number("1e-130"), *AttributeValue::Number("-9.99e125")};
  std::string key;
  for (size_t i = 0; i < values.size(); ++i) {
    fuzz::WriteSeed(dir, "component_" + std::to_string(i), Encoded(values[i]));
    key += Encoded(values[i]);
  }
  fuzz::WriteSeed(dir, "key_all", key);
  std::string prefix;
  EncodeKeyPrefix(AttributeValue::String("USER#"), &prefix);
  fuzz::WriteSeed(dir, "prefix", prefix);
}

}  // namespace
}  // namespace cdcview

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cdcview;
  const std::string_view input = fuzz::Bytes(data, size);
  DecodeAll(input);
  if (!input.empty()) CheckOrder(static_cast<uint8_t>(input[0]), input.substr(1));
  return 0;
}

CDCVIEW_FUZZ_SEED_MODE(cdcview::WriteSeeds)
