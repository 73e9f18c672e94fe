#include "daemon/aws/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cctype>
#include <map>

#include "absl/strings/str_cat.h"

namespace cdcview::aws {
namespace {

constexpr char kAlgorithm[] = "AWS4-HMAC-SHA256";

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Header values are trimmed and runs of spaces collapsed to one (the suite's
// get-header-value-trim: even inside quotes).
std::string TrimAll(std::string_view value) {
  std::string out;
  bool space = false;
  for (char c : value) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

std::string CanonicalQuery(const HeaderList& query) {
  std::vector<std::pair<std::string, std::string>> encoded;
  for (const auto& [name, value] : query) encoded.emplace_back(UriEncode(name), UriEncode(value));
  std::sort(encoded.begin(), encoded.end());
  std::string out;
  for (const auto& [name, value] : encoded) {
    if (!out.empty()) out += '&';
    absl::StrAppend(&out, name, "=", value);
  }
  return out;
}

}  // namespace

std::string HexEncode(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 0xF];
  }
  return out;
}

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  return HexEncode(std::string_view(reinterpret_cast<char*>(digest), sizeof digest));
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest, &length);
  return std::string(reinterpret_cast<char*>(digest), length);
}

std::string UriEncode(std::string_view text) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kDigits[c >> 4];
      out += kDigits[c & 0xF];
    }
  }
  return out;
}

std::string AmzDate(absl::Time time) {
  return absl::FormatTime("%Y%m%dT%H%M%SZ", time, absl::UTCTimeZone());
}

std::string DerivedSigningKey(std::string_view secret, std::string_view date,
                              std::string_view region, std::string_view service) {
  std::string key = HmacSha256(absl::StrCat("AWS4", std::string(secret)), date);
  key = HmacSha256(key, region);
  key = HmacSha256(key, service);
  return HmacSha256(key, "aws4_request");
}

SignedParts Sign(const RequestToSign& request, const SigningKey& key, std::string_view region,
                 std::string_view service, absl::Time time) {
  SignedParts parts;
  // Lowercase names, sorted; repeated names joined with "," in the order given.
  std::map<std::string, std::string> headers;
  for (const auto& [name, value] : request.headers) {
    std::string lower = Lower(name);
    std::string trimmed = TrimAll(value);
    auto [it, inserted] = headers.emplace(lower, trimmed);
    if (!inserted) absl::StrAppend(&it->second, ",", trimmed);
  }
  std::string amz_date;
  if (auto it = headers.find("x-amz-date"); it != headers.end()) {
    amz_date = it->second;
  } else {
    amz_date = AmzDate(time);
    headers["x-amz-date"] = amz_date;
    parts.added_headers.emplace_back("X-Amz-Date", amz_date);
  }
  if (!key.session_token.empty() && !headers.contains("x-amz-security-token")) {
    headers["x-amz-security-token"] = key.session_token;
    parts.added_headers.emplace_back("X-Amz-Security-Token", key.session_token);
  }
  std::string canonical_headers, signed_headers;
  for (const auto& [name, value] : headers) {
    absl::StrAppend(&canonical_headers, name, ":", value, "\n");
    absl::StrAppend(&signed_headers, signed_headers.empty() ? "" : ";", name);
  }
  parts.canonical_request =
      absl::StrCat(request.method, "\n", request.path, "\n", CanonicalQuery(request.query), "\n",
                   canonical_headers, "\n", signed_headers, "\n", Sha256Hex(request.body));

  const std::string date = amz_date.substr(0, 8);
  const std::string scope =
      absl::StrCat(date, "/", std::string(region), "/", std::string(service), "/aws4_request");
  parts.string_to_sign = absl::StrCat(kAlgorithm, "\n", amz_date, "\n", scope, "\n",
                                      Sha256Hex(parts.canonical_request));
  parts.signature = HexEncode(HmacSha256(
      DerivedSigningKey(key.secret_access_key, date, region, service), parts.string_to_sign));
  parts.authorization =
      absl::StrCat(kAlgorithm, " Credential=", key.access_key_id, "/", scope,
                   ", SignedHeaders=", signed_headers, ", Signature=", parts.signature);
  parts.added_headers.emplace_back("Authorization", parts.authorization);
  return parts;
}

}  // namespace cdcview::aws
