#include "index_builders/item_size.h"

#include <string>

#include "index_builders/number.h"

namespace cdcview {

namespace {

uint64_t NumberSize(const std::string& canonical) {
  absl::StatusOr<Decimal> d = ParseDecimal(canonical);
  return ((d.ok() ? d->digits.size() : canonical.size()) + 1) / 2 + 1;
}

}  // namespace

uint64_t AttributeValueSize(const AttributeValue& v) {
  switch (v.type()) {
    case AttrType::kS:
    case AttrType::kB:
      return v.scalar().size();
    case AttrType::kN:
      return NumberSize(v.scalar());
    case AttrType::kBool:
    case AttrType::kNull:
      return 1;
    case AttrType::kSS:
    case AttrType::kBS: {
      uint64_t n = 0;
      for (const std::string& m : v.set()) n += m.size();
      return n;
    }
    case AttrType::kNS: {
      uint64_t n = 0;
      for (const std::string& m : v.set()) n += NumberSize(m);
      return n;
    }
    case AttrType::kL: {
      uint64_t n = 3;
      for (const AttributeValue& e : v.list()) n += 1 + AttributeValueSize(e);
      return n;
    }
    case AttrType::kM: {
      uint64_t n = 3;
      for (const auto& [name, e] : v.map()) n += 1 + name.size() + AttributeValueSize(e);
      return n;
    }
  }
  return 0;
}

uint64_t ItemSize(const Item& item) {
  uint64_t n = 0;
  for (const auto& [name, v] : item) n += name.size() + AttributeValueSize(v);
  return n;
}

}  // namespace cdcview
