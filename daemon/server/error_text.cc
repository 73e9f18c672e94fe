#include "daemon/server/error_text.h"

#include "absl/strings/str_cat.h"

namespace cdcview {
namespace {

// The longest prefix of `text` of at most `n` bytes that ends on a UTF-8 sequence boundary.
absl::string_view PrefixOnBoundary(absl::string_view text, size_t n) {
  if (n >= text.size()) return text;
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return text.substr(0, n);
}

}  // namespace

std::string QuoteBounded(absl::string_view value) {
  if (value.size() <= kQuotedValueBytes) return absl::StrCat("\"", value, "\"");
  return absl::StrCat("\"", PrefixOnBoundary(value, kQuotedValueBytes), "...\" (", value.size(),
                      " bytes)");
}

std::string BoundStatusMessage(absl::string_view message) {
  if (message.size() <= kMaxStatusMessageBytes) return std::string(message);
  const std::string tail = absl::StrCat("... (message of ", message.size(), " bytes cut)");
  return absl::StrCat(PrefixOnBoundary(message, kMaxStatusMessageBytes - tail.size()), tail);
}

}  // namespace cdcview
