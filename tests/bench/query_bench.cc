// query_bench: query latency and throughput through the real gRPC server.
//
// Loads a store with the benchmark workload (tests/bench/workload.h), starts a ViewServer on
// 127.0.0.1:0 (as cdcviewd starts it) and drives it over loopback gRPC from a client in a
// child process, as a service's client would be. (In one process, client and server shared
// gRPC's internal threads: a scheduler trace of an open-loop stall showed the client's sender
// thread running 30 ms at a stretch on gRPC work, charged to the server's latency.)
//   point  Query on GSI1, EQ on a voter (unique within its DAY#<day>#<shard> partition), limit 1
//   range  Query on a GSI1 vote partition with >= 100 entries, limit 100
// (a) closed loop: sync stubs on several threads, each sending its next query as soon as the
//     previous answers: max QPS.
// (b) open loop: a client sends at a fixed rate; latency runs from the scheduled send time, so
//     a stalled server is charged for the queries that waited (no coordinated omission).
//     Point at --qps, then range at each of --range-rates. The client is the lean HTTP/2 client
//     of h2_client.h (one thread, no gRPC library), so that its own scheduling adds least to
//     the figures; the point row is repeated with gRPC's C++ async client for comparison.
// (c) first of all, in the server process: ViewReader::Query alone, point at --qps and range
//     at the first of --range-rates, no gRPC: the part of the latency that is ours, not the
//     transport's. (Printed before the client's banner.)
// --fast-tls: the fast read port serves TLS (a P-256 certificate made with `openssl`); its rows
// then come from gRPC's async client over TLS (the lean HTTP/2 client has no TLS).
// Client and server share the machine's cores; "cpu" is each process's CPU time per query.
// Prints figures beside their targets; asserts nothing.
// Progress goes to stderr.
#include <grpcpp/grpcpp.h>
#include <prometheus/registry.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "cdcview/v1/view_service.grpc.pb.h"
#include "daemon/server/h2_read_server.h"
#include "daemon/server/view_reader.h"
#include "daemon/server/view_service.h"
#include "tests/bench/h2_client.h"
#include "tests/bench/workload.h"

namespace cdcview::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  uint64_t events = 200'000;
  uint64_t seed = 20250301;
  int threads = 4;
  // Range queries also run open loop at each of these rates: the highest one whose p99 stays
  // under the target is printed.
  std::vector<double> range_rates = {250, 500, 750, 1000, 1250, 1500};
  // h2: the lean HTTP/2 client; async: gRPC's C++ async stub; threads: blocking stubs on
  // --open-threads threads
  std::string open_client = "h2";
  int open_threads = 8;
  double closed_seconds = 3;
  double open_seconds = 5;
  double qps = 5000;
  std::string config = DefaultConfigPath();
  std::string tmp = std::filesystem::temp_directory_path().string();
  bool fast_tls = false;
  std::string tls_dir;  // set by Run when fast_tls: tls.crt and tls.key
};

// One kind of query: the requests to cycle through and the entry count each must return.
struct QueryKind {
  std::string name;
  std::vector<v1::QueryRequest> requests;
  int expected_entries = 0;
};

struct Samples {
  std::vector<double> latency_us;
  uint64_t errors = 0;      // RPC failures
  uint64_t wrong_size = 0;  // answers without the expected number of entries
  uint64_t not_sent = 0;    // open loop: scheduled but given up on (server saturated)
};

void Merge(Samples&& from, Samples* into) {
  into->latency_us.insert(into->latency_us.end(), from.latency_us.begin(), from.latency_us.end());
  into->errors += from.errors;
  into->wrong_size += from.wrong_size;
  into->not_sent += from.not_sent;
}

// Sends one query and records its latency from `start`.
void Send(v1::ViewService::Stub& stub, const QueryKind& kind, size_t i, Clock::time_point start,
          Samples* out) {
  grpc::ClientContext ctx;
  v1::QueryResponse resp;
  grpc::Status s = stub.Query(&ctx, kind.requests[i % kind.requests.size()], &resp);
  out->latency_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  if (!s.ok()) {
    if (out->errors++ == 0) fprintf(stderr, "query_bench: %s: %s\n", kind.name.c_str(), s.error_message().c_str());
  } else if (resp.entries_size() != kind.expected_entries) {
    ++out->wrong_size;
  }
}

