// Redaction: secrets taken out of text before it goes into a log line, a health message or an
// error, for text that may carry one without our say (a library's log line, a server's error
// body that echoes a request, an error about a value the user gave).
//
// Pure functions; safe from any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cdcview {

// What stands where a secret was, in messages and in `cdcviewd --print-config`.
inline constexpr std::string_view kRedacted = "<redacted>";

// `text` with every occurrence of each non-empty secret replaced by kRedacted; longer
// secrets first, so that a secret containing another is taken out whole.
std::string RedactSecrets(std::string_view text, std::vector<std::string_view> secrets);

}  // namespace cdcview
