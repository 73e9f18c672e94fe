#include "daemon/sources/dynamodb_source.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/log/log.h"
#include "daemon/sources/record_queue.h"
#include "simdjson.h"

namespace cdcview {
namespace {

using Clock = std::chrono::steady_clock;
using aws::IteratorType;

constexpr std::string_view kEnd = "END";
constexpr std::string_view kTrimHorizon = "TRIM_HORIZON";
constexpr std::string_view kScanDone = "DONE";
// The snapshot's own partition: "started" before the first shard position, "done" once the
// stream replay after the scan has caught up (see the header).
constexpr std::string_view kSnapshotPartition = "snapshot";
constexpr std::string_view kSnapshotStarted = "started";
constexpr std::string_view kSnapshotDone = "done";
// Data lost upstream (TrimmedDataAccessException): the last report, kept with the views so
// the loss stays visible after a restart (only a new store repairs it).
constexpr std::string_view kTrimmedPartition = "trimmed";
constexpr std::chrono::milliseconds kLineageInterval{100};
constexpr std::chrono::milliseconds kErrorRetry{1000};
constexpr int kRecordsPerCall = 1000;

std::string ToStd(absl::string_view text) { return std::string(text.data(), text.size()); }

bool IsDigits(std::string_view text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string ScanPartition(uint32_t segment) { return absl::StrCat("scan/", segment); }

bool IsShardPartition(std::string_view partition) {
  return !partition.starts_with("scan/") && partition != kSnapshotPartition &&
         partition != kTrimmedPartition;
}

// The SequenceNumber of a record the decoder refused (the API's JSON is well-formed, so it
// usually has one), so the position still moves past it.
std::string SequenceOf(const std::string& record_json) {
  simdjson::dom::parser parser;
  std::string_view seq;
  if (parser.parse(record_json)["dynamodb"]["SequenceNumber"].get_string().get(seq) !=
      simdjson::SUCCESS) {
    return "";
  }
  return IsDigits(seq) ? std::string(seq) : std::string();
}

}  // namespace

struct DynamoDbSource::StepResult {
  std::string iterator;
  std::string last_sequence;
  IteratorType start = IteratorType::kTrimHorizon;
  bool ended = false;
  bool had_records = false;
  std::chrono::milliseconds wait{0};
};

DynamoDbSource::DynamoDbSource(uint32_t source_index, const SourceConfig& config,
                               const TableSpec& table, MetricsRegistry* metrics,
                               aws::CredentialsProvider::Getenv getenv)
    : index_(source_index),
      config_(config),
      table_(table),
      dead_letters_(config.name, config.dynamodb.dead_letter_path),
      // Stop cancels a request in flight (stop_ outlives http_'s use: readers join first).
      http_(aws::HttpClient::Options{std::chrono::milliseconds(5000),
                                     std::chrono::milliseconds(20000), &stop_}),
      credentials_(&http_, config.dynamodb.region, std::move(getenv)) {
  if (metrics != nullptr) probe_ = std::make_unique<DynamoDbProbe>(*metrics, config.name);
  aws::DynamoDbStreamsClient::Options options;
  options.region = config.dynamodb.region;
  options.endpoint = config.dynamodb.endpoint;
  client_ = std::make_unique<aws::DynamoDbStreamsClient>(
      options, &credentials_, &http_,
      [this](std::chrono::milliseconds d) { return Sleep(d); },
      [this](std::string_view call, std::string_view result) {
        if (probe_) probe_->CountRequest(call, result);
      });
}

DynamoDbSource::~DynamoDbSource() { Stop(); }

// ---------------------------------------------------------------- life cycle

absl::Status DynamoDbSource::Start(const std::map<std::string, std::string>& positions,
                                   RecordQueue* queue) {
  absl::MutexLock start_stop(&start_stop_mu_);
  if (discovery_.joinable()) {
    return absl::FailedPreconditionError(
        absl::StrCat("source \"", config_.name, "\" is already started"));
  }
  for (const auto& [partition, position] : positions) {
    bool scan = partition.starts_with("scan/");
    bool valid = partition == kSnapshotPartition
                     ? position == kSnapshotStarted || position == kSnapshotDone
                 : scan || partition == kTrimmedPartition ? !position.empty()
                        : position.empty() || position == kEnd || position == kTrimHorizon ||
                              IsDigits(position);
    if (!valid) {
      absl::Status status = absl::InvalidArgumentError(absl::StrCat(
          "stored position \"", position, "\" of partition \"", partition, "\" of source \"",
          config_.name, "\" is not a DynamoDB Streams position (sequence number, TRIM_HORIZON, "
          "END, a scan segment's key, or the snapshot's started/done)"));
      SetError(ToStd(status.message()));
      return status;
    }
  }
  stop_ = false;  // before the first request: a set stop_ cancels requests (http_)
  if (auto key = credentials_.Get(); !key.ok()) {
    absl::Status status(key.status().code(),
                        absl::StrCat("source ", config_.name, ": ", key.status().message()));
    SetError(ToStd(status.message()));
    return status;
  }
  start_positions_ = positions;
  if (auto it = positions.find(std::string(kTrimmedPartition)); it != positions.end()) {
    absl::MutexLock lock(&mu_);
    sticky_error_ = it->second;
  }
  queue_ = queue;
  stop_ = false;
  discovery_ = std::thread(&DynamoDbSource::DiscoveryMain, this);
  for (uint32_t i = 0; i < std::max<uint32_t>(1, config_.dynamodb.shard_concurrency); ++i) {
    readers_.emplace_back(&DynamoDbSource::ReaderMain, this);
  }
  return absl::OkStatus();
}

void DynamoDbSource::Stop() {
  absl::MutexLock start_stop(&start_stop_mu_);
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  wake_.SignalAll();
  if (discovery_.joinable()) discovery_.join();
  for (std::thread& t : readers_) t.join();
  readers_.clear();
}

SourceHealth DynamoDbSource::Health() const {
  absl::MutexLock lock(&mu_);
  if (!sticky_error_.empty()) return {SourceState::kError, sticky_error_};
  if (!transient_error_.empty()) return {SourceState::kError, transient_error_};
  if (backfilling_) return {SourceState::kBackfilling, "", backfill_progress_};
  if (!streaming_) return {SourceState::kStarting, ""};
  for (const auto& [id, shard] : shards_) {
    if (shard.phase != Phase::kWaitingParent && shard.had_records) return {SourceState::kRunning, ""};
  }
  return {SourceState::kCaughtUp, ""};
}

void DynamoDbSource::SetError(std::string message) {
  absl::MutexLock lock(&mu_);
  transient_error_ = std::move(message);
}

void DynamoDbSource::SetTransientError(std::string message) {
  if (stopping()) return;  // a request Stop cancelled is no error
  LogWarning(absl::StrCat("source ", config_.name, ": ", message));
  absl::MutexLock lock(&mu_);
  transient_error_ = std::move(message);
}

bool DynamoDbSource::Sleep(std::chrono::milliseconds duration) {
  const absl::Time deadline = absl::Now() + absl::FromChrono(duration);
  absl::MutexLock lock(&mu_);
  while (!stop_.load()) {
    if (wake_.WaitWithDeadline(&mu_, deadline)) break;  // timed out
  }
  return !stop_.load();
}

std::map<std::string, std::string> DynamoDbSource::Committed() const {
  return lookup_ ? lookup_() : std::map<std::string, std::string>{};
}

// ---------------------------------------------------------------- discovery and lineage

void DynamoDbSource::DiscoveryMain() {
  while (!stopping()) {
    absl::Status s = ResolveStream();
    if (s.ok()) break;
    SetTransientError(ToStd(s.message()));
    Sleep(std::max(kErrorRetry, std::chrono::milliseconds(config_.dynamodb.discovery_interval_ms)));
  }
  if (!stopping() && SnapshotNeeded()) {
    absl::Status s = RunSnapshot();
    if (!s.ok()) return;  // stopping
  }
  bool first = true;
  auto next_discovery = Clock::now();
  while (!stopping()) {
    if (Clock::now() >= next_discovery) {
      absl::Status s = Discover(first);
      if (s.ok()) {
        first = false;
        absl::MutexLock lock(&mu_);
        streaming_ = true;
        transient_error_.clear();
      } else if (!absl::IsCancelled(s)) {
        SetTransientError(ToStd(s.message()));
      }
      next_discovery = Clock::now() + (s.ok() ? std::chrono::milliseconds(
                                                    config_.dynamodb.discovery_interval_ms)
                                              : kErrorRetry);
    }
    if (!first) AdvanceLineage();
    if (!first) AdvanceReplay();
    UpdateShardMetrics();
    Sleep(kLineageInterval);
  }
}

absl::Status DynamoDbSource::ResolveStream() {
  stream_arn_ = config_.dynamodb.stream_arn;
  table_name_ = config_.dynamodb.table_name;
  if (stream_arn_.empty()) {
    auto arn = client_->LatestStreamArn(table_name_);
    if (!arn.ok()) return arn.status();
    stream_arn_ = *arn;
  }
  if (table_name_.empty() && config_.dynamodb.snapshot == DynamoDbSourceConfig::Snapshot::kScan) {
    auto description = client_->DescribeStream(stream_arn_);
    if (!description.ok()) return description.status();
    table_name_ = description->table_name;
  }
  LogInfo(absl::StrCat("source ", config_.name, ": reading stream ", stream_arn_));
  return absl::OkStatus();
}

absl::Status DynamoDbSource::Discover(bool first) {
  auto description = client_->DescribeStream(stream_arn_);
  if (!description.ok()) return description.status();
  bool fresh_latest = first && start_positions_.empty() &&
                      config_.dynamodb.start == DynamoDbSourceConfig::Start::kLatest;
  {
    absl::MutexLock lock(&mu_);
    for (const aws::StreamShard& shard : description->shards) AddShard(shard, fresh_latest);
  }
  wake_.SignalAll();
  return absl::OkStatus();
}

// A shard with a parent waits; AdvanceLineage releases it once the
// parent is finished or gone (a parent older than the stream's 24 hours is no longer listed).
void DynamoDbSource::AddShard(const aws::StreamShard& listed, bool fresh_latest) {
  if (shards_.contains(listed.shard_id) || finished_.contains(listed.shard_id)) return;
  std::string position;
  if (auto it = start_positions_.find(listed.shard_id); it != start_positions_.end()) {
    position = it->second;
  }
  if (position == kEnd) {
    finished_.insert(listed.shard_id);
    return;
  }
  Shard shard;
  shard.id = listed.shard_id;
  shard.parent = listed.parent_shard_id;
  shard.due = Clock::now();
  if (IsDigits(position)) {
    shard.start = IteratorType::kAfterSequenceNumber;
    shard.last_sequence = position;
  } else if (position.empty() && fresh_latest) {
    // `start: latest` on a fresh store: only the open shards, from their newest records.
    if (!listed.ending_sequence_number.empty()) {
      finished_.insert(listed.shard_id);
      return;
    }
    shard.start = IteratorType::kLatest;
  }  // else TRIM_HORIZON: a stored TRIM_HORIZON, or a shard that appeared after the start.
  shard.phase = shard.parent.empty() ? Phase::kReady : Phase::kWaitingParent;
  shards_.emplace(shard.id, std::move(shard));
}

void DynamoDbSource::AdvanceLineage() {
  std::map<std::string, std::string> committed = Committed();
  std::vector<std::string> forgotten;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = shards_.begin(); it != shards_.end();) {
      auto c = committed.find(it->first);
      bool applied = !lookup_ || (c != committed.end() && c->second == kEnd);
      if (it->second.phase == Phase::kEnded && applied) {
        finished_.insert(it->first);
        forgotten.push_back(it->first);
        it = shards_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto& [id, shard] : shards_) {
      if (shard.phase == Phase::kWaitingParent && !shards_.contains(shard.parent)) {
        shard.phase = Phase::kReady;
        shard.due = Clock::now();
      }
    }
  }
  for (const std::string& id : forgotten) {
    LogInfo(absl::StrCat("source ", config_.name, ": shard ", id, " fully applied"));
    if (probe_) probe_->ForgetShard(id);
  }
  wake_.SignalAll();
}

void DynamoDbSource::UpdateShardMetrics() {
  if (!probe_) return;
  uint64_t open = 0, closed = 0, waiting = 0;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, shard] : shards_) {
      if (shard.phase == Phase::kWaitingParent) {
        ++waiting;
      } else if (shard.phase == Phase::kEnded) {
        ++closed;
      } else {
        ++open;
      }
    }
  }
  probe_->SetShards(open, closed, waiting);
}

