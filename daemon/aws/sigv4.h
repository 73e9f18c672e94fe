// SigV4: AWS Signature Version 4 for requests signed in the Authorization header.
//
// Sign() computes the canonical request, the string to sign, the HMAC-SHA256 signing key
// (date -> region -> service -> "aws4_request") and the Authorization header, and returns the
// headers to add (X-Amz-Date, X-Amz-Security-Token when there is a session token, and
// Authorization). Every header of the request is signed, so a Host header must be among them.
// Paths are signed as given (the caller passes an already normalized, encoded path such as
// "/"); query parameters are URI-encoded and sorted here.
//
// Pure functions, no state: safe from any thread. Tested against AWS's published SigV4 test
// suite and cross-checked against botocore.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/time/time.h"

namespace cdcview::aws {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct SigningKey {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // "" for long-term keys
};

struct RequestToSign {
  std::string method = "POST";
  std::string path = "/";
  HeaderList query;    // decoded names and values
  HeaderList headers;  // as sent, names in any case; a repeated name is joined with ","
  std::string body;
};

struct SignedParts {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signature;      // lowercase hex
  std::string authorization;  // the Authorization header value
  HeaderList added_headers;   // X-Amz-Date, X-Amz-Security-Token?, Authorization
};

// Signs `request` for `region`/`service` at `time` (its UTC second is used). An X-Amz-Date
// header already in `request.headers` is used as is (the test suite's requests carry one).
SignedParts Sign(const RequestToSign& request, const SigningKey& key, std::string_view region,
                 std::string_view service, absl::Time time);

// Building blocks, exposed for tests.
std::string Sha256Hex(std::string_view data);
std::string HmacSha256(std::string_view key, std::string_view data);  // raw bytes
std::string HexEncode(std::string_view bytes);
// RFC 3986: unreserved characters as they are, everything else %XX (uppercase).
std::string UriEncode(std::string_view text);
std::string AmzDate(absl::Time time);  // "20150830T123600Z"
std::string DerivedSigningKey(std::string_view secret, std::string_view date,
                              std::string_view region, std::string_view service);  // raw

}  // namespace cdcview::aws
