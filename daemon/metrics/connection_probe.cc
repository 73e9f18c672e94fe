#include "daemon/metrics/connection_probe.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

namespace cdcview {

ConnectionProbe::ConnectionProbe(MetricsRegistry& metrics, const std::string& port,
                                 const std::vector<std::string>& closed_reasons)
    : port_(port) {
  prometheus::Registry& registry = metrics.registry();
  open_ = &prometheus::BuildGauge()
               .Name("cdcview_connections_open")
               .Help("Connections held now, per listening port.")
               .Register(registry)
               .Add({{"port", port}});
  max_ = &prometheus::BuildGauge()
              .Name("cdcview_connections_max")
              .Help("The connection cap in force per port: its config field, clamped to what "
                    "the open-files limit leaves (cdcview_fd_connection_budget).")
              .Register(registry)
              .Add({{"port", port}});
  opened_ = &prometheus::BuildCounter()
                 .Name("cdcview_connections_opened_total")
                 .Help("Connections accepted and served, per port.")
                 .Register(registry)
                 .Add({{"port", port}});
  refused_ = &prometheus::BuildCounter()
                  .Name("cdcview_connections_refused_total")
                  .Help("Connections accepted and closed at once: max_connections (the port's "
                        "cap reached), fd_limit (no file descriptor left).")
                  .Register(registry);
  closed_ = &prometheus::BuildCounter()
                 .Name("cdcview_connections_closed_total")
                 .Help("Served connections that ended, per port and reason.")
                 .Register(registry);
  for (const char* reason : {"max_connections", "fd_limit"}) {
    refused_->Add({{"port", port}, {"reason", reason}});
  }
  for (const std::string& reason : closed_reasons) closed_->Add({{"port", port}, {"reason", reason}});
}

void ConnectionProbe::Opened() { opened_->Increment(); }
void ConnectionProbe::Refused(const std::string& reason) {
  refused_->Add({{"port", port_}, {"reason", reason}}).Increment();
}
void ConnectionProbe::Closed(const std::string& reason, uint64_t count) {
  closed_->Add({{"port", port_}, {"reason", reason}}).Increment(static_cast<double>(count));
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