// ---------------------------------------------------------------- reading shards

void DynamoDbSource::ReaderMain() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    // The ready shard due soonest.
    Shard* next = nullptr;
    if (streaming_) {
      for (auto& [id, shard] : shards_) {
        if (shard.phase == Phase::kReady && (next == nullptr || shard.due < next->due)) {
          next = &shard;
        }
      }
    }
    if (next == nullptr) {
      wake_.WaitWithTimeout(&mu_, absl::FromChrono(kLineageInterval));
      continue;
    }
    if (next->due > Clock::now()) {
      wake_.WaitWithTimeout(&mu_, absl::FromChrono(next->due - Clock::now()));
      continue;
    }
    next->phase = Phase::kReading;
    Shard copy = *next;
    mu_.Unlock();
    StepResult result = ReadStep(copy);
    mu_.Lock();
    auto it = shards_.find(copy.id);
    if (it == shards_.end()) continue;
    Shard& shard = it->second;
    shard.iterator = result.iterator;
    shard.last_sequence = result.last_sequence;
    shard.start = result.start;
    shard.had_records = result.had_records;
    shard.phase = result.ended ? Phase::kEnded : Phase::kReady;
    shard.due = Clock::now() + result.wait;
  }
}

absl::Status DynamoDbSource::ObtainIterator(Shard* shard) {
  IteratorType type = shard->last_sequence.empty() ? shard->start
                                                   : IteratorType::kAfterSequenceNumber;
  auto iterator = client_->GetShardIterator(stream_arn_, shard->id, type, shard->last_sequence);
  if (!iterator.ok() && aws::AwsErrorType(iterator.status()) == "TrimmedDataAccessException") {
    ReportTrimmed(shard->id, iterator.status());
    shard->last_sequence.clear();
    shard->start = IteratorType::kTrimHorizon;
    iterator = client_->GetShardIterator(stream_arn_, shard->id, IteratorType::kTrimHorizon);
  }
  if (!iterator.ok()) return iterator.status();
  shard->iterator = *iterator;
  return absl::OkStatus();
}

