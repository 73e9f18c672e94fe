#include "daemon/dynamodb/json_request.h"

#include <set>
#include <utility>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/decode/base64.h"
#include "daemon/server/error_text.h"

namespace cdcview::dynamodb {

namespace dom = simdjson::dom;

std::string Join(const std::vector<std::string_view>& parts, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out.append(separator);
    out.append(parts[i]);
  }
  return out;
}

absl::Status ValidationError(std::string_view message) {
  return absl::InvalidArgumentError(AbslView(message));
}

absl::Status TypedError(std::string_view type, std::string_view message) {
  absl::Status status = absl::InvalidArgumentError(AbslView(message));
  status.SetPayload(kErrorTypePayload, absl::Cord(AbslView(type)));
  return status;
}

absl::Status SerializationError(std::string_view message) {
  return TypedError("SerializationException", message);
}

std::string ErrorTypeOf(const absl::Status& status) {
  auto type = status.GetPayload(kErrorTypePayload);
  return type.has_value() ? std::string(*type) : std::string();
}

absl::Status WrongJsonType(dom::element value, std::string_view expected) {
  // The words of DynamoDB's JSON front end (its Java deserializer).
  switch (value.type()) {
    case dom::element_type::ARRAY:
      return SerializationError("Start of list found where not expected");
    case dom::element_type::OBJECT:
      return SerializationError("Start of structure or map found where not expected.");
    default:
      break;
  }
  if (expected == "structure") return SerializationError("Expected null");
  if (expected == "list") return SerializationError("Expected list or null");
  if (expected == "map") return SerializationError("Expected map or null");
  const std::string article = expected == "Blob" ? "a" : "an";
  switch (value.type()) {
    case dom::element_type::BOOL:
      return SerializationError(
          Cat("class java.lang.Boolean can not be converted to ", article, " ", expected));
    case dom::element_type::STRING:
      return SerializationError(
          Cat("class java.lang.String can not be converted to ", article, " ", expected));
    default:
      return SerializationError(
          Cat("class com.amazon.coral.value.json.numbers.TruncatingBigNumber can not be "
                       "converted to ", article, " ", expected));
  }
}

std::optional<dom::element> RequestObject::Find(std::string_view member) const {
  dom::element value;
  if (object_.at_key(member).get(value) != simdjson::SUCCESS) return std::nullopt;
  if (value.is_null()) return std::nullopt;
  return value;
}

bool RequestObject::Has(std::string_view member) const { return Find(member).has_value(); }

absl::StatusOr<std::optional<std::string_view>> RequestObject::String(
    std::string_view member) const {
  std::optional<dom::element> value = Find(member);
  if (!value.has_value()) return std::optional<std::string_view>();
  if (!value->is_string()) return WrongJsonType(*value, "String");
  return std::optional<std::string_view>(std::string_view(*value));
}

absl::StatusOr<std::optional<int64_t>> RequestObject::Integer(std::string_view member) const {
  std::optional<dom::element> value = Find(member);
  if (!value.has_value()) return std::optional<int64_t>();
  if (value->is_int64()) return std::optional<int64_t>(int64_t(*value));
  if (value->is_uint64() || value->is_double()) {
    return SerializationError(Cat("Value of ", member, " is not an integer within range"));
  }
  return WrongJsonType(*value, "Integer");
}

absl::StatusOr<std::optional<bool>> RequestObject::Bool(std::string_view member) const {
  std::optional<dom::element> value = Find(member);
  if (!value.has_value()) return std::optional<bool>();
  if (!value->is_bool()) return WrongJsonType(*value, "Boolean");
  return std::optional<bool>(bool(*value));
}

absl::StatusOr<std::optional<dom::object>> RequestObject::Object(std::string_view member) const {
  std::optional<dom::element> value = Find(member);
  if (!value.has_value()) return std::optional<dom::object>();
  if (!value->is_object()) return WrongJsonType(*value, "structure");
  return std::optional<dom::object>(dom::object(*value));
}

