// KeyCodec: order-preserving, self-delimiting encoding of key components.
//
// Byte order of encoded components equals DynamoDB's order of the values:
//   S and B by unsigned bytes, N by numeric value.
// Each component starts with a type tag and is self-delimiting, so components can be
// concatenated (view pk · view sk · table pk · table sk) without running into each other, and
// the encoding of a string or binary *prefix* (EncodePrefix) is a byte prefix of the encoding
// of every value that begins with it: begins_with is a range scan.
//
//   S, B: tag, bytes with 0x00 escaped as 0x00 0xFF, terminator 0x00 (FoundationDB's tuple layer).
//   N:    tag, class byte (negative 0x01 / zero 0x02 / positive 0x03), then for non-zero
//         values exponent+129 as one byte and the digits as nibbles (digit+1), a 0 nibble
//         ending them; negative numbers have exponent byte and nibbles complemented so that
//         larger magnitudes sort first.
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "index_builders/attribute_value.h"
#include "index_builders/number.h"

namespace cdcview {

inline constexpr char kTagBinary = 0x01;
inline constexpr char kTagNumber = 0x02;
inline constexpr char kTagString = 0x03;

// The longest encoding of an N component: the tag, the class byte, the exponent byte and up
// to 38 digits as nibbles plus the end nibble (20 bytes). Callers that append a number to a
// key check their key size limit against this.
inline constexpr size_t kMaxNumberKeyDigits = 38;
inline constexpr size_t kMaxNumberKeyComponentBytes = 1 + 1 + 1 + (kMaxNumberKeyDigits + 1 + 1) / 2;

// Appends the encoding of `value` to `out`. Key values are S, N or B; other types are a
// programming error (callers validate types first) and abort.
void EncodeKeyComponent(const AttributeValue& value, std::string* out);
// The same for an N value already parsed (it must be within DynamoDB's range): no second parse.
void EncodeNumberKeyComponent(const Decimal& value, std::string* out);

// Appends the encoding of an S or B prefix (no terminator): every value that begins with
// `prefix` encodes to a key that begins with these bytes.
void EncodeKeyPrefix(const AttributeValue& prefix, std::string* out);

// Decodes one component from the front of `*in` and advances `*in` past it.
// INVALID_ARGUMENT (naming the offset) for a truncated or malformed component.
absl::StatusOr<AttributeValue> DecodeKeyComponent(std::string_view* in);

// The smallest byte string greater than every string that begins with `prefix`;
// empty if there is none (prefix is all 0xFF). Used as an exclusive upper bound.
std::string PrefixSuccessor(std::string_view prefix);

}  // namespace cdcview
