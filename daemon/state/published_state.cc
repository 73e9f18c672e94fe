#include "daemon/state/published_state.h"

#include <algorithm>
#include <cstring>

#include "absl/time/time.h"

namespace cdcview {

namespace {

int64_t WallClockMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int PositionKeyLess::Compare(std::string_view a_source, std::string_view a_partition,
                             std::string_view b_source, std::string_view b_partition) {
  // Compares a_source + "/" + a_partition with the same of b, without building either.
  const std::string_view a[] = {a_source, "/", a_partition};
  const std::string_view b[] = {b_source, "/", b_partition};
  size_t ai = 0, ao = 0, bi = 0, bo = 0;
  for (;;) {
    while (ai < 3 && ao == a[ai].size()) ++ai, ao = 0;
    while (bi < 3 && bo == b[bi].size()) ++bi, bo = 0;
    if (ai == 3 || bi == 3) return (ai == 3 ? 0 : 1) - (bi == 3 ? 0 : 1);
    const size_t n = std::min(a[ai].size() - ao, b[bi].size() - bo);
    if (int c = std::memcmp(a[ai].data() + ao, b[bi].data() + bo, n); c != 0) return c;
    ao += n;
    bo += n;
  }
}

PublishedState::PublishedState(const Catalog& catalog, std::function<int64_t()> now_ms)
    : catalog_(catalog),
      now_ms_(now_ms ? std::move(now_ms) : WallClockMs),
      sources_(catalog.config().sources.size()),
      view_states_(new std::atomic<int>[catalog.views().size()]),
      view_progress_(new std::atomic<double>[catalog.views().size()]),
      aggregate_states_(new std::atomic<int>[catalog.aggregates().size()]),
      aggregate_progress_(new std::atomic<double>[catalog.aggregates().size()]),
      in_flight_(new std::atomic<int64_t>[catalog.config().sources.size()]),
      hot_keys_(catalog) {
  for (size_t i = 0; i < catalog.views().size(); ++i) SetViewState(i, ViewState::kReady, 1.0);
  for (size_t i = 0; i < catalog.aggregates().size(); ++i) {
    SetAggregateState(i, ViewState::kReady, 1.0);
  }
  for (size_t i = 0; i < sources_.size(); ++i) in_flight_[i].store(0);
  auto first = std::make_shared<CommitSnapshot>();
  first->counters.resize(sources_.size());
  const int64_t now = now_ms_();
  for (SourceCounters& c : first->counters) c.last_commit_ms = now;
  first->table_events.resize(catalog.config().tables.size());
  first->view_writes.resize(catalog.views().size());
  first->view_key_type_mismatches.resize(catalog.views().size());
  absl::MutexLock lock(&snapshot_mu_);
  snapshot_ = std::move(first);
}

void PublishedState::RegisterSource(size_t source, std::string kind,
                                    std::function<SourceHealth()> health) {
  sources_[source] = Source{std::move(kind), std::move(health)};
}

void PublishedState::SetFlushError(std::function<std::string()> flush_error) {
  flush_error_ = std::move(flush_error);
}

std::shared_ptr<CommitSnapshot> PublishedState::NextSnapshot() const {
  auto next = std::make_shared<CommitSnapshot>(*Snapshot());
  ++next->number;
  return next;
}

void PublishedState::Publish(std::shared_ptr<const CommitSnapshot> next) {
  const uint64_t number = next->number;
  {
    absl::MutexLock lock(&snapshot_mu_);
    snapshot_.swap(next);
  }
  next.reset();  // the previous snapshot, freed outside the lock (or by its last reader)
  if (number <= commits_.load()) return;
  {
    absl::MutexLock lock(&commit_mu_);
    commits_.store(number);
  }
  committed_.SignalAll();
}

void PublishedState::ReplacePositions(PositionMap positions) {
  auto next = std::make_shared<CommitSnapshot>(*Snapshot());
  next->positions = std::move(positions);
  Publish(std::move(next));
}

std::shared_ptr<const CommitSnapshot> PublishedState::Snapshot() const {
  absl::ReaderMutexLock lock(&snapshot_mu_);
  return snapshot_;
}

bool PublishedState::WaitForCommitAfter(uint64_t since,
                                        std::chrono::steady_clock::time_point deadline) const {
  const absl::Time until =
      absl::Now() + absl::FromChrono(deadline - std::chrono::steady_clock::now());
  absl::MutexLock lock(&commit_mu_);
  while (commits_.load() <= since && !writer_stopped_.load()) {
    if (committed_.WaitWithDeadline(&commit_mu_, until)) break;
  }
  return commits_.load() > since;
}

void PublishedState::SetWriterStopped() {
  {
    absl::MutexLock lock(&commit_mu_);
    writer_stopped_.store(true, std::memory_order_release);
  }
  committed_.SignalAll();
}

void PublishedState::SetViewState(size_t global_view, ViewState state, double progress) {
  view_states_[global_view].store(static_cast<int>(state));
  view_progress_[global_view].store(progress);
}

void PublishedState::SetAggregateState(size_t global_aggregate, ViewState state, double progress) {
  aggregate_states_[global_aggregate].store(static_cast<int>(state));
  aggregate_progress_[global_aggregate].store(progress);
}

ViewState PublishedState::GetViewState(size_t global_view, double* progress) const {
  if (progress != nullptr) *progress = view_progress_[global_view].load();
  return static_cast<ViewState>(view_states_[global_view].load());
}

ViewState PublishedState::GetAggregateState(size_t global_aggregate, double* progress) const {
  if (progress != nullptr) *progress = aggregate_progress_[global_aggregate].load();
  return static_cast<ViewState>(aggregate_states_[global_aggregate].load());
}

void PublishedState::SetCommitError(std::string error, int source) {
  absl::MutexLock lock(&error_mu_);
  commit_error_ = std::move(error);
  commit_error_source_ = source;
}

void PublishedState::SetPrepareError(std::string error) {
  absl::MutexLock lock(&error_mu_);
  prepare_error_ = std::move(error);
}

void PublishedState::SetStoreError(std::string error) {
  absl::MutexLock lock(&error_mu_);
  store_error_ = std::move(error);
}

std::string PublishedState::StoreError() const {
  absl::MutexLock lock(&error_mu_);
  return store_error_;
}

void PublishedState::CountInFlight(size_t source, int64_t delta) {
  in_flight_[source].fetch_add(delta);
}

void PublishedState::WatchQueue(std::function<size_t(size_t)> queued) {
  absl::MutexLock lock(&queue_mu_);
  queued_ = std::move(queued);
}

SourceCounters PublishedState::Counters(size_t source) const {
  return Snapshot()->counters[source];
}

std::string PublishedState::PositionOf(size_t source, std::string_view partition) const {
  const std::string_view name = catalog_.config().sources[source].name;
  auto snapshot = Snapshot();
  auto it = snapshot->positions.find(std::pair<std::string_view, std::string_view>(name, partition));
  return it == snapshot->positions.end() ? "" : it->second;
}

std::map<std::string, std::string> PublishedState::PositionsOf(size_t source) const {
  const std::string& name = catalog_.config().sources[source].name;
  auto snapshot = Snapshot();
  std::map<std::string, std::string> out;
  for (const auto& [key, position] : snapshot->positions) {
    if (key.first == name) out[key.second] = position;
  }
  return out;
}

double PublishedState::IndexWritesPerEvent(size_t global_view) const {
  auto snapshot = Snapshot();
  const uint64_t events = snapshot->table_events[catalog_.views()[global_view].table];
  return events ? double(snapshot->view_writes[global_view]) / double(events) : 0.0;
}

uint64_t PublishedState::KeyTypeMismatches(size_t global_view) const {
  return Snapshot()->view_key_type_mismatches[global_view];
}

std::string PublishedState::WriterError() const {
  {
    absl::MutexLock lock(&error_mu_);
    if (!store_error_.empty()) return store_error_;
    if (!commit_error_.empty()) return commit_error_;
    if (!prepare_error_.empty()) return prepare_error_;
  }
  return flush_error_ ? flush_error_() : "";
}

std::string PublishedState::WriterError(size_t source) const {
  {
    absl::MutexLock lock(&error_mu_);
    if (!store_error_.empty()) return store_error_;  // nothing is applied any more
    if (!commit_error_.empty() &&
        (commit_error_source_ < 0 || static_cast<size_t>(commit_error_source_) == source)) {
      return commit_error_;
    }
    if (!prepare_error_.empty()) return prepare_error_;  // it holds up every source
  }
  return flush_error_ ? flush_error_() : "";
}

bool PublishedState::HasUnapplied(size_t source) const {
  {
    absl::ReaderMutexLock lock(&queue_mu_);
    if (queued_ && queued_(source) > 0) return true;
  }
  return in_flight_[source].load() > 0;
}

std::optional<SourceHealth> PublishedState::SourceHealthOf(size_t source) const {
  if (source >= sources_.size() || !sources_[source].health) return std::nullopt;
  return sources_[source].health();
}

std::string_view PublishedState::SourceKind(size_t source) const {
  return source < sources_.size() ? std::string_view(sources_[source].kind) : std::string_view();
}

}  // namespace cdcview
