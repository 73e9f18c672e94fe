// Sealed tokens: the one integrity check of every opaque token the server hands out (page
// tokens, position tokens). A token is its body followed by the FNV-1a 32 of the body,
// little-endian; a client that changes a byte, truncates it or passes another kind's token
// gets a clear INVALID_ARGUMENT instead of a read from a nonsense position. Not a MAC: the
// tokens protect against mistakes, not against forgery (they grant nothing a request could
// not ask for directly).
//
// Pure functions; thread-safe. The returned body is a view into `token`.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace cdcview {

// `body` followed by its checksum.
std::string SealToken(std::string body);
// The body of a sealed token, or nullopt if it is shorter than a checksum or the checksum
// does not match.
std::optional<std::string_view> UnsealToken(std::string_view token);

}  // namespace cdcview
