#include "daemon/dynamodb/sigv4_verify.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <map>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/civil_time.h"
#include "daemon/aws/sigv4.h"

namespace cdcview::dynamodb {
namespace {

constexpr std::string_view kAlgorithm = "AWS4-HMAC-SHA256";
constexpr std::string_view kService = "dynamodb";
constexpr std::string_view kTerminator = "aws4_request";

absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }
std::string_view Sv(absl::string_view s) { return std::string_view(s.data(), s.size()); }

SigV4Verdict Refuse(std::string type, std::string message) {
  SigV4Verdict verdict;
  verdict.error_type = std::move(type);
  verdict.message = std::move(message);
  return verdict;
}

SigV4Verdict Incomplete(std::string message) {
  return Refuse("IncompleteSignatureException", std::move(message));
}

SigV4Verdict Invalid(std::string message) {
  return Refuse("InvalidSignatureException", std::move(message));
}

// A header's value as SigV4 canonicalizes it: trimmed, runs of spaces folded to one.
std::string CanonicalValue(std::string_view value) {
  std::string out;
  for (absl::string_view word : absl::StrSplit(Av(value), ' ', absl::SkipWhitespace())) {
    if (!out.empty()) out += ' ';
    out.append(Sv(absl::StripAsciiWhitespace(word)));
  }
  return out;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string PercentDecode(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() &&
        HexValue(text[i + 1]) >= 0 && HexValue(text[i + 2]) >= 0) {
      out += static_cast<char>(HexValue(text[i + 1]) * 16 + HexValue(text[i + 2]));
      i += 2;
    } else if (text[i] == '+') {
      out += ' ';
    } else {
      out += text[i];
    }
  }
  return out;
}

// Path: each segment URI-encoded again (AWS services other than S3 sign the encoded path
// encoded once more). Query: names and values decoded, encoded, sorted.
std::string CanonicalUriAndQuery(std::string_view target) {
  const size_t question = target.find('?');
  std::string_view path = target.substr(0, question);
  if (path.empty()) path = "/";
  std::vector<std::string> segments;
  for (absl::string_view segment : absl::StrSplit(Av(path), '/')) {
    segments.push_back(aws::UriEncode(Sv(segment)));
  }
  std::string out = absl::StrJoin(segments, "/");
  out += '\n';
  if (question != std::string_view::npos) {
    std::vector<std::pair<std::string, std::string>> query;
    for (absl::string_view piece :
         absl::StrSplit(Av(target.substr(question + 1)), '&', absl::SkipEmpty())) {
      const std::string_view pair = Sv(piece);
      const size_t equals = pair.find('=');
      query.emplace_back(aws::UriEncode(PercentDecode(pair.substr(0, equals))),
                         equals == std::string_view::npos
                             ? std::string()
                             : aws::UriEncode(PercentDecode(pair.substr(equals + 1))));
    }
    std::sort(query.begin(), query.end());
    std::vector<std::string> parts;
    for (const auto& [name, value] : query) parts.push_back(absl::StrCat(name, "=", value));
    out += absl::StrJoin(parts, "&");
  }
  return out;
}

// "20150830T123600Z" (absl::ParseTime's %Y would take all eight digits as the year).
std::optional<absl::Time> ParseAmzDate(std::string_view text) {
  if (text.size() != 16 || text[8] != 'T' || text[15] != 'Z') return std::nullopt;
  auto number = [&](size_t at, size_t length) -> std::optional<int> {
    int n = 0;
    for (size_t i = at; i < at + length; ++i) {
      if (!absl::ascii_isdigit(static_cast<unsigned char>(text[i]))) return std::nullopt;
      n = n * 10 + (text[i] - '0');
    }
    return n;
  };
  auto year = number(0, 4), month = number(4, 2), day = number(6, 2), hour = number(9, 2),
       minute = number(11, 2), second = number(13, 2);
  if (!year || !month || !day || !hour || !minute || !second) return std::nullopt;
  const absl::CivilSecond civil(*year, *month, *day, *hour, *minute, *second);
  // CivilSecond normalizes out-of-range fields (month 13): such a date is malformed.
  if (civil.year() != *year || civil.month() != *month || civil.day() != *day ||
      civil.hour() != *hour || civil.minute() != *minute || civil.second() != *second) {
    return std::nullopt;
  }
  return absl::FromCivil(civil, absl::UTCTimeZone());
}

struct Authorization {
  std::string credential;
  std::string signed_headers;
  std::string signature;
};

// "AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=..."; nullopt with `problem`
// set when it is not one.
std::optional<Authorization> ParseAuthorization(std::string_view header, std::string* problem) {
  absl::string_view value = absl::StripAsciiWhitespace(Av(header));
  if (!absl::ConsumePrefix(&value, Av(kAlgorithm)) || value.empty() ||
      !absl::ascii_isspace(static_cast<unsigned char>(value.front()))) {
    // The header itself is not quoted: it may be a bearer token meant for another port.
    *problem = absl::StrCat("Authorization header must use the ", Av(kAlgorithm),
                            " algorithm (AWS Signature Version 4)");
    return std::nullopt;
  }
  Authorization out;
  bool has_credential = false, has_signed = false, has_signature = false;
  for (absl::string_view part : absl::StrSplit(value, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (absl::ConsumePrefix(&part, "Credential=")) {
      out.credential = std::string(part);
      has_credential = true;
    } else if (absl::ConsumePrefix(&part, "SignedHeaders=")) {
      out.signed_headers = std::string(part);
      has_signed = true;
    } else if (absl::ConsumePrefix(&part, "Signature=")) {
      out.signature = std::string(part);
      has_signature = true;
    }
  }
  std::vector<std::string> missing;
  if (!has_credential) missing.push_back("Authorization header requires 'Credential' parameter.");
  if (!has_signature) missing.push_back("Authorization header requires 'Signature' parameter.");
  if (!has_signed) missing.push_back("Authorization header requires 'SignedHeaders' parameter.");
  if (!missing.empty()) {
    *problem = absl::StrJoin(missing, " ");
    return std::nullopt;
  }
  return out;
}

}  // namespace

