// The main gRPC port's transport security and caller identity: gRPC TLS server credentials on
// server.tls_* (certificates re-read when the files change), and with server.tokens_file an
// AuthMetadataProcessor that checks every call's `authorization: Bearer <token>` before any
// service sees it (views, health, reflection, admin alike).
//
// The handlers then decide per view (CallPermissions): they authenticate the call's header
// again rather than read properties the processor could set, because gRPC 1.51 hands the
// processor the connection's AuthContext, not the call's: a property set for one call would be
// seen by every later call on the connection, whatever token it carries.
//
// Thread-safety: the processor and CallPermissions are called from gRPC's threads; TokenStore
// and AuthProbe are thread-safe. Both share ownership of the store; the probe must outlive them.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "daemon/config/config.h"
#include "daemon/security/auth_probe.h"
#include "daemon/security/token_store.h"

namespace grpc {
class ServerContext;
class ServerCredentials;
}  // namespace grpc

namespace cdcview {

// How often gRPC looks at the certificate files for a change (its minimum).
inline constexpr unsigned kCertificateRefreshSeconds = 1;

// TLS credentials for `server` (TlsEnabled): the key pair, and with tls_client_ca_file a client
// certificate required and verified against it. With `tokens`, every call is checked against it
// and refusals are counted in `refusals` (may be null).
std::shared_ptr<grpc::ServerCredentials> MainPortCredentials(
    const ServerConfig& server, std::shared_ptr<security::TokenStore> tokens,
    security::AuthProbe* refusals);

// The per-view decisions of the handlers.
class CallPermissions {
 public:
  // `tokens` null: every call may read everything. `refusals` may be null.
  CallPermissions(std::shared_ptr<security::TokenStore> tokens, security::AuthProbe* refusals)
      : tokens_(std::move(tokens)), refusals_(refusals) {}

  // Who made the call: its token's entry, nullopt without tokens; UNAUTHENTICATED as
  // TokenStore::Authenticate says (the processor let it through, then the file changed).
  absl::StatusOr<std::optional<security::Principal>> Caller(
      const grpc::ServerContext& context) const;
  // OK when the caller may read `view` (a view or aggregate name); else PERMISSION_DENIED
  // (TokenStore::PermitView's message). Refusals are counted.
  absl::Status PermitView(const grpc::ServerContext& context, std::string_view view) const;
  // OK when the caller's token has views: all (for what spans every view: a table's items or
  // hot keys, a backup); else PERMISSION_DENIED naming `what`.
  absl::Status PermitEverything(const grpc::ServerContext& context, std::string_view what) const;

 private:
  const std::shared_ptr<security::TokenStore> tokens_;
  security::AuthProbe* const refusals_;
};

}  // namespace cdcview
