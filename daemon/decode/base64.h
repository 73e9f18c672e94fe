// Base64 (RFC 4648 section 4, standard alphabet, '=' padding): how DynamoDB JSON carries
// B and BS values. Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace cdcview {

// Padded standard base64 of `bytes`.
std::string Base64Encode(std::string_view bytes);

// Decodes `text` into `out` (replacing its contents). Padding is optional, so both
// "YQ==" and "YQ" decode to "a". Returns false, leaving `out` unspecified, for a character
// outside the alphabet, '=' anywhere but the end, or a length no encoding can have.
bool Base64Decode(std::string_view text, std::string* out);

}  // namespace cdcview
