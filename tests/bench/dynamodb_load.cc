// dynamodb_load: point-query load on a running cdcviewd, over its DynamoDB endpoint and beside it
// over its gRPC port, for tests/bench/dynamodb_bench.py (which starts the daemon and runs this).
//
// The DynamoDB side is an HTTP/1.1 keep-alive client on Boost.Beast: every request is built
// before the run (the whole HTTP message, as an SDK would send it: JSON 1.0 body, X-Amz-Target,
// a SigV4-shaped Authorization header that an endpoint without tokens_file does not check), and
// one thread drives every connection through one io_context, so the client takes one core at
// most (all of it while an open loop spins, see below).
//   closed loop: --connections connections, each sending its next query when the previous
//     answered: max QPS.
//   open loop: a query is due every 1/--qps s; a due query goes out on an idle connection (of
//     --open-connections) or waits for one; latency runs from the time it was due, so a server
//     that stalls is charged for every query that waited (no coordinated omission).
//     With --open-wait spin, both open loops poll their sockets instead of sleeping in the
//     kernel, as a load generator on a core of its own should: it stands for clients on other
//     machines, whose wake-ups are not the server's latency, and on a VM whose idle vCPUs halt,
//     every sleep ends with the vCPU's wake-up. Its CPU per query is then its whole core, so
//     the default is sleep; dynamodb_bench.py asks for spin when the client has a core apart.
// The gRPC side sends the same queries as cdcview.v1 QueryRequests: closed loop with blocking
// stubs on --connections threads, open loop with the lean HTTP/2 client (h2_client.h).
// The DynamoDB open loop also prints how late the client woke for each query and how late it
// went out (both in the latency), and the time from the actual send to the answer. After
// each open loop, the steal of each CPU meanwhile (/proc/stat): time the VM's host gave
// another guest while this one had work, which no process here can make up.
// With --pause-before-open, it prints kOpenLoopNext and reads a line from stdin before the
// DynamoDB open loop: dynamodb_bench.py snapshots the daemon's metrics there, so that it can
// tell the daemon's own time for that loop's queries from the closed loop's.
// Each answer is checked: HTTP 200 with "Count":1 (DynamoDB), one entry (gRPC).
// Prints figures and the DynamoDB/gRPC ratios; asserts nothing.
#include <grpcpp/grpcpp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <deque>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "cdcview/v1/view_service.grpc.pb.h"
#include "tests/bench/h2_client.h"

namespace cdcview::bench {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr char kOpenLoopNext[] = "dynamodb_load: the DynamoDB open loop is next";

struct Flags {
  int port = 0;       // the DynamoDB endpoint
  int grpc_port = 0;  // 0: no gRPC rows
  bool pause_before_open = false;
  std::string keys;   // a file of "partition<TAB>sort" lines
  std::string table = "App";
  std::string index = "GSI1";
  std::string pk_attr = "GSI1PK";
  std::string sk_attr = "GSI1SK";
  double qps = 5000;
  double open_seconds = 5;
  double closed_seconds = 3;
  int connections = 4;
  int open_connections = 16;
  std::string open_wait = "sleep";  // sleep | spin
};

struct Figures {
  std::vector<double> latency_us;
  std::vector<double> send_late_us;  // open loop: how late each query went out
  std::vector<double> wake_late_us;  // open loop: how late the client woke for it (its own share)
  std::vector<double> from_send_us;  // open loop: from the actual send to the answer
  uint64_t errors = 0;
  double seconds = 0;
  double client_cpu_seconds = 0;
};

double ProcessCpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// Steal seconds of each CPU so far (/proc/stat): time the host ran something else while the
// CPU had work. Empty when unreadable.
std::vector<double> StealPerCpu() {
  std::vector<double> steal;
  std::ifstream in("/proc/stat");
  const double tick = double(sysconf(_SC_CLK_TCK));
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("cpu") || line.size() < 4 || line[3] == ' ') continue;
    std::istringstream fields(line.substr(line.find(' ')));
    double v[8] = {};
    for (double& x : v) fields >> x;
    steal.push_back(v[7] / tick);
  }
  return steal;
}

// "cpu0 10 ms, cpu1 0 ms" since `before`.
std::string StealSince(const std::vector<double>& before) {
  const std::vector<double> now = StealPerCpu();
  std::string out;
  for (size_t i = 0; i < now.size() && i < before.size(); ++i) {
    absl::StrAppendFormat(&out, "%scpu%zu %.0f ms", out.empty() ? "" : ", ", i,
                          (now[i] - before[i]) * 1000);
  }
  return out.empty() ? "unknown" : out;
}

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(p * double(v.size())));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

