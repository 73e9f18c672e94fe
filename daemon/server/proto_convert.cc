#include "daemon/server/proto_convert.h"

#include "absl/strings/str_cat.h"
#include "index_builders/item_codec.h"
#include "index_builders/key_codec.h"

namespace cdcview {

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
    case AttrType::kL:
      for (const AttributeValue& v : value.list()) ToProto(v, out->mutable_l()->add_values());
      break;
    case AttrType::kSS:
      for (const std::string& m : value.set()) out->mutable_ss()->add_values(m);
      break;
    case AttrType::kNS:
      for (const std::string& m : value.set()) out->mutable_ns()->add_values(m);
      break;
    case AttrType::kBS:
      for (const std::string& m : value.set()) out->mutable_bs()->add_values(m);
      break;
  }
}

void ToProto(const Item& item, v1::Item* out) {
  auto* attrs = out->mutable_attributes();
  for (const auto& [name, value] : item) ToProto(value, &(*attrs)[name]);
}

absl::StatusOr<AttributeValue> FromProto(const v1::AttributeValue& value, const std::string& field) {
  switch (value.value_case()) {
    case v1::AttributeValue::kS: return AttributeValue::String(value.s());
    case v1::AttributeValue::kN: {
      auto n = AttributeValue::Number(value.n());
      if (!n.ok()) return absl::InvalidArgumentError(absl::StrCat(field, ": ", n.status().message()));
      return n;
    }
    case v1::AttributeValue::kB: return AttributeValue::Binary(value.b());
    case v1::AttributeValue::kBool: return AttributeValue::Bool(value.bool_());
    case v1::AttributeValue::kNull: return AttributeValue::Null();
    case v1::AttributeValue::kM: {
      Item m;
      for (const auto& [name, v] : value.m().fields()) {
        auto child = FromProto(v, absl::StrCat(field, ".", name));
        if (!child.ok()) return child.status();
        m.emplace(name, std::move(*child));
      }
      return AttributeValue::Map(std::move(m));
    }
    case v1::AttributeValue::kL: {
      std::vector<AttributeValue> l;
      for (int i = 0; i < value.l().values_size(); ++i) {
        auto child = FromProto(value.l().values(i), absl::StrCat(field, "[", i, "]"));
        if (!child.ok()) return child.status();
        l.push_back(std::move(*child));
      }
      return AttributeValue::List(std::move(l));
    }
    case v1::AttributeValue::kSs:
      return AttributeValue::StringSet({value.ss().values().begin(), value.ss().values().end()});
    case v1::AttributeValue::kNs: {
      auto ns = AttributeValue::NumberSet({value.ns().values().begin(), value.ns().values().end()});
      if (!ns.ok()) return absl::InvalidArgumentError(absl::StrCat(field, ": ", ns.status().message()));
      return ns;
    }
    case v1::AttributeValue::kBs:
      return AttributeValue::BinarySet({value.bs().values().begin(), value.bs().values().end()});
    case v1::AttributeValue::VALUE_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(field, ": no value set (set one of s, n, b, ...)"));
}

absl::StatusOr<Item> FromProto(const v1::Item& item, const std::string& field) {
  Item out;
  for (const auto& [name, v] : item.attributes()) {
    auto value = FromProto(v, absl::StrCat(field, ".", name));
    if (!value.ok()) return value.status();
    out.emplace(name, std::move(*value));
  }
  return out;
}

absl::Status EntryToProto(const ViewSpec& view, std::string_view key, std::string_view value,
                          v1::ViewEntry* out) {
  auto pk = DecodeKeyComponent(&key);
  if (!pk.ok()) return pk.status();
  ToProto(*pk, out->mutable_partition_key());
  if (view.has_sort_key()) {
    auto sk = DecodeKeyComponent(&key);
    if (!sk.ok()) return sk.status();
    ToProto(*sk, out->mutable_sort_key());
  }
  auto item = DecodeItem(value);
  if (!item.ok()) return item.status();
  ToProto(*item, out->mutable_item());
  return absl::OkStatus();
}

}  // namespace cdcview