struct Result {
  Samples samples;
  double seconds = 0;
  double client_cpu_seconds = 0;
  double server_cpu_seconds = 0;
};

// CPU time (user + system) of this process so far.
double ProcessCpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  auto secs = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) / 1e6; };
  return secs(u.ru_utime) + secs(u.ru_stime);
}

// CPU time of the server, the client's parent process, from /proc (clock ticks); 0 if unreadable.
double ServerCpuSeconds() {
  std::ifstream in(absl::StrFormat("/proc/%d/stat", getppid()));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t after_name = stat.rfind(')');
  if (after_name == std::string::npos) return 0;
  std::istringstream fields(stat.substr(after_name + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {  // utime and stime are fields 14 and 15
    if (i >= 14) ticks += std::stod(field);
  }
  return ticks / double(sysconf(_SC_CLK_TCK));
}

// CPU used by client and server between construction and Stop.
class CpuMeter {
 public:
  CpuMeter() : client_(ProcessCpuSeconds()), server_(ServerCpuSeconds()) {}
  void Stop(Result* r) const {
    r->client_cpu_seconds = ProcessCpuSeconds() - client_;
    r->server_cpu_seconds = ServerCpuSeconds() - server_;
  }

 private:
  double client_, server_;
};

Result ClosedLoop(v1::ViewService::Stub& stub, const QueryKind& kind, int threads, double seconds) {
  std::vector<Samples> per_thread(threads);
  std::vector<std::thread> workers;
  const CpuMeter cpu;
  auto start = Clock::now();
  auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (size_t i = t * 7919; Clock::now() < deadline; i += threads) {
        Send(stub, kind, i, Clock::now(), &per_thread[t]);
      }
    });
  }
  for (auto& w : workers) w.join();
  Result r;
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  cpu.Stop(&r);
  for (auto& s : per_thread) Merge(std::move(s), &r.samples);
  return r;
}

// The open loop's client: one thread sends each query at its scheduled time through the async
// stub, one thread takes the answers from the completion queue. Two client threads whatever the
// rate, so the client's own scheduling on a small machine stays out of the server's figures
// (eight sync client threads made a good part of the tail), and a send never waits for an
// answer: latency runs from the scheduled send time, so a stalled server is charged for every
// query that waited and lateness of the sender itself counts against the figures too.
Result OpenLoop(v1::ViewService::Stub& stub, const QueryKind& kind, double qps, double seconds) {
  struct Call {
    grpc::ClientContext ctx;
    v1::QueryResponse resp;
    grpc::Status status;
    Clock::time_point scheduled;
    std::unique_ptr<grpc::ClientAsyncResponseReader<v1::QueryResponse>> reader;
  };
  const uint64_t total = static_cast<uint64_t>(qps * seconds);
  const auto interval = std::chrono::duration<double>(1.0 / qps);
  const auto t0 = Clock::now() + std::chrono::milliseconds(50);
  const auto give_up = t0 + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(seconds * 3));
  const CpuMeter cpu;
  grpc::CompletionQueue cq;
  Samples samples;
  samples.latency_us.reserve(total);
  Clock::time_point last_end = t0;
  std::thread receiver([&] {
    void* tag;
    bool ok;
    while (cq.Next(&tag, &ok)) {
      std::unique_ptr<Call> call(static_cast<Call*>(tag));
      last_end = Clock::now();
      samples.latency_us.push_back(
          std::chrono::duration<double, std::micro>(last_end - call->scheduled).count());
      if (!call->status.ok()) {
        if (samples.errors++ == 0) {
          fprintf(stderr, "query_bench: %s: %s\n", kind.name.c_str(), call->status.error_message().c_str());
        }
      } else if (call->resp.entries_size() != kind.expected_entries) {
        ++samples.wrong_size;
      }
    }
  });
  // A saturated server would keep the answers coming for ever: past the give-up time the rest
  // is counted as not sent.
  uint64_t not_sent = 0;
  for (uint64_t k = 0; k < total; ++k) {
    auto scheduled = t0 + std::chrono::duration_cast<Clock::duration>(interval * double(k));
    if (Clock::now() > give_up) {
      not_sent = total - k;
      break;
    }
    std::this_thread::sleep_until(scheduled);
    auto* call = new Call;
    call->scheduled = scheduled;
    call->reader = stub.PrepareAsyncQuery(&call->ctx, kind.requests[k % kind.requests.size()], &cq);
    call->reader->StartCall();
    call->reader->Finish(&call->resp, &call->status, call);
  }
  cq.Shutdown();  // Next keeps returning the calls in flight, then false
  receiver.join();
  Result r;
  r.samples = std::move(samples);
  r.samples.not_sent = not_sent;
  r.seconds = std::chrono::duration<double>(last_end - t0).count();
  cpu.Stop(&r);
  return r;
}

