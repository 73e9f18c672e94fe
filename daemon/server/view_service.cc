#include "daemon/server/view_service.h"

#include <grpc/grpc.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "cdcview/v1/view_service.grpc.pb.h"
#include "daemon/log/log.h"
#include "daemon/security/certificate_watch.h"
#include "daemon/server/cluster_peers.h"
#include "daemon/server/cluster_watch.h"
#include "daemon/server/error_text.h"
#include "daemon/server/grpc_auth.h"
#include "daemon/server/grpc_listener.h"
#include "daemon/server/watch.h"
#include "daemon/server/read_consistency.h"

namespace cdcview {
namespace {

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  // absl and gRPC share the canonical code numbering. The message is bounded: one over
  // gRPC's metadata limit would reach the client as RESOURCE_EXHAUSTED instead.
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), BoundStatusMessage(s.message()));
}

constexpr const char* kServiceName = "cdcview.v1.ViewService";
// Idle sync-server threads kept for the next calls (see Start).
constexpr int kMaxIdleHandlerThreads = 64;

// A config duration in seconds as a gRPC channel argument in milliseconds; 0 (never) is
// gRPC's INT_MAX. The config bounds keep the product within an int.
int MillisOrNever(uint32_t seconds) {
  return seconds == 0 ? INT_MAX : static_cast<int>(seconds) * 1000;
}

// On a connection gRPC accepts itself (the main port with TLS, from the relay), the TLS
// handshake and then the HTTP/2 preface must arrive within this, or gRPC closes it. gRPC's
// default is 120 s, during which a client that stops mid-handshake holds one of
// server.grpc_max_connections; a real client on a slow network finishes well within this.
// Connections handed to gRPC as descriptors (plaintext) have no handshake: the idle time
// bounds those.
constexpr int kHandshakeTimeoutMs = 10 * 1000;

// The limits on each connection of a port whose connections come from a GrpcListener (which
// caps their number). gRPC ends a connection with no call for the idle time, and any
// connection at its age (jittered by gRPC, then the grace period for its calls, then closed):
// a client that sends half a request and stops, or never sends the HTTP/2 preface, holds a
// connection only that long. A client pinging more often than the minimum interval with no
// call is sent GOAWAY after the strikes.
void AddConnectionLimits(grpc::ServerBuilder& builder, const ServerConfig& limits) {
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, kHandshakeTimeoutMs);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             MillisOrNever(limits.grpc_max_connection_idle_seconds));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                             MillisOrNever(limits.grpc_max_connection_age_seconds));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                             static_cast<int>(limits.grpc_max_connection_age_grace_seconds) * 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             static_cast<int>(limits.grpc_min_ping_interval_seconds) * 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES,
                             static_cast<int>(limits.grpc_max_ping_strikes));
}

// The call's deadline on the steady clock (gRPC gives it on the system clock); max() if none.
ViewQueries::Deadline DeadlineOf(const grpc::ServerContext* context) {
  const auto deadline = context->deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return ViewQueries::Deadline::max();
  const auto now = std::chrono::steady_clock::now();
  return WaitDeadline(now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                deadline - std::chrono::system_clock::now()),
                      now);
}

// Drops the builder plugins every ServerBuilder gets (reflection registers itself when its
// library loads), so that the unauthenticated health port serves nothing but health.
class WithoutPlugins final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->clear();
  }
};

}  // namespace

// With tokens, each handler first checks the caller may read what the request names: a view
// or an aggregate by its name (a token's `views` list names either); a table's items or hot
// keys only with views: all, as they span every view of the table.
class ViewServer::Service final : public v1::ViewService::Service {
 public:
  Service(const ViewQueries& reader, const ViewQueries* local_only, QueryProbe* probe,
          WatchHub* watch, const CallPermissions& permissions, ClusterWatch* cluster_watch)
      : reader_(reader),
        local_only_(local_only),
        probe_(probe),
        watch_(watch),
        permissions_(permissions),
        cluster_watch_(cluster_watch) {}

