// DynamoDbSource: change events from a DynamoDB stream (the Streams API over HTTPS, SigV4),
// with an optional initial snapshot by parallel Scan.
//
// Partitions and positions (stored by the writer with the views, so exactly once):
//   <shard id>   ""              nothing applied yet
//                "TRIM_HORIZON"  read from the shard's trim horizon (set before a snapshot)
//                "<digits>"      the last applied sequence number; resume AFTER_SEQUENCE_NUMBER
//                "END"           the shard is closed and every record of it is applied
//   scan/<i>     JSON            the LastEvaluatedKey after which segment i continues
//                "DONE"          segment i is fully applied
//   snapshot     "started"       a snapshot is under way (the scan, or the replay after it)
//                "done"          the snapshot and the replay after it are applied
//   trimmed      text            the last data-loss report (see Failures)
// After the last record of a closed shard the source pushes a record with no event whose
// next_position is "END"; a child shard starts only once its parent's stored position is
// END (asked through the PositionLookup: "applied" means committed by the writer), so an
// item's changes are applied in order across shard splits. Finished shards are forgotten.
//
// Reading: one discovery thread (DescribeStream every discovery_interval_ms, shard lineage,
// snapshot) and shard_concurrency reader threads that take the shard due soonest, make one
// GetRecords call and put it back: at once if it returned records, after poll_interval_ms
// if not, so an idle stream costs one call per shard per poll interval. A shard is read by
// one thread at a time, so its records are pushed in order.
//
// Failures: throttling and 5xx are retried by the client with full-jitter back-off. An
// expired iterator is obtained again from the last sequence number read.
// TrimmedDataAccessException means records were lost upstream: Health turns "error" with the
// shard named, cdcview_dynamodb_trimmed_data_total counts it, it is logged, and the shard
// continues from TRIM_HORIZON. The message is also stored as the position of the partition
// "trimmed", so the error survives restarts (only a new store repairs the loss).
//
// Snapshot (snapshot: scan, on a store with no position of this source, or resuming one):
// the marker partition "snapshot" gets "started" and every listed shard TRIM_HORIZON first
// (one ordered run of position records, so a store with shard positions always has the
// marker), then scan_segments threads Scan the table (consistent reads, throttled by the
// consumed capacity to scan_read_capacity_percent of the provisioned read capacity, or to
// scan_read_units_per_second on an on-demand table), pushing each item as an INSERT with
// partition scan/<i>; then the stream is read from the shard positions. Once every shard has
// been read to its end (a GetRecords with no records, or the shard closed) after the scan,
// the marker "done" is pushed; Health is "backfilling" with the progress until that marker is
// applied, so views are not READY while the replay still moves items through older states.
// A restart with the marker "started" resumes the scan (segments at DONE are not read again)
// or the replay.
//
// Threading: Start, Stop, Health, dead_letters and SetPositionLookup may be called from any
// thread (SetPositionLookup before Start). Stop joins every thread the source owns; a thread
// blocked on a full RecordQueue returns when the writer makes room or the queue is closed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "daemon/aws/credentials.h"
#include "daemon/aws/dynamodb_streams_client.h"
#include "daemon/aws/http_client.h"
#include "daemon/config/config.h"
#include "daemon/decode/dynamodb_json.h"
#include "daemon/metrics/dynamodb_probe.h"
#include "daemon/sources/change_source.h"
#include "daemon/sources/file_source.h"

namespace cdcview {

class DynamoDbSource : public ChangeSource {
 public:
  // `table` is the TableSpec of config.table (its key names make Scan items into events);
  // `metrics` may be null (no metrics). Both must outlive the source. `getenv` is injected
  // by tests (default: the process environment).
  DynamoDbSource(uint32_t source_index, const SourceConfig& config, const TableSpec& table,
                 MetricsRegistry* metrics, aws::CredentialsProvider::Getenv getenv = nullptr);
  ~DynamoDbSource() override;

  // Checks the credentials (UNAUTHENTICATED naming the variables to set, also in Health) and
  // the stored positions (INVALID_ARGUMENT for one this source did not write), then starts
  // the threads. Everything after that (the stream ARN, DescribeStream) happens on the
  // discovery thread and is retried; failures show in Health.
  absl::Status Start(const std::map<std::string, std::string>& positions,
                     RecordQueue* queue) override;
  void Stop() override;
  SourceHealth Health() const override;
  DeadLetterSink* dead_letters() override { return &dead_letters_; }
  std::string_view kind() const override { return SourceKindName(SourceKind::kDynamoDb); }
  void SetPositionLookup(PositionLookup lookup) override { lookup_ = std::move(lookup); }