// The open loop through the lean HTTP/2 client (tests/bench/h2_client.h): one thread, no gRPC
// library on the client side, so the client's own scheduling adds least to the figures.
Result OpenLoopH2(int port, const QueryKind& kind, double qps, double seconds) {
  std::vector<std::string> requests;
  requests.reserve(kind.requests.size());
  for (const auto& q : kind.requests) requests.push_back(q.SerializeAsString());
  const CpuMeter cpu;
  auto run = RunH2OpenLoop(port, "/cdcview.v1.ViewService/Query", requests, qps, seconds);
  Result r;
  cpu.Stop(&r);
  if (!run.ok()) {
    fprintf(stderr, "query_bench: %s: the HTTP/2 client failed: %s\n", kind.name.c_str(),
            std::string(run.status().message()).c_str());
    r.samples.errors = 1;
    return r;
  }
  r.seconds = run->seconds;
  r.samples.not_sent = run->not_sent;
  r.samples.latency_us.reserve(run->calls.size());
  v1::QueryResponse resp;
  for (const H2Call& call : run->calls) {
    r.samples.latency_us.push_back(call.latency_us);
    if (call.grpc_status != 0) {
      if (r.samples.errors++ == 0) {
        fprintf(stderr, "query_bench: %s: grpc-status %d: %s\n", kind.name.c_str(), call.grpc_status,
                call.grpc_message.c_str());
      }
    } else if (!resp.ParseFromString(call.response) || resp.entries_size() != kind.expected_entries) {
      ++r.samples.wrong_size;
    }
  }
  return r;
}

// The open loop on ViewReader directly, on this thread: latency from the scheduled time.
Result ReaderOpenLoop(const ViewReader& reader, const QueryKind& kind, double qps, double seconds) {
  const uint64_t total = static_cast<uint64_t>(qps * seconds);
  const auto interval = std::chrono::duration<double>(1.0 / qps);
  auto thread_cpu = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
  };
  // Sleeps end up to the timer slack (50 us by default) late, which would count as latency.
  const int slack = prctl(PR_GET_TIMERSLACK);
  prctl(PR_SET_TIMERSLACK, 1);
  Result r;
  r.samples.latency_us.reserve(total);
  const double cpu0 = thread_cpu();
  const auto t0 = Clock::now();
  for (uint64_t k = 0; k < total; ++k) {
    auto scheduled = t0 + std::chrono::duration_cast<Clock::duration>(interval * double(k));
    std::this_thread::sleep_until(scheduled);
    auto resp = reader.Query(kind.requests[k % kind.requests.size()], ViewReader::Deadline::max());
    r.samples.latency_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - scheduled).count());
    if (!resp.ok()) {
      if (r.samples.errors++ == 0) {
        fprintf(stderr, "query_bench: %s: %s\n", kind.name.c_str(), std::string(resp.status().message()).c_str());
      }
    } else if (resp->entries_size() != kind.expected_entries) {
      ++r.samples.wrong_size;
    }
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.server_cpu_seconds = thread_cpu() - cpu0;  // the "client" is this thread too: 0 there
  prctl(PR_SET_TIMERSLACK, slack);  // gRPC's threads, started later, inherit it: keep cdcviewd's
  return r;
}

