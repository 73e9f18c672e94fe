// Conversions between index_builders' AttributeValue and Item and their cdcview.v1 protobuf
// messages (proto/cdcview/v1/attribute_value.proto), in both directions. The one copy for the
// protobuf change-event decoder (protobuf_event.h) and the read server (keys in requests,
// items and keys in answers).
//
// Errors are INVALID_ARGUMENT "PATH: problem", PATH naming the value inside the message
// (`path` for the value itself, then ".name" for a map member or attribute, "[i]" for a list
// element):
//   keys.PK: no value set (set one of s, n, b, bool, null, m, l, ss, ns, bs)
//   new_image.total: number "abc" is not a valid number
// Pure functions; thread-safe. The results own their data.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "cdcview/v1/attribute_value.pb.h"
#include "index_builders/attribute_value.h"

namespace cdcview {

void ToProto(const AttributeValue& value, v1::AttributeValue* out);
void ToProto(const Item& item, v1::Item* out);

// INVALID_ARGUMENT naming the path of an unset value or an invalid number (or number set).
absl::StatusOr<AttributeValue> FromProto(const v1::AttributeValue& value, const std::string& path);
absl::StatusOr<Item> FromProto(const v1::Item& item, const std::string& path);

}  // namespace cdcview
