// Workload: the benchmarks' in-memory change stream and the store they apply it to.
//
// The stream follows the entity mix of examples/gen_sample.py (votes sharded by day, users,
// orders whose open_since appears and disappears, enrollments, stores, players with numeric
// scores) over the table App of examples/cdcview.yaml: 60% inserts, 30% modifies and 10%
// removes of live items. It is generated completely before anything is timed, from a seed,
// so two runs with the same flags apply the same events.
//
// Besides the SourceRecords, the generator can log the exact LMDB writes the applier will
// make for them (view puts and deletes from ViewBuilder::Diff, then the items put), so the
// raw-LMDB ceiling replays the same keys and values in the same order.
//
// Not thread-safe; benchmark drivers use it from their main thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/apply/applier.h"
#include "daemon/config/config.h"
#include "daemon/metrics/metrics.h"
#include "daemon/sources/change_source.h"
#include "daemon/state/catalog.h"
#include "daemon/state/published_state.h"
#include "daemon/store/store.h"
#include "index_builders/view_builder.h"

namespace cdcview::bench {

// One logged LMDB write. `db` 0 is the table's items database, 1 + i is the table's view i.
struct LoggedWrite {
  bool is_delete = false;
  uint8_t db = 0;
  uint32_t key_size = 0;
  uint32_t value_size = 0;
  uint64_t offset = 0;  // of the key in WriteLog::arena; the value follows the key
};

// The writes of a workload, event by event.
struct WriteLog {
  std::string arena;
  std::vector<LoggedWrite> writes;
  // Event i made writes [event_end[i-1], event_end[i]) (event_end[-1] is 0).
  std::vector<uint64_t> event_end;
  uint64_t view_puts = 0;
  uint64_t view_deletes = 0;
  uint64_t item_puts = 0;

  std::string_view key(const LoggedWrite& w) const { return {arena.data() + w.offset, w.key_size}; }
  std::string_view value(const LoggedWrite& w) const {
    return {arena.data() + w.offset + w.key_size, w.value_size};
  }
};

struct Workload {
  std::vector<SourceRecord> records;
  uint64_t inserts = 0, modifies = 0, removes = 0;
  // Live votes at the end, for queries on GSI1: partition key DAY#<day>#<shard> and the
  // voter (GSI1SK, unique within its partition).
  struct VoteKey {
    std::string partition;
    std::string user;
  };
  std::vector<VoteKey> live_votes;
  // GSI1 vote partitions holding at least 100 live votes.
  std::vector<std::string> big_vote_partitions;
};

struct WorkloadOptions {
  uint64_t events = 1'000'000;
  uint64_t seed = 20250301;
  uint32_t source = 0;  // SourceRecord::source of every record
};

// `builder` and `log` may be null (no write log). `progress(fraction)` is called every ~10%.
// `builder` must be the ViewBuilder of table App as configured in examples/cdcview.yaml.
Workload GenerateWorkload(const WorkloadOptions& options, const ViewBuilder* builder,
                          WriteLog* log, const std::function<void(double)>& progress);

// The daemon's writer side without sources: config, store in a fresh directory, catalog,
// apply probe, applier (views READY). Owns everything.
class BenchStore {
 public:
  // Loads `config_path`, points storage at `dir` (which must not hold a store) with an initial
  // map of `map_size` bytes; without `aggregates`, the config's aggregates are left out (the
  // views-only baseline); `write_map` overrides storage.write_map; a non-empty `views` keeps
  // only those views of the first table (each must exist). Errors name the step that failed.
  static absl::StatusOr<std::unique_ptr<BenchStore>> Open(
      const std::string& config_path, const std::string& dir, uint64_t map_size,
      bool aggregates = false, std::optional<bool> write_map = std::nullopt,
      const std::vector<std::string>& views = {});
  ~BenchStore();

  const Config& config() const { return *config_; }
  Store& store() { return *store_; }
  const Catalog& catalog() const { return *catalog_; }
  Applier& applier() { return *applier_; }
  const PublishedState& published() const { return *published_; }
  // Dead letters written (the workload should produce none).
  uint64_t dead_letters() const;

  // Total index writes (puts + deletes over all views) applied since start.
  uint64_t IndexWrites() const;

 private:
  class CountingSink;
  BenchStore() = default;
  std::unique_ptr<Config> config_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<MetricsRegistry> metrics_;
  std::unique_ptr<ApplyProbe> probe_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<CountingSink> sink_;
  std::unique_ptr<PublishedState> published_;
  std::unique_ptr<Applier> applier_;
};

// Splits `records` into batches of `batch_size` (moving them).
std::vector<std::vector<SourceRecord>> SplitIntoBatches(std::vector<SourceRecord>* records,
                                                        size_t batch_size);

// A fresh directory under `base` (mkdtemp); removed by RemoveTree.
absl::StatusOr<std::string> MakeTempDir(const std::string& base, const std::string& prefix);
void RemoveTree(const std::string& dir);

// Prints "[name] label NN%" to stderr.
void ReportProgress(std::string_view name, std::string_view label, double fraction);

// The default config: examples/cdcview.yaml of the source tree.
std::string DefaultConfigPath();

}  // namespace cdcview::bench
