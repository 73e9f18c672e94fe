#include "daemon/decode/debezium_json.h"

#include <charconv>
#include <cstdint>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "daemon/decode/decode_errors.h"
#include "simdjson.h"

namespace cdcview {

namespace od = simdjson::ondemand;

namespace {

using decode_internal::Child;
using decode_internal::PathError;
using decode_internal::Quoted;
using decode_internal::ToAbsl;

// The same prefix as the DynamoDB decoder's, so IsMalformedJson recognizes both.
constexpr char kMalformedPrefix[] = "malformed JSON: ";
constexpr int kMaxNesting = 64;

absl::Status Malformed(simdjson::error_code error) {
  return absl::InvalidArgumentError(
      absl::StrCat(kMalformedPrefix, simdjson::error_message(error)));
}

// The JSON type a converted value came from, for messages.
std::string_view JsonTypeOf(const AttributeValue& value) {
  switch (value.type()) {
    case AttrType::kS: return "string";
    case AttrType::kN: return "number";
    case AttrType::kBool: return "boolean";
    case AttrType::kNull: return "null";
    case AttrType::kM: return "object";
    case AttrType::kL: return "array";
    default: return "binary";
  }
}

std::string_view TrimRight(std::string_view text) {
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\n' ||
                           text.back() == '\r')) {
    text.remove_suffix(1);
  }
  return text;
}

absl::StatusOr<AttributeValue> Convert(od::value& value, std::string_view path, int depth);

absl::StatusOr<AttributeValue> ConvertObject(od::object& object, std::string_view path,
                                             int depth) {
  Item map;
  for (auto field_result : object) {
    od::field field;
    if (auto error = std::move(field_result).get(field)) return Malformed(error);
    std::string_view name_view;
    if (auto error = field.unescaped_key().get(name_view)) return Malformed(error);
    std::string name(name_view);  // copied before converting reuses the string buffer
    std::string child = Child(path, name);
    if (map.find(name) != map.end()) return PathError(child, "duplicate field name");
    absl::StatusOr<AttributeValue> v = Convert(field.value(), child, depth + 1);
    if (!v.ok()) return v.status();
    map.emplace(std::move(name), *std::move(v));
  }
  return AttributeValue::Map(std::move(map));
}

absl::StatusOr<AttributeValue> ConvertArray(od::array& array, std::string_view path, int depth) {
  std::vector<AttributeValue> list;
  for (auto element_result : array) {
    od::value element;
    if (auto error = std::move(element_result).get(element)) return Malformed(error);
    absl::StatusOr<AttributeValue> v =
        Convert(element, absl::StrCat(ToAbsl(path), "[", list.size(), "]"), depth + 1);
    if (!v.ok()) return v.status();
    list.push_back(*std::move(v));
  }
  return AttributeValue::List(std::move(list));
}

// JSON's number grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
bool IsJsonNumber(std::string_view text) {
  size_t i = 0;
  auto digits = [&] {
    size_t start = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    return i - start;
  };
  if (i < text.size() && text[i] == '-') ++i;
  if (i < text.size() && text[i] == '0') {
    ++i;
  } else if (digits() == 0) {
    return false;
  }
  if (i < text.size() && text[i] == '.') {
    ++i;
    if (digits() == 0) return false;
  }
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    if (digits() == 0) return false;
  }
  return i == text.size();
}

absl::StatusOr<AttributeValue> ConvertNumber(od::value& value, std::string_view path) {
  // The token's own text, not a double: "0.1" stays exactly 0.1, 20-digit ids stay exact.
  std::string text(TrimRight(value.raw_json_token()));
  if (!IsJsonNumber(text)) return Malformed(simdjson::NUMBER_ERROR);  // "12x", "01"
  absl::StatusOr<AttributeValue> number = AttributeValue::Number(text);
  if (number.ok()) return number;
  return PathError(path, number.status().message());  // valid JSON, not a DynamoDB number
}

// Any JSON value as an attribute value (string S, number N, boolean BOOL, null NULL,
// object M, array L).
absl::StatusOr<AttributeValue> Convert(od::value& value, std::string_view path, int depth) {
  if (depth > kMaxNesting) {
    return PathError(path, absl::StrCat("nested more than ", kMaxNesting, " levels deep"));
  }
  od::json_type type;
  if (auto error = value.type().get(type)) return Malformed(error);
  switch (type) {
    case od::json_type::string: {
      std::string_view text;
      if (auto error = value.get_string().get(text)) return Malformed(error);
      return AttributeValue::String(std::string(text));
    }
    case od::json_type::number: return ConvertNumber(value, path);
    case od::json_type::boolean: {
      bool flag = false;
      if (auto error = value.get_bool().get(flag)) return Malformed(error);
      return AttributeValue::Bool(flag);
    }
    case od::json_type::null: {
      bool is_null = false;
      if (auto error = value.is_null().get(is_null)) return Malformed(error);
      if (!is_null) return Malformed(simdjson::N_ATOM_ERROR);
      return AttributeValue::Null();
    }
    case od::json_type::object: {
      od::object object;
      if (auto error = value.get_object().get(object)) return Malformed(error);
      return ConvertObject(object, path, depth);
    }
    case od::json_type::array: {
      od::array array;
      if (auto error = value.get_array().get(array)) return Malformed(error);
      return ConvertArray(array, path, depth);
    }
  }
  return PathError(path, "unknown JSON type");
}

