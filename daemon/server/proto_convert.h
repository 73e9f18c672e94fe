// Conversions between index_builders values and cdcview.v1 protobuf messages.
// Pure functions; thread-safe.
#pragma once

#include "absl/status/statusor.h"
#include "cdcview/v1/attribute_value.pb.h"
#include "index_builders/attribute_value.h"

namespace cdcview {

void ToProto(const AttributeValue& value, v1::AttributeValue* out);
void ToProto(const Item& item, v1::Item* out);
// INVALID_ARGUMENT naming `field` for an unset value or an invalid number.
absl::StatusOr<AttributeValue> FromProto(const v1::AttributeValue& value, const std::string& field);
absl::StatusOr<Item> FromProto(const v1::Item& item, const std::string& field);

}  // namespace cdcview
