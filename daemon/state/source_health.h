// SourceHealth: what a change source reports about itself (GetStatus, readiness, the
// cdcview_source_state metric, the ingestion log line), the vocabulary sources and readers
// share. A plain value type; SourceStateName is pure.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cdcview {

// Where a source stands. Readiness treats kFinished and kCaughtUp as having nothing more to
// read, kError as infinitely behind.
enum class SourceState {
  kStarting,     // not reading the stream yet (a DynamoDB source before its first shards)
  kRunning,      // reading, with records to read
  kBackfilling,  // reading a snapshot (a DynamoDB Scan) before the stream
  kCaughtUp,     // at the end of what there is; waiting for more
  kFinished,     // read everything there will be (a file without follow)
  kError,        // cannot read; SourceHealth::error says why and what to do
  kStopped,      // Stop was called
};

// The state's name on the wire and in logs and metric labels: "starting", "running",
// "backfilling", "caught_up", "finished", "error", "stopped".
std::string_view SourceStateName(SourceState state);

struct SourceHealth {
  SourceState state = SourceState::kStarting;
  std::string error;    // what is wrong and what to do, when state is kError
  double progress = 0;  // 0..1 while kBackfilling (a DynamoDB snapshot Scan, a cluster
                        // member's Kafka partitions read from their start)
  // The partitions the source reads now, where it has a say in them: a Kafka source's
  // assignment ("topic/3"), in order. Empty for the other kinds.
  std::vector<std::string> partitions = {};
};

}  // namespace cdcview