  grpc::Status Query(grpc::ServerContext* ctx, const v1::QueryRequest* req, v1::QueryResponse* resp) override {
    return Timed("Query", [&] {
      absl::Status refused = permissions_.PermitView(*ctx, req->view());
      if (!refused.ok()) return refused;
      return Assign(For(*ctx).Query(*req, DeadlineOf(ctx)), resp);
    });
  }
  grpc::Status Scan(grpc::ServerContext* ctx, const v1::ScanRequest* req, v1::ScanResponse* resp) override {
    return Timed("Scan", [&] {
      absl::Status refused = permissions_.PermitView(*ctx, req->view());
      if (!refused.ok()) return refused;
      return Assign(For(*ctx).Scan(*req, DeadlineOf(ctx)), resp);
    });
  }
  grpc::Status GetItem(grpc::ServerContext* ctx, const v1::GetItemRequest* req, v1::GetItemResponse* resp) override {
    return Timed("GetItem", [&] {
      absl::Status refused = permissions_.PermitEverything(
          *ctx, absl::StrCat("table \"", req->table(), "\"'s items"));
      if (!refused.ok()) return refused;
      return Assign(For(*ctx).GetItem(*req, DeadlineOf(ctx)), resp);
    });
  }
  grpc::Status GetHotKeys(grpc::ServerContext* ctx, const v1::GetHotKeysRequest* req,
                          v1::HotKeysResponse* resp) override {
    return Timed("GetHotKeys", [&] {
      absl::Status refused =
          req->view().empty()
              ? permissions_.PermitEverything(
                    *ctx, absl::StrCat("table \"", req->table(), "\"'s hot keys"))
              : permissions_.PermitView(*ctx, req->view());
      if (!refused.ok()) return refused;
      return Assign(For(*ctx).GetHotKeys(*req), resp);
    });
  }
  // A token that may read some views lists only those.
  grpc::Status ListViews(grpc::ServerContext* ctx, const v1::ListViewsRequest*, v1::ListViewsResponse* resp) override {
    return Timed("ListViews", [&] {
      absl::StatusOr<std::optional<security::Principal>> who = permissions_.Caller(*ctx);
      if (!who.ok()) return who.status();
      absl::Status s = Assign(For(*ctx).ListViews(), resp);
      if (!s.ok() || !who->has_value() || (*who)->all_views) return s;
      auto* views = resp->mutable_views();
      for (int i = views->size() - 1; i >= 0; --i) {
        if (!(*who)->MayRead(views->Get(i).name())) views->DeleteSubrange(i, 1);
      }
      return s;
    });
  }
  grpc::Status DescribeView(grpc::ServerContext* ctx, const v1::DescribeViewRequest* req,
                            v1::ViewDescription* resp) override {
    return Timed("DescribeView", [&] {
      absl::Status refused = permissions_.PermitView(*ctx, req->view());
      if (!refused.ok()) return refused;
      return Assign(For(*ctx).DescribeView(req->view()), resp);
    });
  }
  grpc::Status GetAggregate(grpc::ServerContext* ctx, const v1::GetAggregateRequest* req,
                            v1::AggregateGroup* resp) override {
    return Timed("GetAggregate", [&] {
      absl::Status refused = permissions_.PermitView(*ctx, req->aggregate());
      if (!refused.ok()) return refused;
      return Assign(For(*ctx).GetAggregate(*req, DeadlineOf(ctx)), resp);
    });
  }
  grpc::Status ListAggregates(grpc::ServerContext* ctx, const v1::ListAggregatesRequest* req,
                              v1::ListAggregatesResponse* resp) override {
    return Timed("ListAggregates", [&] {
      absl::Status refused = permissions_.PermitView(*ctx, req->aggregate());
      if (!refused.ok()) return refused;
      return Assign(For(*ctx).ListAggregates(*req, DeadlineOf(ctx)), resp);
    });
  }
  grpc::Status GetStatus(grpc::ServerContext* ctx, const v1::GetStatusRequest*, v1::StatusResponse* resp) override {
    return Timed("GetStatus", [&] {
      *resp = For(*ctx).GetStatus();
      return absl::OkStatus();
    });
  }
  // A sync handler: the stream holds one gRPC thread while open. A client that stops reading
  // blocks its Write; the hub's watchdog and Shutdown end the call to free it (watch.h),
  // cancelling it with a status the client receives (TryCancel would tell it only CANCELLED).
  grpc::Status Watch(grpc::ServerContext* ctx, const v1::WatchRequest* req,
                     grpc::ServerWriter<v1::WatchEvent>* writer) override {
    if (watch_ == nullptr) return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "Watch is not served here");
    if (absl::Status s = permissions_.PermitView(*ctx, req->view()); !s.ok()) return ToGrpc(s);
    // Plain Writes: a sync Write with buffer_hint does not complete until a later write
    // flushes it, so it would stall the handler on its last buffered event.
    WatchStream stream{[writer](const v1::WatchEvent& e) { return writer->Write(e); },
                       [ctx] { return ctx->IsCancelled(); },
                       [ctx](const absl::Status& s) {
                         const std::string message = BoundStatusMessage(s.message());
                         grpc_call_cancel_with_status(ctx->c_call(),
                                                      static_cast<grpc_status_code>(s.code()),
                                                      message.c_str(), nullptr);
                       }};
    // A cluster member merges every member's stream, unless another member asks for its own.
    if (cluster_watch_ != nullptr && !LocalOnly(*ctx)) {
      return ToGrpc(cluster_watch_->Run(*req, stream, DeadlineOf(ctx)));
    }
    return ToGrpc(watch_->Run(*req, stream));
  }

 private:
  // A cluster member's own store for a call marked local-only (another member merging), the
  // whole cluster's answer otherwise.
  const ViewQueries& For(const grpc::ServerContext& ctx) const {
    return local_only_ != nullptr && LocalOnly(ctx) ? *local_only_ : reader_;
  }

  // Whether the call carries the local-only marker (cluster_peers.h).
  static bool LocalOnly(const grpc::ServerContext& ctx) {
    auto marker = ctx.client_metadata().find(kLocalOnlyMetadata);
    return marker != ctx.client_metadata().end() && marker->second == "1";
  }

  template <typename T, typename R>
  static absl::Status Assign(absl::StatusOr<T> result, R* out) {
    if (!result.ok()) return result.status();
    *out = std::move(*result);
    return absl::OkStatus();
  }

  template <typename F>
  grpc::Status Timed(const std::string& method, F&& body) {
    auto start = std::chrono::steady_clock::now();
    absl::Status s = body();
    if (probe_ != nullptr) {
      probe_->Observe(method, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                      s.ok());
    }
    return ToGrpc(s);
  }

  const ViewQueries& reader_;
  const ViewQueries* local_only_;
  QueryProbe* probe_;
  WatchHub* watch_;
  const CallPermissions& permissions_;
  ClusterWatch* cluster_watch_;
};

