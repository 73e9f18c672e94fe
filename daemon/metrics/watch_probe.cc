#include "daemon/metrics/watch_probe.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

namespace cdcview {

WatchProbe::WatchProbe(MetricsRegistry& metrics, const std::vector<std::string>& views) {
  prometheus::Registry& registry = metrics.registry();
  auto& open = prometheus::BuildGauge()
                   .Name("cdcview_watchers")
                   .Help("Watch streams open on each view.")
                   .Register(registry);
  auto& events = prometheus::BuildCounter()
                     .Name("cdcview_watch_events_total")
                     .Help("Watch events sent on each view: snapshot entries, changes, "
                           "snapshot_done and fell_behind markers.")
                     .Register(registry);
  auto& cut_off = prometheus::BuildCounter()
                      .Name("cdcview_watchers_cut_off_total")
                      .Help("Watch streams the server ended, by reason: fell_behind (more than "
                            "watch.max_lag_changes behind the change log's head), stalled (the "
                            "client read nothing for watch.stalled_stream_timeout_ms).")
                      .Register(registry);
  auto& refused = prometheus::BuildCounter()
                      .Name("cdcview_watchers_refused_total")
                      .Help("Watch streams refused because watch.max_streams were open.")
                      .Register(registry);
  for (const std::string& v : views) {
    views_.push_back(ViewMetrics{&open.Add({{"view", v}}), &events.Add({{"view", v}}),
                                 &cut_off.Add({{"view", v}, {"reason", "fell_behind"}}),
                                 &cut_off.Add({{"view", v}, {"reason", "stalled"}})});
  }
  refused_ = &refused.Add({});
}

void WatchProbe::Opened(size_t view) { views_[view].open->Increment(); }
void WatchProbe::Closed(size_t view) { views_[view].open->Decrement(); }
void WatchProbe::Sent(size_t view, uint64_t events) {
  views_[view].events->Increment(static_cast<double>(events));
}
void WatchProbe::CutOff(size_t view, CutOffReason reason) {
  (reason == CutOffReason::kFellBehind ? views_[view].fell_behind : views_[view].stalled)
      ->Increment();
}
void WatchProbe::Refused() { refused_->Increment(); }

}  // namespace cdcview