struct Row {
  double qps = 0, p50 = 0, p99 = 0, max = 0;
};

Row Print(const std::string& name, Figures f) {
  Row r;
  const size_t n = f.latency_us.size();
  r.qps = f.seconds > 0 ? double(n) / f.seconds : 0;
  r.p50 = Percentile(f.latency_us, 0.50) / 1000;
  r.p99 = Percentile(f.latency_us, 0.99) / 1000;
  r.max = n ? *std::max_element(f.latency_us.begin(), f.latency_us.end()) / 1000 : 0;
  printf("  %-34s queries %7zu  QPS %7.0f  p50 %6.3f ms  p99 %6.3f ms  max %7.3f ms  errors %llu"
         "  client cpu %.0f us/query\n",
         name.c_str(), n, r.qps, r.p50, r.p99, r.max, (unsigned long long)f.errors,
         n ? f.client_cpu_seconds * 1e6 / double(n) : 0.0);
  if (!f.send_late_us.empty()) {
    // Lateness past the due time, included in the latency above: the client waking late (its
    // own scheduling on a busy machine), then waiting for a free connection (each is busy
    // until the server answers: a server that stalls holds them all).
    printf("  %-34s p50 %6.3f ms  p99 %6.3f ms\n", "  client woke after the due time",
           Percentile(f.wake_late_us, 0.50) / 1000, Percentile(f.wake_late_us, 0.99) / 1000);
    printf("  %-34s p50 %6.3f ms  p99 %6.3f ms\n", "  sent after the due time",
           Percentile(f.send_late_us, 0.50) / 1000, Percentile(f.send_late_us, 0.99) / 1000);
    printf("  %-34s p50 %6.3f ms  p99 %6.3f ms\n", "  answered after the send",
           Percentile(f.from_send_us, 0.50) / 1000, Percentile(f.from_send_us, 0.99) / 1000);
  }
  fflush(stdout);
  return r;
}

// ---------------------------------------------------------------- the DynamoDB side

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out + "\"";
}

// Whole HTTP/1.1 messages, one per key: what boto3 sends for
// query(IndexName=..., KeyConditionExpression="#p = :p AND #s = :s", Limit=1).
std::vector<std::string> DynamoDbRequests(const Flags& f,
                                          const std::vector<std::pair<std::string, std::string>>& keys) {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& [pk, sk] : keys) {
    const std::string body = absl::StrFormat(
        R"({"TableName":%s,"IndexName":%s,"KeyConditionExpression":"#p = :p AND #s = :s",)"
        R"("ExpressionAttributeNames":{"#p":%s,"#s":%s},)"
        R"("ExpressionAttributeValues":{":p":{"S":%s},":s":{"S":%s}},"Limit":1})",
        JsonString(f.table), JsonString(f.index), JsonString(f.pk_attr), JsonString(f.sk_attr),
        JsonString(pk), JsonString(sk));
    out.push_back(absl::StrFormat(
        "POST / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAccept-Encoding: identity\r\n"
        "X-Amz-Target: DynamoDB_20120810.Query\r\nContent-Type: application/x-amz-json-1.0\r\n"
        "User-Agent: dynamodb_load\r\nX-Amz-Date: 20250301T000000Z\r\n"
        "Authorization: AWS4-HMAC-SHA256 Credential=bench/20250301/us-east-1/dynamodb/aws4_request, "
        "SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature="
        "0000000000000000000000000000000000000000000000000000000000000000\r\n"
        "Content-Length: %zu\r\n\r\n%s",
        f.port, body.size(), body));
  }
  return out;
}

// One keep-alive connection and the query it has in flight.
struct Connection {
  explicit Connection(asio::io_context& io) : stream(io) {}
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
  std::unique_ptr<http::response_parser<http::string_body>> parser;
  Clock::time_point due;
  Clock::time_point sent;
  bool busy = false;
};

// Both loops on one thread. open: qps > 0 (queries due at a fixed rate); closed: qps == 0.
class DynamoDbLoad {
 public:
  DynamoDbLoad(const Flags& flags, const std::vector<std::string>& requests, int connections,
               double qps, double seconds)
      : requests_(requests),
        qps_(qps),
        seconds_(seconds),
        spin_(qps > 0 && flags.open_wait == "spin"),
        timer_(io_) {
    tcp::resolver resolver(io_);
    const auto endpoints = resolver.resolve("127.0.0.1", std::to_string(flags.port));
    for (int i = 0; i < connections; ++i) {
      auto c = std::make_unique<Connection>(io_);
      c->stream.connect(endpoints);
      c->stream.socket().set_option(tcp::no_delay(true));
      connections_.push_back(std::move(c));
    }
  }

