#include "daemon/metrics/file_probe.h"

#include <prometheus/counter.h>
#include <prometheus/registry.h>

namespace cdcview {

FileProbe::FileProbe(MetricsRegistry& metrics, const std::string& source) {
  // The registry merges families of the same name, so every file source shares this one.
  auto& reopened = prometheus::BuildCounter()
                       .Name("cdcview_source_file_reopened_total")
                       .Help("Times a following file source read its file again from the start: "
                             "the file shrank below the position read (truncated), or another "
                             "file took its path (rotated).")
                       .Register(metrics.registry());
  truncated_ = &reopened.Add({{"source", source}, {"reason", "truncated"}});
  rotated_ = &reopened.Add({{"source", source}, {"reason", "rotated"}});
}

void FileProbe::RecordReopen(Reopen reason) {
  (reason == Reopen::kTruncated ? truncated_ : rotated_)->Increment();
}

}  // namespace cdcview
