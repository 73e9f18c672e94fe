#include "daemon/aws/credentials.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "daemon/log/redact.h"
#include "simdjson.h"

namespace cdcview::aws {
namespace {

constexpr absl::Duration kRefreshBefore = absl::Minutes(5);
constexpr char kContainerHost[] = "http://169.254.170.2";

absl::StatusOr<std::string> ReadFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read ", what, " \"", path, "\""));
  }
  std::stringstream text;
  text << in.rdbuf();
  std::string out = text.str();
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r' || out.back() == ' ')) {
    out.pop_back();
  }
  return out;
}

std::optional<absl::Time> ParseIso8601(const std::string& text) {
  absl::Time t;
  std::string err;
  if (absl::ParseTime(absl::RFC3339_full, text, &t, &err)) return t;
  return std::nullopt;
}

// The text between <tag> and </tag>, or "" (STS's XML is flat enough for this).
std::string XmlValue(const std::string& xml, const std::string& tag) {
  size_t start = xml.find(absl::StrCat("<", tag, ">"));
  if (start == std::string::npos) return "";
  start += tag.size() + 2;
  size_t end = xml.find(absl::StrCat("</", tag, ">"), start);
  return end == std::string::npos ? "" : xml.substr(start, end - start);
}

std::string FormEncode(const HeaderList& fields) {
  std::string out;
  for (const auto& [name, value] : fields) {
    absl::StrAppend(&out, out.empty() ? "" : "&", UriEncode(name), "=", UriEncode(value));
  }
  return out;
}

}  // namespace

absl::StatusOr<SigningKey> ParseContainerCredentials(const std::string& json,
                                                     std::optional<absl::Time>* expiration) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(json).get(doc) != simdjson::SUCCESS || !doc.is_object()) {
    return absl::InvalidArgumentError("container credentials response is not a JSON object");
  }
  SigningKey key;
  std::string_view value;
  for (auto [field, out] : {std::pair<const char*, std::string*>{"AccessKeyId", &key.access_key_id},
                            {"SecretAccessKey", &key.secret_access_key}}) {
    if (doc[field].get_string().get(value) != simdjson::SUCCESS || value.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("container credentials response has no ", field));
    }
    out->assign(value);
  }
  if (doc["Token"].get_string().get(value) == simdjson::SUCCESS) key.session_token.assign(value);
  expiration->reset();
  if (doc["Expiration"].get_string().get(value) == simdjson::SUCCESS) {
    *expiration = ParseIso8601(std::string(value));
  }
  return key;
}

absl::StatusOr<SigningKey> ParseAssumeRoleResponse(const std::string& xml,
                                                   std::optional<absl::Time>* expiration) {
  SigningKey key;
  key.access_key_id = XmlValue(xml, "AccessKeyId");
  key.secret_access_key = XmlValue(xml, "SecretAccessKey");
  key.session_token = XmlValue(xml, "SessionToken");
  if (key.access_key_id.empty() || key.secret_access_key.empty()) {
    std::string message = XmlValue(xml, "Message");
    return absl::PermissionDeniedError(absl::StrCat(
        "STS AssumeRoleWithWebIdentity failed: ",
        message.empty() ? "the response has no Credentials" : message));
  }
  *expiration = ParseIso8601(XmlValue(xml, "Expiration"));
  return key;
}

CredentialsProvider::CredentialsProvider(const HttpClient* http, std::string region,
                                         Getenv getenv, Clock now)
    : http_(http), region_(std::move(region)), getenv_(std::move(getenv)), now_(std::move(now)) {
  if (!getenv_) {
    getenv_ = [](const std::string& name) -> std::optional<std::string> {
      const char* value = std::getenv(name.c_str());
      if (value == nullptr || value[0] == '\0') return std::nullopt;
      return std::string(value);
    };
  }
  if (!now_) now_ = [] { return absl::Now(); };
}

std::optional<std::string> CredentialsProvider::Env(const std::string& name) const {
  return getenv_(name);
}

absl::StatusOr<SigningKey> CredentialsProvider::Get() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = now_();
  if (current_ && (!current_->expiration || now < *current_->expiration - kRefreshBefore)) {
    return current_->key;
  }
  absl::StatusOr<Fetched> fetched = Fetch();
  if (!fetched.ok()) {
    // A failed refresh is not fatal while the old credentials are still valid.
    if (current_ && current_->expiration && now < *current_->expiration) return current_->key;
    return fetched.status();
  }
  current_ = *std::move(fetched);
  return current_->key;
}