  Figures Run() {
    const double cpu0 = ProcessCpuSeconds();
    t0_ = Clock::now() + std::chrono::milliseconds(20);
    end_ = t0_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds_));
    figures_.latency_us.reserve(static_cast<size_t>((qps_ > 0 ? qps_ : 50000) * seconds_));
    if (qps_ > 0) {
      total_ = static_cast<uint64_t>(qps_ * seconds_);
      Pump();
    } else {
      timer_.expires_at(t0_);
      timer_.async_wait([this](beast::error_code) {
        for (auto& c : connections_) Send(*c, Clock::now());
      });
    }
    if (spin_) {
      while (!io_.stopped()) io_.poll();
    } else {
      io_.run();
    }
    figures_.seconds = std::chrono::duration<double>(last_answer_ - t0_).count();
    figures_.client_cpu_seconds = ProcessCpuSeconds() - cpu0;
    return std::move(figures_);
  }

 private:
  // Open loop: moves every query that is due into the backlog, sends what idle connections
  // can take, and waits on the timer for the next one (Run sleeps or spins until it fires).
  void Pump() {
    const auto interval = std::chrono::duration<double>(1.0 / qps_);
    const auto now = Clock::now();
    while (next_ < total_) {
      const auto due = t0_ + std::chrono::duration_cast<Clock::duration>(interval * double(next_));
      if (due > now) {
        timer_.expires_at(due);
        timer_.async_wait([this](beast::error_code ec) {
          if (!ec) Pump();
        });
        break;
      }
      backlog_.push_back(due);
      figures_.wake_late_us.push_back(std::chrono::duration<double, std::micro>(now - due).count());
      ++next_;
    }
    for (auto& c : connections_) {
      if (backlog_.empty()) break;
      if (!c->busy) SendNext(*c);
    }
  }

  void SendNext(Connection& c) {
    const Clock::time_point due = backlog_.front();
    backlog_.pop_front();
    Send(c, due);
  }

  void Send(Connection& c, Clock::time_point due) {
    c.busy = true;
    c.due = due;
    c.sent = Clock::now();
    if (qps_ > 0) {
      figures_.send_late_us.push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - due).count());
    }
    const std::string& request = requests_[sent_++ % requests_.size()];
    asio::async_write(c.stream.socket(), asio::buffer(request),
                      [this, &c](beast::error_code ec, size_t) {
                        if (ec) return Fail(c, ec);
                        c.parser = std::make_unique<http::response_parser<http::string_body>>();
                        c.parser->body_limit(1 << 20);
                        http::async_read(c.stream, c.buffer, *c.parser,
                                         [this, &c](beast::error_code ec2, size_t) {
                                           if (ec2) return Fail(c, ec2);
                                           Answered(c);
                                         });
                      });
  }

  void Answered(Connection& c) {
    last_answer_ = Clock::now();
    figures_.latency_us.push_back(
        std::chrono::duration<double, std::micro>(last_answer_ - c.due).count());
    if (qps_ > 0) {
      figures_.from_send_us.push_back(
          std::chrono::duration<double, std::micro>(last_answer_ - c.sent).count());
    }
    const auto& res = c.parser->get();
    if (res.result_int() != 200 || res.body().find("\"Count\":1") == std::string::npos) {
      if (figures_.errors++ == 0) {
        fprintf(stderr, "dynamodb_load: HTTP %u: %s\n", res.result_int(), res.body().c_str());
      }
    }
    c.busy = false;
    if (qps_ > 0) {
      if (!backlog_.empty()) SendNext(c);
      else if (next_ >= total_) MaybeStop();
    } else if (last_answer_ < end_) {
      Send(c, Clock::now());
    } else {
      MaybeStop();
    }
  }

  void MaybeStop() {
    for (auto& c : connections_) {
      if (c->busy) return;
    }
    timer_.cancel();
    io_.stop();
  }

  void Fail(Connection& c, beast::error_code ec) {
    fprintf(stderr, "dynamodb_load: connection failed: %s\n", ec.message().c_str());
    ++figures_.errors;
    c.busy = false;
    io_.stop();
  }

  const std::vector<std::string>& requests_;
  const double qps_;
  const double seconds_;
  const bool spin_;  // open loop: poll instead of sleeping in the kernel
  asio::io_context io_;
  asio::steady_timer timer_;
  std::vector<std::unique_ptr<Connection>> connections_;
  std::deque<Clock::time_point> backlog_;
  Clock::time_point t0_, end_, last_answer_;
  uint64_t total_ = 0, next_ = 0, sent_ = 0;
  Figures figures_;
};

