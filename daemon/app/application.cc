#include "daemon/app/application.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "daemon/app/cpu_budget.h"
#include "daemon/server/grpc_listener.h"
#include "daemon/server/readiness.h"
#include "daemon/log/log.h"
#include "daemon/security/token_store.h"
#include "daemon/sources/dynamodb_source.h"
#include "daemon/sources/file_source.h"
#include "daemon/sources/kafka_source.h"
#include "daemon/store/lmdb_status.h"

namespace cdcview {
namespace {

absl::Status InPhase(const char* phase, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(phase, ": ", s.message()));
}

// One place knows every source type.
absl::StatusOr<std::unique_ptr<ChangeSource>> MakeSource(uint32_t index, const SourceConfig& config,
                                                         const Config& all,
                                                         MetricsRegistry* metrics) {
  switch (config.kind) {
    case SourceConfig::Kind::kFile:
      return std::make_unique<FileSource>(index, config,
                                          std::make_unique<FileProbe>(*metrics, config.name));
    case SourceConfig::Kind::kDynamoDb:
      // The config loader checked that the source's table is declared.
      return std::make_unique<DynamoDbSource>(index, config, *all.FindTable(config.table), metrics);
    case SourceConfig::Kind::kKafka:
      return std::make_unique<KafkaSource>(
          index, config, std::make_unique<KafkaProbe>(*metrics, config.name), all.cluster);
  }
  return absl::UnimplementedError(absl::StrCat(
      "source ", config.name, ": this cdcviewd has no reader for its source type yet"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Application>> Application::Start(Config config) {
  // Debian builds Abseil without NDEBUG, so every absl::Mutex (gRPC takes several per call)
  // records its lock order in a process-wide graph behind one global lock: a cost on every
  // mutex use and contention between all threads. Tests keep the check; the daemon turns it off.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  std::unique_ptr<Application> app(new Application());
  app->config_ = std::move(config);
  if (absl::Status s = app->Init(); !s.ok()) {
    app->Shutdown();
    return s;
  }
  return app;
}

absl::Status Application::Init() {
  // Container runtimes often start processes with a soft limit of 1024 and a far higher hard
  // one; every connection and Kafka socket takes a descriptor.
  auto fd_limit = RaiseFdLimit();
  if (!fd_limit.ok()) return InPhase("raising the open-files limit", fd_limit.status());
  fd_limit_ = *fd_limit;
  LogInfo(absl::StrCat("open-files limit (RLIMIT_NOFILE): soft ", fd_limit_.soft_at_start,
                       fd_limit_.soft != fd_limit_.soft_at_start
                           ? absl::StrCat(" raised to ", fd_limit_.soft)
                           : std::string(),
                       ", hard ", fd_limit_.hard));
  auto store = Store::Open(config_.storage, config_.tables);
  if (!store.ok()) return InPhase("opening the store", store.status());
  store_ = std::move(*store);
  for (const std::string& v : store_->dropped_views()) {
    LogInfo(absl::StrCat("view ", v, " is no longer configured: dropped its database"));
  }
  for (const std::string& a : store_->dropped_aggregates()) {
    LogInfo(absl::StrCat("aggregate ", a, " is no longer configured: dropped its databases"));
  }

  metrics_ = MetricsRegistry::Create();
  if (!config_.server.tokens_file.empty()) {
    auto tokens = security::TokenStore::Open(config_.server.tokens_file, &metrics_->registry());
    if (!tokens.ok()) return InPhase("loading server.tokens_file", tokens.status());
    tokens_ = std::move(*tokens);
    LogInfo(absl::StrCat("server.tokens_file ", config_.server.tokens_file, ": ",
                         tokens_->size(), " tokens"));
  }
  if (absl::Status s = metrics_->Serve(config_.server.metrics, config_.server, tokens_); !s.ok()) {
    return InPhase("starting metrics", s);
  }
  apply_probe_ = std::make_unique<ApplyProbe>(*metrics_, config_);
  query_probe_ = std::make_unique<QueryProbe>(*metrics_, ViewServiceUnaryMethods());

  catalog_ = std::make_unique<Catalog>(config_, store_->max_key_size());
  published_ = std::make_unique<PublishedState>(*catalog_);
  std::vector<DeadLetterSink*> dead_letters;
  for (size_t i = 0; i < config_.sources.size(); ++i) {
    auto source = MakeSource(static_cast<uint32_t>(i), config_.sources[i], config_, metrics_.get());
    if (!source.ok()) return InPhase("creating sources", source.status());
    sources_.push_back(std::move(*source));
    const ChangeSource* registered = sources_.back().get();
    published_->RegisterSource(i, std::string(registered->kind()),
                               [registered] { return registered->Health(); });
    dead_letters.push_back(sources_.back()->dead_letters());
  }
  applier_ = std::make_unique<Applier>(*catalog_, store_.get(), apply_probe_.get(), dead_letters,
                                       published_.get());
  if (absl::Status s = applier_->Recover(); !s.ok()) return InPhase("loading view states", s);
  assignment_probe_ = std::make_unique<AssignmentProbe>(*metrics_);
  Applier::AssignmentOptions assignment;
  assignment.probe = assignment_probe_.get();
  if (auto changed = applier_->ApplyAssignment(config_.cluster, assignment); !changed.ok()) {
    return InPhase("changing the cluster assignment", changed.status());
  }

  reader_ = std::make_unique<ViewReader>(*catalog_, *store_, *published_);
  if (config_.cluster.Enabled()) {
    if (absl::Status s = StartCluster(); !s.ok()) return InPhase("starting the cluster", s);
  }
  // With `cluster:`, both ports answer for the whole cluster, and a call with the local-only
  // marker (another member merging) from this member's store.
  const ViewQueries& queries =
      cluster_queries_ != nullptr ? static_cast<const ViewQueries&>(*cluster_queries_) : *reader_;
  std::vector<std::string> view_names;
  for (const ViewRef& view : catalog_->views()) view_names.push_back(view.spec->name);
  watch_probe_ = std::make_unique<WatchProbe>(*metrics_, view_names);
  watch_hub_ = std::make_unique<WatchHub>(*catalog_, *store_, *published_, *reader_, config_.watch,
                                          watch_probe_.get());
  if (peers_ != nullptr) {
    cluster_watch_ = std::make_unique<ClusterWatch>(*watch_hub_, *peers_, config_.watch,
                                                    config_.server.max_wait_ms);
  }
  admin_ = std::make_unique<AdminService>(store_.get(), config_.storage.backup_dir, tokens_,
                                          metrics_.get());
  fd_probe_ = std::make_unique<FdProbe>(*metrics_);
  fd_probe_->SetLimit(fd_limit_.soft);
  grpc_connections_ = std::make_unique<ConnectionProbe>(
      *metrics_, "grpc", std::vector<std::string>{GrpcListener::kClosedReason});
  auto server = ViewServer::Start(config_.server.grpc, queries, query_probe_.get(),
                                  watch_hub_.get(), config_.server, grpc_connections_.get(),
                                  admin_.get(),
                                  MainPortSecurity{config_.storage.path, tokens_, metrics_.get()},
                                  member_reader_.get(), cluster_watch_.get());
  if (!server.ok()) return InPhase("starting the gRPC server", server.status());
  server_ = std::move(*server);
  // Views start NOT_SERVING (not unknown) so a probe on a view name waits instead of failing.
  for (const ViewRef& view : catalog_->views()) {
    server_->SetServiceServing(ViewHealthServiceName(view.spec->name), false);
  }
  server_->SetServiceServing(kAllViewsHealthService, false);
  server_->SetServing(true);
  if (server_->health_port() != 0) {
    LogInfo(absl::StrCat("cdcviewd serving grpc.health.v1.Health (plaintext) on port ",
                         server_->health_port()));
  }
  if (!config_.server.fast_reads.empty()) {
    fast_reads_connections_ = std::make_unique<ConnectionProbe>(*metrics_, "fast_reads");
    H2ReadSecurity security;
    if (config_.server.TlsEnabled()) {
      security::TlsServerContext::Options tls;
      tls.port = "fast_reads";
      tls.alpn = {"h2"};
      auto context =
          security::TlsServerContext::Create(config_.server, std::move(tls), metrics_->registry());
      if (!context.ok()) return InPhase("starting the fast read port's TLS", context.status());
      security.tls = *std::move(context);
    }
    if (tokens_ != nullptr) {
      fast_reads_auth_ = std::make_unique<security::AuthProbe>(metrics_->registry(), "fast_reads");
      security.tokens = tokens_;
      security.auth_probe = fast_reads_auth_.get();
    }
    auto fast = H2ReadServer::Start(config_.server.fast_reads, queries, query_probe_.get(),
                                    "server.grpc", config_.server, fast_reads_connections_.get(),
                                    std::move(security), member_reader_.get());
    if (!fast.ok()) {
      return InPhase("starting the fast read port",
                     absl::Status(fast.status().code(),
                                  absl::StrCat("server.fast_reads: ", fast.status().message(),
                                               "; set it to a free host:port, or \"\" to turn "
                                               "the fast read port off")));
    }
    fast_reads_ = std::move(*fast);
    LogInfo(absl::StrCat("cdcviewd serving the fast read port (ViewService's unary reads) on port ",
                         fast_reads_->port()));
  }

  if (!config_.server.dynamodb.empty()) {
    if (absl::Status s = StartDynamoDb(queries); !s.ok()) {
      return InPhase("starting the DynamoDB endpoint", s);
    }
  }

  queue_ = std::make_unique<RecordQueue>(config_.apply.queue_capacity);
  for (size_t i = 0; i < sources_.size(); ++i) {
    sources_[i]->SetPositionLookup([this, i] { return published_->PositionsOf(i); });
    if (absl::Status s = sources_[i]->Start(published_->PositionsOf(i), queue_.get()); !s.ok()) {
      // A source that cannot start is reported in GetStatus; the others go on.
      LogError(absl::StrCat("source ", config_.sources[i].name, ": ", s.message()));
    }
  }
  if (absl::Status s = ClampConnectionCaps(); !s.ok()) return InPhase("budgeting file descriptors", s);
  writer_ = std::thread([this] { WriterMain(); });
  readiness_ = std::thread([this] { ReadinessMain(); });
  LogInfo(absl::StrCat("cdcviewd serving gRPC on port ", server_->port(), ", metrics on port ",
                       metrics_->port(), ", store in ", config_.storage.path));
  started_ = true;
  return absl::OkStatus();
}

absl::Status Application::StartCluster() {
  const ClusterConfig& cluster = config_.cluster;
  if (!config_.server.tokens_file.empty()) {
    const char* token = std::getenv(kClusterTokenEnv);
    if (token == nullptr || *token == '\0') {
      return absl::FailedPreconditionError(absl::StrCat(
          "with server.tokens_file, cluster members call each other with the token in ",
          kClusterTokenEnv, ": set it to a token of the tokens file that may read every view "
          "(views: all), the same on every member"));
    }
  }
  member_reader_ = std::make_unique<ViewReader>(*catalog_, *store_, *published_,
                                                reader_->max_page_size(), /*member_parts=*/true);
  peers_ = std::make_unique<ClusterPeers>(cluster, config_.server, &metrics_->registry());
  if (!peers_->credentials_status().ok()) return peers_->credentials_status();
  cluster_queries_ = std::make_unique<ClusterQueries>(*member_reader_, *peers_, config_);
  LogInfo(absl::StrCat("cluster member ", cluster.ordinal, " of ", cluster.members,
                       ": reads ask every member (", absl::StrJoin(cluster.peers, ", "), ")"));
  return absl::OkStatus();
}

absl::Status Application::StartDynamoDb(const ViewQueries& queries) {
  dynamodb_api_ = std::make_unique<dynamodb::DynamoDbApi>(*catalog_, queries);
  dynamodb_connections_ = std::make_unique<ConnectionProbe>(
      *metrics_, "dynamodb",
      std::vector<std::string>{"client", "error", "idle", "request_timeout", "write_timeout",
                               "request_refused", "tls_handshake", "shutdown"});
  dynamodb_probe_ = std::make_unique<DynamoDbApiProbe>(*metrics_);
  dynamodb::HttpServer::Options options;
  options.connections = dynamodb_connections_.get();
  options.probe = dynamodb_probe_.get();
  // A cluster member's reads ask the other members: never on the I/O threads.
  options.offload_all = cluster_queries_ != nullptr;
  if (config_.server.TlsEnabled()) {
    security::TlsServerContext::Options tls;
    tls.port = "dynamodb";
    auto context =
        security::TlsServerContext::Create(config_.server, std::move(tls), metrics_->registry());
    if (!context.ok()) return context.status();
    options.tls = *std::move(context);
  }
  if (tokens_ != nullptr) {
    dynamodb_auth_ = std::make_unique<security::AuthProbe>(metrics_->registry(), "dynamodb");
    options.tokens = tokens_;
    options.auth_probe = dynamodb_auth_.get();
  }
  const dynamodb::DynamoDbApi* api = dynamodb_api_.get();
  ServerConfig limits = config_.server;
  if (limits.dynamodb_threads == 0) {
    limits.dynamodb_threads =
        std::clamp(UsableCpus(), uint32_t{1}, ServerConfig::kMaxDynamoDbThreads);
  }
  auto server = dynamodb::HttpServer::Start(
      limits, [api](const dynamodb::ApiRequest& request) { return api->Handle(request); },
      std::move(options));
  if (!server.ok()) {
    return absl::Status(server.status().code(),
                        absl::StrCat("server.dynamodb: ", server.status().message(),
                                     "; set it to a free host:port, or \"\" to turn the DynamoDB "
                                     "endpoint off"));
  }
  dynamodb_ = std::move(*server);
  const uint32_t n = limits.dynamodb_threads;
  LogInfo(absl::StrCat("cdcviewd serving the DynamoDB API (",
                       config_.server.TlsEnabled() ? "HTTPS" : "HTTP", ") on port ",
                       dynamodb_->port(), " with ", n,
                       cluster_queries_ != nullptr
                           ? absl::StrCat(" I/O thread", n == 1 ? "" : "s",
                                          "; a cluster member's requests run on wait threads, "
                                          "its long ones on page-wait threads")
                           : absl::StrCat(" I/O and ", n, " page thread", n == 1 ? "" : "s")));
  return absl::OkStatus();
}

absl::Status Application::ClampConnectionCaps() {
  auto open = CountOpenFds();
  if (!open.ok()) return open.status();
  fd_probe_->SetOpen(*open);
  const uint64_t budget = ConnectionBudget(fd_limit_.soft, *open, config_.server.fd_reserve);
  fd_probe_->SetConnectionBudget(budget);
  if (budget == 0) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the open-files limit ", fd_limit_.soft, " leaves no descriptor for connections: ", *open,
        " are open and server.fd_reserve keeps ", config_.server.fd_reserve,
        "; raise the limit (ulimit -n, the container's nofile) or lower server.fd_reserve"));
  }
  // With TLS each main-port connection holds three descriptors (connection_relay.h).
  const uint32_t grpc_fds = config_.server.TlsEnabled() ? 3 : 1;
  const uint32_t grpc_wanted = config_.server.grpc_max_connections;
  std::vector<uint32_t> wanted = {grpc_wanted * grpc_fds};
  if (fast_reads_ != nullptr) wanted.push_back(config_.server.fast_reads_max_connections);
  if (dynamodb_ != nullptr) wanted.push_back(config_.server.dynamodb_max_connections);
  const std::vector<uint32_t> caps = ShareConnectionBudget(budget, wanted);
  const uint32_t grpc_cap = std::max<uint32_t>(1, caps[0] / grpc_fds);
  server_->SetMaxConnections(grpc_cap);
  if (fast_reads_ != nullptr) fast_reads_->SetMaxConnections(caps[1]);
  const uint32_t dynamodb_cap = dynamodb_ != nullptr ? caps.back() : 0;
  if (dynamodb_ != nullptr) dynamodb_->SetMaxConnections(dynamodb_cap);
  LogInfo(absl::StrCat(
      "file descriptors: limit ", fd_limit_.soft, ", ", *open, " open, server.fd_reserve ",
      config_.server.fd_reserve, ": connections may hold ", budget, "; the gRPC port takes at most ",
      grpc_cap, grpc_fds > 1 ? " (3 descriptors each: TLS relay)" : "",
      fast_reads_ != nullptr ? absl::StrCat(", the fast read port ", caps[1]) : "",
      dynamodb_ != nullptr ? absl::StrCat(", the DynamoDB endpoint ", dynamodb_cap) : "",
      caps != wanted ? " (server.grpc_max_connections, server.fast_reads_max_connections and "
                       "server.dynamodb_max_connections ask for more than the limit leaves)"
                     : ""));
  return absl::OkStatus();
}

void Application::WriterMain() {
  pthread_setname_np(pthread_self(), "cdcview-writer");  // for top -H, perf and the benches
  applier_->Run(queue_.get(), &stop_writer_);  // rebuilds changed views first
  writer_done_ = true;
}

void Application::ReadinessMain() {
  const auto counts_interval = std::chrono::seconds(config_.apply.log_counts_seconds);
  auto last_counts = std::chrono::steady_clock::now();
  logged_counts_.assign(sources_.size(), EventCounts{});
  logged_states_.assign(sources_.size(), std::nullopt);
  absl::MutexLock lock(&readiness_mu_);
  while (!stop_readiness_) {
    readiness_mu_.Unlock();
    UpdateViewHealth();
    applier_->LogThrottledSummaries();
    const auto now = std::chrono::steady_clock::now();
    if (counts_interval.count() > 0 && now - last_counts >= counts_interval) {
      LogEventCounts(std::chrono::duration<double>(now - last_counts).count());
      last_counts = now;
    }
    readiness_mu_.Lock();
    const absl::Time deadline = absl::Now() + absl::Seconds(1);
    while (!stop_readiness_) {
      if (readiness_wake_.WaitWithDeadline(&readiness_mu_, deadline)) break;  // timed out
    }
  }
}

void Application::UpdateViewHealth() {
  // The writer stopped on a damaged store: reads still answer what they can, but no probe may
  // take this process for healthy. Every view is NOT_SERVING below (WriterError says why).
  if (!published_->StoreError().empty()) server_->SetServing(false);
  if (auto open = CountOpenFds(); open.ok()) fd_probe_->SetOpen(*open);
  applier_->PublishHotKeyMetrics();
  std::vector<std::pair<std::string, uint64_t>> store_errors;
  const std::array<uint64_t, kStoreErrorKinds> counts = StoreErrorCounts();
  for (size_t kind = 0; kind < kStoreErrorKinds; ++kind) {
    store_errors.emplace_back(StoreErrorKindName(static_cast<StoreErrorKind>(kind)), counts[kind]);
  }
  apply_probe_->SetStoreErrors(store_errors);
  apply_probe_->SetUnflushed(store_->pending_layers(), store_->pending_bytes());
  apply_probe_->SetDiskFull(store_->disk_full());
  applier_->PublishFlushedSizes();
  for (size_t i = 0; i < sources_.size(); ++i) {
    apply_probe_->SetSourceState(i, ProgressOf(*published_, i).state);
  }
  bool all_caught_up = true;
  for (const ViewRef& view : catalog_->views()) {
    std::vector<SourceProgress> table_sources;
    for (size_t i = 0; i < sources_.size(); ++i) {
      if (catalog_->TableOfSource(i) != view.table) continue;
      table_sources.push_back(ProgressOf(*published_, i));
    }
    // A writer that cannot apply leaves every view stale, whatever the sources read.
    bool ready = published_->GetViewState(view.global) == ViewState::kReady &&
                 published_->WriterError().empty();
    const bool caught_up =
        ViewCaughtUp(ready, table_sources, config_.server.ready_max_lag_seconds);
    server_->SetServiceServing(ViewHealthServiceName(view.spec->name), caught_up);
    all_caught_up = all_caught_up && caught_up;
  }
  server_->SetServiceServing(kAllViewsHealthService, all_caught_up);
}

void Application::LogEventCounts(double interval_seconds) {
  for (size_t i = 0; i < sources_.size(); ++i) {
    const SourceCounters c = published_->Counters(i);
    const EventCounts now{c.applied, c.skipped, c.rejected};
    SourceProgress progress = ProgressOf(*published_, i);
    // An idle source says so once, not every interval.
    if (now == logged_counts_[i] && progress.state == logged_states_[i]) continue;
    LogInfo(IngestionLine(config_.sources[i].name, progress, logged_counts_[i], now,
                          interval_seconds));
    logged_counts_[i] = now;
    logged_states_[i] = progress.state;
  }
}

void Application::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  auto drain_start = std::chrono::steady_clock::now();
  {
    absl::MutexLock lock(&readiness_mu_);
    stop_readiness_ = true;
  }
  readiness_wake_.SignalAll();
  if (readiness_.joinable()) readiness_.join();
  // In parallel, so the drain time does not grow with the number of sources.
  std::vector<std::thread> stopping;
  for (auto& source : sources_) stopping.emplace_back([&source] { source->Stop(); });
  for (std::thread& t : stopping) t.join();
  if (queue_) queue_->Close();
  // The writer drains what the sources had read; if it cannot (a batch keeps failing), it is
  // told to stop after a grace period and the unapplied events are read again next start.
  const auto writer_deadline = std::chrono::steady_clock::now() + kWriterDrainTimeout;
  while (!writer_done_.load() && writer_.joinable() &&
         std::chrono::steady_clock::now() < writer_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  stop_writer_ = true;
  if (writer_.joinable()) writer_.join();
  // Reads waiting for a position the writer has not applied answer now, not at their deadline.
  if (published_) published_->SetWriterStopped();
  // And so do those waiting for a peer's: what this member answers now, it answers at once.
  if (peers_) peers_->Stop();
  // Watch streams never end by themselves, and one whose client stopped reading blocks in a
  // Write: cancel them all, or the server would wait its whole grace period for them.
  if (watch_hub_) watch_hub_->Shutdown();
  const int grace_ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(kServerDrainTimeout).count());
  std::thread fast_reads_drain;
  if (fast_reads_) fast_reads_drain = std::thread([this] { fast_reads_->Shutdown(grace_ms); });
  std::thread dynamodb_drain;
  if (dynamodb_) dynamodb_drain = std::thread([this] { dynamodb_->Shutdown(grace_ms); });
  if (server_) {
    server_->SetServing(false);
    server_->Shutdown(grace_ms);
  }
  if (fast_reads_drain.joinable()) fast_reads_drain.join();
  if (dynamodb_drain.joinable()) dynamodb_drain.join();
  const auto elapsed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::steady_clock::now() - drain_start)
                              .count();
  if (!started_) {
    // Nothing was read or served: what Start opened before its failure is closed, and the
    // failure itself is what the caller reports.
    LogInfo(absl::StrCat("cdcviewd did not start; closed what it had opened in ", elapsed_ms,
                         " ms"));
    return;
  }
  // The drain time is what terminationGracePeriodSeconds must exceed (deploy/k8s).
  LogInfo(absl::StrCat("cdcviewd stopped; drained in ", elapsed_ms, " ms"));
}

Application::~Application() { Shutdown(); }

}  // namespace cdcview