 private:
  enum class Phase { kWaitingParent, kReady, kReading, kEnded };
  struct Shard {
    std::string id;
    std::string parent;
    Phase phase = Phase::kReady;
    aws::IteratorType start = aws::IteratorType::kTrimHorizon;
    std::string last_sequence;  // last sequence number pushed; "" none
    std::string iterator;       // "" when one must be obtained
    bool had_records = true;    // the last GetRecords returned records (not caught up)
    std::chrono::steady_clock::time_point due;
  };
  struct StepResult;

  void DiscoveryMain();
  absl::Status ResolveStream();
  absl::Status Discover(bool first);
  void AddShard(const aws::StreamShard& shard, bool fresh_latest) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AdvanceLineage();
  void ReaderMain();
  StepResult ReadStep(Shard shard);
  absl::Status ObtainIterator(Shard* shard);
  void ReportTrimmed(const std::string& shard, const absl::Status& why);
  bool PushEnd(const std::string& shard);

  // Snapshot.
  bool SnapshotNeeded() const;
  absl::Status RunSnapshot();
  void AdvanceReplay();
  void ScanSegment(uint32_t segment, std::string start_key);
  bool ThrottleScan(double consumed_units);
  bool PushScanItem(uint32_t segment, const std::string& item_json, std::string next_position,
                    DynamoDbJsonDecoder* decoder);
  bool PushPositionOnly(const std::string& partition, const std::string& position);
  bool ScanCommitted();

  std::map<std::string, std::string> Committed() const;
  bool Sleep(std::chrono::milliseconds duration);  // false when stopping
  bool stopping() const { return stop_.load(); }
  void SetError(std::string message);
  void SetTransientError(std::string message);
  void UpdateShardMetrics();

  const uint32_t index_;
  const SourceConfig config_;
  const TableSpec& table_;
  FileDeadLetterSink dead_letters_;
  std::unique_ptr<DynamoDbProbe> probe_;
  aws::HttpClient http_;
  aws::CredentialsProvider credentials_;
  std::unique_ptr<aws::DynamoDbStreamsClient> client_;
  PositionLookup lookup_;
  RecordQueue* queue_ = nullptr;
  std::map<std::string, std::string> start_positions_;  // as given to Start
  std::string stream_arn_;   // set by the discovery thread before readers start
  std::string table_name_;   // for Scan

  std::atomic<bool> stop_{false};
  mutable absl::Mutex mu_;
  absl::CondVar wake_;                           // shards became due, or stopping
  std::map<std::string, Shard> shards_ ABSL_GUARDED_BY(mu_);  // known, not yet forgotten
  std::set<std::string> finished_ ABSL_GUARDED_BY(mu_);       // END applied (or skipped)
  std::string sticky_error_ ABSL_GUARDED_BY(mu_);             // data lost upstream
  std::string transient_error_ ABSL_GUARDED_BY(mu_);          // cleared by a success
  bool backfilling_ ABSL_GUARDED_BY(mu_) = false;
  double backfill_progress_ ABSL_GUARDED_BY(mu_) = 0;
  // After the scan: kReplaying until every shard was read to its end, kMarked once the
  // "done" marker is pushed, kNone when it is applied (or no snapshot).
  enum class Replay { kNone, kReplaying, kMarked };
  Replay replay_ = Replay::kNone;                // discovery thread only
  bool streaming_ ABSL_GUARDED_BY(mu_) = false;  // readers may take shards
  std::atomic<uint64_t> scanned_items_{0};
  uint64_t item_count_estimate_ = 0;             // set before the scan threads start
  uint32_t scan_rate_ = 0;                       // read units per second, 0: unthrottled; idem

  absl::Mutex throttle_mu_;
  std::chrono::steady_clock::time_point throttle_next_ ABSL_GUARDED_BY(throttle_mu_);

  absl::Mutex start_stop_mu_;
  std::thread discovery_ ABSL_GUARDED_BY(start_stop_mu_);
  std::vector<std::thread> readers_ ABSL_GUARDED_BY(start_stop_mu_);
};

}  // namespace cdcview
