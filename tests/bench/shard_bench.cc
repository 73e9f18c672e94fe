// shard_bench: the cost of merging write-sharded partitions on read.
//
// One store holds the same N entries (random sort keys) three times: in one unsharded
// partition (view Plain), spread over 4 shards (Sharded4) and over 16 shards (Sharded16).
// ViewReader::Query is called in-process (no gRPC, so the merge is what is measured) for a
// first page of 100 entries and for the whole partition, the three views interleaved, and the
// p50/p99 latencies are printed beside the ratio to the unsharded query. Prints figures; asserts nothing except
// that every answer has the expected size.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "daemon/apply/applier.h"
#include "daemon/config/config.h"
#include "daemon/log/log.h"
#include "daemon/server/view_reader.h"
#include "daemon/state/catalog.h"
#include "daemon/store/store.h"
#include "tests/fakes/fake_dead_letter_sink.h"
#include "tests/fakes/records.h"

namespace cdcview::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kConfig[] = R"(
sources: [ { name: s, table: T, file: { path: unused.ndjson } } ]
tables:
  - name: T
    key: { partition: PK }
    views:
      - { name: Plain, partition_key: { attribute: P1 }, sort_key: { attribute: K },
          projection: KEYS_ONLY }
      - { name: Sharded4, partition_key: { attribute: P4 }, sort_key: { attribute: K },
          projection: KEYS_ONLY, shards: { count: 4 } }
      - { name: Sharded16, partition_key: { attribute: P16 }, sort_key: { attribute: K },
          projection: KEYS_ONLY, shards: { count: 16 } }
)";

struct Figures {
  double p50_us = 0, p99_us = 0;
};

// Times `iterations` queries of each view, interleaved (one of each per round), so that load
// from other processes on the machine falls on all of them alike and the ratios stay fair.
std::vector<Figures> Measure(const ViewReader& reader, const std::vector<std::string>& views,
                             uint32_t limit, int iterations, int expected) {
  std::vector<v1::QueryRequest> requests(views.size());
  for (size_t v = 0; v < views.size(); ++v) {
    requests[v].set_view(views[v]);
    requests[v].mutable_partition_key()->set_s("HOT");
    requests[v].set_limit(limit);
  }
  std::vector<std::vector<double>> us(views.size());
  for (int i = 0; i < iterations + iterations / 10; ++i) {
    for (size_t v = 0; v < views.size(); ++v) {
      const auto start = Clock::now();
      auto response = reader.Query(requests[v]);
      const double took = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
      if (!response.ok() || response->entries_size() != expected) {
        fprintf(stderr, "shard_bench: %s limit %u: %s, %d entries (want %d)\n", views[v].c_str(),
                limit, response.status().ToString().c_str(),
                response.ok() ? response->entries_size() : -1, expected);
        std::exit(1);
      }
      if (i >= iterations / 10) us[v].push_back(took);  // the first tenth warms the caches
    }
  }
  std::vector<Figures> out;
  for (std::vector<double>& samples : us) {
    std::sort(samples.begin(), samples.end());
    out.push_back({samples[samples.size() / 2],
                   samples[std::min(samples.size() - 1, samples.size() * 99 / 100)]});
  }
  return out;
}

int Main(int argc, char** argv) {
  int entries = 10'000;
  int iterations = 2000;
  std::string tmp = std::filesystem::temp_directory_path().string();
  CLI::App app{"shard_bench: merged queries of write-sharded views vs one unsharded partition"};
  app.add_option("--entries", entries, "entries in the partition")->capture_default_str();
  app.add_option("--iterations", iterations, "queries per figure (limit 100; a tenth of it for "
                                             "full partitions)")->capture_default_str();
  app.add_option("--tmp", tmp, "directory for the store")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  SetLogLevel(LogLevel::kWarning);
  // As cdcviewd does (Application::Start): no debug lock-order graph behind every absl::Mutex.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  absl::StatusOr<Config> config = ParseConfig(kConfig, "shard_bench.yaml");
  if (!config.ok()) return fprintf(stderr, "%s\n", config.status().ToString().c_str()), 1;
  const std::string dir = absl::StrCat(tmp, "/cdcview-shard-bench-", getpid());
  std::filesystem::remove_all(dir);
  config->storage.path = dir;
  config->storage.map_size = 1ull << 30;
  auto store = Store::Open(config->storage, config->tables);
  if (!store.ok()) return fprintf(stderr, "%s\n", store.status().ToString().c_str()), 1;
  Catalog catalog(*config, (*store)->max_key_size());
  FakeDeadLetterSink sink;
  PublishedState published(catalog, [] { return int64_t{0}; });
  Applier applier(catalog, store->get(), nullptr, {&sink}, &published);
  if (!applier.Recover().ok() || !applier.RebuildViews().ok()) return 1;

  std::mt19937_64 rng(20250301);
  std::vector<SourceRecord> batch;
  for (int i = 0; i < entries; ++i) {
    Item item = {{"PK", test::S(absl::StrCat("item#", i))},
                 {"P1", test::S("HOT")},
                 {"P4", test::S(absl::StrCat("HOT#", rng() % 4))},
                 {"P16", test::S(absl::StrCat("HOT#", rng() % 16))},
                 {"K", test::S(absl::StrCat("user", rng() % 1'000'000'000))}};
    batch.push_back(test::Insert(config->tables[0].key, item, test::At(absl::StrCat(i + 1))));
    if (batch.size() == 1000 || i + 1 == entries) {
      if (absl::Status s = applier.ApplyBatch(&batch); !s.ok()) {
        return fprintf(stderr, "%s\n", s.ToString().c_str()), 1;
      }
      batch.clear();
    }
  }
  ViewReader reader(catalog, **store, published, static_cast<uint32_t>(entries));

  printf("shard_bench: %d entries per logical key, ViewReader::Query in-process\n", entries);
  printf("%-26s %10s %10s %12s %12s\n", "query", "p50 us", "p99 us", "p50 ratio", "p99 ratio");
  const std::vector<std::string> views = {"Plain", "Sharded4", "Sharded16"};
  for (uint32_t limit : {100u, static_cast<uint32_t>(entries)}) {
    const int n = limit == 100 ? iterations : std::max(10, iterations / 10);
    const int expected = std::min<int>(limit, entries);
    std::vector<Figures> f = Measure(reader, views, limit, n, expected);
    for (size_t v = 0; v < views.size(); ++v) {
      std::string name = absl::StrCat(views[v], limit == 100 ? " limit 100" : " full");
      printf("%-26s %10.1f %10.1f %11.2fx %11.2fx\n", name.c_str(), f[v].p50_us, f[v].p99_us,
             f[v].p50_us / f[0].p50_us, f[v].p99_us / f[0].p99_us);
    }
  }
  store->reset();
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace cdcview::bench

int main(int argc, char** argv) { return cdcview::bench::Main(argc, argv); }
