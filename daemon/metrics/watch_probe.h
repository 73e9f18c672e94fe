// WatchProbe: the metrics of Watch streams, per view.
//
//   cdcview_watchers{view}                        streams open now
//   cdcview_watch_events_total{view}              events sent (snapshot entries, changes, markers)
//   cdcview_watchers_cut_off_total{view,reason}   streams the server ended: `fell_behind` (more
//                                                 than watch.max_lag_changes behind), `stalled`
//                                                 (read nothing for watch.stalled_stream_timeout_ms)
//   cdcview_watchers_refused_total                new streams refused at watch.max_streams
//
// (The change log's size, cdcview_change_log_entries, is the writer's: ApplyProbe.)
// Thread-safe: every stream handler records from its own thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/metrics/metrics.h"

namespace cdcview {

class WatchProbe {
 public:
  enum class CutOffReason { kFellBehind, kStalled };

  // `views` in global view order; the methods take a global view index.
  WatchProbe(MetricsRegistry& metrics, const std::vector<std::string>& views);

  void Opened(size_t view);
  void Closed(size_t view);
  void Sent(size_t view, uint64_t events);
  void CutOff(size_t view, CutOffReason reason);
  void Refused();

 private:
  struct ViewMetrics {
    prometheus::Gauge* open;
    prometheus::Counter* events;
    prometheus::Counter* fell_behind;
    prometheus::Counter* stalled;
  };
  std::vector<ViewMetrics> views_;
  prometheus::Counter* refused_;
};

}  // namespace cdcview
