#include "daemon/cli/json_output.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string_view>
#include <vector>

namespace cdcview {
namespace {

template <typename Map>
std::string Object(const Map& fields, bool ddb) {
  // Sorted by name so output is stable (protobuf maps are unordered).
  std::vector<const typename Map::value_type*> sorted;
  for (const auto& kv : fields) sorted.push_back(&kv);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->first < b->first; });
  std::string out = "{";
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (i) out += ",";
    out += JsonString(sorted[i]->first) + ":" + ValueToJson(sorted[i]->second, ddb);
  }
  return out + "}";
}

template <typename List, typename F>
std::string Array(const List& values, F&& render) {
  std::string out = "[";
  bool first = true;
  for (const auto& v : values) {
    if (!first) out += ",";
    first = false;
    out += render(v);
  }
  return out + "]";
}

// Whether number text (DynamoDB's decimal form, optionally with an exponent) is a value a
// double holds exactly enough to print back the same: at most 15 significant digits (DBL_DIG)
// and a decimal exponent a normal double reaches (1e-307 up to below 1e308). Text that does
// not parse is not a number JSON may carry as such.
bool FitsDouble(std::string_view text) {
  size_t i = 0;
  if (i < text.size() && (text[i] == '-' || text[i] == '+')) ++i;
  std::string digits;
  long point = 0;  // value = 0.<digits> * 10^point
  bool seen_point = false;
  for (; i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'); ++i) {
    if (text[i] == '.') {
      if (seen_point) return false;
      seen_point = true;
      continue;
    }
    digits.push_back(text[i]);
    if (!seen_point) ++point;
  }
  if (digits.empty()) return false;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    bool negative = i < text.size() && text[i] == '-';
    if (i < text.size() && (text[i] == '-' || text[i] == '+')) ++i;
    if (i == text.size()) return false;
    long exponent = 0;
    for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
      if (exponent < 100000) exponent = exponent * 10 + (text[i] - '0');
    }
    point += negative ? -exponent : exponent;
  }
  if (i != text.size()) return false;
  size_t first = digits.find_first_not_of('0');
  if (first == std::string::npos) return true;  // zero
  point -= static_cast<long>(first);
  const size_t last = digits.find_last_not_of('0');
  const size_t significant = last - first + 1;
  const long exponent = point - 1;  // of the first significant digit: d.ddd * 10^exponent
  return significant <= 15 && exponent >= -307 && exponent <= 307;
}

// Plain JSON: a number a double holds, as a number; any other as a string of its exact text,
// so that jq and JavaScript (which parse every JSON number into a double) do not round it.
std::string PlainNumber(const std::string& text) {
  return FitsDouble(text) ? text : JsonString(text);
}

}  // namespace

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  return out + "\"";
}

std::string Base64(const std::string& bytes) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    uint32_t n = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int k = 3; k >= 0; --k) out.push_back(kAlphabet[(n >> (6 * k)) & 63]);
  }
  if (i + 1 == bytes.size()) {
    uint32_t n = uint8_t(bytes[i]) << 16;
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += "==";
  } else if (i + 2 == bytes.size()) {
    uint32_t n = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += kAlphabet[(n >> 6) & 63];
    out += "=";
  }
  return out;
}

std::string ValueToJson(const v1::AttributeValue& v, bool ddb) {
  auto typed = [&](const char* type, const std::string& body) {
    return ddb ? std::string("{\"") + type + "\":" + body + "}" : body;
  };
  auto str = [](const std::string& s) { return JsonString(s); };
  auto b64 = [](const std::string& s) { return JsonString(Base64(s)); };
  switch (v.value_case()) {
    case v1::AttributeValue::kS: return typed("S", JsonString(v.s()));
    case v1::AttributeValue::kN: return typed("N", ddb ? JsonString(v.n()) : PlainNumber(v.n()));
    case v1::AttributeValue::kB: return typed("B", b64(v.b()));
    case v1::AttributeValue::kBool: return typed("BOOL", v.bool_() ? "true" : "false");
    case v1::AttributeValue::kNull: return ddb ? typed("NULL", "true") : "null";
    case v1::AttributeValue::kM: return typed("M", Object(v.m().fields(), ddb));
    case v1::AttributeValue::kL:
      return typed("L", Array(v.l().values(), [&](const v1::AttributeValue& e) { return ValueToJson(e, ddb); }));
    case v1::AttributeValue::kSs: return typed("SS", Array(v.ss().values(), str));
    case v1::AttributeValue::kNs:
      return typed("NS", ddb ? Array(v.ns().values(), str)
                             : Array(v.ns().values(), PlainNumber));
    case v1::AttributeValue::kBs: return typed("BS", Array(v.bs().values(), b64));
    case v1::AttributeValue::VALUE_NOT_SET: break;
  }
  return "null";
}

std::string ItemToJson(const v1::Item& item, bool ddb) { return Object(item.attributes(), ddb); }

}  // namespace cdcview
