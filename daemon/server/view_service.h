// ViewServer: the gRPC server: cdcview.v1.ViewService over a ViewQueries, the standard health
// service, server reflection and, if given, cdcview.v1.AdminService. Its port is a
// GrpcListener (grpc_listener.h): connections are capped, and gRPC closes idle and old ones
// and clients that ping too often (ServerConfig's grpc_* fields).
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
#include "daemon/server/view_queries.h"

namespace grpc {
class Server;
class Service;
}

namespace cdcview {

class WatchHub;  // serves Watch (watch.h), from the local change log
class GrpcListener;

class ViewServer {
 public:
  // Listens on `address` (host:port; port 0 picks one). UNAVAILABLE naming the address when
  // it cannot listen. Health starts NOT_SERVING: call SetServing once views are loaded.
  // `watch` serves Watch (UNIMPLEMENTED without one). `limits` gives the grpc_* fields (the
  // address is `address`); `connections` (may be null) counts this port's connections;
  // `admin` (cdcview.v1.AdminService, see admin_service.h) is served beside ViewService if
  // given. All must outlive the server.
  static absl::StatusOr<std::unique_ptr<ViewServer>> Start(
      const std::string& address, const ViewQueries& reader, QueryProbe* probe,
      WatchHub* watch = nullptr, const ServerConfig& limits = ServerConfig{},
      ConnectionProbe* connections = nullptr, grpc::Service* admin = nullptr);
  ~ViewServer();

  int port() const { return port_; }
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
  std::unique_ptr<Service> service_;
  std::unique_ptr<GrpcListener> listener_;  // stopped before server_ shuts down
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace cdcview
