// DynamoDB's item size, by its documented rules: what its 400 KB item and 1 MB page limits
// count. Attribute names and strings by UTF-8 bytes, binaries by length, numbers one byte per
// two significant digits plus one, BOOL and NULL one byte, M and L 3 bytes plus one per element
// (and a map member's name), sets the sum of their members.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>

#include "index_builders/attribute_value.h"

namespace cdcview {

uint64_t AttributeValueSize(const AttributeValue& value);
uint64_t ItemSize(const Item& item);

}  // namespace cdcview