bool IsBlank(std::string_view text) {
  for (char c : text) {
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return false;
  }
  return true;
}

const AttributeValue* Find(const Item& item, std::string_view name) {
  auto it = item.find(name);
  return it == item.end() ? nullptr : &it->second;
}

// {"schema": ..., "payload": X} (the JsonConverter's wrapper) -> X; anything else as it is.
// `path` becomes "payload" when unwrapped.
const AttributeValue* Unwrap(const AttributeValue& root, std::string* path) {
  if (root.type() != AttrType::kM) return &root;
  const AttributeValue* payload = Find(root.map(), "payload");
  if (payload == nullptr || root.map().size() > 2) return &root;
  if (root.map().size() == 2 && Find(root.map(), "schema") == nullptr) return &root;
  *path = Child(*path, "payload");
  return payload;
}

absl::StatusOr<int64_t> ReadMillis(const AttributeValue& value, std::string_view path) {
  if (value.type() != AttrType::kN) {
    return PathError(path, absl::StrCat("expected milliseconds since the epoch, got ",
                                        ToAbsl(JsonTypeOf(value))));
  }
  const std::string& text = value.scalar();
  int64_t ms = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), ms);
  if (error != std::errc() || end != text.data() + text.size() || ms < 0) {
    return PathError(path, absl::StrCat("expected whole milliseconds since the epoch, got ",
                                        text));
  }
  return ms;
}

absl::Status CheckKeyValue(const AttributeValue& value, std::string_view path) {
  if (value.type() == AttrType::kS || value.type() == AttrType::kN) return absl::OkStatus();
  return PathError(path, absl::StrCat("key attributes must be strings or numbers, got ",
                                      ToAbsl(JsonTypeOf(value))));
}

// Optional row image: an object, null or absent.
absl::Status ReadImage(const Item& envelope, std::string_view name, std::string_view prefix,
                       std::optional<Item>* out) {
  const AttributeValue* image = Find(envelope, name);
  if (image == nullptr || image->type() == AttrType::kNull) return absl::OkStatus();
  if (image->type() != AttrType::kM) {
    return PathError(Child(prefix, name), absl::StrCat("expected an object or null, got ",
                                                       ToAbsl(JsonTypeOf(*image))));
  }
  *out = image->map();
  return absl::OkStatus();
}

absl::StatusOr<ChangeEvent::Kind> ReadOp(const Item& envelope, std::string_view prefix,
                                         std::string* op_out) {
  const std::string path = Child(prefix, "op");
  const AttributeValue* op = Find(envelope, "op");
  if (op == nullptr) return PathError(path, "is required");
  if (op->type() != AttrType::kS) {
    return PathError(path, absl::StrCat("expected a string, got ", ToAbsl(JsonTypeOf(*op))));
  }
  *op_out = op->scalar();
  if (*op_out == "c" || *op_out == "r") return ChangeEvent::Kind::kInsert;
  if (*op_out == "u") return ChangeEvent::Kind::kModify;
  if (*op_out == "d") return ChangeEvent::Kind::kRemove;
  return PathError(path, absl::StrCat("expected \"c\", \"u\", \"d\" or \"r\", got ",
                                      Quoted(*op_out)));
}

absl::StatusOr<int64_t> ReadCreationTime(const Item& envelope, std::string_view prefix) {
  if (const AttributeValue* source = Find(envelope, "source");
      source != nullptr && source->type() == AttrType::kM) {
    if (const AttributeValue* ts = Find(source->map(), "ts_ms");
        ts != nullptr && ts->type() != AttrType::kNull) {
      return ReadMillis(*ts, Child(Child(prefix, "source"), "ts_ms"));
    }
  }
  const AttributeValue* ts = Find(envelope, "ts_ms");
  if (ts == nullptr || ts->type() == AttrType::kNull) return 0;
  return ReadMillis(*ts, Child(prefix, "ts_ms"));
}

}  // namespace

struct DebeziumJsonDecoder::Impl {
  std::vector<std::string> key_attributes;
  od::parser parser;
  std::string buffer;  // the input copied with simdjson's padding
  od::document doc;

