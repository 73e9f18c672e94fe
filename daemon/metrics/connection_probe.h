// ConnectionProbe: the metrics of one listening port's client connections, in families both
// ports share (label port="grpc" for the main port, "fast_reads" for the fast read port);
// FdProbe: the process's file descriptors and what of them connections may use.
//
//   cdcview_connections_open{port}                 connections held now
//   cdcview_connections_max{port}                  the cap in force (config, clamped to the fd budget)
//   cdcview_connections_opened_total{port}         connections accepted and served
//   cdcview_connections_refused_total{port,reason} accepted and closed at once: max_connections
//                                                  (at the cap), fd_limit (no descriptor left)
//   cdcview_connections_closed_total{port,reason}  served connections that ended, by why (the
//       fast port: client, error, idle, request_timeout, shutdown; the main port: ended, as
//       gRPC does not say why it closed one)
//   cdcview_requests_refused_total{port,reason}    calls refused before they ran, by the limit
//                                                  they hit (body_limit, waits_per_connection)
//   cdcview_fd_limit                               the soft RLIMIT_NOFILE in force
//   cdcview_fds_open                               descriptors open now
//   cdcview_fd_connection_budget                   the limit less the descriptors the store and
//                                                  sources hold and server.fd_reserve
//
// Thread-safe: prometheus-cpp's metrics are atomic and its families lock when adding a series.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/metrics/metrics.h"

namespace prometheus {
template <typename T>
class Family;
}  // namespace prometheus

namespace cdcview {

class ConnectionProbe {
 public:
  // `port`: the port label. The series of both refusal reasons and of `closed_reasons` start
  // at 0; other reasons are added when first counted. `metrics` must outlive the probe.
  ConnectionProbe(MetricsRegistry& metrics, std::string port,
                  const std::vector<std::string>& closed_reasons = {});

  // A connection accepted (opened and open +1) and one ended (open -count).
  void Opened();
  void Closed(std::string_view reason, uint64_t count = 1);
  void Refused(std::string_view reason);
  void RequestRefused(std::string_view reason);
  // For a port that counts its open connections by looking (GrpcListener): sets the gauge.
  void SetOpen(uint64_t open);
  void SetMax(uint64_t max);

 private:
  const std::string port_;
  prometheus::Gauge* open_;
  prometheus::Gauge* max_;
  prometheus::Counter* opened_;
  prometheus::Family<prometheus::Counter>* refused_;
  prometheus::Family<prometheus::Counter>* closed_;
  prometheus::Family<prometheus::Counter>* requests_refused_;
};

class FdProbe {
 public:
  explicit FdProbe(MetricsRegistry& metrics);

  void SetLimit(uint64_t limit);
  void SetOpen(uint64_t open);
  void SetConnectionBudget(uint64_t budget);

 private:
  prometheus::Gauge* limit_;
  prometheus::Gauge* open_;
  prometheus::Gauge* budget_;
};

}  // namespace cdcview
