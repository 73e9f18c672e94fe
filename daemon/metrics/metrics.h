// Metrics: the daemon's Prometheus metrics, one probe per component.
//
// Only this folder includes prometheus-cpp. Probes are created once at start-up (all label
// sets known then: sources, views, methods) and then only updated, so the hot path does no
// lookups: the writer records one BatchStats per committed batch, never per event.
// All probe methods are thread-safe (prometheus-cpp metrics are atomic or locked).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/config/config.h"
#include "daemon/state/source_health.h"

namespace prometheus {
class Registry;
class Counter;
class Gauge;
class Histogram;
template <typename T>
class Family;
}  // namespace prometheus

namespace cdcview {
namespace security {
class AuthProbe;
class TokenStore;
}  // namespace security
class MetricsHttpServer;

// Owns the registry and, once served, the HTTP endpoint serving /metrics (MetricsHttpServer).
class MetricsRegistry {
 public:
  // The registry without an endpoint (Serve adds one).
  static std::unique_ptr<MetricsRegistry> Create();
  // Create and Serve(listen) in plaintext without tokens. `listen` is host:port
  // ("127.0.0.1:0" picks a free port) or "" for no HTTP endpoint.
  static absl::StatusOr<std::unique_ptr<MetricsRegistry>> Start(const std::string& listen);
  ~MetricsRegistry();

  // Serves /metrics on `listen` ("" for none): over TLS with server.tls_cert_file,
  // tls_key_file and tls_client_ca_file (reloaded when they change) when tls_cert_file is set
  // and server.tls_metrics; with `tokens`, only to a bearer token with metrics: true (see
  // MetricsHttpServer). UNAVAILABLE naming the address when it cannot listen; TlsServerContext's
  // errors for unusable certificate files. Call once.
  absl::Status Serve(const std::string& listen, const ServerConfig& server,
                     std::shared_ptr<security::TokenStore> tokens);

  int port() const { return port_; }  // 0 without an endpoint
  prometheus::Registry& registry() { return *registry_; }
  // The text exposition of every metric (what /metrics serves).
  std::string Render() const;

 private:
  MetricsRegistry() = default;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<security::AuthProbe> refusals_;  // with tokens
  std::unique_ptr<MetricsHttpServer> http_;  // last: stopped before what its handler uses
  int port_ = 0;
};

// What one committed batch did; filled by the writer, recorded by ApplyProbe.
struct BatchStats {
  struct Source {
    uint64_t applied = 0;
    uint64_t skipped = 0;  // already applied (sequence number not newer than the stored one)
    uint64_t rejected = 0;
    uint64_t ttl_deletes = 0;
    std::map<std::string, uint64_t> rejected_by_reason;
    int64_t newest_creation_ms = 0;  // of the applied events, 0 if none had a time
  };
  struct View {
    uint64_t puts = 0;
    uint64_t deletes = 0;
    uint64_t items = 0;  // entries after the batch
    uint64_t bytes = 0;
    // Applied events whose new image has no entry here because a key attribute has another
    // type than the view declares (ViewSkip): cdcview_view_skipped_total{reason="key_type_mismatch"}.
    uint64_t skipped_key_type_mismatch = 0;
  };
  struct Aggregate {
    uint64_t updates = 0;  // group states written (a contribution added or retracted)
    uint64_t groups = 0;   // physical groups after the batch
    uint64_t inconsistencies = 0;  // state found contradicting the items: rebuilt (see Applier)
  };
  explicit BatchStats(size_t sources = 0, size_t views = 0, size_t aggregates = 0)
      : sources(sources), views(views), aggregates(aggregates) {}
  void Clear();

  std::vector<Source> sources;       // by source index
  std::vector<View> views;           // by global view index (tables in order, views in order)
  std::vector<Aggregate> aggregates;  // by global aggregate index (tables in order, then in order)
  std::vector<double> lag_seconds;   // commit time - creation time, per applied event with a time
  // The same lag in two parts: received - created (events with both times) and commit time -
  // received (events with a receive time).
  std::vector<double> arrival_lag_seconds;
  std::vector<double> apply_delay_seconds;
  uint64_t events = 0;               // records in the batch
  uint64_t map_used_bytes = 0;
  uint64_t map_size_bytes = 0;
  uint64_t change_log_entries = 0;   // after the batch (Watch's change log)
  // Whether views[].items/bytes and aggregates[].groups were measured (with write-back they
  // are not: LMDB trails the batch, and the readiness ticker sets those gauges).
  bool sizes = true;
  // Where the batch's time went, in seconds (cdcview_apply_stage_seconds{stage}); a negative
  // value is a stage the batch did not pass through (ApplyBatch has no queue and no hand-off).
  // queue: from the receipt of its earliest received record until the preparer took it
  // (queueing behind earlier batches, and the linger), in whole milliseconds (receive times
  // are Unix ms); prepare: the first stage's work, its retries included; handoff: prepared
  // until the writer took it (the writer still busy with the batch before); write: the write
  // transaction's puts and the dead letters, a grown map's retry included; commit:
  // mdb_txn_commit (or the publication of a layer, with write-back). A commit that fails and
  // is retried later counts only its last attempt.
  struct Stages {
    double queue = -1, prepare = -1, handoff = -1, write = -1, commit = -1;
  } stages;
};

class ApplyProbe {
 public:
  ApplyProbe(MetricsRegistry& metrics, const Config& config);
  ~ApplyProbe();

