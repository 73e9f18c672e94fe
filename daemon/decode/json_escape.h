// JSON text helpers shared by the encoders (DynamoDB JSON, dead letters). Pure functions;
// thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace cdcview {

// Appends `text` as a quoted JSON string: '"', '\\' and control characters are escaped;
// other bytes are copied as they are, so `text` should be valid UTF-8 (see IsValidUtf8).
void AppendJsonString(std::string_view text, std::string* out);

// True if `bytes` is well-formed UTF-8 (what a JSON document must be).
bool IsValidUtf8(std::string_view bytes);

}  // namespace cdcview