absl::StatusOr<std::optional<dom::array>> RequestObject::Array(std::string_view member) const {
  std::optional<dom::element> value = Find(member);
  if (!value.has_value()) return std::optional<dom::array>();
  if (!value->is_array()) return WrongJsonType(*value, "list");
  return std::optional<dom::array>(dom::array(*value));
}

namespace {

constexpr char kInvalid[] = "One or more parameter values were invalid: ";

absl::StatusOr<AttributeValue> Decode(dom::element value, int depth);

absl::Status NumberError(std::string_view text, const absl::Status& why) {
  if (text.empty()) return ValidationError("The parameter cannot be converted to a numeric value");
  if (StdView(why.message()).find("significant digits") != std::string_view::npos) {
    return ValidationError("Attempting to store more than 38 significant digits in a Number");
  }
  if (StdView(why.message()).find("range") != std::string_view::npos) {
    const bool small = text.find("e-") != std::string_view::npos ||
                       text.find("E-") != std::string_view::npos || text.starts_with("0.") ||
                       text.starts_with("-0.");
    return ValidationError(
        small ? "Number underflow. Attempting to store a number with magnitude smaller than "
                "supported range"
              : "Number overflow. Attempting to store a number with magnitude larger than "
                "supported range");
  }
  return ValidationError(
      Cat("The parameter cannot be converted to a numeric value: ", QuoteBounded(AbslView(text))));
}

absl::StatusOr<std::string_view> StringMember(dom::element value) {
  if (!value.is_string()) return WrongJsonType(value, "String");
  return std::string_view(value);
}

absl::StatusOr<std::string> BlobMember(dom::element value) {
  if (!value.is_string()) return WrongJsonType(value, "Blob");
  std::string bytes;
  std::string_view text(value);
  if (!Base64Decode(text, &bytes)) {
    return SerializationError(
        Cat(QuoteBounded(AbslView(text)), " can not be converted to a Blob: invalid Base64"));
  }
  return bytes;
}

absl::StatusOr<std::vector<std::string>> SetMembers(dom::element value, AttrType type) {
  if (!value.is_array()) return WrongJsonType(value, "list");
  std::vector<std::string> members;
  std::set<std::string> seen;
  bool duplicate = false;
  for (dom::element member : dom::array(value)) {
    std::string text;
    if (type == AttrType::kBS) {
      absl::StatusOr<std::string> bytes = BlobMember(member);
      if (!bytes.ok()) return bytes.status();
      text = *std::move(bytes);
    } else {
      absl::StatusOr<std::string_view> s = StringMember(member);
      if (!s.ok()) return s.status();
      text = std::string(*s);
    }
    if (type == AttrType::kNS) {
      absl::StatusOr<AttributeValue> n = AttributeValue::Number(text);
      if (!n.ok()) return NumberError(text, n.status());
      text = n->scalar();
    }
    duplicate = duplicate || !seen.insert(text).second;
    members.push_back(std::move(text));
  }
  if (members.empty()) {
    switch (type) {
      case AttrType::kSS: return ValidationError(Cat(kInvalid, "An string set  may not be empty"));
      case AttrType::kNS: return ValidationError(Cat(kInvalid, "An number set  may not be empty"));
      default: return ValidationError(Cat(kInvalid, "Binary sets should not be empty"));
    }
  }
  if (duplicate) {
    if (type == AttrType::kNS) return ValidationError("Input collection contains duplicates");
    return ValidationError(Cat(kInvalid, "Input collection contains duplicates."));
  }
  return members;
}

absl::StatusOr<AttributeValue> DecodeTyped(std::string_view type_name, dom::element value,
                                           int depth) {
  AttrType type;
  ParseAttrType(type_name, &type);  // the caller passes only known names
  switch (type) {
    case AttrType::kS: {
      absl::StatusOr<std::string_view> s = StringMember(value);
      if (!s.ok()) return s.status();
      return AttributeValue::String(std::string(*s));
    }
    case AttrType::kN: {
      absl::StatusOr<std::string_view> s = StringMember(value);
      if (!s.ok()) return s.status();
      absl::StatusOr<AttributeValue> n = AttributeValue::Number(*s);
      if (!n.ok()) return NumberError(*s, n.status());
      return n;
    }
    case AttrType::kB: {
      absl::StatusOr<std::string> bytes = BlobMember(value);
      if (!bytes.ok()) return bytes.status();
      return AttributeValue::Binary(*std::move(bytes));
    }
    case AttrType::kBool:
      if (!value.is_bool()) return WrongJsonType(value, "Boolean");
      return AttributeValue::Bool(bool(value));
    case AttrType::kNull:
      if (!value.is_bool()) return WrongJsonType(value, "Boolean");
      if (!bool(value)) {
        return ValidationError(
            Cat(kInvalid, "Null attribute value types must have the value of true"));
      }
      return AttributeValue::Null();
    case AttrType::kM: {
      if (!value.is_object()) return WrongJsonType(value, "map");
      if (depth >= kMaxAttributeNesting) {
        return ValidationError("Nesting Levels have exceeded supported limits");
      }
      Item map;
      for (dom::key_value_pair field : dom::object(value)) {
        if (field.value.is_null()) continue;
        absl::StatusOr<AttributeValue> member = Decode(field.value, depth + 1);
        if (!member.ok()) return member.status();
        map.insert_or_assign(std::string(field.key), *std::move(member));
      }
      return AttributeValue::Map(std::move(map));
    }
    case AttrType::kL: {
      if (!value.is_array()) return WrongJsonType(value, "list");
      if (depth >= kMaxAttributeNesting) {
        return ValidationError("Nesting Levels have exceeded supported limits");
      }
      std::vector<AttributeValue> list;
      for (dom::element element : dom::array(value)) {
        absl::StatusOr<AttributeValue> member = Decode(element, depth + 1);
        if (!member.ok()) return member.status();
        list.push_back(*std::move(member));
      }
      return AttributeValue::List(std::move(list));
    }
    case AttrType::kSS:
    case AttrType::kNS:
    case AttrType::kBS: {
      absl::StatusOr<std::vector<std::string>> members = SetMembers(value, type);
      if (!members.ok()) return members.status();
      if (type == AttrType::kSS) return AttributeValue::StringSet(*std::move(members));
      if (type == AttrType::kBS) return AttributeValue::BinarySet(*std::move(members));
      return AttributeValue::NumberSet(*members);
    }
  }
  return ValidationError("unhandled attribute type");
}

absl::StatusOr<AttributeValue> Decode(dom::element value, int depth) {
  if (!value.is_object()) return WrongJsonType(value, "structure");
  // Members that are no type descriptor are ignored, as DynamoDB's front end ignores unknown
  // members; null members count as absent.
  std::optional<std::pair<std::string_view, dom::element>> typed;
  int types = 0;
  for (dom::key_value_pair field : dom::object(value)) {
    AttrType type;
    if (!ParseAttrType(field.key, &type) || field.value.is_null()) continue;
    if (++types == 1) typed.emplace(field.key, field.value);
  }
  if (types == 0) {
    return ValidationError(
        "Supplied AttributeValue is empty, must contain exactly one of the supported datatypes");
  }
  if (types > 1) {
    return ValidationError(
        "Supplied AttributeValue has more than one datatypes set, must contain exactly one of "
        "the supported datatypes");
  }
  return DecodeTyped(typed->first, typed->second, depth);
}

}  // namespace

absl::StatusOr<AttributeValue> DecodeAttributeValue(dom::element value) {
  return Decode(value, 0);
}

absl::StatusOr<Item> DecodeAttributeMap(dom::element value) {
  if (!value.is_object()) return WrongJsonType(value, "map");
  Item item;
  for (dom::key_value_pair field : dom::object(value)) {
    if (field.value.is_null()) continue;
    absl::StatusOr<AttributeValue> member = Decode(field.value, 0);
    if (!member.ok()) return member.status();
    item.insert_or_assign(std::string(field.key), *std::move(member));
  }
  return item;
}

}  // namespace cdcview::dynamodb
