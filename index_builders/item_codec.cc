#include "index_builders/item_codec.h"

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "index_builders/coding.h"
#include "index_builders/number.h"

namespace cdcview {
namespace {

// Nesting deeper than this is rejected on decode (DynamoDB allows 32 levels); it bounds the
// recursion when decoding garbage.
constexpr int kMaxDepth = 256;

void EncodeValue(const AttributeValue& v, std::string* out);

void EncodeItemBody(const Item& item, std::string* out) {
  PutVarint(item.size(), out);
  for (const auto& [name, value] : item) {
    PutLengthPrefixed(name, out);
    EncodeValue(value, out);
  }
}

void EncodeValue(const AttributeValue& v, std::string* out) {
  out->push_back(static_cast<char>(v.type()));
  switch (v.type()) {
    case AttrType::kS:
    case AttrType::kN:
    case AttrType::kB:
      PutLengthPrefixed(v.scalar(), out);
      return;
    case AttrType::kBool:
      out->push_back(v.boolean() ? 1 : 0);
      return;
    case AttrType::kNull:
      return;
    case AttrType::kM:
      EncodeItemBody(v.map(), out);
      return;
    case AttrType::kL:
      PutVarint(v.list().size(), out);
      for (const AttributeValue& e : v.list()) EncodeValue(e, out);
      return;
    case AttrType::kSS:
    case AttrType::kNS:
    case AttrType::kBS:
      PutVarint(v.set().size(), out);
      for (const std::string& m : v.set()) PutLengthPrefixed(m, out);
      return;
  }
}

bool Named(const std::vector<std::string_view>& names, std::string_view name) {
  for (std::string_view n : names) {
    if (n == name) return true;
  }
  return false;
}

// A cursor over the whole input, so errors can name absolute offsets.
class Decoder {
 public:
  explicit Decoder(std::string_view bytes) : all_(bytes), rest_(bytes) {}

  size_t offset() const { return all_.size() - rest_.size(); }
  bool done() const { return rest_.empty(); }

  absl::Status Error(size_t at, std::string_view what) const {
    return absl::DataLossError(absl::StrCat("corrupt item at byte ", at, ": ", std::string(what)));
  }

  absl::Status Varint(uint64_t* v) {
    const size_t at = offset();
    const std::string_view before = rest_;
    if (!GetVarint(&rest_, v)) return Error(at, "truncated or overlong varint");
    // Only the shortest form is valid, so that an item has exactly one serialization.
    if (before.size() - rest_.size() > 1 && before[before.size() - rest_.size() - 1] == '\0') {
      return Error(at, "varint not in shortest form");
    }
    return absl::OkStatus();
  }

  // A count of things each taking at least one byte: cannot exceed what is left.
  absl::Status Count(uint64_t* n) {
    const size_t at = offset();
    if (absl::Status s = Varint(n); !s.ok()) return s;
    if (*n > rest_.size()) return Error(at, absl::StrCat("count ", *n, " exceeds remaining bytes"));
    return absl::OkStatus();
  }

  absl::Status Bytes(std::string* out) {
    const size_t at = offset();
    uint64_t len;
    if (absl::Status s = Varint(&len); !s.ok()) return s;
    if (len > rest_.size()) return Error(at, absl::StrCat("length ", len, " exceeds remaining bytes"));
    out->assign(rest_.data(), static_cast<size_t>(len));
    rest_.remove_prefix(static_cast<size_t>(len));
    return absl::OkStatus();
  }

  absl::Status ItemBody(int depth, Item* item) {
    uint64_t n;
    if (absl::Status s = Count(&n); !s.ok()) return s;
    for (uint64_t i = 0; i < n; ++i) {
      const size_t at = offset();
      std::string name;
      if (absl::Status s = Bytes(&name); !s.ok()) return s;
      if (!item->empty() && !(item->rbegin()->first < name)) {
        return Error(at, "attribute names not in strictly increasing order");
      }
      AttributeValue value;
      if (absl::Status s = Value(depth, &value); !s.ok()) return s;
      item->emplace_hint(item->end(), std::move(name), std::move(value));
    }
    return absl::OkStatus();
  }

