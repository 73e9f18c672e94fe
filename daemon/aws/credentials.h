// CredentialsProvider: AWS credentials from the standard places, never from the config file.
//
// Looked for in this order (the AWS SDKs' order, minus profiles and instance metadata):
//   1. environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, optional AWS_SESSION_TOKEN;
//   2. web identity (Kubernetes IRSA): AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN (optional
//      AWS_ROLE_SESSION_NAME) -> STS AssumeRoleWithWebIdentity at AWS_ENDPOINT_URL_STS or
//      https://sts.<region>.amazonaws.com;
//   3. container credentials (ECS, EKS Pod Identity): AWS_CONTAINER_CREDENTIALS_FULL_URI, or
//      AWS_CONTAINER_CREDENTIALS_RELATIVE_URI under http://169.254.170.2, with the
//      Authorization header from AWS_CONTAINER_AUTHORIZATION_TOKEN or the contents of
//      AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE.
// Temporary credentials are fetched again 5 minutes before they expire (or on the next call
// after a failed refresh, while the old ones still hold).
//
// Thread-safe: Get may be called from many threads; one refresh runs at a time.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/aws/http_client.h"
#include "daemon/aws/sigv4.h"

namespace cdcview::aws {

class CredentialsProvider {
 public:
  using Getenv = std::function<std::optional<std::string>(const std::string& name)>;
  using Clock = std::function<absl::Time()>;

  // `http` must outlive the provider. `getenv` and `now` are injected in tests (default: the
  // process environment and the wall clock).
  CredentialsProvider(const HttpClient* http, std::string region, Getenv getenv = nullptr,
                      Clock now = nullptr);

  // The current credentials. UNAUTHENTICATED naming every variable that could be set when no
  // source has any; the fetch error (naming the source) when a configured source fails;
  // INVALID_ARGUMENT when only half of a pair of variables is set.
  absl::StatusOr<SigningKey> Get();
  // Where the credentials came from: "environment", "web identity", "container".
  std::string source() const;

 private:
  struct Fetched {
    SigningKey key;
    std::optional<absl::Time> expiration;
    std::string source;
  };
  absl::StatusOr<Fetched> Fetch() const;
  absl::StatusOr<Fetched> FromWebIdentity(const std::string& token_file,
                                          const std::string& role_arn) const;
  absl::StatusOr<Fetched> FromContainer(const std::string& url) const;
  std::optional<std::string> Env(const std::string& name) const;

  const HttpClient* http_;
  const std::string region_;
  Getenv getenv_;
  Clock now_;
  mutable absl::Mutex mu_;
  std::optional<Fetched> current_ ABSL_GUARDED_BY(mu_);
};

// Parses the container credentials JSON ({"AccessKeyId", "SecretAccessKey", "Token",
// "Expiration"}). INVALID_ARGUMENT naming the missing field. Exposed for tests.
absl::StatusOr<SigningKey> ParseContainerCredentials(const std::string& json,
                                                     std::optional<absl::Time>* expiration);
// Parses an STS AssumeRoleWithWebIdentity XML response (or its <Error><Message>).
absl::StatusOr<SigningKey> ParseAssumeRoleResponse(const std::string& xml,
                                                   std::optional<absl::Time>* expiration);

}  // namespace cdcview::aws
