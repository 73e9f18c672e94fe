// watch_bench: Watch fan-out at full ingest rate.
//
// The writer applies the generated workload (tests/bench/workload.h) as fast as it can, twice
// on fresh stores: once with no watcher, once with N gRPC Watch streams (in-process server,
// real client streams on their own threads) on one view. Prints ingest events/s for both,
// the changes delivered per second in total, and the delivery latency (commit -> the client
// read the change) p50/p99. Asserts nothing; progress goes to stderr.
// The clients run in this process at the lowest CPU priority (they stand for consumers on
// other machines); on a 2-core machine their parsing still competes with the server.
#include <grpcpp/grpcpp.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "cdcview/v1/view_service.grpc.pb.h"
#include "daemon/server/view_reader.h"
#include "daemon/server/view_service.h"
#include "daemon/server/watch.h"
#include "daemon/store/change_log.h"
#include "tests/bench/workload.h"

namespace cdcview::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  uint64_t events = 20'000;
  uint64_t seed = 20250301;
  int watchers = 100;
  uint64_t rate = 0;  // events/s the writer is paced to; 0: as fast as it can
  std::string view = "GSI1";
  std::string config = DefaultConfigPath();
  std::string tmp = std::filesystem::temp_directory_path().string();
};

struct Commit {
  uint64_t head;  // the change log's newest sequence after the batch
  Clock::time_point at;
};

struct RunResult {
  double ingest_seconds = 0;
  double deliver_seconds = 0;  // first commit -> the last watcher has the last change
  uint64_t delivered = 0;
  uint64_t fell_behind = 0;
  std::vector<double> latency_us;
};

// The example config with a change log big enough that no watcher is cut off for the
// retention's sake: what is measured is delivery, not the cut-off.
absl::StatusOr<std::string> ConfigWithBigLog(const std::string& path, const std::string& dir) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  std::string yaml = text.str();
  const size_t at = yaml.find("\nwatch:");
  if (at != std::string::npos) {  // drop the file's watch: block (it ends at a blank line)
    yaml.erase(at + 1, yaml.find("\n\n", at + 1) - at);
  }
  yaml += "\nwatch: { retain_changes: 20000000, max_lag_changes: 19000000 }\n";
  std::string out = dir + "/watch_bench.yaml";
  std::ofstream(out) << yaml;
  return out;
}

