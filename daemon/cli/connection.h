// How the cdcview CLI reaches cdcviewd: the TLS and bearer-token flags (--tls-ca, --cert, --key,
// --token-file, --server-name) checked and read into a gRPC channel, and the hint added to a
// failed call's message that names the flag likely to fix it.
//
// Plain functions over values; no shared state. ConnectionSecrets holds the token and the
// private key in memory: nothing here prints them, and no message quotes a file's contents.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace cdcview {

// The connection flags as given; "" for a flag not given.
struct ConnectionFlags {
  std::string addr = "127.0.0.1:50051";  // host:port of cdcviewd's server.grpc
  std::string tls_ca;       // PEM CA bundle that verifies the server; given => TLS
  std::string cert, key;    // PEM client certificate (chain) and its private key (mTLS); => TLS
  std::string token_file;   // the bearer token, sent as "authorization: Bearer <token>"
  std::string server_name;  // the name expected in the server's certificate, if not --addr's host

  // TLS when --tls-ca or --cert is given (without --tls-ca, the system's CAs verify the server).
  bool tls() const { return !tls_ca.empty() || !cert.empty(); }
};

// What the flags' files hold. `token` is trimmed of surrounding white space.
struct ConnectionSecrets {
  std::string ca_pem, cert_pem, key_pem, token;
};

// Checks the flags against each other and reads their files. INVALID_ARGUMENT whose message
// starts with the flag at fault: a flag without its partner (--cert without --key, --token-file
// or --server-name without TLS), a file that cannot be read (naming the path and the system's
// reason), a --tls-ca / --cert with no PEM certificate, a --key with no PEM private key, an empty
// token file or a token with white space or control characters inside.
absl::StatusOr<ConnectionSecrets> LoadConnectionSecrets(const ConnectionFlags& flags);

// A channel to flags.addr: plaintext, or TLS with the secrets' CA and client pair, with the
// token as call credentials on every call (gRPC sends them only over TLS).
std::shared_ptr<grpc::Channel> OpenChannel(const ConnectionFlags& flags,
                                           const ConnectionSecrets& secrets);

// What to append to a failed call's message (" (...)" or ""): the flag that likely fixes
// `code`/`message` given the flags used. UNAUTHENTICATED: --token-file; PERMISSION_DENIED: the
// token's entry; UNAVAILABLE: --tls-ca for a failed handshake or a closed plaintext connection,
// --cert/--key when the server wants a client certificate, --server-name for a name mismatch,
// else whether cdcviewd runs on --addr.
std::string ConnectionHint(grpc::StatusCode code, std::string_view message,
                           const ConnectionFlags& flags);

}  // namespace cdcview