std::string CredentialsProvider::source() const {
  absl::MutexLock lock(&mu_);
  return current_ ? current_->source : "";
}

absl::StatusOr<CredentialsProvider::Fetched> CredentialsProvider::Fetch() const {
  auto id = Env("AWS_ACCESS_KEY_ID");
  auto secret = Env("AWS_SECRET_ACCESS_KEY");
  if (id && secret) {
    return Fetched{{*id, *secret, Env("AWS_SESSION_TOKEN").value_or("")}, std::nullopt,
                   "environment"};
  }
  if (id || secret) {
    return absl::InvalidArgumentError(absl::StrCat(
        id ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY", " is set but ",
        id ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID", " is not; set both"));
  }
  auto token_file = Env("AWS_WEB_IDENTITY_TOKEN_FILE");
  auto role = Env("AWS_ROLE_ARN");
  if (token_file && role) return FromWebIdentity(*token_file, *role);
  if (auto full = Env("AWS_CONTAINER_CREDENTIALS_FULL_URI")) return FromContainer(*full);
  if (auto relative = Env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")) {
    return FromContainer(absl::StrCat(kContainerHost, *relative));
  }
  return absl::UnauthenticatedError(
      "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and "
      "AWS_SESSION_TOKEN for temporary keys), or AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN, "
      "or AWS_CONTAINER_CREDENTIALS_FULL_URI / AWS_CONTAINER_CREDENTIALS_RELATIVE_URI; "
      "credentials are never read from the config file");
}

absl::StatusOr<CredentialsProvider::Fetched> CredentialsProvider::FromWebIdentity(
    const std::string& token_file, const std::string& role_arn) const {
  auto token = ReadFile(token_file, "AWS_WEB_IDENTITY_TOKEN_FILE");
  if (!token.ok()) return token.status();
  std::string endpoint = Env("AWS_ENDPOINT_URL_STS")
                             .value_or(absl::StrCat("https://sts.", region_, ".amazonaws.com"));
  if (endpoint.back() != '/') endpoint += '/';
  std::string body = FormEncode({{"Action", "AssumeRoleWithWebIdentity"},
                                 {"Version", "2011-06-15"},
                                 {"RoleArn", role_arn},
                                 {"RoleSessionName", Env("AWS_ROLE_SESSION_NAME").value_or("cdcviewd")},
                                 {"WebIdentityToken", *token}});
  auto response = http_->Post(
      endpoint, {{"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"}}, body);
  if (!response.ok()) return response.status();
  Fetched fetched;
  fetched.source = "web identity";
  auto key = ParseAssumeRoleResponse(response->body, &fetched.expiration);
  if (!key.ok()) {
    // STS's message is its text: one that quotes the request would carry the token.
    return absl::Status(
        key.status().code(),
        absl::StrCat(RedactSecrets(std::string(key.status().message()), {*token, UriEncode(*token)}),
                     " (HTTP ", response->status, " from ", endpoint, ", role ", role_arn, ")"));
  }
  fetched.key = *std::move(key);
  return fetched;
}

absl::StatusOr<CredentialsProvider::Fetched> CredentialsProvider::FromContainer(
    const std::string& url) const {
  HeaderList headers;
  std::string authorization;
  if (auto token = Env("AWS_CONTAINER_AUTHORIZATION_TOKEN")) {
    authorization = *token;
  } else if (auto file = Env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")) {
    auto token = ReadFile(*file, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
    if (!token.ok()) return token.status();
    authorization = *std::move(token);
  }
  if (!authorization.empty()) headers.emplace_back("Authorization", authorization);
  auto response = http_->Get(url, headers);
  if (!response.ok()) return response.status();
  if (response->status != 200) {
    return absl::UnavailableError(absl::StrCat("container credentials endpoint ", url,
                                               " answered HTTP ", response->status, ": ",
                                               RedactSecrets(response->body, {authorization})
                                                   .substr(0, 200)));
  }
  Fetched fetched;
  fetched.source = "container";
  auto key = ParseContainerCredentials(response->body, &fetched.expiration);
  if (!key.ok()) return key.status();
  fetched.key = *std::move(key);
  return fetched;
}

}  // namespace cdcview::aws
