#include "daemon/metrics/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/metrics/metrics_http_server.h"
#include "daemon/security/auth_probe.h"
#include "daemon/security/tls_context.h"
#include "daemon/security/token_store.h"

namespace cdcview {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

std::unique_ptr<MetricsRegistry> MetricsRegistry::Create() {
  std::unique_ptr<MetricsRegistry> m(new MetricsRegistry());
  m->registry_ = std::make_shared<prometheus::Registry>();
  return m;
}

absl::StatusOr<std::unique_ptr<MetricsRegistry>> MetricsRegistry::Start(const std::string& listen) {
  std::unique_ptr<MetricsRegistry> m = Create();
  if (absl::Status s = m->Serve(listen, ServerConfig{}, nullptr); !s.ok()) return s;
  return m;
}

absl::Status MetricsRegistry::Serve(const std::string& listen, const ServerConfig& server,
                                    std::shared_ptr<security::TokenStore> tokens) {
  if (listen.empty()) return absl::OkStatus();
  MetricsHttpServer::Options options;
  options.listen = listen;
  if (!server.tls_cert_file.empty() && server.tls_metrics) {
    // No ALPN: civetweb speaks HTTP/1.1, and a scraper offering h2 falls back to it.
    security::TlsServerContext::Options tls_options;
    tls_options.port = "metrics";
    auto tls = security::TlsServerContext::Create(server, std::move(tls_options), *registry_);
    if (!tls.ok()) {
      return absl::Status(tls.status().code(),
                          absl::StrCat("/metrics over TLS: ", tls.status().message()));
    }
    options.tls = std::move(*tls);
  }
  if (tokens != nullptr) {
    refusals_ = std::make_unique<security::AuthProbe>(*registry_, "metrics");
    options.tokens = std::move(tokens);
    options.refusals = refusals_.get();
  }
  auto http = MetricsHttpServer::Start(std::move(options), [this] { return Render(); });
  if (!http.ok()) return http.status();
  http_ = std::move(*http);
  port_ = http_->port();
  return absl::OkStatus();
}

MetricsRegistry::~MetricsRegistry() = default;

std::string MetricsRegistry::Render() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

void BatchStats::Clear() {
  for (Source& s : sources) s = Source{};
  for (View& v : views) v = View{};
  for (Aggregate& a : aggregates) a = Aggregate{};
  lag_seconds.clear();
  arrival_lag_seconds.clear();
  apply_delay_seconds.clear();
  events = 0;
  stages = Stages{};
}

ApplyProbe::ApplyProbe(MetricsRegistry& metrics, const Config& config)
    : registry_(metrics.registry()),
      // Fine between 1 and 100 ms, where a live source's lag sits and its p99 target (50 ms)
      // is: a quantile is interpolated within a bucket, so 25-50 ms as one bucket could read
      // a 30 ms p99 as 48. Coarse above, where hours of backlog only need their order.
      lag_bounds_{0.001, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025,
                  0.03,  0.04,  0.05,  0.075, 0.1,    0.25,   0.5,  1,     2.5,  5,
                  10,    30,    60,    300,   900,    3600,   21600, 86400, 604800} {
  auto& events = BuildCounter()
                     .Name("cdcview_events_total")
                     .Help("Events read from each source, by how they ended: applied, skipped "
                           "(already applied) or rejected (dead-lettered). Each event is counted once.")
                     .Register(registry_);
  auto& ttl = BuildCounter()
                  .Name("cdcview_ttl_deletes_total")
                  .Help("REMOVE events made by DynamoDB's TTL process, applied like any other.")
                  .Register(registry_);
  auto& lag = BuildGauge()
                  .Name("cdcview_source_lag_seconds")
                  .Help("Commit time minus creation time of the newest event applied from the "
                        "source, set at each batch.")
                  .Register(registry_);
  auto& state = BuildGauge()
                    .Name("cdcview_source_state")
                    .Help("1 for the source's current state (as in GetStatus), 0 for the others: "
                          "starting, running (has records to read), backfilling (a DynamoDB "
                          "snapshot scan), caught_up, finished, error.")
                    .Register(registry_);
  // Which table each source feeds and which table each view indexes, for PromQL joins (index
  // writes of a view per event of its own table).
  auto& source_info = BuildGauge()
                          .Name("cdcview_source_info")
                          .Help("Always 1: the table a source feeds, and its kind.")
                          .Register(registry_);
  auto& view_info = BuildGauge()
                        .Name("cdcview_view_info")
                        .Help("Always 1: the table a view indexes.")
                        .Register(registry_);
  for (const SourceConfig& s : config.sources) {
    source_names_.push_back(s.name);
    sources_.push_back(SourceMetrics{
        &events.Add({{"source", s.name}, {"result", "applied"}}),
        &events.Add({{"source", s.name}, {"result", "skipped"}}),
        &events.Add({{"source", s.name}, {"result", "rejected"}}),
        &ttl.Add({{"source", s.name}}),
        &lag.Add({{"source", s.name}}),
        {},
        {}});
    for (SourceState name : kSourceStates) {
      sources_.back().states.push_back(
          &state.Add({{"source", s.name}, {"state", std::string(SourceStateName(name))}}));
    }
    const std::string kind(SourceKindName(s.kind));
    source_info.Add({{"source", s.name}, {"table", s.table}, {"kind", kind}}).Set(1);
  }
  for (const TableSpec& t : config.tables) {
    for (const ViewSpec& v : t.views) view_info.Add({{"view", v.name}, {"table", t.name}}).Set(1);
  }
  auto& writes = BuildCounter()
                     .Name("cdcview_index_writes_total")
                     .Help("Index entries written (put) and removed (delete) per view.")
                     .Register(registry_);
  auto& items = BuildGauge().Name("cdcview_view_items").Help("Entries in each view.").Register(registry_);
  auto& bytes = BuildGauge()
                    .Name("cdcview_view_bytes")
                    .Help("LMDB pages used by each view, in bytes.")
                    .Register(registry_);
  auto& progress = BuildGauge()
                       .Name("cdcview_view_build_progress_ratio")
                       .Help("Progress of a view rebuild from the items store, 0 to 1 (1 when ready).")
                       .Register(registry_);
  auto& skipped = BuildCounter()
                      .Name("cdcview_view_skipped_total")
                      .Help("Applied events whose item has no entry in a view its rules select it "
                            "for, by reason: key_type_mismatch (a key attribute of another type "
                            "than the view declares).")
                      .Register(registry_);
  for (const TableSpec& t : config.tables) {
    for (const ViewSpec& v : t.views) {
      views_.push_back(ViewMetrics{&writes.Add({{"view", v.name}, {"op", "put"}}),
                                   &writes.Add({{"view", v.name}, {"op", "delete"}}),
                                   &items.Add({{"view", v.name}}), &bytes.Add({{"view", v.name}}),
                                   &progress.Add({{"view", v.name}}),
                                   &skipped.Add({{"view", v.name}, {"reason", "key_type_mismatch"}})});
      views_.back().build_progress->Set(1);
    }
  }
  auto& hot_share = BuildGauge()
                        .Name("cdcview_view_hot_key_share_ratio")
                        .Help("Share of the view's entry writes (puts and deletes) that went to its "
                              "most written partition key over the last one to two minutes.")
                        .Register(registry_);
  auto& hot_rate = BuildGauge()
                       .Name("cdcview_view_hot_key_writes_per_second")
                       .Help("Entry writes per second to the view's most written partition key "
                             "over the last one to two minutes.")
                       .Register(registry_);
  for (const TableSpec& t : config.tables) {
    for (const ViewSpec& v : t.views) {
      hot_key_share_.push_back(&hot_share.Add({{"view", v.name}}));
      hot_key_rate_.push_back(&hot_rate.Add({{"view", v.name}}));
    }
  }
  auto& aggregate_updates = BuildCounter()
                                .Name("cdcview_aggregate_updates_total")
                                .Help("Aggregate group states written: a member added or retracted "
                                      "(an update moving an item between groups counts two).")
                                .Register(registry_);
  auto& aggregate_groups = BuildGauge()
                               .Name("cdcview_aggregate_groups")
                               .Help("Groups of each aggregate (each shard of a write-sharded "
                                     "group counts as one).")
                               .Register(registry_);
  auto& aggregate_inconsistencies =
      BuildCounter()
          .Name("cdcview_aggregate_inconsistencies_total")
          .Help("Times an aggregate's stored state contradicted a change of its items (a bug or "
                "a store edited by hand); each empties the aggregate and rebuilds it.")
          .Register(registry_);
  for (const TableSpec& t : config.tables) {
    for (const AggregateSpec& a : t.aggregates) {
      aggregates_.push_back(AggregateMetrics{&aggregate_updates.Add({{"aggregate", a.name}}),
                                             &aggregate_groups.Add({{"aggregate", a.name}}),
                                             &aggregate_inconsistencies.Add({{"aggregate", a.name}})});
    }
  }
  replication_lag_ = &BuildHistogram()
                          .Name("cdcview_replication_lag_seconds")
                          .Help("Apply (commit) time minus the event's creation time "
                                "(ApproximateCreationDateTime or the message timestamp).")
                          .Register(registry_)
                          .Add({}, Histogram::BucketBoundaries(lag_bounds_));
  arrival_lag_ = &BuildHistogram()
                      .Name("cdcview_arrival_lag_seconds")
                      .Help("Receive time minus the event's creation time: the part of the "
                            "replication lag before cdcviewd (the stream, the broker, the fetch; "
                            "also events left in the stream while cdcviewd is behind).")
                      .Register(registry_)
                      .Add({}, Histogram::BucketBoundaries(lag_bounds_));
  apply_delay_ = &BuildHistogram()
                      .Name("cdcview_apply_delay_seconds")
                      .Help("Apply (commit) time minus receive time: cdcviewd's own part of the "
                            "replication lag (queue, batching, writing).")
                      .Register(registry_)
                      .Add({}, Histogram::BucketBoundaries(lag_bounds_));
  batch_size_ = &BuildHistogram()
                     .Name("cdcview_apply_batch_size")
                     .Help("Events per committed write transaction.")
                     .Register(registry_)
                     .Add({}, Histogram::BucketBoundaries{1, 2, 4, 8, 16, 32, 64, 128, 256, 512,
                                                          1024, 2048, 4096, 8192});
  auto& stages = BuildHistogram()
                     .Name("cdcview_apply_stage_seconds")
                     .Help("Time a committed batch spent in each stage of the writer: queue (its "
                           "earliest record's wait until the preparer took the batch, linger "
                           "included; whole milliseconds), prepare, handoff (prepared, waiting "
                           "for the writer), write (the transaction's puts and dead letters) and "
                           "commit.")
                     .Register(registry_);
  const Histogram::BucketBoundaries stage_bounds{0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.003,
                                                 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1,
                                                 0.25, 0.5, 1, 2.5};
  stage_queue_ = &stages.Add({{"stage", "queue"}}, stage_bounds);
  stage_prepare_ = &stages.Add({{"stage", "prepare"}}, stage_bounds);
  stage_handoff_ = &stages.Add({{"stage", "handoff"}}, stage_bounds);
  stage_write_ = &stages.Add({{"stage", "write"}}, stage_bounds);
  stage_commit_ = &stages.Add({{"stage", "commit"}}, stage_bounds);
  map_used_ = &BuildGauge()
                   .Name("cdcview_lmdb_map_used_bytes")
                   .Help("Bytes of the LMDB map in use (last page + 1, times the page size).")
                   .Register(registry_)
                   .Add({});
  map_size_ = &BuildGauge()
                   .Name("cdcview_lmdb_map_size_bytes")
                   .Help("Current LMDB map size; grows on MDB_MAP_FULL up to storage.max_map_size.")
                   .Register(registry_)
                   .Add({});
  // The ceiling, so "map near its ceiling" is one ratio (dashboards/alerts.yaml).
  BuildGauge()
      .Name("cdcview_lmdb_map_max_bytes")
      .Help("storage.max_map_size: the LMDB map never grows past this.")
      .Register(registry_)
      .Add({})
      .Set(static_cast<double>(config.storage.max_map_size));
  batch_failures_ = &BuildCounter()
                         .Name("cdcview_apply_batch_failures_total")
                         .Help("Batches that could not commit and were retried.")
                         .Register(registry_)
                         .Add({});
  store_errors_ = &BuildCounter()
                       .Name("cdcview_store_errors_total")
                       .Help("LMDB errors that say the store is damaged or unreadable, by kind: "
                             "corrupted, page_not_found, bad_txn, panic, invalid, io.")
                       .Register(registry_);
  unflushed_bytes_ = &BuildGauge()
                          .Name("cdcview_store_unflushed_bytes")
                          .Help("Bytes of applied batches that reads see and LMDB does not hold "
                                "yet (storage.flush_interval_ms; 0 when write-back is off).")
                          .Register(registry_)
                          .Add({});
  unflushed_batches_ = &BuildGauge()
                            .Name("cdcview_store_unflushed_batches")
                            .Help("Applied batches that reads see and LMDB does not hold yet.")
                            .Register(registry_)
                            .Add({});
  disk_full_ = &BuildGauge()
                    .Name("cdcview_store_disk_full")
                    .Help("1 while the LMDB map cannot grow because its file cannot have the disk "
                          "space (no space, a file size limit); the writer retries.")
                    .Register(registry_)
                    .Add({});
  change_log_entries_ = &BuildGauge()
                             .Name("cdcview_change_log_entries")
                             .Help("Entry changes kept in the change log Watch streams read and "
                                   "resume from (at most watch.retain_changes).")
                             .Register(registry_)
                             .Add({});
  auto& tombstones = BuildGauge()
                         .Name("cdcview_tombstones")
                         .Help("Tombstones of removed items held in the table's items database "
                               "(kept for their sequence numbers until the tombstone horizon).")
                         .Register(registry_);
  auto& compacted = BuildCounter()
                        .Name("cdcview_tombstones_compacted_total")
                        .Help("Tombstones dropped because they were older than the horizon.")
                        .Register(registry_);
  for (const TableSpec& t : config.tables) {
    tombstones_.push_back(&tombstones.Add({{"table", t.name}}));
    tombstones_compacted_.push_back(&compacted.Add({{"table", t.name}}));
  }
  tombstone_step_ = &BuildHistogram()
                         .Name("cdcview_tombstone_compaction_step_seconds")
                         .Help("Duration of a tombstone compaction step that dropped tombstones "
                               "(its write transaction, between two batches).")
                         .Register(registry_)
                         .Add({}, Histogram::BucketBoundaries{0.0001, 0.00025, 0.0005, 0.001, 0.0025,
                                                              0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                              0.5, 1});
}

ApplyProbe::~ApplyProbe() = default;

void ApplyProbe::SetTombstones(size_t table, uint64_t held) {
  if (table < tombstones_.size()) tombstones_[table]->Set(static_cast<double>(held));
}

void ApplyProbe::RecordTombstoneCompaction(size_t table, uint64_t compacted) {
  if (table < tombstones_compacted_.size() && compacted > 0) {
    tombstones_compacted_[table]->Increment(static_cast<double>(compacted));
  }
}

void ApplyProbe::ObserveTombstoneCompactionStep(double seconds) { tombstone_step_->Observe(seconds); }

void ApplyProbe::RecordBatch(const BatchStats& stats, int64_t now_ms) {
  for (size_t i = 0; i < stats.sources.size() && i < sources_.size(); ++i) {
    const BatchStats::Source& s = stats.sources[i];
    SourceMetrics& m = sources_[i];
    if (s.applied) m.applied->Increment(static_cast<double>(s.applied));
    if (s.skipped) m.skipped->Increment(static_cast<double>(s.skipped));
    if (s.rejected) m.rejected->Increment(static_cast<double>(s.rejected));
    if (s.ttl_deletes) m.ttl_deletes->Increment(static_cast<double>(s.ttl_deletes));
    for (const auto& [reason, n] : s.rejected_by_reason) {
      prometheus::Counter*& c = m.rejected_by_reason[reason];
      if (c == nullptr) {
        c = &BuildCounter()
                 .Name("cdcview_rejected_events_total")
                 .Help("Rejected (dead-lettered) events by source and reason.")
                 .Register(registry_)
                 .Add({{"source", source_names_[i]}, {"reason", reason}});
      }
      c->Increment(static_cast<double>(n));
    }
    if (s.newest_creation_ms > 0) m.lag->Set(static_cast<double>(now_ms - s.newest_creation_ms) / 1000.0);
  }
  for (size_t i = 0; i < stats.views.size() && i < views_.size(); ++i) {
    const BatchStats::View& v = stats.views[i];
    if (v.puts) views_[i].puts->Increment(static_cast<double>(v.puts));
    if (v.deletes) views_[i].deletes->Increment(static_cast<double>(v.deletes));
    if (v.skipped_key_type_mismatch) {
      views_[i].skipped_key_type_mismatch->Increment(static_cast<double>(v.skipped_key_type_mismatch));
    }
    if (stats.sizes) {
      views_[i].items->Set(static_cast<double>(v.items));
      views_[i].bytes->Set(static_cast<double>(v.bytes));
    }
  }
  for (size_t i = 0; i < stats.aggregates.size() && i < aggregates_.size(); ++i) {
    const BatchStats::Aggregate& a = stats.aggregates[i];
    if (a.updates) aggregates_[i].updates->Increment(static_cast<double>(a.updates));
    if (a.inconsistencies) {
      aggregates_[i].inconsistencies->Increment(static_cast<double>(a.inconsistencies));
    }
    if (stats.sizes) aggregates_[i].groups->Set(static_cast<double>(a.groups));
  }
  // One ObserveMultiple per batch: a histogram takes a lock per call.
  auto observe = [&](prometheus::Histogram* histogram, const std::vector<double>& values) {
    if (values.empty()) return;
    std::vector<double> buckets(lag_bounds_.size() + 1, 0.0);
    double sum = 0;
    for (double lag : values) {
      size_t b = std::lower_bound(lag_bounds_.begin(), lag_bounds_.end(), lag) - lag_bounds_.begin();
      buckets[b] += 1;
      sum += lag;
    }
    histogram->ObserveMultiple(buckets, sum);
  };
  observe(replication_lag_, stats.lag_seconds);
  observe(arrival_lag_, stats.arrival_lag_seconds);
  observe(apply_delay_, stats.apply_delay_seconds);
  if (stats.events) batch_size_->Observe(static_cast<double>(stats.events));
  for (auto [histogram, seconds] : {std::pair{stage_queue_, stats.stages.queue},
                                    std::pair{stage_prepare_, stats.stages.prepare},
                                    std::pair{stage_handoff_, stats.stages.handoff},
                                    std::pair{stage_write_, stats.stages.write},
                                    std::pair{stage_commit_, stats.stages.commit}}) {
    if (seconds >= 0) histogram->Observe(seconds);
  }
  map_used_->Set(static_cast<double>(stats.map_used_bytes));
  map_size_->Set(static_cast<double>(stats.map_size_bytes));
  change_log_entries_->Set(static_cast<double>(stats.change_log_entries));
}

void ApplyProbe::RecordBatchFailure() { batch_failures_->Increment(); }

void ApplyProbe::SetHotKey(size_t view, double share, double writes_per_second) {
  if (view >= hot_key_share_.size()) return;
  hot_key_share_[view]->Set(share);
  hot_key_rate_[view]->Set(writes_per_second);
}

void ApplyProbe::SetStoreErrors(const std::vector<std::pair<std::string, uint64_t>>& counts) {
  for (const auto& [kind, n] : counts) {
    prometheus::Counter*& c = store_errors_by_kind_[kind];
    if (c == nullptr) c = &store_errors_->Add({{"kind", kind}});
    if (static_cast<double>(n) > c->Value()) c->Increment(static_cast<double>(n) - c->Value());
  }
}

void ApplyProbe::SetUnflushed(size_t batches, size_t bytes) {
  unflushed_batches_->Set(static_cast<double>(batches));
  unflushed_bytes_->Set(static_cast<double>(bytes));
}

void ApplyProbe::SetDiskFull(bool full) { disk_full_->Set(full ? 1 : 0); }

void ApplyProbe::SetViewSize(size_t view, uint64_t items, uint64_t bytes) {
  if (view >= views_.size()) return;
  views_[view].items->Set(static_cast<double>(items));
  views_[view].bytes->Set(static_cast<double>(bytes));
}

void ApplyProbe::SetAggregateGroups(size_t aggregate, uint64_t groups) {
  if (aggregate < aggregates_.size()) aggregates_[aggregate].groups->Set(static_cast<double>(groups));
}

void ApplyProbe::SetSourceState(size_t source, SourceState state) {
  if (source >= sources_.size()) return;
  for (size_t i = 0; i < std::size(kSourceStates); ++i) {
    sources_[source].states[i]->Set(kSourceStates[i] == state ? 1 : 0);
  }
}

void ApplyProbe::SetViewBuildProgress(size_t view, double fraction) {
  if (view < views_.size()) views_[view].build_progress->Set(fraction);
}

QueryProbe::QueryProbe(MetricsRegistry& metrics, const std::vector<std::string>& methods) {
  auto& duration = BuildHistogram()
                       .Name("cdcview_query_duration_seconds")
                       .Help("Time to answer a gRPC request, per method.")
                       .Register(metrics.registry());
  auto& errors = BuildCounter()
                     .Name("cdcview_query_errors_total")
                     .Help("gRPC requests answered with an error, per method.")
                     .Register(metrics.registry());
  for (const std::string& m : methods) {
    duration_[m] = &duration.Add({{"method", m}},
                                 Histogram::BucketBoundaries{0.0001, 0.00025, 0.0005, 0.001, 0.0025,
                                                             0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                             0.5, 1, 2.5, 5, 10});
    errors_[m] = &errors.Add({{"method", m}});
  }
}

void QueryProbe::Observe(const std::string& method, double seconds, bool ok) {
  auto it = duration_.find(method);
  if (it == duration_.end()) return;
  it->second->Observe(seconds);
  if (!ok) errors_[method]->Increment();
}

}  // namespace cdcview
