// Shared pieces of the decoders' error messages: "PATH: problem", quoted values, JSON paths.
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace cdcview::decode_internal {

// Abseil here is built with its own string_view (ABSL_OPTION_USE_STD_STRING_VIEW 0), so
// std::string_view must be converted before it reaches StrCat and friends.
inline absl::string_view ToAbsl(std::string_view text) { return {text.data(), text.size()}; }

// INVALID_ARGUMENT "PATH: problem".
inline absl::Status PathError(std::string_view path, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(ToAbsl(path), ": ", problem));
}

// "text" with C escapes, for values quoted in messages.
inline std::string Quoted(std::string_view text) {
  return absl::StrCat("\"", absl::CHexEscape(ToAbsl(text)), "\"");
}

// The path of member `name` of the object at `path` ("" is the document).
inline std::string Child(std::string_view path, std::string_view name) {
  return path.empty() ? std::string(name) : absl::StrCat(ToAbsl(path), ".", ToAbsl(name));
}

}  // namespace cdcview::decode_internal
