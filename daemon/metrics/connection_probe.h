// ConnectionProbe: the metrics of one listening port's connections; FdProbe: the process's
// file descriptors and what of them connections may use.
//
//   cdcview_connections_open{port}                 connections held now
//   cdcview_connections_max{port}                  the cap in force (config, clamped to the fd budget)
//   cdcview_connections_opened_total{port}         connections accepted and served
//   cdcview_connections_refused_total{port,reason} accepted and closed at once: `max_connections`
//                                                  (at the cap), `fd_limit` (no descriptor left)
//   cdcview_connections_closed_total{port,reason}  served connections that ended
//   cdcview_fd_limit                               the soft RLIMIT_NOFILE in force
//   cdcview_fds_open                               descriptors open now
//   cdcview_fd_connection_budget                   the limit less the descriptors the store and
//                                                  sources hold and server.fd_reserve
//
// Thread-safe: prometheus-cpp metrics are atomic. `port` is the label value ("grpc").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/metrics/metrics.h"

namespace prometheus {
template <typename T>
class Family;
}  // namespace prometheus

namespace cdcview {

class ConnectionProbe {
 public:
  // Every series starts at 0: both refusal reasons, and the closing reasons this port uses.
  ConnectionProbe(MetricsRegistry& metrics, const std::string& port,
                  const std::vector<std::string>& closed_reasons);

  void Opened();
  void Refused(const std::string& reason);
  void Closed(const std::string& reason, uint64_t count = 1);
  void SetOpen(uint64_t open);
  void SetMax(uint64_t max);

 private:
  prometheus::Family<prometheus::Counter>* refused_;
  prometheus::Family<prometheus::Counter>* closed_;
  prometheus::Gauge* open_;
  prometheus::Gauge* max_;
  prometheus::Counter* opened_;
  std::string port_;
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