// ---------------------------------------------------------------- the gRPC side

std::vector<v1::QueryRequest> GrpcRequests(const Flags& f,
                                           const std::vector<std::pair<std::string, std::string>>& keys) {
  std::vector<v1::QueryRequest> out;
  out.reserve(keys.size());
  for (const auto& [pk, sk] : keys) {
    v1::QueryRequest q;
    q.set_view(f.index);
    q.mutable_partition_key()->set_s(pk);
    q.mutable_sort()->set_op(v1::SortCondition::EQ);
    q.mutable_sort()->mutable_value()->set_s(sk);
    q.set_limit(1);
    out.push_back(std::move(q));
  }
  return out;
}

Figures GrpcClosedLoop(int port, const std::vector<v1::QueryRequest>& requests, int threads,
                       double seconds) {
  auto channel = grpc::CreateChannel(absl::StrFormat("127.0.0.1:%d", port),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::ViewService::NewStub(channel);
  std::vector<Figures> per(threads);
  const double cpu0 = ProcessCpuSeconds();
  const auto t0 = Clock::now();
  const auto end = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (size_t i = t; Clock::now() < end; i += threads) {
        grpc::ClientContext ctx;
        v1::QueryResponse resp;
        const auto start = Clock::now();
        grpc::Status s = stub->Query(&ctx, requests[i % requests.size()], &resp);
        per[t].latency_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
        if (!s.ok() || resp.entries_size() != 1) ++per[t].errors;
      }
    });
  }
  for (auto& w : workers) w.join();
  Figures f;
  for (auto& p : per) {
    f.latency_us.insert(f.latency_us.end(), p.latency_us.begin(), p.latency_us.end());
    f.errors += p.errors;
  }
  f.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  f.client_cpu_seconds = ProcessCpuSeconds() - cpu0;
  return f;
}

Figures GrpcOpenLoop(int port, const std::vector<v1::QueryRequest>& requests, double qps,
                     double seconds, bool spin) {
  std::vector<std::string> serialized;
  serialized.reserve(requests.size());
  for (const auto& q : requests) serialized.push_back(q.SerializeAsString());
  const double cpu0 = ProcessCpuSeconds();
  H2Options options;
  options.spin = spin;
  auto run =
      RunH2OpenLoop(port, "/cdcview.v1.ViewService/Query", serialized, qps, seconds, options);
  Figures f;
  f.client_cpu_seconds = ProcessCpuSeconds() - cpu0;
  if (!run.ok()) {
    fprintf(stderr, "dynamodb_load: the HTTP/2 client failed: %s\n",
            std::string(run.status().message()).c_str());
    f.errors = 1;
    return f;
  }
  f.seconds = run->seconds;
  v1::QueryResponse resp;
  for (const H2Call& call : run->calls) {
    f.latency_us.push_back(call.latency_us);
    if (call.grpc_status != 0 || !resp.ParseFromString(call.response) || resp.entries_size() != 1) {
      ++f.errors;
    }
  }
  f.errors += run->not_sent;
  return f;
}