void DynamoDbSource::ReportTrimmed(const std::string& shard, const absl::Status& why) {
  std::string message = absl::StrCat(
      "shard ", shard, " of ", stream_arn_,
      ": stream records were trimmed before they were read, so changes are missing from the "
      "views (", ToStd(why.message()),
      "); continuing from TRIM_HORIZON; to repair, start a new store with snapshot: scan");
  LogError(absl::StrCat("source ", config_.name, ": ", message));
  if (probe_) probe_->CountTrimmedData();
  {
    absl::MutexLock lock(&mu_);
    sticky_error_ = message;
  }
  PushPositionOnly(std::string(kTrimmedPartition), message);  // false only when stopping
}

DynamoDbSource::StepResult DynamoDbSource::ReadStep(Shard shard) {
  StepResult result;
  auto finish = [&](std::chrono::milliseconds wait) {
    result.iterator = shard.iterator;
    result.last_sequence = shard.last_sequence;
    result.start = shard.start;
    result.wait = wait;
    return result;
  };
  if (shard.iterator.empty()) {
    absl::Status s = ObtainIterator(&shard);
    if (absl::IsNotFound(s)) {
      // The shard aged out of the stream before it was read to its end.
      ReportTrimmed(shard.id, s);
      result.ended = PushEnd(shard.id);
      return finish(kErrorRetry);
    }
    if (!s.ok()) {
      if (!absl::IsCancelled(s)) SetTransientError(ToStd(s.message()));
      return finish(kErrorRetry);
    }
  }
  auto page = client_->GetRecords(shard.iterator, kRecordsPerCall);
  if (!page.ok()) {
    const std::string type = aws::AwsErrorType(page.status());
    shard.iterator.clear();
    if (type == "ExpiredIteratorException") return finish(std::chrono::milliseconds(0));
    if (type == "TrimmedDataAccessException") {
      ReportTrimmed(shard.id, page.status());
      shard.last_sequence.clear();
      shard.start = IteratorType::kTrimHorizon;
      return finish(std::chrono::milliseconds(0));
    }
    if (!absl::IsCancelled(page.status())) SetTransientError(ToStd(page.status().message()));
    return finish(std::max(kErrorRetry, std::chrono::milliseconds(config_.dynamodb.poll_interval_ms)));
  }
  {
    absl::MutexLock lock(&mu_);
    transient_error_.clear();
  }
  DynamoDbJsonDecoder decoder;
  int64_t newest_ms = 0;
  for (const std::string& raw : page->records) {
    SourceRecord record;
    record.source = index_;
    record.partition = shard.id;
    record.raw = raw;
    absl::StatusOr<ChangeEvent> event = decoder.Decode(raw);
    std::string sequence = event.ok() ? event->sequence_number : SequenceOf(raw);
    if (!sequence.empty()) shard.last_sequence = sequence;
    record.next_position = shard.last_sequence.empty() && shard.start == IteratorType::kTrimHorizon
                               ? std::string(kTrimHorizon)
                               : shard.last_sequence;
    record.locator = absl::StrCat(shard.id, "@", sequence.empty() ? "?" : sequence);
    if (event.ok()) {
      newest_ms = std::max(newest_ms, event->creation_time_ms);
      record.event = *std::move(event);
    } else {
      record.reason = IsMalformedJson(event.status()) ? "malformed_json" : "bad_record";
      record.rejection = absl::Status(
          event.status().code(), absl::StrCat(record.locator, ": ", event.status().message()));
    }
    if (!queue_->PushUnless(std::move(record), [this] { return stopping(); })) {
      return finish(std::chrono::milliseconds(0));
    }
  }
  if (probe_ && newest_ms > 0) {
    probe_->SetIteratorAge(shard.id, double(UnixNowMs() - newest_ms) / 1000.0);
  } else if (probe_ && page->records.empty()) {
    probe_->SetIteratorAge(shard.id, 0);  // caught up: nothing newer waits in the shard
  }
  result.had_records = !page->records.empty();
  shard.iterator = page->next_iterator;
  if (page->next_iterator.empty()) {
    result.ended = PushEnd(shard.id);
    return finish(std::chrono::milliseconds(0));
  }
  return finish(result.had_records ? std::chrono::milliseconds(0)
                                   : std::chrono::milliseconds(config_.dynamodb.poll_interval_ms));
}