  // Parses a whole JSON document into an attribute value (errors prefixed by `path`).
  absl::StatusOr<AttributeValue> Parse(std::string_view json, std::string_view path) {
    buffer.assign(json);
    buffer.resize(json.size() + simdjson::SIMDJSON_PADDING, '\0');
    if (auto error = parser.iterate(buffer.data(), json.size(), buffer.size()).get(doc)) {
      return Malformed(error);
    }
    od::value root;
    // A scalar document cannot be read as a value; those are never envelopes or keys.
    od::json_type type;
    if (auto error = doc.type().get(type)) return Malformed(error);
    if (type != od::json_type::object && type != od::json_type::array) {
      if (type == od::json_type::null) {
        bool is_null = false;
        if (auto error = doc.is_null().get(is_null); error || !is_null) {
          return Malformed(error ? error : simdjson::N_ATOM_ERROR);
        }
        if (!AtEnd()) return Malformed(simdjson::TRAILING_CONTENT);
        return AttributeValue::Null();
      }
      return PathError(path.empty() ? "value" : path,
                       "expected a JSON object, got a scalar value");
    }
    if (auto error = doc.get_value().get(root)) return Malformed(error);
    absl::StatusOr<AttributeValue> value = Convert(root, path, 0);
    if (!value.ok()) return value;
    if (!AtEnd()) return Malformed(simdjson::TRAILING_CONTENT);
    return value;
  }

  bool AtEnd() {
    const char* location = nullptr;
    return doc.current_location().get(location) == simdjson::OUT_OF_BOUNDS;
  }

  absl::StatusOr<Item> KeyFromMessage(std::string_view key_json) {
    if (IsBlank(key_json)) {
      return PathError("key", "the message has no key; give the key columns in the source's "
                              "kafka.key_attributes");
    }
    absl::StatusOr<AttributeValue> root = Parse(key_json, "key");
    if (!root.ok()) return root.status();
    std::string path = "key";
    const AttributeValue* key = Unwrap(*root, &path);
    if (key->type() != AttrType::kM || key->map().empty()) {
      return PathError(path, absl::StrCat("expected an object of key columns, got ",
                                          key->type() == AttrType::kM
                                              ? "an empty object"
                                              : std::string(JsonTypeOf(*key))));
    }
    for (const auto& [name, value] : key->map()) {
      if (absl::Status s = CheckKeyValue(value, Child(path, name)); !s.ok()) return s;
    }
    return key->map();
  }

  absl::StatusOr<Item> KeyFromImage(const std::optional<Item>& image, std::string_view image_name,
                                    std::string_view op) {
    if (!image) {
      return PathError(image_name, absl::StrCat("is required for op \"", ToAbsl(op),
                                                "\" to read the key attributes"));
    }
    Item keys;
    for (const std::string& name : key_attributes) {
      const AttributeValue* value = Find(*image, name);
      if (value == nullptr) {
        return PathError(absl::StrCat("key attribute ", Quoted(name)),
                         absl::StrCat("is missing from ", ToAbsl(image_name)));
      }
      if (absl::Status s = CheckKeyValue(*value, Child(image_name, name)); !s.ok()) return s;
      keys.emplace(name, *value);
    }
    return keys;
  }
};

DebeziumJsonDecoder::DebeziumJsonDecoder(std::vector<std::string> key_attributes)
    : impl_(std::make_unique<Impl>()) {
  impl_->key_attributes = std::move(key_attributes);
}

DebeziumJsonDecoder::~DebeziumJsonDecoder() = default;

absl::StatusOr<std::optional<ChangeEvent>> DebeziumJsonDecoder::Decode(std::string_view key,
                                                                       std::string_view value) {
  if (IsBlank(value)) return std::nullopt;  // a tombstone
  absl::StatusOr<AttributeValue> root = impl_->Parse(value, "");
  if (!root.ok()) return root.status();
  std::string prefix;
  const AttributeValue* envelope = Unwrap(*root, &prefix);
  if (envelope->type() == AttrType::kNull) return std::nullopt;  // null, or a null payload
  if (envelope->type() != AttrType::kM) {
    return PathError(prefix.empty() ? "value" : prefix,
                     absl::StrCat("expected a Debezium envelope object, got ",
                                  ToAbsl(JsonTypeOf(*envelope))));
  }
  const Item& fields = envelope->map();

  ChangeEvent event;
  std::string op;
  absl::StatusOr<ChangeEvent::Kind> kind = ReadOp(fields, prefix, &op);
  if (!kind.ok()) return kind.status();
  event.kind = *kind;
  std::optional<Item> before, after;
  if (absl::Status s = ReadImage(fields, "before", prefix, &before); !s.ok()) return s;
  if (absl::Status s = ReadImage(fields, "after", prefix, &after); !s.ok()) return s;
  const bool remove = event.kind == ChangeEvent::Kind::kRemove;
  if (!remove && !after) {
    return PathError(Child(prefix, "after"), absl::StrCat("is required for op ", Quoted(op)));
  }
  if (remove && after) {
    return PathError(Child(prefix, "after"), "must be null for op \"d\"");
  }
  absl::StatusOr<int64_t> created = ReadCreationTime(fields, prefix);
  if (!created.ok()) return created.status();
  event.creation_time_ms = *created;

  absl::StatusOr<Item> keys =
      impl_->key_attributes.empty()
          ? impl_->KeyFromMessage(key)
          : impl_->KeyFromImage(remove ? before : after,
                                Child(prefix, remove ? "before" : "after"), op);
  if (!keys.ok()) return keys.status();
  event.keys = *std::move(keys);
  event.new_image = std::move(after);
  event.old_image = std::move(before);
  return event;
}

}  // namespace cdcview
