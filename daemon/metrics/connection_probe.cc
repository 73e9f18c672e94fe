#include "daemon/metrics/connection_probe.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <utility>

namespace cdcview {

ConnectionProbe::ConnectionProbe(MetricsRegistry& metrics, std::string port)
    : port_(std::move(port)) {
  // Both ports register the same families; the registry merges a family registered twice.
  prometheus::Registry& registry = metrics.registry();
  open_ = &prometheus::BuildGauge()
               .Name("cdcview_connections_open")
               .Help("Client connections open on each port.")
               .Register(registry)
               .Add({{"port", port_}});
  opened_ = &prometheus::BuildCounter()
                 .Name("cdcview_connections_opened_total")
                 .Help("Client connections accepted on each port.")
                 .Register(registry)
                 .Add({{"port", port_}});
  refused_family_ = &prometheus::BuildCounter()
                         .Name("cdcview_connections_refused_total")
                         .Help("Client connections closed as soon as accepted, by reason "
                               "(cap: the port's connection limit was reached).")
                         .Register(registry);
  closed_family_ = &prometheus::BuildCounter()
                        .Name("cdcview_connections_closed_total")
                        .Help("Accepted client connections closed, by reason: client, error, "
                              "idle, request_timeout, shutdown.")
                        .Register(registry);
  requests_refused_family_ = &prometheus::BuildCounter()
                                  .Name("cdcview_requests_refused_total")
                                  .Help("Calls refused before they ran, by the limit they hit: "
                                        "body_limit, waits_per_connection.")
                                  .Register(registry);
}

prometheus::Counter* ConnectionProbe::Reason(
    prometheus::Family<prometheus::Counter>& family,
    std::map<std::string, prometheus::Counter*, std::less<>>& counters, std::string_view reason) {
  auto it = counters.find(reason);
  if (it == counters.end()) {
    it = counters
             .emplace(std::string(reason),
                      &family.Add({{"port", port_}, {"reason", std::string(reason)}}))
             .first;
  }
  return it->second;
}

void ConnectionProbe::Opened() {
  opened_->Increment();
  open_->Increment();
}

void ConnectionProbe::Closed(std::string_view reason) {
  open_->Decrement();
  absl::MutexLock lock(&mu_);
  Reason(*closed_family_, closed_, reason)->Increment();
}

void ConnectionProbe::Refused(std::string_view reason) {
  absl::MutexLock lock(&mu_);
  Reason(*refused_family_, refused_, reason)->Increment();
}

void ConnectionProbe::RequestRefused(std::string_view reason) {
  absl::MutexLock lock(&mu_);
  Reason(*requests_refused_family_, requests_refused_, reason)->Increment();
}

}  // namespace cdcview