bool DynamoDbSource::PushEnd(const std::string& shard) {
  return PushPositionOnly(shard, std::string(kEnd));
}

bool DynamoDbSource::PushPositionOnly(const std::string& partition, const std::string& position) {
  SourceRecord record;
  record.source = index_;
  record.partition = partition;
  record.next_position = position;
  record.position_only = true;
  record.locator = absl::StrCat(partition, "@", position);
  return queue_->PushUnless(std::move(record), [this] { return stopping(); });
}

// ---------------------------------------------------------------- snapshot

bool DynamoDbSource::SnapshotNeeded() const {
  if (config_.dynamodb.snapshot != DynamoDbSourceConfig::Snapshot::kScan) return false;
  if (start_positions_.empty()) return true;  // a fresh store
  if (auto it = start_positions_.find(std::string(kSnapshotPartition));
      it != start_positions_.end()) {
    return it->second != kSnapshotDone;  // resume the scan or the replay after it
  }
  // A store written before the marker existed: resume a snapshot it began (it has scan/<i>);
  // a store filled from the stream alone has none.
  bool began = false, finished = true;
  for (uint32_t i = 0; i < config_.dynamodb.scan_segments; ++i) {
    auto it = start_positions_.find(ScanPartition(i));
    began = began || it != start_positions_.end();
    finished = finished && it != start_positions_.end() && it->second == kScanDone;
  }
  return began && !finished;
}

