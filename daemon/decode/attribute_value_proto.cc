#include "daemon/decode/attribute_value_proto.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/decode/decode_errors.h"

namespace cdcview {

using decode_internal::PathError;

void ToProto(const AttributeValue& value, v1::AttributeValue* out) {
  switch (value.type()) {
    case AttrType::kS: out->set_s(value.scalar()); break;
    case AttrType::kN: out->set_n(value.scalar()); break;
    case AttrType::kB: out->set_b(value.scalar()); break;
    case AttrType::kBool: out->set_bool_(value.boolean()); break;
    case AttrType::kNull: out->set_null(true); break;
    case AttrType::kM: {
      auto* fields = out->mutable_m()->mutable_fields();
      for (const auto& [name, v] : value.map()) ToProto(v, &(*fields)[name]);
      break;
    }
    // mutable_*() before the members: an empty list is still a list, not an unset value.
    case AttrType::kL: {
      auto* list = out->mutable_l();
      for (const AttributeValue& v : value.list()) ToProto(v, list->add_values());
      break;
    }
    case AttrType::kSS: {
      auto* set = out->mutable_ss();
      for (const std::string& m : value.set()) set->add_values(m);
      break;
    }
    case AttrType::kNS: {
      auto* set = out->mutable_ns();
      for (const std::string& m : value.set()) set->add_values(m);
      break;
    }
    case AttrType::kBS: {
      auto* set = out->mutable_bs();
      for (const std::string& m : value.set()) set->add_values(m);
      break;
    }
  }
}

void ToProto(const Item& item, v1::Item* out) {
  auto* attrs = out->mutable_attributes();
  for (const auto& [name, value] : item) ToProto(value, &(*attrs)[name]);
}

absl::StatusOr<AttributeValue> FromProto(const v1::AttributeValue& value, const std::string& path) {
  switch (value.value_case()) {
    case v1::AttributeValue::kS: return AttributeValue::String(value.s());
    case v1::AttributeValue::kN: {
      absl::StatusOr<AttributeValue> n = AttributeValue::Number(value.n());
      if (!n.ok()) return PathError(path, n.status().message());
      return n;
    }
    case v1::AttributeValue::kB: return AttributeValue::Binary(value.b());
    case v1::AttributeValue::kBool: return AttributeValue::Bool(value.bool_());
    case v1::AttributeValue::kNull: return AttributeValue::Null();
    case v1::AttributeValue::kM: {
      Item map;
      for (const auto& [name, v] : value.m().fields()) {
        absl::StatusOr<AttributeValue> child = FromProto(v, absl::StrCat(path, ".", name));
        if (!child.ok()) return child.status();
        map.emplace(name, *std::move(child));
      }
      return AttributeValue::Map(std::move(map));
    }
    case v1::AttributeValue::kL: {
      std::vector<AttributeValue> list;
      for (int i = 0; i < value.l().values_size(); ++i) {
        absl::StatusOr<AttributeValue> child =
            FromProto(value.l().values(i), absl::StrCat(path, "[", i, "]"));
        if (!child.ok()) return child.status();
        list.push_back(*std::move(child));
      }
      return AttributeValue::List(std::move(list));
    }
    case v1::AttributeValue::kSs:
      return AttributeValue::StringSet({value.ss().values().begin(), value.ss().values().end()});
    case v1::AttributeValue::kNs: {
      absl::StatusOr<AttributeValue> ns =
          AttributeValue::NumberSet({value.ns().values().begin(), value.ns().values().end()});
      if (!ns.ok()) return PathError(path, ns.status().message());
      return ns;
    }
    case v1::AttributeValue::kBs:
      return AttributeValue::BinarySet({value.bs().values().begin(), value.bs().values().end()});
    case v1::AttributeValue::VALUE_NOT_SET: break;
  }
  return PathError(path, "no value set (set one of s, n, b, bool, null, m, l, ss, ns, bs)");
}

absl::StatusOr<Item> FromProto(const v1::Item& item, const std::string& path) {
  Item out;
  for (const auto& [name, v] : item.attributes()) {
    absl::StatusOr<AttributeValue> value = FromProto(v, absl::StrCat(path, ".", name));
    if (!value.ok()) return value.status();
    out.emplace(name, *std::move(value));
  }
  return out;
}

}  // namespace cdcview