int Main(const Flags& flags) {
  // The open loop's sleeps end up to the timer slack (50 us by default) late otherwise.
  prctl(PR_SET_TIMERSLACK, 1);
  std::vector<std::pair<std::string, std::string>> keys;
  std::ifstream in(flags.keys);
  for (std::string line; std::getline(in, line);) {
    const size_t tab = line.find('\t');
    if (tab != std::string::npos) keys.emplace_back(line.substr(0, tab), line.substr(tab + 1));
  }
  if (keys.empty()) {
    fprintf(stderr, "dynamodb_load: no keys in %s\n", flags.keys.c_str());
    return 2;
  }
  const auto ddb = DynamoDbRequests(flags, keys);
  const auto grpc_requests = GrpcRequests(flags, keys);
  printf("== dynamodb_load: %zu point queries (Query %s on %s: partition and sort key EQ, Limit 1) ==\n",
         keys.size(), flags.index.c_str(), flags.table.c_str());
  DynamoDbLoad(flags, ddb, flags.connections, 0, 0.3).Run();  // warm-up
  printf("closed loop, %.1f s (max QPS):\n", flags.closed_seconds);
  const Row ddb_closed = Print(absl::StrFormat("DynamoDB endpoint, %d connections", flags.connections),
                               DynamoDbLoad(flags, ddb, flags.connections, 0, flags.closed_seconds).Run());
  Row grpc_closed;
  if (flags.grpc_port) {
    GrpcClosedLoop(flags.grpc_port, grpc_requests, flags.connections, 0.3);  // warm-up
    grpc_closed = Print(absl::StrFormat("gRPC port, %d threads", flags.connections),
                        GrpcClosedLoop(flags.grpc_port, grpc_requests, flags.connections,
                                       flags.closed_seconds));
  }
  if (flags.pause_before_open) {
    printf("%s\n", kOpenLoopNext);
    fflush(stdout);
    std::string go;
    std::getline(std::cin, go);
  }
  printf("open loop at %.0f QPS, %.1f s, the client %s between sends (latency from the time each "
         "query was due):\n",
         flags.qps, flags.open_seconds, flags.open_wait == "spin" ? "spinning" : "sleeping");
  std::vector<double> steal = StealPerCpu();
  const Row ddb_open = Print(absl::StrFormat("DynamoDB endpoint, %d connections", flags.open_connections),
                             DynamoDbLoad(flags, ddb, flags.open_connections, flags.qps, flags.open_seconds).Run());
  printf("    the host's steal meanwhile: %s\n", StealSince(steal).c_str());
  printf("   target p99 < 2 ms at %.0f point queries/s %s\n", flags.qps,
         ddb_open.p99 < 2 ? "[met]" : "[not met]");
  if (flags.grpc_port) {
    steal = StealPerCpu();
    const Row grpc_open = Print("gRPC port, lean HTTP/2 client",
                                GrpcOpenLoop(flags.grpc_port, grpc_requests, flags.qps,
                                             flags.open_seconds, flags.open_wait == "spin"));
    printf("    the host's steal meanwhile: %s\n", StealSince(steal).c_str());
    printf("DynamoDB / gRPC: closed-loop QPS %.2f, open-loop p50 %.2f, open-loop p99 %.2f\n",
           grpc_closed.qps > 0 ? ddb_closed.qps / grpc_closed.qps : 0,
           grpc_open.p50 > 0 ? ddb_open.p50 / grpc_open.p50 : 0,
           grpc_open.p99 > 0 ? ddb_open.p99 / grpc_open.p99 : 0);
  }
  return 0;
}

}  // namespace
}  // namespace cdcview::bench

int main(int argc, char** argv) {
  cdcview::bench::Flags flags;
  CLI::App app{"Point-query load over cdcviewd's DynamoDB endpoint and its gRPC port"};
  app.add_option("--port", flags.port, "the DynamoDB endpoint's port on 127.0.0.1")->required();
  app.add_option("--grpc-port", flags.grpc_port, "the gRPC port on 127.0.0.1 (0: no gRPC rows)");
  app.add_option("--open-wait", flags.open_wait,
                 "how the open loops wait between sends: sleep (the default) or spin (poll; "
                 "give the client a core of its own)")
      ->check(CLI::IsMember({"spin", "sleep"}));
  app.add_flag("--pause-before-open", flags.pause_before_open,
               "print a line and wait for one on stdin before the DynamoDB open loop");
  app.add_option("--keys", flags.keys, "file of partition<TAB>sort lines to query")->required();
  app.add_option("--table", flags.table, "TableName");
  app.add_option("--index", flags.index, "IndexName (the view)");
  app.add_option("--pk-attr", flags.pk_attr, "the index's partition key attribute");
  app.add_option("--sk-attr", flags.sk_attr, "the index's sort key attribute");
  app.add_option("--qps", flags.qps, "open-loop rate")->check(CLI::PositiveNumber);
  app.add_option("--open-seconds", flags.open_seconds, "open-loop duration");
  app.add_option("--closed-seconds", flags.closed_seconds, "closed-loop duration");
  app.add_option("--connections", flags.connections, "closed-loop connections (gRPC: threads)")
      ->check(CLI::PositiveNumber);
  app.add_option("--open-connections", flags.open_connections, "open-loop connections")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  return cdcview::bench::Main(flags);
}