absl::Status DynamoDbSource::RunSnapshot() {
  // The marker first, then the shard positions, in one ordered run of position records: a
  // committed prefix that holds a shard position holds the marker too, so a restart always
  // knows that the scan is unfinished (without it, a store with shard positions and no
  // scan/<i> yet would look like a store filled from the stream alone).
  if (!start_positions_.contains(std::string(kSnapshotPartition))) {
    if (!PushPositionOnly(std::string(kSnapshotPartition), std::string(kSnapshotStarted))) {
      return absl::CancelledError("stopping");
    }
    start_positions_[std::string(kSnapshotPartition)] = std::string(kSnapshotStarted);
  }
  if (std::none_of(start_positions_.begin(), start_positions_.end(),
                   [](const auto& p) { return IsShardPartition(p.first); })) {
    // The stream positions first: every change from here on is read after the scan.
    absl::StatusOr<aws::StreamDescription> description;
    while (!(description = client_->DescribeStream(stream_arn_)).ok()) {
      SetTransientError(ToStd(description.status().message()));
      if (!Sleep(kErrorRetry)) return absl::CancelledError("stopping");
    }
    for (const aws::StreamShard& shard : description->shards) {
      if (!PushPositionOnly(shard.shard_id, std::string(kTrimHorizon))) {
        return absl::CancelledError("stopping");
      }
      start_positions_[shard.shard_id] = std::string(kTrimHorizon);
    }
  }
  // The read budget: a share of the provisioned capacity, or the configured rate when the
  // table is on demand (or DescribeTable failed: the snapshot does not wait for it).
  scan_rate_ = config_.dynamodb.scan_read_units_per_second;
  if (auto table = client_->DescribeTable(table_name_); table.ok()) {
    item_count_estimate_ = table->item_count;
    if (table->read_capacity_units > 0) {
      scan_rate_ = std::max<uint32_t>(
          1, uint32_t(table->read_capacity_units * config_.dynamodb.scan_read_capacity_percent /
                      100));
    }
  }
  {
    absl::MutexLock lock(&mu_);
    backfilling_ = true;
    backfill_progress_ = 0;
    transient_error_.clear();
  }
  LogInfo(absl::StrCat("source ", config_.name, ": snapshot of table ", table_name_, " by ",
                       config_.dynamodb.scan_segments, " Scan segments (about ",
                       item_count_estimate_, " items, ",
                       scan_rate_ == 0 ? std::string("unthrottled")
                                       : absl::StrCat(scan_rate_, " read units per second"),
                       ")"));
  std::vector<std::thread> segments;
  for (uint32_t i = 0; i < config_.dynamodb.scan_segments; ++i) {
    std::string position;
    if (auto it = start_positions_.find(ScanPartition(i)); it != start_positions_.end()) {
      position = it->second;
    }
    if (position == kScanDone) continue;
    segments.emplace_back(&DynamoDbSource::ScanSegment, this, i, position);
  }
  for (std::thread& t : segments) t.join();
  while (!stopping() && !ScanCommitted()) Sleep(kLineageInterval);
  if (stopping()) return absl::CancelledError("stopping");
  replay_ = Replay::kReplaying;  // still backfilling: AdvanceReplay ends it
  LogInfo(absl::StrCat("source ", config_.name, ": scan done, ", scanned_items_.load(),
                       " items scanned; replaying the stream from the positions taken before"));
  return absl::OkStatus();
}