absl::StatusOr<RunResult> RunOnce(const Flags& flags, const std::string& config, const std::string& dir,
                                  int watchers) {
  auto bench = BenchStore::Open(config, dir, 4ull << 30);
  if (!bench.ok()) return bench.status();
  Workload workload = GenerateWorkload({flags.events, flags.seed, 0}, nullptr, nullptr, [](double) {});
  // Paced, the writer commits every 20 ms like a daemon at that rate (apply.max_delay_ms).
  const size_t batch_size = flags.rate ? std::max<size_t>(1, flags.rate / 50) : 1024;
  auto batches = SplitIntoBatches(&workload.records, batch_size);
  const ViewRef* view = (*bench)->catalog().FindView(flags.view);
  if (view == nullptr) return absl::NotFoundError("no view " + flags.view);

  ViewReader reader((*bench)->catalog(), (*bench)->store(), (*bench)->published());
  WatchHub hub((*bench)->catalog(), (*bench)->store(), (*bench)->published(), reader,
               (*bench)->config().watch, nullptr);
  auto server = ViewServer::Start("127.0.0.1:0", reader, nullptr, &hub);
  if (!server.ok()) return server.status();

  std::vector<Commit> commits;
  commits.reserve(batches.size() + 1);
  std::mutex mu;
  RunResult result;
  std::atomic<int> ready{0};
  std::atomic<uint64_t> target{0};  // the view's last change sequence, once known
  std::vector<std::thread> clients;
  std::vector<std::vector<std::pair<uint64_t, Clock::time_point>>> received(watchers);
  std::vector<Clock::time_point> last_at(watchers);
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  for (int w = 0; w < watchers; ++w) contexts.push_back(std::make_unique<grpc::ClientContext>());
  std::vector<std::atomic<uint64_t>> last_seq(watchers);
  std::vector<uint64_t> counts(watchers, 0);
  for (int w = 0; w < watchers; ++w) {
    clients.emplace_back([&, w] {
      // The clients stand for consumers on other machines: keep their parsing off the
      // writer's CPU share as far as one process can.
      setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 19);
      // One channel per watcher, as separate consumers would have.
      grpc::ChannelArguments args;
      args.SetInt("grpc.use_local_subchannel_pool", 1);
      auto channel = grpc::CreateCustomChannel(absl::StrFormat("127.0.0.1:%d", (*server)->port()),
                                               grpc::InsecureChannelCredentials(), args);
      auto stub = v1::ViewService::NewStub(channel);
      v1::WatchRequest req;
      req.set_view(flags.view);
      req.set_snapshot(true);
      auto stream = stub->Watch(contexts[w].get(), req);
      v1::WatchEvent e;
      auto& mine = received[w];
      while (stream->Read(&e)) {
        const auto now = Clock::now();
        if (e.has_snapshot_done()) {
          ++ready;
          continue;
        }
        if (e.has_fell_behind()) {
          std::lock_guard lock(mu);
          ++result.fell_behind;
          break;
        }
        if (!e.has_change()) continue;
        auto seq = DecodeWatchPosition(e.position(), view->spec->name, view->fingerprint);
        if (!seq.ok()) break;
        ++counts[w];
        // Latency of every 16th change by sequence: an unbiased sample that keeps 100
        // watchers' records in memory.
        if (*seq % 16 == 0) mine.emplace_back(*seq, now);
        last_seq[w] = *seq;
        last_at[w] = now;
      }
      stream->Finish();
    });
  }
  while (ready.load() < watchers) std::this_thread::sleep_for(std::chrono::milliseconds(5));

  const auto start = Clock::now();
  for (size_t b = 0; b < batches.size(); ++b) {
    if (flags.rate) {
      std::this_thread::sleep_until(start + std::chrono::microseconds(
                                                static_cast<int64_t>(b * batch_size * 1e6 / flags.rate)));
    }
    if (absl::Status s = (*bench)->applier().ApplyBatch(&batches[b]); !s.ok()) return s;
    const auto at = Clock::now();
    auto txn = (*bench)->store().BeginRead();
    if (!txn.ok()) return txn.status();
    auto bounds = ReadChangeLogBounds(**txn, (*bench)->store().changes());
    if (!bounds.ok()) return bounds.status();
    commits.push_back({*bounds ? (*bounds)->newest : 0, at});
  }
  result.ingest_seconds = std::chrono::duration<double>(Clock::now() - start).count();

  // The view's last change: every watcher is done when it has it.
  {
    auto txn = (*bench)->store().BeginRead();
    if (!txn.ok()) return txn.status();
    ChangeLogReader log(**txn, (*bench)->store().changes());
    absl::StatusOr<bool> ok = log.Seek(0);
    for (; ok.ok() && *ok; ok = log.Next()) {
      if (log.change().view == flags.view) target = log.change().sequence;
    }
    if (!ok.ok()) return ok.status();
  }
  // Every watcher has the view's last change, or a minute passed: end the streams.
  for (int i = 0; i < 600; ++i) {
    bool all = true;
    for (int w = 0; w < watchers; ++w) all = all && last_seq[w].load() >= target.load();
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (auto& c : contexts) c->TryCancel();
  for (auto& t : clients) t.join();
  hub.Shutdown();
  (*server)->Shutdown(100);

  Clock::time_point last = start;
  for (int w = 0; w < watchers; ++w) {
    result.delivered += counts[w];
    if (counts[w] > 0) last = std::max(last, last_at[w]);
    for (const auto& [seq, at] : received[w]) {
      // The batch that committed `seq`: the first whose head reaches it.
      auto it = std::lower_bound(commits.begin(), commits.end(), seq,
                                 [](const Commit& c, uint64_t s) { return c.head < s; });
      if (it == commits.end()) continue;
      result.latency_us.push_back(
          std::max(0.0, std::chrono::duration<double, std::micro>(at - it->at).count()));
    }
  }
  result.deliver_seconds = std::chrono::duration<double>(last - start).count();
  return result;
}

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1)));
  std::nth_element(v.begin(), v.begin() + i, v.end());
  return v[i];
}

