// AttributeValue and Item: DynamoDB's data model (S, N, B, BOOL, NULL, M, L, SS, NS, BS).
//
// Values are plain value types: copyable, movable, no shared state; safe to read from many
// threads at once, not to mutate concurrently. Numbers are kept as their canonical decimal
// text (see number.h), so two equal numbers compare equal as values.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace cdcview {

enum class AttrType : uint8_t { kS, kN, kB, kBool, kNull, kM, kL, kSS, kNS, kBS };

// "S", "N", "B", "BOOL", "NULL", "M", "L", "SS", "NS", "BS": DynamoDB's type descriptors.
std::string_view AttrTypeName(AttrType type);
// Parses a DynamoDB type descriptor; false for anything else.
bool ParseAttrType(std::string_view name, AttrType* type);

class AttributeValue;
// Attribute name -> value. Ordered so that serialization and fingerprints are deterministic.
using Item = std::map<std::string, AttributeValue, std::less<>>;

class AttributeValue {
 public:
  AttributeValue() : type_(AttrType::kNull) {}  // NULL
  AttributeValue(const AttributeValue& other);
  AttributeValue& operator=(const AttributeValue& other);
  AttributeValue(AttributeValue&&) noexcept = default;
  AttributeValue& operator=(AttributeValue&&) noexcept = default;
  ~AttributeValue();

  static AttributeValue String(std::string s);
  // Returns INVALID_ARGUMENT naming the problem if `text` is not a DynamoDB number
  // (syntax, more than 38 significant digits, magnitude outside 1e-130 .. 1e126).
  static absl::StatusOr<AttributeValue> Number(std::string_view text);
  static AttributeValue Binary(std::string bytes);
  static AttributeValue Bool(bool b);
  static AttributeValue Null();
  static AttributeValue Map(Item m);
  static AttributeValue List(std::vector<AttributeValue> l);
  // Sets: members are kept sorted and unique (DynamoDB sets are unordered; this makes
  // equality and serialization deterministic). NS members must be canonical numbers.
  static AttributeValue StringSet(std::vector<std::string> members);
  static absl::StatusOr<AttributeValue> NumberSet(const std::vector<std::string>& members);
  static AttributeValue BinarySet(std::vector<std::string> members);

  AttrType type() const { return type_; }
  // S: the string; N: canonical decimal text; B: raw bytes. Empty for other types.
  const std::string& scalar() const { return scalar_; }
  bool boolean() const { return bool_; }
  // SS / NS / BS members, sorted and unique.
  const std::vector<std::string>& set() const { return set_; }
  const std::vector<AttributeValue>& list() const { return list_; }
  // M: the map; an empty map for other types.
  const Item& map() const;

  friend bool operator==(const AttributeValue& a, const AttributeValue& b);
  friend bool operator!=(const AttributeValue& a, const AttributeValue& b) { return !(a == b); }

 private:
  explicit AttributeValue(AttrType type) : type_(type) {}

  AttrType type_;
  bool bool_ = false;
  std::string scalar_;
  std::vector<std::string> set_;
  std::vector<AttributeValue> list_;
  std::unique_ptr<Item> map_;  // only for kM; deep-copied
};

// Approximate in-memory size in bytes, for DynamoDB-like item size accounting.
size_t ApproximateSize(const Item& item);

}  // namespace cdcview