absl::StatusOr<std::unique_ptr<ViewServer>> ViewServer::Start(
    const std::string& address, const ViewQueries& reader, QueryProbe* probe, WatchHub* watch,
    const ServerConfig& limits, ConnectionProbe* connections, grpc::Service* admin,
    const MainPortSecurity& security, const ViewQueries* local_only,
    ClusterWatch* cluster_watch) {
  std::unique_ptr<ViewServer> server(new ViewServer());
  auto listener = GrpcListener::Listen(address);
  if (!listener.ok()) {
    return absl::UnavailableError(absl::StrCat(listener.status().message(),
                                               "; set server.grpc (or --grpc) to a free host:port"));
  }
  server->listener_ = std::move(*listener);
  server->port_ = server->listener_->port();
  if (security.tokens != nullptr && security.metrics != nullptr) {
    server->auth_probe_ = std::make_unique<security::AuthProbe>(security.metrics->registry(), "grpc");
  }
  grpc::EnableDefaultHealthCheckService(true);
  if (!limits.health.empty()) {
    if (absl::Status s = server->StartHealthPort(limits, security.metrics); !s.ok()) return s;
  }
  server->permissions_ =
      std::make_unique<CallPermissions>(security.tokens, server->auth_probe_.get());
  server->service_ = std::make_unique<Service>(reader, local_only, probe, watch,
                                               *server->permissions_, cluster_watch);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.RegisterService(server->service_.get());
  if (limits.TlsEnabled()) {
    auto watch = security::CertificateWatch::Start(
        limits.tls_cert_file, limits.tls_key_file,
        security.metrics != nullptr ? &security.metrics->registry() : nullptr, "grpc");
    if (!watch.ok()) return watch.status();
    server->certificate_watch_ = std::move(*watch);
    if (!limits.tls_client_ca_file.empty()) {
      absl::Status ca = security::CertificateWatch::CheckClientCa(limits.tls_client_ca_file);
      if (!ca.ok()) return ca;
    }
    absl::StatusOr<std::string> socket = server->MakeRelaySocketPath(security.private_dir);
    if (!socket.ok()) return socket.status();
    if (absl::Status s = server->listener_->RelayTo(*socket); !s.ok()) return s;
    builder.AddListeningPort(absl::StrCat("unix:", *socket),
                             MainPortCredentials(limits, security.tokens, server->auth_probe_.get()));
  }
  AddConnectionLimits(builder, limits);
  if (admin != nullptr) builder.RegisterService(admin);
  // gRPC's sync server keeps between MIN_POLLERS (1) and MAX_POLLERS (2) idle handler threads by
  // default: when the last idle one takes a call it starts a new thread, and a thread that
  // finishes a call while two others are idle exits. Under a steady stream of concurrent calls
  // that creates and destroys threads all the time, each start costing CPU and stalling a call
  // on a busy machine. A higher MAX_POLLERS keeps the threads a burst needed for the next one
  // (docs/PERFORMANCE.md, "Comparisons behind design choices"). No cap on the threads
  // themselves (ResourceQuota::SetMaxThreads): at the cap gRPC answers RESOURCE_EXHAUSTED,
  // which would refuse Watch streams (each holds a thread).
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::NUM_CQS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, kMaxIdleHandlerThreads);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve gRPC on ", address,
        limits.TlsEnabled() ? absl::StrCat(" (TLS: server.tls_cert_file ", limits.tls_cert_file,
                                           ", server.tls_key_file ", limits.tls_key_file,
                                           "; gRPC's log above says why)")
                            : "; set server.grpc (or --grpc) to a free host:port"));
  }
  server->SetServing(false);
  server->listener_->Start(server->server_.get(), limits.grpc_max_connections, connections);
  return server;
}

