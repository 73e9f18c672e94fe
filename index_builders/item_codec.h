// ItemCodec: compact binary serialization of Items for LMDB values.
//
// Format (version 1): varint attribute count, then per attribute varint name length, name,
// type byte, payload (S/N/B: varint length + bytes; BOOL: one byte; NULL: nothing;
// M: nested item; L: varint count + values; SS/NS/BS: varint count + length-prefixed members).
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "index_builders/attribute_value.h"

namespace cdcview {

// Appends the serialization of `item` to `out`.
void EncodeItem(const Item& item, std::string* out);
std::string EncodeItem(const Item& item);

// Appends the serialization of the attributes of `item` named in `names` (as EncodeItem of
// that subset would, without copying it). `names` may hold duplicates and absent names.
void EncodeItemSubset(const Item& item, const std::vector<std::string_view>& names,
                      std::string* out);

// DATA_LOSS naming the offset if `bytes` is not a valid serialization.
absl::StatusOr<Item> DecodeItem(std::string_view bytes);

}  // namespace cdcview