  absl::Status Value(int depth, AttributeValue* out) {
    const size_t at = offset();
    if (rest_.empty()) return Error(at, "truncated (missing type byte)");
    const auto type_byte = static_cast<unsigned char>(rest_[0]);
    rest_.remove_prefix(1);
    if (type_byte > static_cast<unsigned char>(AttrType::kBS)) {
      return Error(at, absl::StrCat("invalid type byte ", static_cast<int>(type_byte)));
    }
    const auto type = static_cast<AttrType>(type_byte);
    switch (type) {
      case AttrType::kS:
      case AttrType::kB: {
        std::string bytes;
        if (absl::Status s = Bytes(&bytes); !s.ok()) return s;
        *out = type == AttrType::kS ? AttributeValue::String(std::move(bytes))
                                    : AttributeValue::Binary(std::move(bytes));
        return absl::OkStatus();
      }
      case AttrType::kN: {
        const size_t text_at = offset();
        std::string text;
        if (absl::Status s = Bytes(&text); !s.ok()) return s;
        absl::StatusOr<AttributeValue> n = AttributeValue::Number(text);
        if (!n.ok() || n->scalar() != text) return Error(text_at, "number is not canonical");
        *out = *std::move(n);
        return absl::OkStatus();
      }
      case AttrType::kBool: {
        if (rest_.empty()) return Error(offset(), "truncated BOOL");
        const char b = rest_[0];
        if (b != 0 && b != 1) return Error(offset(), "BOOL byte is not 0 or 1");
        rest_.remove_prefix(1);
        *out = AttributeValue::Bool(b == 1);
        return absl::OkStatus();
      }
      case AttrType::kNull:
        *out = AttributeValue::Null();
        return absl::OkStatus();
      case AttrType::kM: {
        if (depth >= kMaxDepth) return Error(at, "nesting too deep");
        Item m;
        if (absl::Status s = ItemBody(depth + 1, &m); !s.ok()) return s;
        *out = AttributeValue::Map(std::move(m));
        return absl::OkStatus();
      }
      case AttrType::kL: {
        if (depth >= kMaxDepth) return Error(at, "nesting too deep");
        uint64_t n;
        if (absl::Status s = Count(&n); !s.ok()) return s;
        std::vector<AttributeValue> l;
        l.reserve(static_cast<size_t>(n));
        for (uint64_t i = 0; i < n; ++i) {
          AttributeValue e;
          if (absl::Status s = Value(depth + 1, &e); !s.ok()) return s;
          l.push_back(std::move(e));
        }
        *out = AttributeValue::List(std::move(l));
        return absl::OkStatus();
      }
      case AttrType::kSS:
      case AttrType::kNS:
      case AttrType::kBS: {
        uint64_t n;
        if (absl::Status s = Count(&n); !s.ok()) return s;
        std::vector<std::string> members;
        members.reserve(static_cast<size_t>(n));
        for (uint64_t i = 0; i < n; ++i) {
          const size_t member_at = offset();
          std::string m;
          if (absl::Status s = Bytes(&m); !s.ok()) return s;
          if (!members.empty() && !(members.back() < m)) {
            return Error(member_at, "set members not in strictly increasing order");
          }
          if (type == AttrType::kNS) {
            absl::StatusOr<std::string> canonical = CanonicalNumber(m);
            if (!canonical.ok() || *canonical != m) {
              return Error(member_at, "number set member is not canonical");
            }
          }
          members.push_back(std::move(m));
        }
        if (type == AttrType::kSS) {
          *out = AttributeValue::StringSet(std::move(members));
        } else if (type == AttrType::kBS) {
          *out = AttributeValue::BinarySet(std::move(members));
        } else {
          absl::StatusOr<AttributeValue> ns = AttributeValue::NumberSet(members);
          if (!ns.ok()) return Error(at, "invalid number set");
          *out = *std::move(ns);
        }
        return absl::OkStatus();
      }
    }
    return Error(at, "invalid type byte");
  }

 private:
  std::string_view all_;
  std::string_view rest_;
};

}  // namespace

void EncodeItem(const Item& item, std::string* out) { EncodeItemBody(item, out); }

void EncodeItemSubset(const Item& item, const std::vector<std::string_view>& names,
                      std::string* out) {
  // The item's own (sorted) order keeps the serialization canonical.
  size_t count = 0;
  for (const auto& entry : item) count += Named(names, entry.first) ? 1 : 0;
  PutVarint(count, out);
  for (const auto& [name, value] : item) {
    if (!Named(names, name)) continue;
    PutLengthPrefixed(name, out);
    EncodeValue(value, out);
  }
}

std::string EncodeItem(const Item& item) {
  std::string out;
  EncodeItem(item, &out);
  return out;
}

absl::StatusOr<Item> DecodeItem(std::string_view bytes) {
  Decoder d(bytes);
  Item item;
  if (absl::Status s = d.ItemBody(0, &item); !s.ok()) return s;
  if (!d.done()) return d.Error(d.offset(), "trailing bytes after item");
  return item;
}

}  // namespace cdcview
