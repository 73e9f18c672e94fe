#include "daemon/decode/dynamodb_json.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/decode/decode_errors.h"
#include "absl/time/time.h"
#include "daemon/decode/base64.h"
#include "daemon/decode/json_escape.h"
#include "index_builders/number.h"
#include "simdjson.h"

namespace cdcview {

namespace od = simdjson::ondemand;

namespace {

using decode_internal::PathError;
using decode_internal::Quoted;
using decode_internal::ToAbsl;

constexpr char kMalformedPrefix[] = "malformed JSON: ";
// DynamoDB allows 32 levels; the guard only keeps hostile input from exhausting the stack.
constexpr int kMaxNesting = 64;
// 9999-12-31T23:59:59Z: anything larger is not seconds (milliseconds, most likely).
constexpr int64_t kMaxEpochSeconds = 253402300799;

absl::Status Malformed(simdjson::error_code error) {
  return absl::InvalidArgumentError(
      absl::StrCat(kMalformedPrefix, simdjson::error_message(error)));
}

std::string_view JsonTypeName(od::json_type type) {
  switch (type) {
    case od::json_type::array: return "array";
    case od::json_type::object: return "object";
    case od::json_type::number: return "number";
    case od::json_type::string: return "string";
    case od::json_type::boolean: return "boolean";
    case od::json_type::null: return "null";
  }
  return "unknown";
}

// The JSON type of `value`; a value that cannot even be typed is malformed JSON.
absl::StatusOr<od::json_type> TypeOf(od::value& value) {
  od::json_type type;
  if (auto error = value.type().get(type)) return Malformed(error);
  return type;
}

// The on-demand parser types a value by its first character, so `tru` looks like a
// boolean: a literal of the wrong type is read before it is blamed on the record.
absl::Status CheckLiteral(od::value& value, od::json_type type) {
  simdjson::error_code error = simdjson::SUCCESS;
  if (type == od::json_type::boolean) {
    error = value.get_bool().error();
  } else if (type == od::json_type::number) {
    error = value.get_double().error();
  } else if (type == od::json_type::null) {
    bool is_null = false;
    error = value.is_null().get(is_null);
    if (!error && !is_null) error = simdjson::N_ATOM_ERROR;
  }
  return error ? Malformed(error) : absl::OkStatus();
}

// OK if `value` has JSON type `want`, else "<path>: <must_be>, got <actual type>".
absl::Status ExpectType(od::value& value, od::json_type want, std::string_view path,
                        std::string_view must_be) {
  absl::StatusOr<od::json_type> type = TypeOf(value);
  if (!type.ok()) return type.status();
  if (*type != want) {
    if (absl::Status s = CheckLiteral(value, *type); !s.ok()) return s;
    return PathError(path, absl::StrCat(ToAbsl(must_be), ", got ", ToAbsl(JsonTypeName(*type))));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadString(od::value& value, std::string_view path,
                                       std::string_view must_be = "expected a string") {
  if (absl::Status s = ExpectType(value, od::json_type::string, path, must_be); !s.ok()) {
    return s;
  }
  std::string_view text;
  if (auto error = value.get_string().get(text)) return Malformed(error);
  return std::string(text);
}

absl::StatusOr<od::object> ReadObject(od::value& value, std::string_view path,
                                      std::string_view must_be = "expected an object") {
  if (absl::Status s = ExpectType(value, od::json_type::object, path, must_be); !s.ok()) {
    return s;
  }
  od::object object;
  if (auto error = value.get_object().get(object)) return Malformed(error);
  return object;
}

absl::StatusOr<od::array> ReadArray(od::value& value, std::string_view path,
                                    std::string_view must_be) {
  if (absl::Status s = ExpectType(value, od::json_type::array, path, must_be); !s.ok()) {
    return s;
  }
  od::array array;
  if (auto error = value.get_array().get(array)) return Malformed(error);
  return array;
}

// Calls fn(key, value) for each field of `object`, stopping at the first error. The key
// points into the parser's buffers: copy it to keep it.
template <typename Fn>
absl::Status ForEachField(od::object& object, Fn&& fn) {
  for (auto field_result : object) {
    od::field field;
    if (auto error = std::move(field_result).get(field)) return Malformed(error);
    std::string_view key;
    if (auto error = field.unescaped_key().get(key)) return Malformed(error);
    if (absl::Status s = fn(key, field.value()); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// Calls fn(index, value) for each element of `array`, stopping at the first error.
template <typename Fn>
absl::Status ForEachElement(od::array& array, Fn&& fn) {
  size_t index = 0;
  for (auto element_result : array) {
    od::value element;
    if (auto error = std::move(element_result).get(element)) return Malformed(error);
    if (absl::Status s = fn(index++, element); !s.ok()) return s;
  }
  return absl::OkStatus();
}

std::string ElementPath(std::string_view path, size_t index) {
  return absl::StrCat(ToAbsl(path), "[", index, "]");
}

absl::StatusOr<AttributeValue> DecodeAttributeValue(od::value& value, std::string_view path,
                                                     int depth);

absl::StatusOr<Item> DecodeAttributeMap(od::value& value, std::string_view path, int depth) {
  absl::StatusOr<od::object> object =
      ReadObject(value, path, "expected an object of attributes");
  if (!object.ok()) return object.status();
  Item item;
  absl::Status status = ForEachField(*object, [&](std::string_view name, od::value& v) {
    std::string attr_path =
        path.empty() ? std::string(name) : absl::StrCat(ToAbsl(path), ".", ToAbsl(name));
    if (item.find(name) != item.end()) return PathError(attr_path, "duplicate attribute name");
    std::string key(name);  // copied before decoding reuses the parser's string buffer
    absl::StatusOr<AttributeValue> attr = DecodeAttributeValue(v, attr_path, depth + 1);
    if (!attr.ok()) return attr.status();
    item.emplace(std::move(key), *std::move(attr));
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return item;
}

// Reads an SS / NS / BS array's members as strings; NS members are checked as numbers
// and BS members base64-decoded, each error naming the member's index.
absl::StatusOr<std::vector<std::string>> DecodeSetMembers(od::value& value,
                                                          std::string_view path,
                                                          AttrType type) {
  std::string_view name = AttrTypeName(type);
  absl::StatusOr<od::array> array =
      ReadArray(value, path, absl::StrCat(ToAbsl(name), " value must be an array"));
  if (!array.ok()) return array.status();
  std::vector<std::string> members;
  absl::Status status = ForEachElement(*array, [&](size_t index, od::value& element) {
    std::string member_path = ElementPath(path, index);
    absl::StatusOr<std::string> text =
        ReadString(element, member_path, absl::StrCat(ToAbsl(name), " member must be a string"));
    if (!text.ok()) return text.status();
    if (type == AttrType::kNS) {
      absl::StatusOr<std::string> canonical = CanonicalNumber(*text);
      if (!canonical.ok()) return PathError(member_path, canonical.status().message());
      members.push_back(*std::move(canonical));
    } else if (type == AttrType::kBS) {
      std::string bytes;
      if (!Base64Decode(*text, &bytes)) return PathError(member_path, "invalid base64");
      members.push_back(std::move(bytes));
    } else {
      members.push_back(*std::move(text));
    }
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return members;
}

// Decodes the value of the type key `type` ({"<type>": <value>}).
absl::StatusOr<AttributeValue> DecodeTypedValue(AttrType type, od::value& value,
                                                std::string_view path, int depth) {
  std::string_view name = AttrTypeName(type);
  std::string must_be_string = absl::StrCat(ToAbsl(name), " value must be a string");
  switch (type) {
    case AttrType::kS: {
      absl::StatusOr<std::string> text = ReadString(value, path, must_be_string);
      if (!text.ok()) return text.status();
      return AttributeValue::String(*std::move(text));
    }
    case AttrType::kN: {
      absl::StatusOr<std::string> text = ReadString(value, path, must_be_string);
      if (!text.ok()) return text.status();
      absl::StatusOr<AttributeValue> number = AttributeValue::Number(*text);
      if (!number.ok()) return PathError(path, number.status().message());
      return number;
    }
    case AttrType::kB: {
      absl::StatusOr<std::string> text = ReadString(value, path, must_be_string);
      if (!text.ok()) return text.status();
      std::string bytes;
      if (!Base64Decode(*text, &bytes)) return PathError(path, "invalid base64");
      return AttributeValue::Binary(std::move(bytes));
    }
    case AttrType::kBool:
    case AttrType::kNull: {
      absl::Status s = ExpectType(value, od::json_type::boolean, path,
                                  absl::StrCat(ToAbsl(name), " value must be a boolean"));
      if (!s.ok()) return s;
      bool flag = false;
      if (auto error = value.get_bool().get(flag)) return Malformed(error);
      if (type == AttrType::kBool) return AttributeValue::Bool(flag);
      if (!flag) return PathError(path, "NULL value must be true, got false");
      return AttributeValue::Null();
    }
    case AttrType::kM: {
      if (depth >= kMaxNesting) {
        return PathError(path, absl::StrCat("nested more than ", kMaxNesting, " levels deep"));
      }
      absl::StatusOr<Item> map = DecodeAttributeMap(value, path, depth);
      if (!map.ok()) return map.status();
      return AttributeValue::Map(*std::move(map));
    }
    case AttrType::kL: {
      if (depth >= kMaxNesting) {
        return PathError(path, absl::StrCat("nested more than ", kMaxNesting, " levels deep"));
      }
      absl::StatusOr<od::array> array = ReadArray(value, path, "L value must be an array");
      if (!array.ok()) return array.status();
      std::vector<AttributeValue> list;
      absl::Status status = ForEachElement(*array, [&](size_t index, od::value& element) {
        absl::StatusOr<AttributeValue> item =
            DecodeAttributeValue(element, ElementPath(path, index), depth + 1);
        if (!item.ok()) return item.status();
        list.push_back(*std::move(item));
        return absl::OkStatus();
      });
      if (!status.ok()) return status;
      return AttributeValue::List(std::move(list));
    }
    case AttrType::kSS:
    case AttrType::kNS:
    case AttrType::kBS: {
      absl::StatusOr<std::vector<std::string>> members = DecodeSetMembers(value, path, type);
      if (!members.ok()) return members.status();
      if (type == AttrType::kSS) return AttributeValue::StringSet(*std::move(members));
      if (type == AttrType::kBS) return AttributeValue::BinarySet(*std::move(members));
      absl::StatusOr<AttributeValue> set = AttributeValue::NumberSet(*members);
      if (!set.ok()) return PathError(path, set.status().message());
      return set;
    }
  }
  return PathError(path, "unhandled attribute type");
}

// {"<type>": <value>}: exactly one type key.
absl::StatusOr<AttributeValue> DecodeAttributeValue(od::value& value, std::string_view path,
                                                     int depth) {
  absl::StatusOr<od::object> object = ReadObject(
      value, path, "attribute value must be an object like {\"S\": \"text\"}");
  if (!object.ok()) return object.status();
  int keys = 0;
  std::optional<absl::StatusOr<AttributeValue>> decoded;
  absl::Status status = ForEachField(*object, [&](std::string_view key, od::value& v) {
    if (++keys > 1) return absl::OkStatus();  // only counted; the value is skipped
    AttrType type;
    if (!ParseAttrType(key, &type)) {
      // Reported after counting, so a record with two keys hears about that first.
      decoded = PathError(path, absl::StrCat("unknown attribute type ", Quoted(key)));
      return absl::OkStatus();
    }
    decoded = DecodeTypedValue(type, v, path, depth);
    // Stop at once: after a failure the parser may sit inside the value.
    return decoded->ok() ? absl::OkStatus() : decoded->status();
  });
  if (!status.ok()) return status;
  if (keys != 1) {
    return PathError(path,
                     absl::StrCat("attribute value must have exactly one type key, got ", keys));
  }
  return *std::move(decoded);
}

// What the record's fields said, before the cross-field checks.
struct RecordFields {
  std::optional<ChangeEvent::Kind> kind;
  bool has_dynamodb = false;
  std::optional<Item> keys;
  std::optional<Item> new_image;
  std::optional<Item> old_image;
  std::string sequence_number;
  std::string stream_view_type;
  int64_t creation_time_ms = 0;
  std::string principal_id;
};

absl::StatusOr<ChangeEvent::Kind> ParseEventName(std::string_view name) {
  if (name == "INSERT") return ChangeEvent::Kind::kInsert;
  if (name == "MODIFY") return ChangeEvent::Kind::kModify;
  if (name == "REMOVE") return ChangeEvent::Kind::kRemove;
  return PathError("eventName",
                   absl::StrCat("expected INSERT, MODIFY or REMOVE, got ", Quoted(name)));
}

absl::Status CheckSequenceNumber(std::string_view text) {
  bool digits = !text.empty();
  for (char c : text) digits = digits && c >= '0' && c <= '9';
  if (!digits) {
    return PathError("dynamodb.SequenceNumber",
                     absl::StrCat("expected decimal digits, got ", Quoted(text)));
  }
  if (text.size() > kMaxSequenceNumberDigits) {
    return PathError("dynamodb.SequenceNumber",
                     absl::StrCat("expected at most ", kMaxSequenceNumberDigits,
                                  " decimal digits (DynamoDB's have 21 to 40), got ",
                                  text.size()));
  }
  return absl::OkStatus();
}

absl::Status CheckStreamViewType(std::string_view text) {
  if (text == "KEYS_ONLY" || text == "NEW_IMAGE" || text == "OLD_IMAGE" ||
      text == "NEW_AND_OLD_IMAGES") {
    return absl::OkStatus();
  }
  return PathError("dynamodb.StreamViewType",
                   absl::StrCat("expected KEYS_ONLY, NEW_IMAGE, OLD_IMAGE or "
                                "NEW_AND_OLD_IMAGES, got ",
                                Quoted(text)));
}

// ApproximateCreationDateTime: seconds since the epoch as a JSON number (DynamoDB's wire
// format), or an ISO-8601 / RFC 3339 string (what SDKs print, e.g. "2025-03-01T00:00:00Z").
absl::StatusOr<int64_t> ReadCreationTime(od::value& value) {
  constexpr std::string_view kPath = "dynamodb.ApproximateCreationDateTime";
  absl::StatusOr<od::json_type> type = TypeOf(value);
  if (!type.ok()) return type.status();
  if (*type == od::json_type::number) {
    double seconds = 0;
    if (auto error = value.get_double().get(seconds)) return Malformed(error);
    if (!(seconds >= 0 && seconds <= static_cast<double>(kMaxEpochSeconds))) {
      return PathError(kPath, absl::StrCat("expected seconds since the epoch (0 to ",
                                           kMaxEpochSeconds, "), got ", seconds));
    }
    return static_cast<int64_t>(std::llround(seconds * 1000));
  }
  if (*type == od::json_type::string) {
    std::string_view text;
    if (auto error = value.get_string().get(text)) return Malformed(error);
    absl::Time time;
    std::string ignored;
    if (!absl::ParseTime("%Y-%m-%d%ET%H:%M:%E*S%Ez", ToAbsl(text), &time, &ignored)) {
      return PathError(kPath, absl::StrCat("expected an ISO-8601 time like "
                                           "\"2025-03-01T00:00:00Z\", got ",
                                           Quoted(text)));
    }
    return absl::ToUnixMillis(time);
  }
  return PathError(kPath, absl::StrCat("expected a number of seconds or an ISO-8601 string, got ",
                                       ToAbsl(JsonTypeName(*type))));
}

absl::Status ReadUserIdentity(od::value& value, RecordFields* fields) {
  absl::StatusOr<od::object> object = ReadObject(value, "userIdentity");
  if (!object.ok()) return object.status();
  return ForEachField(*object, [&](std::string_view key, od::value& v) {
    if (key == "type") return ReadString(v, "userIdentity.type").status();
    if (key != "principalId") return absl::OkStatus();
    absl::StatusOr<std::string> principal = ReadString(v, "userIdentity.principalId");
    if (!principal.ok()) return principal.status();
    fields->principal_id = *std::move(principal);
    return absl::OkStatus();
  });
}

absl::Status ReadImage(od::value& value, std::string_view path, std::optional<Item>* out) {
  absl::StatusOr<Item> item = DecodeAttributeMap(value, path, 0);
  if (!item.ok()) return item.status();
  *out = *std::move(item);
  return absl::OkStatus();
}

absl::Status ReadStreamRecord(od::value& value, RecordFields* fields) {
  absl::StatusOr<od::object> object = ReadObject(value, "dynamodb");
  if (!object.ok()) return object.status();
  return ForEachField(*object, [&](std::string_view key, od::value& v) -> absl::Status {
    if (key == "Keys") return ReadImage(v, "dynamodb.Keys", &fields->keys);
    if (key == "NewImage") return ReadImage(v, "dynamodb.NewImage", &fields->new_image);
    if (key == "OldImage") return ReadImage(v, "dynamodb.OldImage", &fields->old_image);
    if (key == "SequenceNumber") {
      absl::StatusOr<std::string> text = ReadString(v, "dynamodb.SequenceNumber");
      if (!text.ok()) return text.status();
      fields->sequence_number = *std::move(text);
      return CheckSequenceNumber(fields->sequence_number);
    }
    if (key == "StreamViewType") {
      absl::StatusOr<std::string> text = ReadString(v, "dynamodb.StreamViewType");
      if (!text.ok()) return text.status();
      fields->stream_view_type = *std::move(text);
      return CheckStreamViewType(fields->stream_view_type);
    }
    if (key == "SizeBytes") {
      return ExpectType(v, od::json_type::number, "dynamodb.SizeBytes", "expected a number");
    }
    if (key == "ApproximateCreationDateTime") {
      absl::StatusOr<int64_t> ms = ReadCreationTime(v);
      if (!ms.ok()) return ms.status();
      fields->creation_time_ms = *ms;
    }
    return absl::OkStatus();
  });
}

absl::Status ReadRecordField(std::string_view key, od::value& value, RecordFields* fields) {
  if (key == "eventName") {
    absl::StatusOr<std::string> name = ReadString(value, "eventName");
    if (!name.ok()) return name.status();
    absl::StatusOr<ChangeEvent::Kind> kind = ParseEventName(*name);
    if (!kind.ok()) return kind.status();
    fields->kind = *kind;
    return absl::OkStatus();
  }
  if (key == "eventID" || key == "eventSource" || key == "awsRegion") {
    return ReadString(value, key).status();
  }
  if (key == "userIdentity") return ReadUserIdentity(value, fields);
  if (key == "dynamodb") {
    fields->has_dynamodb = true;
    return ReadStreamRecord(value, fields);
  }
  return absl::OkStatus();  // unknown fields: forward-compatible
}

// Why a record without a new image cannot be applied, with the fix when the stream's view
// type is the cause.
absl::Status MissingNewImage(ChangeEvent::Kind kind, std::string_view stream_view_type) {
  std::string message = absl::StrCat("is required for ", ToAbsl(ChangeKindName(kind)));
  if (stream_view_type == "KEYS_ONLY" || stream_view_type == "OLD_IMAGE") {
    absl::StrAppend(&message, " (stream view type ", ToAbsl(stream_view_type),
                    stream_view_type == "KEYS_ONLY" ? " carries no image" : " carries no new image",
                    "; use NEW_IMAGE or NEW_AND_OLD_IMAGES)");
  }
  return PathError("dynamodb.NewImage", message);
}

absl::Status CheckKeys(const Item& keys) {
  if (keys.empty()) return PathError("dynamodb.Keys", "must not be empty");
  for (const auto& [name, value] : keys) {
    AttrType type = value.type();
    if (type != AttrType::kS && type != AttrType::kN && type != AttrType::kB) {
      return PathError(absl::StrCat("dynamodb.Keys.", name),
                       absl::StrCat("key attributes must be S, N or B, got ",
                                    ToAbsl(AttrTypeName(type))));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ChangeEvent> BuildEvent(RecordFields fields) {
  if (!fields.kind) return PathError("eventName", "is required");
  if (!fields.has_dynamodb) return PathError("dynamodb", "is required");
  if (!fields.keys) return PathError("dynamodb.Keys", "is required");
  if (absl::Status s = CheckKeys(*fields.keys); !s.ok()) return s;
  ChangeEvent::Kind kind = *fields.kind;
  if (kind != ChangeEvent::Kind::kRemove && !fields.new_image) {
    return MissingNewImage(kind, fields.stream_view_type);
  }
  if (kind == ChangeEvent::Kind::kRemove && fields.new_image) {
    return PathError("dynamodb.NewImage", "must be absent for REMOVE");
  }
  ChangeEvent event;
  event.kind = kind;
  event.keys = *std::move(fields.keys);
  event.new_image = std::move(fields.new_image);
  event.old_image = std::move(fields.old_image);
  event.sequence_number = std::move(fields.sequence_number);
  event.creation_time_ms = fields.creation_time_ms;
  // DynamoDB's TTL process is the only writer that identifies itself this way.
  event.ttl_delete = fields.principal_id == "dynamodb.amazonaws.com";
  return event;
}

// A document whose root is not an object: malformed if it is not even valid JSON,
// otherwise valid JSON of the wrong shape.
absl::Status NotAnObject(od::document& doc, od::json_type type, std::string_view what) {
  simdjson::error_code error = simdjson::SUCCESS;
  switch (type) {
    case od::json_type::string: error = doc.get_string().error(); break;
    case od::json_type::number: error = doc.get_double().error(); break;
    case od::json_type::boolean: error = doc.get_bool().error(); break;
    case od::json_type::null: {
      bool is_null = false;
      error = doc.is_null().get(is_null);
      if (!error && !is_null) error = simdjson::N_ATOM_ERROR;
      break;
    }
    case od::json_type::array:
    case od::json_type::object: break;
  }
  if (error) return Malformed(error);
  return absl::InvalidArgumentError(
      absl::StrCat(ToAbsl(what), ": expected a JSON object, got ", ToAbsl(JsonTypeName(type))));
}

// After the root object was read: anything but the end of input is malformed.
absl::Status ExpectEnd(od::document& doc) {
  const char* location = nullptr;
  if (doc.current_location().get(location) == simdjson::OUT_OF_BOUNDS) return absl::OkStatus();
  return Malformed(simdjson::TRAILING_CONTENT);
}

}  // namespace

struct DynamoDbJsonDecoder::Impl {
  od::parser parser;
  std::string buffer;  // the input copied with the zero padding simdjson reads past its end
  od::document doc;

  // Parses `json` and hands its root object to fn(object); then checks nothing follows.
  template <typename Fn>
  absl::Status WithRootObject(std::string_view json, std::string_view what, Fn&& fn) {
    buffer.assign(json);
    buffer.resize(json.size() + simdjson::SIMDJSON_PADDING, '\0');
    if (auto error = parser.iterate(buffer.data(), json.size(), buffer.size()).get(doc)) {
      return Malformed(error);
    }
    od::json_type type;
    if (auto error = doc.type().get(type)) return Malformed(error);
    if (type != od::json_type::object) return NotAnObject(doc, type, what);
    od::object object;
    if (auto error = doc.get_object().get(object)) return Malformed(error);
    if (absl::Status s = fn(object); !s.ok()) return s;
    return ExpectEnd(doc);
  }
};

DynamoDbJsonDecoder::DynamoDbJsonDecoder() : impl_(std::make_unique<Impl>()) {}
DynamoDbJsonDecoder::~DynamoDbJsonDecoder() = default;

absl::StatusOr<ChangeEvent> DynamoDbJsonDecoder::Decode(std::string_view record_json) {
  RecordFields fields;
  absl::Status status = impl_->WithRootObject(record_json, "record", [&](od::object& object) {
    return ForEachField(object, [&](std::string_view key, od::value& value) {
      return ReadRecordField(key, value, &fields);
    });
  });
  if (!status.ok()) return status;
  return BuildEvent(std::move(fields));
}

absl::StatusOr<Item> DynamoDbJsonDecoder::DecodeItem(std::string_view item_json) {
  Item item;
  absl::Status status = impl_->WithRootObject(item_json, "item", [&](od::object& object) {
    return ForEachField(object, [&](std::string_view name, od::value& value) {
      std::string key(name);
      if (item.find(key) != item.end()) return PathError(key, "duplicate attribute name");
      absl::StatusOr<AttributeValue> attr = DecodeAttributeValue(value, key, 1);
      if (!attr.ok()) return attr.status();
      item.emplace(std::move(key), *std::move(attr));
      return absl::OkStatus();
    });
  });
  if (!status.ok()) return status;
  return item;
}

bool IsMalformedJson(const absl::Status& status) {
  return absl::IsInvalidArgument(status) && absl::StartsWith(status.message(), kMalformedPrefix);
}

namespace {

void AppendValue(const AttributeValue& value, std::string* out);

void AppendItem(const Item& item, std::string* out) {
  out->push_back('{');
  bool first = true;
  for (const auto& [name, value] : item) {
    if (!first) out->push_back(',');
    first = false;
    AppendJsonString(name, out);
    out->push_back(':');
    AppendValue(value, out);
  }
  out->push_back('}');
}

void AppendStrings(const std::vector<std::string>& members, bool base64, std::string* out) {
  out->push_back('[');
  for (size_t i = 0; i < members.size(); ++i) {
    if (i > 0) out->push_back(',');
    AppendJsonString(base64 ? Base64Encode(members[i]) : members[i], out);
  }
  out->push_back(']');
}

void AppendValue(const AttributeValue& value, std::string* out) {
  out->append("{\"");
  out->append(AttrTypeName(value.type()));
  out->append("\":");
  switch (value.type()) {
    case AttrType::kS:
    case AttrType::kN: AppendJsonString(value.scalar(), out); break;
    case AttrType::kB: AppendJsonString(Base64Encode(value.scalar()), out); break;
    case AttrType::kBool: out->append(value.boolean() ? "true" : "false"); break;
    case AttrType::kNull: out->append("true"); break;
    case AttrType::kM: AppendItem(value.map(), out); break;
    case AttrType::kL: {
      out->push_back('[');
      for (size_t i = 0; i < value.list().size(); ++i) {
        if (i > 0) out->push_back(',');
        AppendValue(value.list()[i], out);
      }
      out->push_back(']');
      break;
    }
    case AttrType::kSS:
    case AttrType::kNS: AppendStrings(value.set(), /*base64=*/false, out); break;
    case AttrType::kBS: AppendStrings(value.set(), /*base64=*/true, out); break;
  }
  out->push_back('}');
}

}  // namespace

std::string EncodeDynamoDbJson(const Item& item) {
  std::string out;
  AppendItem(item, &out);
  return out;
}

std::string EncodeDynamoDbJson(const AttributeValue& value) {
  std::string out;
  AppendValue(value, &out);
  return out;
}

}  // namespace cdcview
