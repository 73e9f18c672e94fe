// Application: wires the daemon together and walks its phases.
//
//   Start:    raise the soft open-files limit -> open the store -> metrics -> catalog,
//             published state (sources register their health) -> applier.Recover (positions,
//             view states) -> applier.ApplyAssignment (a cluster member drops the partitions
//             it no longer owns, before anything serves or reads)
//             -> gRPC server (health SERVING once the view states are loaded), the fast
//             read port if server.fast_reads is set, the DynamoDB endpoint if server.dynamodb
//             is (on the same ViewQueries as both gRPC ports)
//             -> sources start at the stored positions -> the connection caps are clamped to
//             the descriptors left (fd_budget.h) -> writer thread (rebuilds changed views,
//             then applies batches)
//   Shutdown: stop the sources (in parallel) -> close the queue -> the writer drains what was read and
//             commits -> cancel Watch streams -> stop the gRPC server, the fast read port and
//             the DynamoDB endpoint (grace period, in parallel) -> close the store
//
// Integration tests and benchmarks drive this same class. Start/Shutdown are called from one
// thread; the accessors are thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/app/fd_budget.h"
#include "daemon/app/ingestion_log.h"
#include "daemon/apply/applier.h"
#include "daemon/config/config.h"
#include "daemon/dynamodb/api.h"
#include "daemon/dynamodb/http_server.h"
#include "daemon/metrics/dynamodb_api_probe.h"
#include "daemon/metrics/connection_probe.h"
#include "daemon/metrics/metrics.h"
#include "daemon/metrics/watch_probe.h"
#include "daemon/security/token_store.h"
#include "daemon/server/admin_service.h"
#include "daemon/server/cluster_peers.h"
#include "daemon/server/cluster_queries.h"
#include "daemon/server/cluster_watch.h"
#include "daemon/server/h2_read_server.h"
#include "daemon/server/view_reader.h"
#include "daemon/server/view_service.h"
#include "daemon/server/watch.h"
#include "daemon/sources/change_source.h"
#include "daemon/sources/record_queue.h"
#include "daemon/state/catalog.h"
#include "daemon/state/published_state.h"
#include "daemon/store/store.h"

namespace cdcview {

class Application {
 public:
  // Shutdown's bounds. The sources stop in parallel, each within kSourceStopTimeout (plus a
  // poll interval); the writer then drains for at most kWriterDrainTimeout; the gRPC server
  // then waits kServerDrainTimeout for calls in flight. kMaxDrainTime is their sum plus 1 s
  // of slack: what terminationGracePeriodSeconds must exceed (cdcviewd --help prints it).
  static constexpr std::chrono::seconds kWriterDrainTimeout{10};
  static constexpr std::chrono::seconds kServerDrainTimeout{5};
  static constexpr std::chrono::seconds kMaxDrainTime =
      kSourceStopTimeout + kWriterDrainTimeout + kServerDrainTimeout + std::chrono::seconds(1);

  // Errors say which phase failed and what to do.
  static absl::StatusOr<std::unique_ptr<Application>> Start(Config config);
  ~Application();

  // Stops everything in order (see the header comment). Idempotent.
  void Shutdown();

  int grpc_port() const { return server_ ? server_->port() : 0; }
  int fast_reads_port() const { return fast_reads_ ? fast_reads_->port() : 0; }  // 0: off
  int dynamodb_port() const { return dynamodb_ ? dynamodb_->port() : 0; }  // 0: off
  int metrics_port() const { return metrics_ ? metrics_->port() : 0; }
  const Config& config() const { return config_; }
  Applier& applier() { return *applier_; }
  const PublishedState& published() const { return *published_; }
  MetricsRegistry& metrics() { return *metrics_; }

 private:
  Application() = default;
  absl::Status Init();
  void WriterMain();
  // Once a second: each view's health service SERVING iff the view is caught up (readiness.h);
  // the throttled warnings' summaries; every apply.log_counts_seconds, the event counts.
  void ReadinessMain();
  void UpdateViewHealth();
  // One info line per source whose counts or state changed since the last (ingestion_log.h).
  void LogEventCounts(double interval_seconds);
  // The cluster's read path (member_reader_, peers_, cluster_queries_). FAILED_PRECONDITION
  // when peers cannot be called: server.tokens_file without CDCVIEW_CLUSTER_TOKEN, or TLS
  // files that do not read.
  absl::Status StartCluster();
  // Once the sources hold their descriptors: what connections may use, and the caps within it.
  absl::Status ClampConnectionCaps();
  // server.dynamodb: the DynamoDB endpoint on `queries`.
  absl::Status StartDynamoDb(const ViewQueries& queries);

  Config config_;
  FdLimit fd_limit_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<MetricsRegistry> metrics_;
  std::unique_ptr<ApplyProbe> apply_probe_;
  std::unique_ptr<AssignmentProbe> assignment_probe_;
  std::unique_ptr<QueryProbe> query_probe_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<PublishedState> published_;  // outlives the writer and the readers
  std::vector<std::unique_ptr<ChangeSource>> sources_;
  std::unique_ptr<RecordQueue> queue_;
  std::unique_ptr<Applier> applier_;
  std::unique_ptr<ViewReader> reader_;
  // With `cluster:` (StartCluster): this member's own reads (with what the merge needs), the
  // channels to the other members and the reads that ask them all. They outlive the ports.
  std::unique_ptr<ViewReader> member_reader_;
  std::unique_ptr<ClusterPeers> peers_;
  std::unique_ptr<ClusterQueries> cluster_queries_;
  std::unique_ptr<WatchProbe> watch_probe_;
  std::unique_ptr<WatchHub> watch_hub_;  // outlives server_, whose Watch handlers use it
  std::unique_ptr<ClusterWatch> cluster_watch_;  // with `cluster:`; outlives server_ too
  std::unique_ptr<AdminService> admin_;   // outlives server_, which serves it
  std::unique_ptr<FdProbe> fd_probe_;
  std::unique_ptr<ConnectionProbe> grpc_connections_;  // outlives server_
  std::shared_ptr<security::TokenStore> tokens_;  // server.tokens_file; null when unset
  std::unique_ptr<ViewServer> server_;
  std::unique_ptr<ConnectionProbe> fast_reads_connections_;  // outlives fast_reads_
  std::unique_ptr<security::AuthProbe> fast_reads_auth_;  // outlives fast_reads_
  std::unique_ptr<H2ReadServer> fast_reads_;  // server.fast_reads; null when off
  // server.dynamodb; null when off. The API, the probes outlive the server.
  std::unique_ptr<dynamodb::DynamoDbApi> dynamodb_api_;
  std::unique_ptr<ConnectionProbe> dynamodb_connections_;
  std::unique_ptr<security::AuthProbe> dynamodb_auth_;
  std::unique_ptr<DynamoDbApiProbe> dynamodb_probe_;
  std::unique_ptr<dynamodb::HttpServer> dynamodb_;
  std::thread writer_;
  std::atomic<bool> stop_writer_{false};
  std::atomic<bool> writer_done_{false};
  std::thread readiness_;
  absl::Mutex readiness_mu_;
  absl::CondVar readiness_wake_;
  bool stop_readiness_ ABSL_GUARDED_BY(readiness_mu_) = false;
  // What the last count lines said, by source (readiness thread only).
  std::vector<EventCounts> logged_counts_;
  std::vector<std::optional<SourceState>> logged_states_;
  bool shut_down_ = false;
  // Init got through every phase: only then did it read or serve anything to drain.
  bool started_ = false;
};

}  // namespace cdcview