absl::StatusOr<std::string> ViewServer::MakeRelaySocketPath(const std::string& private_dir) {
  constexpr char kSocketName[] = "/grpc.sock";
  std::vector<std::string> parents;
  if (!private_dir.empty()) parents.push_back(private_dir);
  const char* tmp = std::getenv("TMPDIR");
  parents.push_back(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp");
  std::string why;
  if (!private_dir.empty()) {
    // What a killed process left: no other process uses this store (it holds the store's lock).
    std::error_code ignored;
    for (const auto& entry : std::filesystem::directory_iterator(private_dir, ignored)) {
      if (entry.path().filename().string().starts_with(".cdcviewd-tls-")) {
        std::filesystem::remove_all(entry.path(), ignored);
      }
    }
  }
  for (const std::string& parent : parents) {
    std::string dir = absl::StrCat(parent, "/.cdcviewd-tls-XXXXXX");
    if (dir.size() + sizeof kSocketName > sizeof(sockaddr_un::sun_path)) {
      why = absl::StrCat(parent, " is too long a path for a unix socket");
      continue;
    }
    // mkdtemp makes it 0700: only this user can reach the socket inside.
    if (mkdtemp(dir.data()) == nullptr) {
      why = absl::StrCat("cannot make a directory in ", parent, ": ", std::strerror(errno));
      continue;
    }
    relay_dir_ = dir;
    return dir + kSocketName;
  }
  return absl::UnavailableError(
      absl::StrCat("cannot make the private socket for the TLS port: ", why));
}

absl::Status ViewServer::StartHealthPort(const ServerConfig& limits, MetricsRegistry* metrics) {
  auto listener = GrpcListener::Listen(
      limits.health, "health port",
      absl::StrCat(kHealthMaxConnections, " for the health port, out of server.fd_reserve"));
  if (!listener.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "server.health: ", listener.status().message(),
        "; set it to a free host:port, or \"\" to turn the health port off"));
  }
  health_listener_ = std::move(*listener);
  health_port_ = health_listener_->port();
  grpc::ServerBuilder builder;
  builder.SetOption(std::make_unique<WithoutPlugins>());
  // The default health service is a callback service; a sync server must have a sync service
  // to start. ViewService's base class answers every method UNIMPLEMENTED.
  health_placeholder_ = std::make_unique<v1::ViewService::Service>();
  builder.RegisterService(health_placeholder_.get());
  // The same limits as the main port: the health port has only kHealthMaxConnections, and a
  // client holding them idle would fail the kubelet's probes.
  AddConnectionLimits(builder, limits);
  health_server_ = builder.BuildAndStart();
  if (health_server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve gRPC health on ", limits.health));
  }
  if (metrics != nullptr) {
    health_connections_ = std::make_unique<ConnectionProbe>(
        *metrics, "health", std::vector<std::string>{GrpcListener::kClosedReason});
  }
  health_listener_->Start(health_server_.get(), kHealthMaxConnections, health_connections_.get());
  return absl::OkStatus();
}