// The open loop with blocking stubs on `threads` threads (--open-client threads): at most
// `threads` queries in flight; a send whose thread is still waiting goes out late, and the
// lateness counts in its latency.
Result OpenLoopThreads(v1::ViewService::Stub& stub, const QueryKind& kind, int threads, double qps,
                       double seconds) {
  const CpuMeter cpu;
  const uint64_t total = static_cast<uint64_t>(qps * seconds);
  const auto interval = std::chrono::duration<double>(1.0 / qps);
  std::vector<Samples> per_thread(threads);
  std::vector<Clock::time_point> last_end(threads);
  std::vector<std::thread> workers;
  const auto t0 = Clock::now() + std::chrono::milliseconds(50);
  const auto give_up = t0 + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(seconds * 3));
  for (int t = 0; t < threads; ++t) {
    per_thread[t].latency_us.reserve(total / threads + 1);
    workers.emplace_back([&, t] {
      // Thread t sends queries t, t + threads, ...; each at its scheduled time, or at once
      // if it is late (the lateness counts in its latency). A saturated server would keep
      // the loop going for ever: past the give-up time the rest is counted as not sent.
      for (uint64_t k = t; k < total; k += threads) {
        auto scheduled = t0 + std::chrono::duration_cast<Clock::duration>(interval * double(k));
        if (Clock::now() > give_up) {
          per_thread[t].not_sent += (total - k + threads - 1) / threads;
          break;
        }
        std::this_thread::sleep_until(scheduled);
        Send(stub, kind, k, scheduled, &per_thread[t]);
      }
      last_end[t] = Clock::now();
    });
  }
  for (auto& w : workers) w.join();
  Result r;
  r.seconds = std::chrono::duration<double>(*std::max_element(last_end.begin(), last_end.end()) - t0).count();
  cpu.Stop(&r);
  for (auto& s : per_thread) Merge(std::move(s), &r.samples);
  return r;
}

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t i = static_cast<size_t>(p * double(sorted.size() - 1) + 0.5);
  return sorted[std::min(i, sorted.size() - 1)];
}

// Prints one result line; returns p99 in microseconds, or infinity for a row that cannot meet
// a target: no answers, errors, wrong answers or queries not sent.
double Print(const char* name, Result r) {
  auto& lat = r.samples.latency_us;
  std::sort(lat.begin(), lat.end());
  double p99 = Percentile(lat, 0.99);
  const double n = std::max<double>(1, double(lat.size()));
  printf("  %-6s %8.0f QPS  p50 %6.0f us  p90 %6.0f us  p99 %6.0f us  max %7.0f us  cpu us/query server %4.0f client %4.0f  (%zu queries, %llu errors, %llu wrong sizes)",
         name, double(lat.size()) / r.seconds, Percentile(lat, 0.5), Percentile(lat, 0.9), p99,
         lat.empty() ? 0.0 : lat.back(), r.server_cpu_seconds * 1e6 / n, r.client_cpu_seconds * 1e6 / n,
         lat.size(), (unsigned long long)r.samples.errors, (unsigned long long)r.samples.wrong_size);
  if (r.samples.not_sent > 0) {
    printf(" [saturated: %llu scheduled queries not sent within 3x the duration]",
           (unsigned long long)r.samples.not_sent);
  }
  if (lat.empty() || r.samples.errors > 0 || r.samples.wrong_size > 0 || r.samples.not_sent > 0) {
    return std::numeric_limits<double>::infinity();
  }
  return p99;
}

std::vector<QueryKind> MakeQueries(const Workload& w, uint64_t seed) {
  QueryKind point{"point", {}, 1}, range{"range", {}, 100};
  std::vector<Workload::VoteKey> votes = w.live_votes;
  std::shuffle(votes.begin(), votes.end(), std::mt19937_64(seed));
  votes.resize(std::min<size_t>(votes.size(), 20000));
  for (const auto& v : votes) {
    v1::QueryRequest q;
    q.set_view("GSI1");
    q.mutable_partition_key()->set_s(v.partition);
    q.mutable_sort()->set_op(v1::SortCondition::EQ);
    q.mutable_sort()->mutable_value()->set_s(v.user);
    q.set_limit(1);
    point.requests.push_back(std::move(q));
  }
  for (const auto& p : w.big_vote_partitions) {
    v1::QueryRequest q;
    q.set_view("GSI1");
    q.mutable_partition_key()->set_s(p);
    q.set_limit(100);
    range.requests.push_back(std::move(q));
  }
  return {point, range};
}