// After the scan, the stream is replayed from the positions taken before it. The views are
// complete only when that replay has reached what the stream held when the scan ended: every
// shard read to its end (an empty GetRecords, or closed) by a read that began after the scan.
// Then the "done" marker is pushed behind every record read so far; once the writer applies
// it, those records are applied too and backfilling ends.
void DynamoDbSource::AdvanceReplay() {
  if (replay_ == Replay::kReplaying) {
    {
      absl::MutexLock lock(&mu_);
      if (!streaming_) return;
      for (const auto& [id, shard] : shards_) {
        bool read_to_end = shard.phase == Phase::kEnded ||
                           (shard.phase != Phase::kWaitingParent && !shard.had_records);
        if (!read_to_end) return;
      }
    }
    if (!PushPositionOnly(std::string(kSnapshotPartition), std::string(kSnapshotDone))) return;
    replay_ = Replay::kMarked;
  }
  if (replay_ == Replay::kMarked) {
    if (lookup_) {
      auto committed = Committed();
      auto it = committed.find(std::string(kSnapshotPartition));
      if (it == committed.end() || it->second != kSnapshotDone) return;
    }
    replay_ = Replay::kNone;
    {
      absl::MutexLock lock(&mu_);
      backfilling_ = false;
      backfill_progress_ = 1;
    }
    LogInfo(absl::StrCat("source ", config_.name,
                         ": snapshot done: the stream replay has caught up with the scan"));
  }
}

