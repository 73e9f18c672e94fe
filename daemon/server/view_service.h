// ViewServer: the gRPC server: cdcview.v1.ViewService over a ViewQueries, the standard health
// service, server reflection and, if given, cdcview.v1.AdminService. Its port is a
// GrpcListener (grpc_listener.h): connections are capped, and gRPC closes idle and old ones
// and clients that ping too often (ServerConfig's grpc_* fields).
//
// With server.tls_cert_file the port speaks only TLS: gRPC's TLS listener sits on a unix socket
// in a private directory and the GrpcListener relays each connection to it (connection_relay.h
// says why). With server.tokens_file every call needs a bearer token (grpc_auth.h), and each
// handler that names a view checks the token may read it; ListViews lists only those.
// server.health adds a plaintext port serving only grpc.health.v1.Health, with the same
// statuses, for probes that speak neither TLS nor tokens.
//
// Thread-safe: gRPC calls handlers from its own thread pool; ViewQueries is thread-safe.
// This file is the one place that translates absl::Status into grpc::Status.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/config/config.h"
#include "daemon/metrics/connection_probe.h"
#include "daemon/metrics/metrics.h"
#include "daemon/security/auth_probe.h"
#include "daemon/security/token_store.h"
#include "daemon/server/view_queries.h"

namespace grpc {
class Server;
class Service;
}

namespace cdcview {

class WatchHub;  // serves Watch (watch.h), from the local change log
class ClusterWatch;  // serves a cluster's merged Watch (cluster_watch.h)
class GrpcListener;
class CallPermissions;
namespace security {
class CertificateWatch;
}

// What the main port needs beyond ServerConfig for TLS, tokens and the health port.
struct MainPortSecurity {
  // A directory only this process's user may write (the store's): the TLS relay's socket goes
  // into a 0700 directory made inside it (or under $TMPDIR when that path would be too long).
  std::string private_dir;
  std::shared_ptr<security::TokenStore> tokens;  // null: no tokens
  // Receives cdcview_auth_refused_total{port="grpc"} and the health port's connection metrics
  // (port="health"); may be null.
  MetricsRegistry* metrics = nullptr;
};

class ViewServer {
 public:
  // Connections the health port takes at once (each probe opens one); beyond, accepted and
  // closed. They come out of server.fd_reserve.
  static constexpr uint32_t kHealthMaxConnections = 16;

  // Listens on `address` (host:port; port 0 picks one). UNAVAILABLE naming the address when
  // it cannot listen. Health starts NOT_SERVING: call SetServing once views are loaded.
  // `watch` serves Watch (UNIMPLEMENTED without one). `limits` gives the grpc_* fields (the
  // address is `address`); `connections` (may be null) counts this port's connections;
  // `admin` (cdcview.v1.AdminService, see admin_service.h) is served beside ViewService if
  // given. `local_only` (a cluster member's own reader, see cluster_peers.h) answers the calls
  // carrying the local-only marker; without it `reader` answers every call. `cluster_watch` (a
  // cluster member's) serves Watch calls without the marker; `watch` those with it. All must
  // outlive the server.
  static absl::StatusOr<std::unique_ptr<ViewServer>> Start(
      const std::string& address, const ViewQueries& reader, QueryProbe* probe,
      WatchHub* watch = nullptr, const ServerConfig& limits = ServerConfig{},
      ConnectionProbe* connections = nullptr, grpc::Service* admin = nullptr,
      const MainPortSecurity& security = MainPortSecurity{},
      const ViewQueries* local_only = nullptr, ClusterWatch* cluster_watch = nullptr);
  ~ViewServer();

  int port() const { return port_; }
  int health_port() const { return health_port_; }  // 0: off
  // The connection cap: `limits.grpc_max_connections` until set (the application clamps it to
  // the descriptors left once the sources have opened theirs).
  void SetMaxConnections(uint32_t max);
  uint32_t max_connections() const;
  void SetServing(bool serving);
  // The status of one more grpc.health.v1 service name (a view's "cdcview.view.<name>").
  void SetServiceServing(const std::string& service, bool serving);
  // Stops accepting calls and waits up to `grace_ms` for running ones.
  void Shutdown(int grace_ms);

 private:
  class Service;
  ViewServer() = default;
  // Makes the private directory and the unix socket path gRPC's TLS listener binds.
  absl::StatusOr<std::string> MakeRelaySocketPath(const std::string& private_dir);
  absl::Status StartHealthPort(const ServerConfig& limits, MetricsRegistry* metrics);

  std::unique_ptr<security::AuthProbe> auth_probe_;  // with tokens
  std::unique_ptr<CallPermissions> permissions_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<GrpcListener> listener_;  // stopped before server_ shuts down
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string relay_dir_;  // removed at shutdown; "" without TLS
  std::unique_ptr<security::CertificateWatch> certificate_watch_;  // with TLS: metrics, log
  std::unique_ptr<ConnectionProbe> health_connections_;
  std::unique_ptr<grpc::Service> health_placeholder_;
  std::unique_ptr<GrpcListener> health_listener_;
  std::unique_ptr<grpc::Server> health_server_;
  int health_port_ = 0;
};

}  // namespace cdcview
