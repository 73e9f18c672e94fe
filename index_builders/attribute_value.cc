#include "index_builders/attribute_value.h"

#include <algorithm>
#include <utility>

#include "index_builders/item_size.h"
#include "index_builders/number.h"

namespace cdcview {
namespace {

constexpr std::string_view kTypeNames[] = {"S", "N",    "B", "BOOL", "NULL",
                                           "M", "L", "SS", "NS",   "BS"};

void SortUnique(std::vector<std::string>* v) {
  std::sort(v->begin(), v->end());
  v->erase(std::unique(v->begin(), v->end()), v->end());
}

const Item& EmptyItem() {
  static const Item* const empty = new Item();
  return *empty;
}

}  // namespace

std::string_view AttrTypeName(AttrType type) {
  const auto i = static_cast<size_t>(type);
  if (i < std::size(kTypeNames)) return kTypeNames[i];
  return "?";
}

bool ParseAttrType(std::string_view name, AttrType* type) {
  for (size_t i = 0; i < std::size(kTypeNames); ++i) {
    if (kTypeNames[i] == name) {
      *type = static_cast<AttrType>(i);
      return true;
    }
  }
  return false;
}

AttributeValue::AttributeValue(const AttributeValue& other)
    : type_(other.type_),
      bool_(other.bool_),
      scalar_(other.scalar_),
      set_(other.set_),
      list_(other.list_),
      map_(other.map_ ? std::make_unique<Item>(*other.map_) : nullptr) {}

AttributeValue& AttributeValue::operator=(const AttributeValue& other) {
  if (this != &other) {
    AttributeValue copy(other);
    *this = std::move(copy);
  }
  return *this;
}

AttributeValue::~AttributeValue() = default;

AttributeValue AttributeValue::String(std::string s) {
  AttributeValue v(AttrType::kS);
  v.scalar_ = std::move(s);
  return v;
}

absl::StatusOr<AttributeValue> AttributeValue::Number(std::string_view text) {
  absl::StatusOr<std::string> canonical = CanonicalNumber(text);
  if (!canonical.ok()) return canonical.status();
  AttributeValue v(AttrType::kN);
  v.scalar_ = *std::move(canonical);
  return v;
}

AttributeValue AttributeValue::Binary(std::string bytes) {
  AttributeValue v(AttrType::kB);
  v.scalar_ = std::move(bytes);
  return v;
}

AttributeValue AttributeValue::Bool(bool b) {
  AttributeValue v(AttrType::kBool);
  v.bool_ = b;
  return v;
}

AttributeValue AttributeValue::Null() { return AttributeValue(AttrType::kNull); }

AttributeValue AttributeValue::Map(Item m) {
  AttributeValue v(AttrType::kM);
  v.map_ = std::make_unique<Item>(std::move(m));
  return v;
}

AttributeValue AttributeValue::List(std::vector<AttributeValue> l) {
  AttributeValue v(AttrType::kL);
  v.list_ = std::move(l);
  return v;
}

AttributeValue AttributeValue::StringSet(std::vector<std::string> members) {
  AttributeValue v(AttrType::kSS);
  v.set_ = std::move(members);
  SortUnique(&v.set_);
  return v;
}

absl::StatusOr<AttributeValue> AttributeValue::NumberSet(const std::vector<std::string>& members) {
  // Canonical text makes equal numbers ("1", "1.0") identical strings; members are then
  // kept in byte order of that text like the other sets.
  AttributeValue v(AttrType::kNS);
  v.set_.reserve(members.size());
  for (const std::string& m : members) {
    absl::StatusOr<std::string> canonical = CanonicalNumber(m);
    if (!canonical.ok()) return canonical.status();
    v.set_.push_back(*std::move(canonical));
  }
  SortUnique(&v.set_);
  return v;
}

AttributeValue AttributeValue::BinarySet(std::vector<std::string> members) {
  AttributeValue v(AttrType::kBS);
  v.set_ = std::move(members);
  SortUnique(&v.set_);
  return v;
}

const Item& AttributeValue::map() const { return map_ ? *map_ : EmptyItem(); }

bool operator==(const AttributeValue& a, const AttributeValue& b) {
  if (a.type_ != b.type_) return false;
  switch (a.type_) {
    case AttrType::kS:
    case AttrType::kN:
    case AttrType::kB:
      return a.scalar_ == b.scalar_;
    case AttrType::kBool:
      return a.bool_ == b.bool_;
    case AttrType::kNull:
      return true;
    case AttrType::kM:
      return a.map() == b.map();
    case AttrType::kL:
      return a.list_ == b.list_;
    case AttrType::kSS:
    case AttrType::kNS:
    case AttrType::kBS:
      return a.set_ == b.set_;
  }
  return false;
}

size_t ApproximateSize(const Item& item) { return ItemSize(item); }

}  // namespace cdcview
