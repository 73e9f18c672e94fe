// Conversions between index_builders values and cdcview.v1 protobuf messages.
// Pure functions; thread-safe.
#pragma once

#include "absl/status/statusor.h"
#include "cdcview/v1/attribute_value.pb.h"
#include "cdcview/v1/view_service.pb.h"
#include "index_builders/attribute_value.h"
#include "index_builders/view_spec.h"

namespace cdcview {

void ToProto(const AttributeValue& value, v1::AttributeValue* out);
void ToProto(const Item& item, v1::Item* out);
// A stored view entry (key = enc(pk) · enc(sk)? · table key, value = EncodeItem of the projected
// item) as Query, Scan and Watch return it: the item and the view keys it sits under.
absl::Status EntryToProto(const ViewSpec& view, std::string_view key, std::string_view value,
                          v1::ViewEntry* out);
// INVALID_ARGUMENT naming `field` for an unset value or an invalid number.
absl::StatusOr<AttributeValue> FromProto(const v1::AttributeValue& value, const std::string& field);
absl::StatusOr<Item> FromProto(const v1::Item& item, const std::string& field);

}  // namespace cdcview
