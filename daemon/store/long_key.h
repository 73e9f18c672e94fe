// LongKey: how a key longer than LMDB's key size limit (511 bytes) is stored. The items and
// view databases take keys of any length (DynamoDB allows a 2,048-byte partition key and a
// 1,024-byte sort key, and a view entry key holds two such keys); a key that fits is stored
// as itself, a longer one in the database's sibling, "long/<database name>":
//
//   key    the logical key's first kLongKeyPrefixBytes bytes · SHA-256 of the whole key (511
//          bytes in all)
//   value  varint length · the logical key's remaining bytes · the value
//
// A database and its sibling never hold the same logical key (its length decides), so the
// main database keeps its format (a store written before keeps working, nothing to migrate)
// and its order is exact. In the sibling, keys that share the prefix ("a group") sort by
// hash: LongKeyCursor (long_key_cursor.h) reads a group whole and sorts it by logical key.
// A read compares the full logical key, so a SHA-256 collision can never return another
// key's value, and a write that would replace another key's entry fails (INTERNAL).
//
// Thread-safety: pure functions. Ownership: a decoded entry's value points into the stored
// value it was decoded from.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace cdcview {

inline constexpr size_t kLongKeyHashBytes = 32;  // SHA-256
// LMDB's key limit (511, mdb_env_get_maxkeysize) less the hash: the stored key is 511 bytes.
inline constexpr size_t kLongKeyStoredBytes = 511;
inline constexpr size_t kLongKeyPrefixBytes = kLongKeyStoredBytes - kLongKeyHashBytes;
// The sibling of database `name`.
inline constexpr char kLongKeyDbPrefix[] = "long/";

// Whether `key` goes to the sibling: longer than the main database's limit.
inline bool IsLongKey(std::string_view key) { return key.size() > kLongKeyStoredBytes; }

// The sibling's key for a long logical key.
std::string LongStoredKey(std::string_view key);
// The sibling's value for a long logical key and its value.
std::string LongStoredValue(std::string_view key, std::string_view value);

struct LongEntry {
  std::string key;         // the logical key
  std::string_view value;  // points into the stored value
};
// DATA_LOSS (naming the sibling) if `stored_key` and `stored_value` are not a sibling entry.
absl::StatusOr<LongEntry> DecodeLongEntry(std::string_view stored_key, std::string_view stored_value);
// Whether `stored_value`, found under LongStoredKey(key), holds logical key `key` (and not
// another key with the same hash); its value if so.
bool LongEntryValue(std::string_view key, std::string_view stored_value, std::string_view* value);

}  // namespace cdcview
