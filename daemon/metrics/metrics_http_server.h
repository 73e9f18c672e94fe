// MetricsHttpServer: the HTTP endpoint that serves /metrics (civetweb), over TLS and behind
// bearer tokens when configured.
//
// Plaintext: civetweb (the HTTP server prometheus-cpp's Exposer embeds), owned directly so that
// its handler reaches this object without globals.
//
// TLS: a small HTTP/1.1 server of its own on OpenSSL, each handshake with
// TlsServerContext::Current(), so a rotated certificate is served on the next connection without
// a restart. Not civetweb: Debian's civetweb 1.15 is built for the OpenSSL 1.1 API and dlopens
// libssl.so, where OpenSSL 3 no longer exports SSL_get_peer_certificate (a macro for
// SSL_get1_peer_certificate since 3.0); civetweb calls that null pointer after every TLS
// handshake and the process crashes. The TLS server answers GET and HEAD of /metrics (404
// elsewhere, 405 for other methods, 400 for a request with a body or a head over
// kMaxRequestHeadBytes), keeps a connection for further requests until the client closes it or
// sends nothing for kIdleTimeout, and serves at most kMaxConnections at once (more are closed
// at accept). One thread accepts; each connection has a thread of its own.
//
// Deadlines are absolute, so a client that trickles bytes cannot hold one of the
// kMaxConnections slots: the handshake must finish within kHandshakeTimeout of accept, a
// request head within kRequestHeadTimeout of its first byte, a reply be written within
// kIdleTimeout; the connection is closed when one passes. With tokens, any answer but 200
// closes the connection, so that requests without a token (a 404 needs none) cannot keep it.
//
// Tokens: with a TokenStore every request for /metrics must carry "authorization: Bearer
// <token>" of an entry with metrics: true. No header or an unknown token: 401 with
// `WWW-Authenticate: Bearer realm="cdcview"` (plus error="invalid_token" for an unknown token,
// RFC 6750); a token without metrics: true: 403 with error="insufficient_scope". The body is
// TokenStore's message. Each refusal is counted in cdcview_auth_refused_total{port="metrics"}.
//
// Thread-safe: connections are served concurrently; `render`, the TLS context and the token
// store must be thread-safe (they are). Destruction stops listening, closes open connections
// and joins the threads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <map>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

class CivetServer;
class CivetHandler;

namespace cdcview {
namespace security {
class AuthProbe;
class TlsServerContext;
class TokenStore;
}  // namespace security

class MetricsHttpServer {
 public:
  struct Options {
    std::string listen;  // host:port; "127.0.0.1:0" picks a free port
    // Set: HTTPS only, with this context's certificates.
    std::shared_ptr<security::TlsServerContext> tls;
    // Set: a scrape needs a bearer token with metrics: true; `refusals` counts the others.
    std::shared_ptr<security::TokenStore> tokens;
    security::AuthProbe* refusals = nullptr;
  };

  // Listens on options.listen and serves `render()` (the text exposition) on /metrics.
  // UNAVAILABLE naming the address and civetweb's reason when it cannot listen or set up TLS.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      Options options, std::function<std::string()> render);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }

  static constexpr size_t kMaxRequestHeadBytes = 16 * 1024;
  static constexpr int kMaxConnections = 16;
  static constexpr std::chrono::seconds kIdleTimeout{30};
  static constexpr std::chrono::seconds kHandshakeTimeout{10};
  static constexpr std::chrono::seconds kRequestHeadTimeout{10};

 private:
  class Handler;
  // What a request gets: status, extra header lines ("Name: value\r\n"...), body.
  struct Reply {
    int status = 200;
    std::string headers;
    std::string body;
  };
  MetricsHttpServer(Options options, std::function<std::string()> render);
  // GET /metrics with this authorization header (null when absent): the metrics, or a refusal.
  Reply Scrape(const char* authorization) const;
  absl::Status ListenTls();
  void AcceptLoop();
  // Joins the threads of the connections that have ended.
  void ReapFinished();
  // Serves connection `id` on `fd`, then closes `fd` and marks the connection ended.
  void Serve(uint64_t id, int fd);

  const Options options_;
  const std::function<std::string()> render_;
  // Plaintext.
  std::unique_ptr<Handler> handler_;
  std::unique_ptr<CivetServer> server_;  // after handler_: destroyed (stopped) first
  // TLS.
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  struct Connection {
    int fd = -1;  // -1 once the connection's thread has closed it
    std::thread thread;
  };
  absl::Mutex mu_;
  // Every connection whose thread is not yet joined, by an id that is never reused (a
  // descriptor number is, as soon as it is closed).
  std::map<uint64_t, Connection> connections_ ABSL_GUARDED_BY(mu_);
  int open_connections_ ABSL_GUARDED_BY(mu_) = 0;  // those with fd >= 0
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  int port_ = 0;
};

}  // namespace cdcview
