// VerifySigV4: checks an AWS Signature Version 4 (the Authorization header) on a request to the
// DynamoDB endpoint, with server.tokens_file's entries as the credentials: access key id = an
// entry's name, secret access key = its token. What the SDKs send:
//
//   Authorization: AWS4-HMAC-SHA256 Credential=<name>/<yyyymmdd>/<region>/dynamodb/aws4_request,
//                  SignedHeaders=host;x-amz-date;x-amz-target, Signature=<64 hex digits>
//   X-Amz-Date: <yyyymmdd>T<hhmmss>Z
//
// The signature is recomputed from the canonical request (method, path, query, the signed
// headers' values trimmed and with runs of spaces folded, the SHA-256 of the body as received:
// an x-amz-content-sha256 header is not trusted), the string to sign and the key derived from
// the token (daemon/aws/sigv4.h's primitives), and compared in constant time. Any region is
// accepted (cdcview is one endpoint); the service must be "dynamodb". X-Amz-Date must be within
// kMaxClockSkew of now, either way, as AWS requires.
//
// Errors, in DynamoDB's types and messages (all HTTP 400):
//   MissingAuthenticationTokenException  no Authorization header
//   IncompleteSignatureException         an Authorization header that is not a SigV4 one, or
//                                        lacks a part, or no X-Amz-Date
//   UnrecognizedClientException          the access key id is no entry's name
//   InvalidSignatureException            the signature does not match, the scope is not
//                                        <date>/<region>/dynamodb/aws4_request of X-Amz-Date's
//                                        day, or X-Amz-Date is too far from now ("Signature
//                                        expired: ...")
//
// Pure apart from the TokenStore lookup; safe from any thread. The token never appears in a
// message.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "daemon/security/token_store.h"

namespace cdcview::dynamodb {

inline constexpr absl::Duration kMaxClockSkew = absl::Minutes(15);

inline constexpr char kMissingTokenMessage[] = "Request is missing Authentication Token";
inline constexpr char kUnrecognizedClientMessage[] =
    "The security token included in the request is invalid.";
inline constexpr char kSignatureMismatchMessage[] =
    "The request signature we calculated does not match the signature you provided. Check your "
    "AWS Secret Access Key and signing method. Consult the service documentation for details.";

// The parts of an HTTP request a signature covers; views into the request, which must outlive
// this.
struct SignedRequest {
  std::string_view method;  // "POST"
  std::string_view target;  // the request line's target: path and query, as sent ("/")
  std::vector<std::pair<std::string_view, std::string_view>> headers;  // as received
  std::string_view body;
};

struct SigV4Verdict {
  bool ok = false;
  security::Principal who;  // when ok
  std::string error_type;   // when not: one of the types in the header comment
  std::string message;
};

SigV4Verdict VerifySigV4(const SignedRequest& request, security::TokenStore& tokens,
                         absl::Time now);

// VerifySigV4's checks that do not read the body: the Authorization header and X-Amz-Date,
// the access key id, the scope and the clock skew. `ok` says only that the signature may still
// hold (VerifySigV4 decides); `who` is left unset. For a long body, whose hash waits for a
// thread other than the one that read it.
SigV4Verdict PrecheckSigV4(const SignedRequest& request, security::TokenStore& tokens,
                           absl::Time now);

}  // namespace cdcview::dynamodb