// The client process: both loops against the server on 127.0.0.1:`port`.
int DriveClient(const Flags& flags, const std::vector<QueryKind>& kinds, int port, int fast_port,
                size_t live_votes, size_t big_partitions) {
  // The open loops' senders sleep until each send is due: without this they would wake up to
  // 50 us (the default timer slack) late, and the lateness counts as latency.
  prctl(PR_SET_TIMERSLACK, 1);
  auto channel = grpc::CreateChannel(absl::StrFormat("127.0.0.1:%d", port),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::ViewService::NewStub(channel);

  printf("== query_bench: store of %llu events (%zu live votes, %zu GSI1 partitions >= 100), "
         "client in a child process, ViewServer on 127.0.0.1:%d ==\n",
         (unsigned long long)flags.events, live_votes,
         big_partitions, port);
  for (const QueryKind& k : kinds) ClosedLoop(*stub, k, flags.threads, 0.3);  // warm-up
  printf("closed loop, %d client threads, %.1f s each (max QPS):\n", flags.threads, flags.closed_seconds);
  for (const QueryKind& k : kinds) {
    ReportProgress("query_bench", "closed loop " + k.name, 0);
    Print(k.name.c_str(), ClosedLoop(*stub, k, flags.threads, flags.closed_seconds));
    printf("\n");
  }
  auto open_loop = [&](const std::string& client, const QueryKind& k, double rate) {
    if (client == "threads") return OpenLoopThreads(*stub, k, flags.open_threads, rate, flags.open_seconds);
    if (client == "async") return OpenLoop(*stub, k, rate, flags.open_seconds);
    return OpenLoopH2(port, k, rate, flags.open_seconds);
  };
  auto describe = [&](const std::string& client) {
    if (client == "threads") return absl::StrFormat("%d client threads with blocking gRPC stubs", flags.open_threads);
    if (client == "async") return std::string("gRPC C++ async client (one sender, one receiver thread)");
    return std::string("lean HTTP/2 client (nghttp2, one thread)");
  };
  // Point only: a 100-row range answer takes most of a millisecond of CPU, so two cores
  // cannot serve 5k of them; the sweep below finds the range rate that keeps the p99.
  printf("open loop, point queries at %.0f QPS for %.0f s (latency from the scheduled send):\n",
         flags.qps, flags.open_seconds);
  ReportProgress("query_bench", "open loop point", 0);
  printf("  %s:\n", describe(flags.open_client).c_str());
  double p99 = Print("point", open_loop(flags.open_client, kinds[0], flags.qps));
  printf("   target p99 < 1000 us at 5k QPS %s\n", p99 < 1000 ? "[met]" : "[below target]");
  // The same load from a gRPC client library, for comparison: its threads share the two
  // cores with the server, and their scheduling shows in the tail.
  if (flags.open_client != "async") {
    printf("  %s:\n", describe("async").c_str());
    Print("point", open_loop("async", kinds[0], flags.qps));
    printf("\n");
  }
  // The same point load on the fast read port (H2ReadServer: one event loop, no gRPC library
  // on the server side), from both clients.
  if (!flags.fast_tls) {
    printf("  fast read port (cdcviewd's own HTTP/2 loop), %s:\n", describe("h2").c_str());
    double fast_p99 = Print("point", OpenLoopH2(fast_port, kinds[0], flags.qps, flags.open_seconds));
    printf("   target p99 < 1000 us at 5k QPS %s\n", fast_p99 < 1000 ? "[met]" : "[below target]");
  }
  std::shared_ptr<grpc::ChannelCredentials> fast_credentials = grpc::InsecureChannelCredentials();
  grpc::ChannelArguments fast_args;
  if (flags.fast_tls) {
    grpc::SslCredentialsOptions ssl;
    std::ifstream ca(flags.tls_dir + "/tls.crt");
    ssl.pem_root_certs.assign(std::istreambuf_iterator<char>(ca), {});
    fast_credentials = grpc::SslCredentials(ssl);
    fast_args.SetSslTargetNameOverride("localhost");
  }
  auto fast_stub = v1::ViewService::NewStub(grpc::CreateCustomChannel(
      absl::StrFormat("127.0.0.1:%d", fast_port), fast_credentials, fast_args));
  printf("  fast read port%s, %s:\n", flags.fast_tls ? " over TLS" : "",
         describe("async").c_str());
  Print("point", OpenLoop(*fast_stub, kinds[0], flags.qps, flags.open_seconds));
  printf("\n");
  printf("open loop, range queries at increasing rates, %.0f s each:\n", flags.open_seconds);
  double best_range_rate = 0;
  for (double rate : flags.range_rates) {
    ReportProgress("query_bench", absl::StrFormat("open loop range at %.0f QPS", rate), 0);
    double p99 = Print(absl::StrFormat("%.0f/s", rate).c_str(),
                       open_loop(flags.open_client, kinds[1], rate));
    printf("\n");
    if (p99 < 1000) best_range_rate = std::max(best_range_rate, rate);
  }
  printf("  highest range rate with p99 < 1000 us: %s\n",
         best_range_rate > 0 ? absl::StrFormat("%.0f QPS", best_range_rate).c_str() : "none");
  // Range pages of 100 run on the fast read port's loop, in turn with everything else there.
  const double fast_range_rate = flags.range_rates.front();
  printf("  fast read port%s, %s, at %.0f/s:\n", flags.fast_tls ? " over TLS" : "",
         describe(flags.fast_tls ? "async" : "h2").c_str(), fast_range_rate);
  Print(absl::StrFormat("%.0f/s", fast_range_rate).c_str(),
        flags.fast_tls ? OpenLoop(*fast_stub, kinds[1], fast_range_rate, flags.open_seconds)
                       : OpenLoopH2(fast_port, kinds[1], fast_range_rate, flags.open_seconds));
  printf("\n");
  return 0;
}

// A self-signed P-256 certificate for localhost in `dir` (tls.crt, tls.key).
bool MakeCertificate(const std::string& dir) {
  const std::string command = absl::StrFormat(
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 "
      "-subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 "
      "-keyout '%s/tls.key' -out '%s/tls.crt' 2>/dev/null",
      dir, dir);
  return std::system(command.c_str()) == 0;
}

int Run(Flags flags) {
  // As cdcviewd does (Application::Start): no debug lock-order graph behind every absl::Mutex.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  auto dir = MakeTempDir(flags.tmp, "cdcview-query-bench");
  if (!dir.ok()) {
    fprintf(stderr, "query_bench: %s\n", std::string(dir.status().message()).c_str());
    return 1;
  }
  if (flags.fast_tls) {
    flags.tls_dir = *dir;
    if (!MakeCertificate(*dir)) {
      fprintf(stderr, "query_bench: openssl req could not make a certificate\n");
      RemoveTree(*dir);
      return 1;
    }
  }
  int rc = 0;
  {
    auto bench = BenchStore::Open(flags.config, *dir + "/store", 4ull << 30);
    if (!bench.ok()) {
      fprintf(stderr, "query_bench: %s\n", std::string(bench.status().message()).c_str());
      RemoveTree(*dir);
      return 1;
    }
    Workload workload = GenerateWorkload({flags.events, flags.seed, 0}, nullptr, nullptr,
                                         [](double f) { ReportProgress("query_bench", "generate", f); });
    std::vector<QueryKind> kinds = MakeQueries(workload, flags.seed);
    auto batches = SplitIntoBatches(&workload.records, 1024);
    for (size_t b = 0; b < batches.size(); ++b) {
      if (absl::Status s = (*bench)->applier().ApplyBatch(&batches[b]); !s.ok()) {
        fprintf(stderr, "query_bench: loading the store: %s\n", std::string(s.message()).c_str());
        RemoveTree(*dir);
        return 1;
      }
      if ((b + 1) % std::max<size_t>(1, batches.size() / 10) == 0) {
        ReportProgress("query_bench", "load", double(b + 1) / batches.size());
      }
    }
    batches.clear();

    // The client process is forked before this process starts gRPC (gRPC does not survive a
    // fork once running); it gets the server's port through a pipe.
    int port_pipe[2];
    if (pipe(port_pipe) != 0) {
      perror("query_bench: pipe");
      RemoveTree(*dir);
      return 1;
    }
    fflush(stdout);
    fflush(stderr);
    const pid_t client = fork();
    if (client < 0) {
      perror("query_bench: fork (the client process)");
      RemoveTree(*dir);
      return 1;
    }
    if (client == 0) {
      close(port_pipe[1]);
      int ports[2] = {0, 0};  // ViewServer's, H2ReadServer's
      if (read(port_pipe[0], ports, sizeof ports) != sizeof ports) _exit(1);  // server failed
      int client_rc = DriveClient(flags, kinds, ports[0], ports[1], workload.live_votes.size(),
                                  workload.big_vote_partitions.size());
      fflush(stdout);
      _exit(client_rc);
    }
    close(port_pipe[0]);
    ViewReader reader((*bench)->catalog(), (*bench)->store(), (*bench)->published());
    // The reader alone first, in this process with no gRPC, at the open loop's rates: what the
    // gRPC figures add to it is the transport's.
    printf("open loop in the server process, ViewReader::Query alone (no gRPC, one thread):\n");
    ReportProgress("query_bench", "reader alone", 0);
    Print("point", ReaderOpenLoop(reader, kinds[0], flags.qps, flags.open_seconds));
    printf("\n");
    Print("range", ReaderOpenLoop(reader, kinds[1], flags.range_rates.front(), flags.open_seconds));
    printf(" (at %.0f QPS)\n", flags.range_rates.front());
    fflush(stdout);
    auto metrics = MetricsRegistry::Start("");
    QueryProbe probe(**metrics, {"Query", "Scan", "GetItem", "ListViews", "DescribeView", "GetStatus"});
    // A server that cannot start: the client, waiting for the ports, sees the pipe close.
    auto fail = [&](const absl::Status& status) {
      fprintf(stderr, "query_bench: %s\n", std::string(status.message()).c_str());
      close(port_pipe[1]);
      waitpid(client, nullptr, 0);
      RemoveTree(*dir);
      return 1;
    };
    auto server = ViewServer::Start("127.0.0.1:0", reader, &probe);
    if (!server.ok()) return fail(server.status());
    (*server)->SetServing(true);
    prometheus::Registry tls_registry;  // outlives the TLS context
    H2ReadSecurity security;
    if (flags.fast_tls) {
      ServerConfig tls_config;
      tls_config.tls_cert_file = *dir + "/tls.crt";
      tls_config.tls_key_file = *dir + "/tls.key";
      security::TlsServerContext::Options options;
      options.port = "fast_reads";
      options.alpn = {"h2"};
      auto tls = security::TlsServerContext::Create(tls_config, options, tls_registry);
      if (!tls.ok()) return fail(tls.status());
      security.tls = *tls;
    }
    auto fast = H2ReadServer::Start("127.0.0.1:0", reader, &probe, "server.grpc", ServerConfig{},
                                    nullptr, security);
    if (!fast.ok()) return fail(fast.status());
    const int ports[2] = {(*server)->port(), (*fast)->port()};
    if (write(port_pipe[1], ports, sizeof ports) != sizeof ports) perror("query_bench: pipe");
    close(port_pipe[1]);
    int status = 0;
    waitpid(client, &status, 0);
    rc = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    (*fast)->Shutdown(1000);
    (*server)->Shutdown(1000);
  }
  RemoveTree(*dir);
  return rc;
}

}  // namespace
}  // namespace cdcview::bench