  // `now_ms` is the commit time, for cdcview_source_lag_seconds.
  void RecordBatch(const BatchStats& stats, int64_t now_ms);
  void RecordBatchFailure();  // a batch that could not commit and will be retried
  void SetViewBuildProgress(size_t view, double fraction);
  // cdcview_view_hot_key_share_ratio and cdcview_view_hot_key_writes_per_second of view
  // `view` (global index).
  void SetHotKey(size_t view, double share, double writes_per_second);
  // cdcview_store_unflushed_bytes and cdcview_store_unflushed_batches: applied batches that
  // reads see and LMDB does not hold yet (write-back; 0 when off). The readiness ticker sets
  // them once a second.
  void SetUnflushed(size_t batches, size_t bytes);
  // cdcview_store_errors_total{kind}: store errors (damaged pages, I/O errors; see
  // daemon/store/lmdb_status.h) counted since the start, `counts` by kind name. The readiness
  // ticker sets it once a second, every kind each time, so every series exists from the start.
  void SetStoreErrors(const std::vector<std::pair<std::string, uint64_t>>& counts);
  // cdcview_store_disk_full: 1 while the store cannot grow for want of disk (Store::disk_full).
  // Set by the readiness ticker once a second.
  void SetDiskFull(bool full);
  // cdcview_view_items and cdcview_view_bytes of view `view`, cdcview_aggregate_groups of
  // aggregate `aggregate` (global indexes), outside a batch.
  void SetViewSize(size_t view, uint64_t items, uint64_t bytes);
  void SetAggregateGroups(size_t aggregate, uint64_t groups);
  // cdcview_source_state{source, state}: 1 for `state` (SourceHealth::state, or kError when
  // the writer fails the source), 0 for the other kSourceStates (label: SourceStateName). Set
  // by the readiness ticker once a second.
  void SetSourceState(size_t source, SourceState state);
  // Tombstone compaction (TombstoneCompactor), by table index: cdcview_tombstones (held, as of
  // the compaction's last check), cdcview_tombstones_compacted_total, and one step's duration,
  // cdcview_tombstone_compaction_step_seconds.
  void SetTombstones(size_t table, uint64_t held);
  void RecordTombstoneCompaction(size_t table, uint64_t compacted);
  void ObserveTombstoneCompactionStep(double seconds);
  static constexpr SourceState kSourceStates[] = {
      SourceState::kStarting, SourceState::kRunning,  SourceState::kBackfilling,
      SourceState::kCaughtUp, SourceState::kFinished, SourceState::kError};

 private:
  struct SourceMetrics {
    prometheus::Counter* applied;
    prometheus::Counter* skipped;
    prometheus::Counter* rejected;
    prometheus::Counter* ttl_deletes;
    prometheus::Gauge* lag;
    std::map<std::string, prometheus::Counter*> rejected_by_reason;  // created on first use
    std::vector<prometheus::Gauge*> states;  // by kSourceStates
  };
  struct AggregateMetrics {
    prometheus::Counter* updates;
    prometheus::Gauge* groups;
    prometheus::Counter* inconsistencies;
  };
  struct ViewMetrics {
    prometheus::Counter* puts;
    prometheus::Counter* deletes;
    prometheus::Gauge* items;
    prometheus::Gauge* bytes;
    prometheus::Gauge* build_progress;
    prometheus::Counter* skipped_key_type_mismatch;
  };
  prometheus::Registry& registry_;
  std::vector<std::string> source_names_;
  std::vector<SourceMetrics> sources_;
  std::vector<ViewMetrics> views_;
  std::vector<AggregateMetrics> aggregates_;
  prometheus::Histogram* replication_lag_;
  prometheus::Histogram* arrival_lag_;
  prometheus::Histogram* apply_delay_;
  prometheus::Histogram* batch_size_;
  // cdcview_apply_stage_seconds by stage: queue, prepare, handoff, write, commit.
  prometheus::Histogram* stage_queue_;
  prometheus::Histogram* stage_prepare_;
  prometheus::Histogram* stage_handoff_;
  prometheus::Histogram* stage_write_;
  prometheus::Histogram* stage_commit_;
  prometheus::Gauge* map_used_;
  prometheus::Gauge* map_size_;
  prometheus::Counter* batch_failures_;
  prometheus::Family<prometheus::Counter>* store_errors_;
  std::map<std::string, prometheus::Counter*> store_errors_by_kind_;  // created on first use
  prometheus::Gauge* change_log_entries_;
  prometheus::Gauge* unflushed_bytes_;
  prometheus::Gauge* unflushed_batches_;
  prometheus::Gauge* disk_full_;
  std::vector<double> lag_bounds_;
  std::vector<prometheus::Gauge*> hot_key_share_;  // by global view index
  std::vector<prometheus::Gauge*> hot_key_rate_;
  std::vector<prometheus::Gauge*> tombstones_;  // by table index
  std::vector<prometheus::Counter*> tombstones_compacted_;
  prometheus::Histogram* tombstone_step_;
};

class QueryProbe {
 public:
  // The methods whose latency is tracked: "Query", "Scan", "GetItem", ...
  QueryProbe(MetricsRegistry& metrics, const std::vector<std::string>& methods);
  void Observe(const std::string& method, double seconds, bool ok);

 private:
  std::map<std::string, prometheus::Histogram*> duration_;
  std::map<std::string, prometheus::Counter*> errors_;
};

}  // namespace cdcview