namespace {

// VerifySigV4, or with `read_body` false PrecheckSigV4.
SigV4Verdict Verify(const SignedRequest& request, security::TokenStore& tokens, absl::Time now,
                    bool read_body) {
  // Header names are case-insensitive; a repeated header's values are joined with ",".
  std::map<std::string, std::string> headers;
  for (const auto& [name, value] : request.headers) {
    std::string key = absl::AsciiStrToLower(Av(name));
    auto [it, fresh] = headers.emplace(key, CanonicalValue(value));
    if (!fresh) absl::StrAppend(&it->second, ",", CanonicalValue(value));
  }
  auto authorization_header = headers.find("authorization");
  if (authorization_header == headers.end() || authorization_header->second.empty()) {
    return Refuse("MissingAuthenticationTokenException", kMissingTokenMessage);
  }
  std::string problem;
  std::optional<Authorization> authorization =
      ParseAuthorization(authorization_header->second, &problem);
  if (!authorization) return Incomplete(problem);
  auto date_header = headers.find("x-amz-date");
  if (date_header == headers.end()) {
    return Incomplete("Authorization header requires existence of a 'X-Amz-Date' header.");
  }
  const std::string& amz_date = date_header->second;
  std::optional<absl::Time> parsed = ParseAmzDate(amz_date);
  if (!parsed) {
    return Incomplete(absl::StrCat("X-Amz-Date must be yyyyMMddTHHmmssZ, got '", amz_date, "'"));
  }
  const absl::Time signed_at = *parsed;

  // <access key id>/<date>/<region>/<service>/aws4_request
  std::vector<std::string> scope = absl::StrSplit(authorization->credential, '/');
  if (scope.size() != 5) {
    return Incomplete(
        "Credential must be <access key id>/<yyyyMMdd>/<region>/dynamodb/aws4_request");
  }
  std::optional<security::TokenStore::NamedToken> key = tokens.FindByName(scope[0]);
  if (!key) return Refuse("UnrecognizedClientException", kUnrecognizedClientMessage);
  if (scope[1] != amz_date.substr(0, 8)) {
    return Invalid(absl::StrCat(
        "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from "
        "HTTP: '",
        scope[1], "' != '", amz_date.substr(0, 8), "', from '", amz_date, "'."));
  }
  if (scope[3] != kService) {
    return Invalid(absl::StrCat("Credential should be scoped to correct service: '",
                                Av(kService), "'. "));
  }
  if (scope[4] != kTerminator) {
    return Invalid(absl::StrCat("Credential should be scoped with a valid terminator: '",
                                Av(kTerminator), "', not '", scope[4], "'. "));
  }
  if (signed_at < now - kMaxClockSkew) {
    return Invalid(absl::StrCat("Signature expired: ", amz_date, " is now earlier than ",
                                aws::AmzDate(now - kMaxClockSkew), " (", aws::AmzDate(now),
                                " - 15 min.)"));
  }
  if (signed_at > now + kMaxClockSkew) {
    return Invalid(absl::StrCat("Signature not yet current: ", amz_date, " is still later than ",
                                aws::AmzDate(now + kMaxClockSkew), " (", aws::AmzDate(now),
                                " + 15 min.)"));
  }
  if (!read_body) {
    SigV4Verdict may_hold;
    may_hold.ok = true;
    return may_hold;
  }

  std::string canonical = absl::StrCat(Av(request.method), "\n",
                                       CanonicalUriAndQuery(request.target), "\n");
  for (absl::string_view name : absl::StrSplit(authorization->signed_headers, ';')) {
    const std::string lower = absl::AsciiStrToLower(name);
    auto it = headers.find(lower);
    absl::StrAppend(&canonical, lower, ":", it == headers.end() ? "" : it->second, "\n");
  }
  absl::StrAppend(&canonical, "\n", absl::AsciiStrToLower(authorization->signed_headers), "\n",
                  aws::Sha256Hex(request.body));
  const std::string scope_text = absl::StrJoin(scope.begin() + 1, scope.end(), "/");
  const std::string string_to_sign = absl::StrCat(Av(kAlgorithm), "\n", amz_date, "\n",
                                                  scope_text, "\n", aws::Sha256Hex(canonical));
  const std::string signing_key = aws::DerivedSigningKey(key->token, scope[1], scope[2], scope[3]);
  const std::string expected = aws::HexEncode(aws::HmacSha256(signing_key, string_to_sign));
  const std::string& given = authorization->signature;
  if (given.size() != expected.size() ||
      CRYPTO_memcmp(given.data(), expected.data(), expected.size()) != 0) {
    return Invalid(kSignatureMismatchMessage);
  }
  SigV4Verdict verdict;
  verdict.ok = true;
  verdict.who = std::move(key->principal);
  return verdict;
}

}  // namespace

SigV4Verdict VerifySigV4(const SignedRequest& request, security::TokenStore& tokens,
                         absl::Time now) {
  return Verify(request, tokens, now, /*read_body=*/true);
}

SigV4Verdict PrecheckSigV4(const SignedRequest& request, security::TokenStore& tokens,
                           absl::Time now) {
  return Verify(request, tokens, now, /*read_body=*/false);
}

}  // namespace cdcview::dynamodb