// Progress: the segments applied, or the items scanned against DescribeTable's (approximate)
// count, whichever says more; at most 99% until the replay after the scan has caught up.
bool DynamoDbSource::ScanCommitted() {
  std::map<std::string, std::string> committed = Committed();
  uint32_t done = 0;
  for (uint32_t i = 0; i < config_.dynamodb.scan_segments; ++i) {
    auto it = committed.find(ScanPartition(i));
    if (it != committed.end() && it->second == kScanDone) ++done;
  }
  const uint32_t total = std::max<uint32_t>(1, config_.dynamodb.scan_segments);
  double progress = double(done) / total;
  if (item_count_estimate_ > 0) {
    progress = std::max(progress, double(scanned_items_.load()) / double(item_count_estimate_));
  }
  absl::MutexLock lock(&mu_);
  backfill_progress_ = std::min(progress, 0.99);
  return !lookup_ || done == total;
}

void DynamoDbSource::ScanSegment(uint32_t segment, std::string start_key) {
  DynamoDbJsonDecoder decoder;
  const uint32_t rate = scan_rate_;
  const int limit = rate == 0 ? 1000 : int(std::clamp<uint32_t>(rate, 1, 1000));
  if (start_key == "{}") start_key.clear();  // the position of a segment's first page
  while (!stopping()) {
    auto page = client_->Scan(table_name_, segment, config_.dynamodb.scan_segments, start_key, limit);
    if (!page.ok()) {
      if (absl::IsCancelled(page.status())) return;
      SetTransientError(absl::StrCat("snapshot segment ", segment, ": ", page.status().message()));
      if (!Sleep(kErrorRetry)) return;
      continue;
    }
    const std::string next = page->last_evaluated_key.empty() ? std::string(kScanDone)
                                                              : page->last_evaluated_key;
    // Items before the page's last keep the page's start as their position: a restart
    // repeats a partly applied page (idempotent), never skips its rest.
    const std::string resume = start_key.empty() ? "{}" : start_key;
    for (size_t i = 0; i < page->items.size(); ++i) {
      bool last = i + 1 == page->items.size();
      if (!PushScanItem(segment, page->items[i], last ? next : resume, &decoder)) return;
    }
    if (page->items.empty() && !PushPositionOnly(ScanPartition(segment), next)) return;
    scanned_items_ += page->items.size();
    ScanCommitted();  // refreshes the progress
    if (next == kScanDone) return;
    start_key = next;
    if (!ThrottleScan(page->consumed_read_units)) return;
  }
}

bool DynamoDbSource::ThrottleScan(double consumed_units) {
  const uint32_t rate = scan_rate_;
  if (rate == 0) return true;
  Clock::time_point until;
  {
    // One budget for all segments: each page moves the shared "next allowed" time on by the
    // time its consumed capacity is worth at the configured rate.
    absl::MutexLock lock(&throttle_mu_);
    auto now = Clock::now();
    if (throttle_next_ < now) throttle_next_ = now;
    throttle_next_ += std::chrono::microseconds(int64_t(consumed_units * 1e6 / rate));
    until = throttle_next_;
  }
  auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
  return wait.count() <= 0 || Sleep(wait);
}

bool DynamoDbSource::PushScanItem(uint32_t segment, const std::string& item_json,
                                  std::string next_position, DynamoDbJsonDecoder* decoder) {
  SourceRecord record;
  record.source = index_;
  record.partition = ScanPartition(segment);
  record.next_position = std::move(next_position);
  record.raw = item_json;
  record.locator = absl::StrCat("scan segment ", segment);
  absl::StatusOr<Item> item = decoder->DecodeItem(item_json);
  absl::Status status = item.status();
  ChangeEvent event;
  if (item.ok()) {
    const TableKeySpec& key = table_.key;
    for (const std::string* name : {&key.partition, key.sort ? &*key.sort : nullptr}) {
      if (name == nullptr) continue;
      auto it = item->find(*name);
      if (it == item->end()) {
        status = absl::InvalidArgumentError(absl::StrCat("scanned item has no key attribute ", *name));
        break;
      }
      event.keys.emplace(it->first, it->second);
    }
  }
  if (status.ok()) {
    event.kind = ChangeEvent::Kind::kInsert;
    event.new_image = *std::move(item);
    record.event = std::move(event);
  } else {
    record.reason = IsMalformedJson(status) ? "malformed_json" : "bad_record";
    record.rejection =
        absl::Status(status.code(), absl::StrCat(record.locator, ": ", status.message()));
  }
  return queue_->PushUnless(std::move(record), [this] { return stopping(); });
}

}  // namespace cdcview
