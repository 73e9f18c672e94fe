// Reading a DynamoDB JSON 1.0 request body: the members of its objects with the type checks
// DynamoDB's front end makes (a member of the wrong JSON type is a SerializationException, as
// DynamoDB answers it), and attribute values ({"S": "x"}, {"M": {...}}) with DynamoDB's
// ValidationException messages.
//
// Errors are absl::Status values: INVALID_ARGUMENT for DynamoDB's ValidationException, and for
// other DynamoDB error types (SerializationException) INVALID_ARGUMENT with the type as the
// payload under kErrorTypePayload (ErrorTypeOf reads it back).
//
// Pure functions over a parsed simdjson DOM; the views they return point into the parser's
// document and are valid while it is. Thread-safe (one parser per request).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "index_builders/attribute_value.h"
#include "simdjson.h"

namespace cdcview::dynamodb {

inline constexpr char kErrorTypePayload[] = "cdcview.dynamodb.error_type";

// This Abseil's string_view is not std::string_view: the conversions, and StrCat and StrJoin
// over std::string_view arguments.
inline absl::string_view AbslView(std::string_view s) { return {s.data(), s.size()}; }
inline std::string_view StdView(absl::string_view s) { return {s.data(), s.size()}; }
template <typename T>
decltype(auto) CatArg(const T& value) {
  if constexpr (std::is_convertible_v<const T&, std::string_view> &&
                !std::is_convertible_v<const T&, absl::string_view>) {
    return AbslView(std::string_view(value));
  } else {
    return (value);
  }
}
template <typename... Args>
std::string Cat(const Args&... args) {
  return absl::StrCat(CatArg(args)...);
}
std::string Join(const std::vector<std::string_view>& parts, std::string_view separator);

// INVALID_ARGUMENT: DynamoDB's ValidationException.
absl::Status ValidationError(std::string_view message);
// An error of another DynamoDB type, e.g. "SerializationException" (HTTP 400).
absl::Status TypedError(std::string_view type, std::string_view message);
absl::Status SerializationError(std::string_view message);
// The DynamoDB error type a status carries, "" if none.
std::string ErrorTypeOf(const absl::Status& status);

// DynamoDB's limit on nested M and L values.
inline constexpr int kMaxAttributeNesting = 32;

// The members of one JSON object of the request. A member that is absent or JSON null reads
// as nullopt (DynamoDB treats null as absent).
class RequestObject {
 public:
  explicit RequestObject(simdjson::dom::object object) : object_(object) {}

  bool Has(std::string_view member) const;
  // The member whatever its JSON type; nullopt when absent or null.
  std::optional<simdjson::dom::element> Element(std::string_view member) const {
    return Find(member);
  }
  absl::StatusOr<std::optional<std::string_view>> String(std::string_view member) const;
  // A JSON integer within int64 (DynamoDB's Integer members); a fraction or a string is a
  // SerializationException.
  absl::StatusOr<std::optional<int64_t>> Integer(std::string_view member) const;
  absl::StatusOr<std::optional<bool>> Bool(std::string_view member) const;
  // A structure or a map.
  absl::StatusOr<std::optional<simdjson::dom::object>> Object(std::string_view member) const;
  absl::StatusOr<std::optional<simdjson::dom::array>> Array(std::string_view member) const;

  simdjson::dom::object object() const { return object_; }

 private:
  std::optional<simdjson::dom::element> Find(std::string_view member) const;

  simdjson::dom::object object_;
};

// The SerializationException for `value` where `expected` ("String", "Integer", "Boolean",
// "structure", "list") was due, in DynamoDB's words.
absl::Status WrongJsonType(simdjson::dom::element value, std::string_view expected);

// One attribute value: exactly one of S, N, B, BOOL, NULL, M, L, SS, NS, BS.
absl::StatusOr<AttributeValue> DecodeAttributeValue(simdjson::dom::element value);
// A map of attribute name to attribute value (a Key, an ExclusiveStartKey).
absl::StatusOr<Item> DecodeAttributeMap(simdjson::dom::element value);

}  // namespace cdcview::dynamodb
