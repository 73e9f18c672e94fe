// FileProbe: the metrics of one file source (every series carries its `source` label).
//
//   cdcview_source_file_reopened_total{source,reason="truncated|rotated"}   counter: times the
//       source went back to the start of its file because the file shrank below the position
//       read (truncated), or read a new file at its path (rotated: another file there, by
//       inode)
//
// Thread-safe (prometheus-cpp counters are atomic); both label sets exist from the start, so
// a rate over them has a series before the first reopen. Owned by its FileSource.
#pragma once

#include <string>

#include "daemon/metrics/metrics.h"

namespace cdcview {

class FileProbe {
 public:
  enum class Reopen { kTruncated, kRotated };

  FileProbe(MetricsRegistry& metrics, const std::string& source);

  void RecordReopen(Reopen reason);

 private:
  prometheus::Counter* truncated_;
  prometheus::Counter* rotated_;
};

}  // namespace cdcview
