// status_bench: whether a GetStatus storm slows the writer. Applies the same workload three
// times, each to a fresh store with the daemon's two-stage writer (Applier::ApplyBatches):
// alone; while --threads threads spin (they take CPU and nothing else); while --threads threads
// call ViewReader::GetStatus in a loop. Prints events/s of each and the ratios: storm / spin
// is what GetStatus costs the writer beyond the CPU its threads take (1.0: nothing), which is
// what a read blocking the committer would show on a machine with fewer cores than threads.
// Figures only, nothing is asserted.
//
//   status_bench [--events N] [--batch B] [--threads K] [--tmp DIR]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "daemon/server/view_reader.h"
#include "tests/bench/workload.h"

namespace cdcview::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  uint64_t events = 200'000;
  size_t batch = 1024;
  int threads = 4;
  uint64_t seed = 20250301;
  std::string config = DefaultConfigPath();
  std::string tmp = std::filesystem::temp_directory_path().string();
};

struct RunResult {
  double seconds = 0;
  uint64_t applied = 0;
  uint64_t status_calls = 0;
};

enum class Load { kNone, kSpin, kGetStatus };

absl::StatusOr<RunResult> RunOnce(const Flags& flags, const std::string& dir, Load load) {
  auto bench = BenchStore::Open(flags.config, dir, 4ull << 30);
  if (!bench.ok()) return bench.status();
  Workload workload = GenerateWorkload({flags.events, flags.seed, 0}, nullptr, nullptr, [](double) {});
  auto batches = SplitIntoBatches(&workload.records, flags.batch);
  ViewReader reader((*bench)->catalog(), (*bench)->store(), (*bench)->published());

  std::atomic<bool> done{false};
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> spun{0};  // the spinning threads' work, which the compiler must keep
  std::vector<std::thread> storm;
  for (int t = 0; load != Load::kNone && t < flags.threads; ++t) {
    storm.emplace_back([&] {
      uint64_t n = 0;
      while (!done.load(std::memory_order_relaxed)) {
        if (load == Load::kSpin) {
          for (int i = 0; i < 1000; ++i) spun.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        v1::StatusResponse status = reader.GetStatus();
        if (status.sources_size() > 0) ++n;
      }
      calls += n;
    });
  }
  size_t next = 0;
  const auto start = Clock::now();
  absl::Status s = (*bench)->applier().ApplyBatches(
      [&](std::vector<SourceRecord>* out) {
        if (next == batches.size()) return false;
        out->swap(batches[next++]);
        return true;
      },
      Applier::OnFailure::kStop);
  RunResult r;
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  done = true;
  for (std::thread& t : storm) t.join();
  if (!s.ok()) return s;
  for (size_t i = 0; i < (*bench)->config().sources.size(); ++i) {
    r.applied += (*bench)->published().Counters(i).applied;
  }
  r.status_calls = calls.load();
  return r;
}

int Run(const Flags& flags) {
  auto dir = MakeTempDir(flags.tmp, "cdcview-status-bench");
  if (!dir.ok()) {
    fprintf(stderr, "status_bench: %s\n", std::string(dir.status().message()).c_str());
    return 1;
  }
  printf("== status_bench: %llu events, batches of %zu, %d GetStatus threads, store in %s ==\n",
         (unsigned long long)flags.events, flags.batch, flags.threads, dir->c_str());
  absl::StatusOr<RunResult> runs[3];
  const char* names[3] = {"alone", "spin", "storm"};
  for (int i = 0; i < 3; ++i) {
    runs[i] = RunOnce(flags, *dir + "/" + names[i], static_cast<Load>(i));
    if (!runs[i].ok()) {
      RemoveTree(*dir);
      fprintf(stderr, "status_bench: %s\n", std::string(runs[i].status().message()).c_str());
      return 1;
    }
  }
  RemoveTree(*dir);
  double rate[3];
  for (int i = 0; i < 3; ++i) rate[i] = double(runs[i]->applied) / runs[i]->seconds;
  printf("apply alone          %12.0f events/s (%llu events, %.2f s)\n", rate[0],
         (unsigned long long)runs[0]->applied, runs[0]->seconds);
  printf("apply + spin         %12.0f events/s (%d threads spinning)\n", rate[1], flags.threads);
  printf("apply + GetStatus    %12.0f events/s (%d threads, %.0f GetStatus/s)\n", rate[2],
         flags.threads, double(runs[2]->status_calls) / runs[2]->seconds);
  printf("storm / alone        %12.3f\n", rate[2] / rate[0]);
  printf("storm / spin         %12.3f\n", rate[2] / rate[1]);
  printf("cores                %12u\n", std::thread::hardware_concurrency());
  return 0;
}

}  // namespace
}  // namespace cdcview::bench

int main(int argc, char** argv) {
  cdcview::bench::Flags flags;
  CLI::App app{"Applies a workload with and without a GetStatus storm; prints events/s of both."};
  app.add_option("--events", flags.events, "events to apply per run");
  app.add_option("--batch", flags.batch, "events per batch");
  app.add_option("--threads", flags.threads, "threads calling GetStatus in a loop");
  app.add_option("--seed", flags.seed, "workload seed");
  app.add_option("--config", flags.config, "config (tables and views)");
  app.add_option("--tmp", flags.tmp, "where the stores go (tmpfs keeps fsync out of it)");
  CLI11_PARSE(app, argc, argv);
  // As cdcviewd does (Application::Start): no debug lock-order graph behind every absl::Mutex.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return cdcview::bench::Run(flags);
}
