#include "daemon/metrics/connection_probe.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <utility>

namespace cdcview {

ConnectionProbe::ConnectionProbe(MetricsRegistry& metrics, std::string port,
                                 const std::vector<std::string>& closed_reasons)
    : port_(std::move(port)) {
  // Both ports register the same families with the same help: the registry then hands the
  // second the family the first made.
  prometheus::Registry& registry = metrics.registry();
  open_ = &prometheus::BuildGauge()
               .Name("cdcview_connections_open")
               .Help("Client connections held now, per listening port.")
               .Register(registry)
               .Add({{"port", port_}});
  max_ = &prometheus::BuildGauge()
              .Name("cdcview_connections_max")
              .Help("The connection cap in force per port: its config field, clamped to what "
                    "the open-files limit leaves (cdcview_fd_connection_budget).")
              .Register(registry)
              .Add({{"port", port_}});
  opened_ = &prometheus::BuildCounter()
                 .Name("cdcview_connections_opened_total")
                 .Help("Client connections accepted and served, per port.")
                 .Register(registry)
                 .Add({{"port", port_}});
  refused_ = &prometheus::BuildCounter()
                  .Name("cdcview_connections_refused_total")
                  .Help("Client connections accepted and closed at once: max_connections (the "
                        "port's cap reached), fd_limit (no file descriptor left).")
                  .Register(registry);
  closed_ = &prometheus::BuildCounter()
                 .Name("cdcview_connections_closed_total")
                 .Help("Served client connections that ended, per port and reason.")
                 .Register(registry);
  requests_refused_ = &prometheus::BuildCounter()
                           .Name("cdcview_requests_refused_total")
                           .Help("Calls refused before they ran, by the limit they hit: "
                                 "body_limit, waits_per_connection.")
                           .Register(registry);
  for (const char* reason : {"max_connections", "fd_limit"}) {
    refused_->Add({{"port", port_}, {"reason", reason}});
  }
  for (const std::string& reason : closed_reasons) {
    closed_->Add({{"port", port_}, {"reason", reason}});
  }
}

void ConnectionProbe::Opened() {
  opened_->Increment();
  open_->Increment();
}

void ConnectionProbe::Closed(std::string_view reason, uint64_t count) {
  open_->Decrement(static_cast<double>(count));
  closed_->Add({{"port", port_}, {"reason", std::string(reason)}})
      .Increment(static_cast<double>(count));
}

void ConnectionProbe::Refused(std::string_view reason) {
  refused_->Add({{"port", port_}, {"reason", std::string(reason)}}).Increment();
}

void ConnectionProbe::RequestRefused(std::string_view reason) {
  requests_refused_->Add({{"port", port_}, {"reason", std::string(reason)}}).Increment();
}

void ConnectionProbe::SetOpen(uint64_t open) { open_->Set(static_cast<double>(open)); }
void ConnectionProbe::SetMax(uint64_t max) { max_->Set(static_cast<double>(max)); }

FdProbe::FdProbe(MetricsRegistry& metrics) {
  prometheus::Registry& registry = metrics.registry();
  limit_ = &prometheus::BuildGauge()
                .Name("cdcview_fd_limit")
                .Help("The soft RLIMIT_NOFILE in force (raised to the hard limit at start).")
                .Register(registry)
                .Add({});
  open_ = &prometheus::BuildGauge()
               .Name("cdcview_fds_open")
               .Help("File descriptors open in the process now.")
               .Register(registry)
               .Add({});
  budget_ = &prometheus::BuildGauge()
                 .Name("cdcview_fd_connection_budget")
                 .Help("File descriptors connections may use: the limit less what the store "
                       "and sources held at start and server.fd_reserve.")
                 .Register(registry)
                 .Add({});
}

void FdProbe::SetLimit(uint64_t limit) { limit_->Set(static_cast<double>(limit)); }
void FdProbe::SetOpen(uint64_t open) { open_->Set(static_cast<double>(open)); }
void FdProbe::SetConnectionBudget(uint64_t budget) { budget_->Set(static_cast<double>(budget)); }

}  // namespace cdcview