int Run(const Flags& flags) {
  // As cdcviewd does (Application::Start): no debug lock-order graph behind every absl::Mutex.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  auto dir = MakeTempDir(flags.tmp, "cdcview-watch-bench");
  if (!dir.ok()) {
    fprintf(stderr, "watch_bench: %s\n", std::string(dir.status().message()).c_str());
    return 1;
  }
  auto config = ConfigWithBigLog(flags.config, *dir);
  if (!config.ok()) {
    fprintf(stderr, "watch_bench: %s\n", std::string(config.status().message()).c_str());
    return 1;
  }
  printf("== watch_bench: %llu events, view %s, %d watchers, writer %s, store in %s ==\n",
         (unsigned long long)flags.events, flags.view.c_str(), flags.watchers,
         flags.rate ? absl::StrFormat("paced to %d events/s", flags.rate).c_str() : "at full speed",
         dir->c_str());
  ReportProgress("watch_bench", "no watchers", 0);
  auto base = RunOnce(flags, *config, *dir + "/base", 0);
  ReportProgress("watch_bench", "with watchers", 0);
  auto fan = RunOnce(flags, *config, *dir + "/fan", flags.watchers);
  RemoveTree(*dir);
  if (!base.ok() || !fan.ok()) {
    fprintf(stderr, "watch_bench: %s\n",
            std::string((base.ok() ? fan.status() : base.status()).message()).c_str());
    return 1;
  }
  const double base_rate = flags.events / base->ingest_seconds;
  const double fan_rate = flags.events / fan->ingest_seconds;
  printf("ingest, no watchers      %10.0f events/s\n", base_rate);
  printf("ingest, %3d watchers     %10.0f events/s  (%.0f%% of no watchers)\n", flags.watchers,
         fan_rate, 100.0 * fan_rate / base_rate);
  printf("changes delivered        %10llu  (%llu per watcher), %.0f changes/s in total\n",
         (unsigned long long)fan->delivered,
         (unsigned long long)(flags.watchers ? fan->delivered / flags.watchers : 0),
         fan->delivered / fan->deliver_seconds);
  printf("delivery latency         p50 %.1f ms  p99 %.1f ms  (commit -> client read)\n",
         Percentile(fan->latency_us, 0.50) / 1000, Percentile(fan->latency_us, 0.99) / 1000);
  printf("watchers cut off         %llu\n", (unsigned long long)fan->fell_behind);
  return 0;
}

}  // namespace
}  // namespace cdcview::bench

int main(int argc, char** argv) {
  cdcview::bench::Flags flags;
  CLI::App app{"watch_bench: Watch fan-out at full ingest rate"};
  app.add_option("--events", flags.events, "events applied")->capture_default_str();
  app.add_option("--watchers", flags.watchers, "Watch streams")->capture_default_str();
  app.add_option("--rate", flags.rate, "pace the writer to this many events/s (0: full speed)")
      ->capture_default_str();
  app.add_option("--view", flags.view, "the watched view")->capture_default_str();
  app.add_option("--seed", flags.seed, "workload seed")->capture_default_str();
  app.add_option("--config", flags.config, "the example config")->capture_default_str();
  app.add_option("--tmp", flags.tmp, "where the stores go")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return cdcview::bench::Run(flags);
}