int main(int argc, char** argv) {
  cdcview::bench::Flags flags;
  CLI::App app{"query_bench: gRPC Query latency and throughput, a client process against a ViewServer"};
  app.add_option("--events", flags.events, "events applied to build the store")->check(CLI::PositiveNumber);
  app.add_option("--seed", flags.seed, "workload seed");
  app.add_option("--threads", flags.threads, "client threads in the closed loop")->check(CLI::PositiveNumber);
  app.add_option("--open-client", flags.open_client,
                 "open-loop client: h2 (a lean HTTP/2 client on one thread, no gRPC library), "
                 "async (gRPC's C++ async stub: one sender, one receiver thread) or threads "
                 "(blocking gRPC stubs on --open-threads threads)")
      ->check(CLI::IsMember({"h2", "async", "threads"}));
  app.add_option("--open-threads", flags.open_threads, "client threads of --open-client threads")
      ->check(CLI::PositiveNumber);
  app.add_option("--range-rates", flags.range_rates, "open-loop rates for the range sweep (comma-separated)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--closed-seconds", flags.closed_seconds, "closed-loop duration per query kind");
  app.add_option("--open-seconds", flags.open_seconds, "open-loop duration per query kind");
  app.add_option("--qps", flags.qps, "open-loop rate")->check(CLI::PositiveNumber);
  app.add_option("--config", flags.config, "cdcview config whose first table is App");
  app.add_option("--tmp", flags.tmp, "where to create the temporary store");
  app.add_flag("--fast-tls", flags.fast_tls, "serve the fast read port over TLS");
  CLI11_PARSE(app, argc, argv);
  return cdcview::bench::Run(flags);
}
