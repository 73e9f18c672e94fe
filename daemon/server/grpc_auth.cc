#include "daemon/server/grpc_auth.h"

#include <grpcpp/security/auth_metadata_processor.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <grpcpp/server_context.h>

#include <vector>

#include "absl/strings/str_cat.h"

namespace cdcview {
namespace {

constexpr char kAuthorization[] = "authorization";

class TokenProcessor final : public grpc::AuthMetadataProcessor {
 public:
  TokenProcessor(std::shared_ptr<security::TokenStore> tokens, security::AuthProbe* refusals)
      : tokens_(std::move(tokens)), refusals_(refusals) {}

  // The check is a hash and a table walk (a stat of the file at most once a second): cheap
  // enough for gRPC's own thread, no hop to an executor.
  bool IsBlocking() const override { return false; }

  // Leaves the header in the call's metadata for CallPermissions, and the AuthContext alone
  // (it is the connection's: see the header).
  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext*, OutputMetadata*,
                       OutputMetadata*) override {
    std::string_view header;
    if (auto it = auth_metadata.find(kAuthorization); it != auth_metadata.end()) {
      header = std::string_view(it->second.data(), it->second.size());
    }
    absl::StatusOr<security::Principal> who = tokens_->Authenticate(header);
    if (who.ok()) return grpc::Status::OK;
    if (refusals_ != nullptr) refusals_->RecordRefusal(who.status());
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::string(who.status().message()));
  }

 private:
  const std::shared_ptr<security::TokenStore> tokens_;
  security::AuthProbe* const refusals_;
};

}  // namespace

std::shared_ptr<grpc::ServerCredentials> MainPortCredentials(
    const ServerConfig& server, std::shared_ptr<security::TokenStore> tokens,
    security::AuthProbe* refusals) {
  const bool mtls = !server.tls_client_ca_file.empty();
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      server.tls_key_file, server.tls_cert_file, mtls ? server.tls_client_ca_file : "",
      kCertificateRefreshSeconds);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (mtls) {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  std::shared_ptr<grpc::ServerCredentials> credentials =
      grpc::experimental::TlsServerCredentials(options);
  if (tokens != nullptr) {
    credentials->SetAuthMetadataProcessor(
        std::make_shared<TokenProcessor>(std::move(tokens), refusals));
  }
  return credentials;
}

absl::StatusOr<std::optional<security::Principal>> CallPermissions::Caller(
    const grpc::ServerContext& context) const {
  if (tokens_ == nullptr) return std::nullopt;
  std::string_view header;
  const auto& metadata = context.client_metadata();
  if (auto it = metadata.find(kAuthorization); it != metadata.end()) {
    header = std::string_view(it->second.data(), it->second.size());
  }
  absl::StatusOr<security::Principal> who = tokens_->Authenticate(header);
  if (!who.ok()) {
    if (refusals_ != nullptr) refusals_->RecordRefusal(who.status());
    return who.status();
  }
  return std::optional<security::Principal>(*std::move(who));
}

absl::Status CallPermissions::PermitView(const grpc::ServerContext& context,
                                         std::string_view view) const {
  absl::StatusOr<std::optional<security::Principal>> who = Caller(context);
  if (!who.ok()) return who.status();
  if (!who->has_value()) return absl::OkStatus();
  absl::Status permitted = security::TokenStore::PermitView(**who, view);
  if (!permitted.ok() && refusals_ != nullptr) refusals_->RecordRefusal(permitted);
  return permitted;
}

absl::Status CallPermissions::PermitEverything(const grpc::ServerContext& context,
                                               std::string_view what) const {
  absl::StatusOr<std::optional<security::Principal>> who = Caller(context);
  if (!who.ok()) return who.status();
  if (!who->has_value() || (*who)->all_views) return absl::OkStatus();
  absl::Status refused = absl::PermissionDeniedError(absl::StrCat(
      "token \"", (*who)->name, "\" may not read ", absl::string_view(what.data(), what.size()),
      ": only a token with views: all may (server.tokens_file)"));
  if (refusals_ != nullptr) refusals_->RecordRefusal(refused);
  return refused;
}

}  // namespace cdcview