ViewServer::~ViewServer() { Shutdown(0); }

void ViewServer::SetMaxConnections(uint32_t max) {
  if (listener_ != nullptr) listener_->SetMaxConnections(max);
}

uint32_t ViewServer::max_connections() const {
  return listener_ != nullptr ? listener_->max_connections() : 0;
}

void ViewServer::SetServing(bool serving) {
  SetServiceServing("", serving);
  SetServiceServing(kServiceName, serving);
}

void ViewServer::SetServiceServing(const std::string& service, bool serving) {
  // The health port answers what the main port answers.
  for (grpc::Server* s : {server_.get(), health_server_.get()}) {
    if (s == nullptr) continue;
    grpc::HealthCheckServiceInterface* health = s->GetHealthCheckService();
    if (health != nullptr) health->SetServingStatus(service, serving);
  }
}

void ViewServer::Shutdown(int grace_ms) {
  if (listener_ != nullptr) listener_->Stop();
  if (health_listener_ != nullptr) health_listener_->Stop();
  const auto deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(grace_ms);
  if (server_ != nullptr) {
    server_->Shutdown(deadline);
    server_->Wait();
    server_.reset();
  }
  if (health_server_ != nullptr) {
    health_server_->Shutdown(deadline);
    health_server_->Wait();
    health_server_.reset();
  }
  if (certificate_watch_ != nullptr) certificate_watch_->Stop();
  // The relayed connections carried the grace period's answers; now they go.
  if (listener_ != nullptr) listener_->StopRelay();
  if (!relay_dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(relay_dir_, ignored);
    relay_dir_.clear();
  }
}

}  // namespace cdcview
