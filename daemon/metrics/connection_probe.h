// ConnectionProbe: the metrics of one listening port's client connections, in families both
// ports share (label port="fast_reads" for the fast read port, "grpc" for the main one).
//
//   cdcview_connections_open{port}                    connections open now
//   cdcview_connections_opened_total{port}            connections accepted
//   cdcview_connections_refused_total{port,reason}    connections closed at accept ("cap")
//   cdcview_connections_closed_total{port,reason}     accepted connections closed, by why:
//       "client" (the client closed it), "error" (a protocol or socket error), "idle",
//       "request_timeout" (a preface, headers or body not finished in time), "shutdown"
//   cdcview_requests_refused_total{port,reason}       calls refused before they ran, by the
//       limit they hit ("body_limit", "waits_per_connection")
//
// Counters with a reason are created on first use. Thread-safe.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "daemon/metrics/metrics.h"

namespace prometheus {
template <typename T>
class Family;
}  // namespace prometheus

namespace cdcview {

class ConnectionProbe {
 public:
  // `port`: the port label. `metrics` must outlive the probe.
  ConnectionProbe(MetricsRegistry& metrics, std::string port);

  void Opened();
  void Closed(std::string_view reason);
  void Refused(std::string_view reason);
  void RequestRefused(std::string_view reason);

 private:
  prometheus::Counter* Reason(prometheus::Family<prometheus::Counter>& family,
                              std::map<std::string, prometheus::Counter*, std::less<>>& counters,
                              std::string_view reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string port_;
  prometheus::Gauge* open_;
  prometheus::Counter* opened_;
  prometheus::Family<prometheus::Counter>* closed_family_;
  prometheus::Family<prometheus::Counter>* refused_family_;
  prometheus::Family<prometheus::Counter>* requests_refused_family_;
  absl::Mutex mu_;
  std::map<std::string, prometheus::Counter*, std::less<>> closed_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Counter*, std::less<>> refused_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Counter*, std::less<>> requests_refused_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cdcview
