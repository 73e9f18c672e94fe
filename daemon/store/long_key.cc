#include "daemon/store/long_key.h"

#include <openssl/sha.h>

#include "absl/strings/str_cat.h"
#include "index_builders/coding.h"

namespace cdcview {

std::string LongStoredKey(std::string_view key) {
  std::string stored(key.substr(0, kLongKeyPrefixBytes));
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), digest);
  stored.append(reinterpret_cast<const char*>(digest), sizeof(digest));
  return stored;
}

std::string LongStoredValue(std::string_view key, std::string_view value) {
  std::string stored;
  stored.reserve(key.size() - kLongKeyPrefixBytes + 3 + value.size());
  PutLengthPrefixed(key.substr(kLongKeyPrefixBytes), &stored);
  stored.append(value);
  return stored;
}

absl::StatusOr<LongEntry> DecodeLongEntry(std::string_view stored_key, std::string_view stored_value) {
  std::string_view rest;
  if (stored_key.size() != kLongKeyStoredBytes || !GetLengthPrefixed(&stored_value, &rest)) {
    return absl::DataLossError(absl::StrCat("a long-key entry (", stored_key.size(),
                                            "-byte key) is damaged"));
  }
  LongEntry entry;
  entry.key.reserve(kLongKeyPrefixBytes + rest.size());
  entry.key.append(stored_key.substr(0, kLongKeyPrefixBytes));
  entry.key.append(rest);
  entry.value = stored_value;
  return entry;
}

bool LongEntryValue(std::string_view key, std::string_view stored_value, std::string_view* value) {
  std::string_view rest;
  if (!GetLengthPrefixed(&stored_value, &rest) || rest != key.substr(kLongKeyPrefixBytes)) {
    return false;
  }
  *value = stored_value;
  return true;
}

}  // namespace cdcview
