// HttpServer against a fake handler (the API's answers are api_test's): what a request passes
// on, the headers of every answer, and each limit with its exact refusal and counter.
#include "daemon/dynamodb/http_server.h"

#include <prometheus/registry.h>
#include <pthread.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/crc.hpp>
#include <fstream>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "daemon/aws/sigv4.h"
#include "daemon/metrics/metrics.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"

namespace cdcview::dynamodb {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Response = http::response<http::string_body>;

double Value(prometheus::Registry& registry, const std::string& name,
             const std::map<std::string, std::string>& labels) {
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const auto& m : family.metric) {
      std::map<std::string, std::string> got;
      for (const auto& l : m.label) got[l.name] = l.value;
      if (got != labels) continue;
      if (family.type == prometheus::MetricType::Histogram) {
        return static_cast<double>(m.histogram.sample_count);
      }
      return m.counter.value + m.gauge.value;
    }
  }
  return -1;
}

// The sum of the unlabelled histogram `name`'s samples; -1 when there is none.
double HistogramSum(MetricsRegistry& metrics, const std::string& name) {
  for (const auto& family : metrics.registry().Collect()) {
    if (family.name == name && family.metric.size() == 1) {
      return family.metric[0].histogram.sample_sum;
    }
  }
  return -1;
}

// `count` once it reaches `target`, or what it is after 2.5 s.
int Reached(const std::atomic<int>& count, int target) {
  for (int i = 0; i < 500 && count.load() < target; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return count.load();
}

// What handlers record of their calls, from whichever threads run them: "<thread name>" and,
// when given, " <detail>".
class ThreadLog {
 public:
  void Add(absl::string_view detail = {}) {
    char name[16] = {};
    pthread_getname_np(pthread_self(), name, sizeof name);
    absl::MutexLock lock(&mu_);
    calls_.push_back(detail.empty() ? std::string(name) : absl::StrCat(name, " ", detail));
  }
  std::vector<std::string> Calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> calls_ ABSL_GUARDED_BY(mu_);
};

std::string Crc32(const std::string& body) {
  boost::crc_32_type crc;
  crc.process_bytes(body.data(), body.size());
  return std::to_string(crc.checksum());
}

// A client connection speaking HTTP/1.1 with Beast's own parser.
class Client {
 public:
  explicit Client(int port) : socket_(ioc_) {
    socket_.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  }
  Response Post(const std::string& body, std::map<std::string, std::string> headers = {}) {
    http::request<http::string_body> request(http::verb::post, "/", 11);
    request.set(http::field::host, "localhost");
    request.set(http::field::content_type, "application/x-amz-json-1.0");
    request.set("X-Amz-Target", "DynamoDB_20120810.Query");
    for (const auto& [name, value] : headers) request.set(name, value);
    request.body() = body;
    request.prepare_payload();
    return Send(request);
  }
  Response Send(http::request<http::string_body>& request) {
    http::write(socket_, request);
    return Read();
  }
  Response Read() {
    Response response;
    beast::error_code ec;
    http::read(socket_, buffer_, response, ec);
    EXPECT_FALSE(ec) << ec.message();
    return response;
  }
  void Raw(const std::string& bytes) { asio::write(socket_, asio::buffer(bytes)); }
  // Reads until the server closes; what arrived.
  std::string ReadToClose() {
    std::string out(static_cast<const char*>(buffer_.data().data()), buffer_.size());
    buffer_.consume(buffer_.size());
    char chunk[4096];
    for (;;) {
      beast::error_code ec;
      size_t n = socket_.read_some(asio::buffer(chunk), ec);
      if (ec) break;
      out.append(chunk, n);
    }
    return out;
  }
  tcp::socket& socket() { return socket_; }

 private:
  asio::io_context ioc_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
};

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    limits_.dynamodb = "127.0.0.1:0";
    limits_.dynamodb_threads = 2;
  }
  void Start(HttpServer::Handler handler = nullptr, HttpServer::Options options = {}) {
    if (!handler) {
      handler = [this](const ApiRequest& request) {
        absl::MutexLock lock(&mu_);
        seen_.push_back({std::string(request.target), std::string(request.body),
                         std::string(request.min_position), std::string(request.min_kafka_offsets),
                         std::string(request.max_staleness_seconds),
                         request.who != nullptr ? request.who->name : "-"});
        ApiResponse response;
        response.body = "{\"Count\":0,\"Items\":[],\"ScannedCount\":0}";
        response.applied_position = "Y3AB";
        response.operation = "Query";
        return response;
      };
    }
    options.connections = &connections_;
    options.probe = &probe_;
    auto server = HttpServer::Start(limits_, std::move(handler), std::move(options));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }
  double Metric(const std::string& name, const std::map<std::string, std::string>& labels) {
    return Value(metrics_->registry(), name, labels);
  }

  struct Seen {
    std::string target, body, min_position, min_kafka_offsets, max_staleness, who;
  };
  ServerConfig limits_;
  std::unique_ptr<MetricsRegistry> metrics_ = MetricsRegistry::Create();
  ConnectionProbe connections_{*metrics_, "dynamodb", {"client", "idle", "request_timeout"}};
  DynamoDbApiProbe probe_{*metrics_};
  std::unique_ptr<HttpServer> server_;
  absl::Mutex mu_;
  std::vector<Seen> seen_ ABSL_GUARDED_BY(mu_);
};

TEST_F(HttpServerTest, PassesTheRequestOnAndAnswersWithDynamoDbsHeadersOnOneConnection) {
  Start();
  Client client(server_->port());
  Response first = client.Post("{\"TableName\":\"App\"}",
                               {{"x-cdcview-min-kafka-offsets", "t/0=5"},
                                {"x-cdcview-max-staleness-seconds", "2.5"}});
  EXPECT_EQ(first.result_int(), 200);
  EXPECT_EQ(first.body(), "{\"Count\":0,\"Items\":[],\"ScannedCount\":0}");
  EXPECT_EQ(first[http::field::content_type], "application/x-amz-json-1.0");
  EXPECT_EQ(first["x-amz-crc32"], Crc32(first.body()));
  EXPECT_EQ(first["x-amz-crc32"], "3413411624");  // zlib.crc32 of the body
  EXPECT_EQ(first["x-cdcview-applied-position"], "Y3AB");
  const std::string id(first["x-amzn-RequestId"]);
  EXPECT_EQ(id.size(), 52u);
  EXPECT_EQ(id.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"), std::string::npos);
  EXPECT_TRUE(first.keep_alive());
  // The same connection serves the next request (keep-alive).
  Response second = client.Post("{}", {{"x-cdcview-min-position", "Y3AB"}});
  EXPECT_EQ(second.result_int(), 200);
  EXPECT_NE(second["x-amzn-RequestId"], first["x-amzn-RequestId"]);
  {
    absl::MutexLock lock(&mu_);
    ASSERT_EQ(seen_.size(), 2u);
    EXPECT_EQ(seen_[0].target, "DynamoDB_20120810.Query");
    EXPECT_EQ(seen_[0].body, "{\"TableName\":\"App\"}");
    EXPECT_EQ(seen_[0].min_position, "");
    EXPECT_EQ(seen_[0].min_kafka_offsets, "t/0=5");
    EXPECT_EQ(seen_[0].max_staleness, "2.5");
    EXPECT_EQ(seen_[0].who, "-");
    EXPECT_EQ(seen_[1].min_position, "Y3AB");
  }
  EXPECT_EQ(Metric("cdcview_connections_opened_total", {{"port", "dynamodb"}}), 1);
  EXPECT_EQ(Metric("cdcview_dynamodb_api_requests_total",
                   {{"operation", "Query"}, {"outcome", "ok"}}),
            2);
  EXPECT_EQ(Metric("cdcview_dynamodb_api_request_duration_seconds", {{"operation", "Query"}}), 2);
}

// The configured 0 ("one per usable CPU") is the application's to resolve; the server refuses
// it rather than start without a thread to serve.
TEST_F(HttpServerTest, ZeroThreadsIsRefused) {
  limits_.dynamodb_threads = 0;
  auto server = HttpServer::Start(limits_, [](const ApiRequest&) { return ApiResponse(); }, {});
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server.status().message(),
            "server.dynamodb_threads is 0: the caller resolves it to a thread count first");
}

TEST_F(HttpServerTest, HealthOtherPathsMethodsAndContentTypes) {
  Start();
  Client client(server_->port());
  http::request<http::string_body> get(http::verb::get, "/", 11);
  Response health = client.Send(get);
  EXPECT_EQ(health.result_int(), 200);
  EXPECT_EQ(health.body(), "healthy: cdcview");
  EXPECT_EQ(health[http::field::content_type], "text/plain; charset=utf-8");

  http::request<http::string_body> other(http::verb::post, "/tables", 11);
  Response missing = client.Send(other);
  EXPECT_EQ(missing.result_int(), 404);
  EXPECT_EQ(missing.body(),
            "{\"__type\":\"com.amazon.coral.service#UnknownOperationException\",\"message\":"
            "\"cdcview's DynamoDB endpoint answers POST / (the DynamoDB JSON 1.0 protocol) and "
            "GET / (health)\"}");
  http::request<http::string_body> put(http::verb::put, "/", 11);
  EXPECT_EQ(client.Send(put).result_int(), 405);
  Response form = client.Post("{}", {{"Content-Type", "application/x-www-form-urlencoded"}});
  EXPECT_EQ(form.result_int(), 400);
  EXPECT_EQ(form.body(),
            "{\"__type\":\"com.amazon.coral.service#SerializationException\",\"message\":"
            "\"Content-Type must be application/x-amz-json-1.0 (or 1.1)\"}");
  EXPECT_EQ(client.Post("{}", {{"Content-Type", "application/x-amz-json-1.1"}}).result_int(), 200);
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(seen_.size(), 1u);
}

TEST_F(HttpServerTest, ABodyOverTheLimitIsRefusedNamingTheFieldAndTheServerGoesOn) {
  limits_.dynamodb_max_request_bytes = 1000;
  Start();
  Client client(server_->port());
  // Only the head is sent: the refusal comes from Content-Length, before any body byte.
  client.Raw("POST / HTTP/1.1\r\nHost: x\r\nX-Amz-Target: DynamoDB_20120810.Scan\r\n"
             "Content-Type: application/x-amz-json-1.0\r\nContent-Length: 1001\r\n\r\n");
  Response refused = client.Read();
  EXPECT_EQ(refused.result_int(), 413);
  EXPECT_EQ(refused.body(),
            "{\"__type\":\"com.amazonaws.dynamodb.v20120810#ValidationException\",\"message\":"
            "\"the request body is larger than 1000 bytes (server.dynamodb_max_request_bytes)\"}");
  EXPECT_FALSE(refused.keep_alive());
  EXPECT_EQ(client.ReadToClose(), "");
  EXPECT_EQ(Metric("cdcview_requests_refused_total", {{"port", "dynamodb"}, {"reason", "body_limit"}}),
            1);
  EXPECT_EQ(Metric("cdcview_dynamodb_api_requests_total",
                   {{"operation", "Scan"}, {"outcome", "ValidationException"}}),
            1);
  // Exactly the limit passes.
  Client again(server_->port());
  EXPECT_EQ(again.Post(std::string(1000, ' ')).result_int(), 200);
}

TEST_F(HttpServerTest, AHeadOverSixteenKibIsRefused) {
  Start();
  Client client(server_->port());
  client.Raw("POST / HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(HttpServer::kMaxHeaderBytes, 'a') +
             "\r\n\r\n");
  Response refused = client.Read();
  EXPECT_EQ(refused.result_int(), 431);
  EXPECT_EQ(refused.body(),
            "{\"__type\":\"com.amazonaws.dynamodb.v20120810#ValidationException\",\"message\":"
            "\"the request head is larger than 16384 bytes\"}");
  EXPECT_EQ(Metric("cdcview_requests_refused_total",
                   {{"port", "dynamodb"}, {"reason", "header_limit"}}),
            1);
}

TEST_F(HttpServerTest, OneConnectionOverTheCapIsClosedAtOnceWithThrottling) {
  limits_.dynamodb_max_connections = 1;
  Start();
  Client first(server_->port());
  EXPECT_EQ(first.Post("{}").result_int(), 200);  // accepted and counted
  Client second(server_->port());
  const std::string refusal = second.ReadToClose();
  EXPECT_NE(refusal.find("HTTP/1.1 503 Service Unavailable\r\n"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("{\"__type\":\"com.amazonaws.dynamodb.v20120810#ThrottlingException\","
                         "\"message\":\"too many connections: the DynamoDB endpoint holds at "
                         "most 1 (server.dynamodb_max_connections); retry later\"}"),
            std::string::npos)
      << refusal;
  EXPECT_EQ(Metric("cdcview_connections_refused_total",
                   {{"port", "dynamodb"}, {"reason", "max_connections"}}),
            1);
  EXPECT_EQ(Metric("cdcview_connections_max", {{"port", "dynamodb"}}), 1);
  // The first one still serves; raising the cap admits more.
  EXPECT_EQ(first.Post("{}").result_int(), 200);
  server_->SetMaxConnections(2);
  Client third(server_->port());
  EXPECT_EQ(third.Post("{}").result_int(), 200);
}

TEST_F(HttpServerTest, SlowRequestsAndIdleConnectionsAreClosed) {
  limits_.dynamodb_request_timeout_ms = 300;
  limits_.dynamodb_idle_timeout_ms = 600;
  Start();
  Client slow(server_->port());
  const auto start = std::chrono::steady_clock::now();
  slow.Raw("POST / HTTP/1.1\r\nHost: x\r\n");  // half a head, then nothing
  EXPECT_EQ(slow.ReadToClose(), "");
  const auto slow_took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(slow_took, std::chrono::milliseconds(290));
  // Upper bounds leave room for a sanitizer-slowed, loaded machine: what they prove is that
  // the timeout, not the client, ended the connection.
  EXPECT_LT(slow_took, std::chrono::milliseconds(3000));

  Client idle(server_->port());
  EXPECT_EQ(idle.Post("{}").result_int(), 200);
  const auto answered = std::chrono::steady_clock::now();
  EXPECT_EQ(idle.ReadToClose(), "");
  const auto idle_took = std::chrono::steady_clock::now() - answered;
  EXPECT_GE(idle_took, std::chrono::milliseconds(590));
  EXPECT_LT(idle_took, std::chrono::milliseconds(3000));
  // Counted once each connection object is gone.
  for (int i = 0; i < 100 && Metric("cdcview_connections_open", {{"port", "dynamodb"}}) != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(Metric("cdcview_connections_closed_total",
                   {{"port", "dynamodb"}, {"reason", "request_timeout"}}),
            1);
  EXPECT_EQ(Metric("cdcview_connections_closed_total", {{"port", "dynamodb"}, {"reason", "idle"}}),
            1);
}

// A request with a consistency header runs on a wait thread: it holds up neither the requests
// without one nor, up to dynamodb_max_waits, other waits; one more is refused.
TEST_F(HttpServerTest, WaitsRunApartAndAreCapped) {
  limits_.dynamodb_max_waits = 2;
  absl::Notification release;
  std::atomic<int> waiting{0};
  Start([&](const ApiRequest& request) {
    ApiResponse response;
    response.operation = "GetItem";
    if (!request.min_position.empty()) {
      ++waiting;
      release.WaitForNotification();
      response.body = "{\"waited\":true}";
    } else {
      response.body = "{}";
    }
    return response;
  });
  Client a(server_->port()), b(server_->port()), c(server_->port()), d(server_->port());
  http::request<http::string_body> wait(http::verb::post, "/", 11);
  wait.set("x-cdcview-min-position", "Y3AB");
  wait.set("X-Amz-Target", "DynamoDB_20120810.GetItem");
  wait.prepare_payload();
  http::write(a.socket(), wait);
  http::write(b.socket(), wait);
  ASSERT_EQ(Reached(waiting, 2), 2);
  Response refused = c.Send(wait);
  EXPECT_EQ(refused.result_int(), 400);
  EXPECT_EQ(refused.body(),
            "{\"__type\":\"com.amazonaws.dynamodb.v20120810#ThrottlingException\",\"message\":"
            "\"too many requests with a consistency header at once: 2 are running "
            "(server.dynamodb_max_waits); retry later\"}");
  EXPECT_TRUE(refused.keep_alive());
  EXPECT_EQ(d.Post("{}").body(), "{}");  // not held up
  release.Notify();
  EXPECT_EQ(a.Read().body(), "{\"waited\":true}");
  EXPECT_EQ(b.Read().body(), "{\"waited\":true}");
  EXPECT_EQ(c.Send(wait).body(), "{\"waited\":true}");  // a slot is free again
  EXPECT_EQ(Metric("cdcview_requests_refused_total", {{"port", "dynamodb"}, {"reason", "max_waits"}}),
            1);
  EXPECT_EQ(Metric("cdcview_dynamodb_api_requests_total",
                   {{"operation", "GetItem"}, {"outcome", "ThrottlingException"}}),
            1);
}

// A long request (here a Scan without Limit) runs on a page thread: with one I/O thread, a
// short one on another connection is answered while it runs, and a second long one waits for
// the page thread; past dynamodb_max_pages queued or running, one more is refused.
TEST_F(HttpServerTest, LongRequestsRunOnPageThreadsAndHoldNoShortOne) {
  limits_.dynamodb_threads = 1;
  limits_.dynamodb_max_pages = 2;
  absl::Notification release;
  absl::Cleanup released = [&] {  // a failed assertion does not leave a page thread waiting
    if (!release.HasBeenNotified()) release.Notify();
  };
  std::atomic<int> pages{0};
  ThreadLog threads;
  Start([&](const ApiRequest& request) {
    ApiResponse response;
    response.operation = "Scan";
    response.body = "{\"short\":true}";
    if (request.target == "DynamoDB_20120810.Scan") {
      threads.Add();
      ++pages;
      // Bounded, so that a regression that builds pages on the I/O thread fails, not hangs.
      release.WaitForNotificationWithTimeout(absl::Seconds(20));
      response.body = "{\"page\":true}";
    }
    return response;
  });
  Client a(server_->port()), b(server_->port()), c(server_->port()), d(server_->port());
  http::request<http::string_body> scan(http::verb::post, "/", 11);
  scan.set("X-Amz-Target", "DynamoDB_20120810.Scan");
  scan.body() = "{\"TableName\":\"App\"}";
  scan.prepare_payload();
  http::write(a.socket(), scan);
  http::write(b.socket(), scan);
  ASSERT_EQ(Reached(pages, 1), 1);
  EXPECT_EQ(c.Post("{\"Limit\":1}").body(), "{\"short\":true}");
  EXPECT_EQ(pages.load(), 1);  // the second Scan waits for the one page thread
  Response refused = d.Send(scan);
  EXPECT_EQ(refused.result_int(), 400);
  EXPECT_EQ(refused.body(),
            "{\"__type\":\"com.amazonaws.dynamodb.v20120810#ThrottlingException\",\"message\":"
            "\"too many long requests (Scan and Query pages, BatchGetItem) at once: 2 are queued "
            "or running (server.dynamodb_max_pages); retry later\"}");
  EXPECT_TRUE(refused.keep_alive());
  release.Notify();
  for (Client* client : {&a, &b}) {
    Response page = client->Read();
    EXPECT_EQ(page.body(), "{\"page\":true}");
    EXPECT_EQ(page["x-amz-crc32"], Crc32(page.body()));  // computed on the page thread
  }
  EXPECT_EQ(pages.load(), 2);
  EXPECT_EQ(d.Send(scan).body(), "{\"page\":true}");  // a slot is free again
  EXPECT_EQ(Metric("cdcview_requests_refused_total",
                   {{"port", "dynamodb"}, {"reason", "max_pages"}}),
            1);
  EXPECT_EQ(threads.Calls(),
            (std::vector<std::string>{"dynamodb-page", "dynamodb-page", "dynamodb-page"}));
}

// A short request that reads past kShortPageBytes on the I/O thread (the handler answers
// run_long) runs again on a page thread without the bound, counted as moved.
TEST_F(HttpServerTest, AShortRequestThatReadsTooMuchMovesToAPageThread) {
  ThreadLog threads;
  Start([&](const ApiRequest& request) {
    threads.Add(absl::StrCat(request.inline_bytes));
    ApiResponse response;
    response.operation = "Query";
    response.run_long = request.inline_bytes > 0;
    response.body = response.run_long ? "" : "{\"moved\":true}";
    return response;
  });
  Client client(server_->port());
  Response answer = client.Post("{\"Limit\":1}");
  EXPECT_EQ(answer.body(), "{\"moved\":true}");
  EXPECT_EQ(answer["x-amz-crc32"], Crc32(answer.body()));
  EXPECT_EQ(threads.Calls(), (std::vector<std::string>{
                                 absl::StrCat("dynamodb-io ", kShortPageBytes), "dynamodb-page 0"}));
  EXPECT_EQ(Metric("cdcview_dynamodb_api_moved_total", {}), 1);
  EXPECT_EQ(Metric("cdcview_dynamodb_api_requests_total", {{"operation", "Query"}, {"outcome", "ok"}}),
            1);
}

// A cluster member (offload_all) runs every request off the I/O threads: short ones on wait
// threads, long ones on page-wait threads.
TEST_F(HttpServerTest, AClusterMembersRequestsRunOnWaitThreads) {
  ThreadLog threads;
  HttpServer::Options options;
  options.offload_all = true;
  Start(
      [&](const ApiRequest& request) {
        threads.Add(std::string(request.body));
        ApiResponse response;
        response.operation = "Query";
        response.body = "{}";
        return response;
      },
      std::move(options));
  Client client(server_->port());
  EXPECT_EQ(client.Post("{\"Limit\":1}").result_int(), 200);
  EXPECT_EQ(client.Post("{}").result_int(), 200);  // no Limit: long
  EXPECT_EQ(threads.Calls(),
            (std::vector<std::string>{"dynamodb-wait {\"Limit\":1}", "dynamodb-pgwait {}"}));
}

// At shutdown, a long request still queued for a page thread after the grace period is not
// built: its connection closes without an answer, counted as closed by the shutdown.
TEST_F(HttpServerTest, ShutdownDropsLongRequestsNotStarted) {
  limits_.dynamodb_threads = 1;
  absl::Notification entered, release;
  absl::Cleanup released = [&] {
    if (!release.HasBeenNotified()) release.Notify();
  };
  std::atomic<int> pages{0};
  Start([&](const ApiRequest&) {
    if (++pages == 1) entered.Notify();
    release.WaitForNotificationWithTimeout(absl::Seconds(20));
    ApiResponse response;
    response.operation = "Scan";
    response.body = "{}";
    return response;
  });
  Client running(server_->port()), queued(server_->port());
  http::request<http::string_body> scan(http::verb::post, "/", 11);
  scan.set("X-Amz-Target", "DynamoDB_20120810.Scan");
  scan.body() = "{\"TableName\":\"App\"}";  // no Limit: long
  scan.prepare_payload();
  http::write(running.socket(), scan);
  ASSERT_TRUE(entered.WaitForNotificationWithTimeout(absl::Seconds(20)));
  http::write(queued.socket(), scan);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // read and queued
  std::thread stopper([&] { server_->Shutdown(100); });
  EXPECT_EQ(queued.ReadToClose(), "");  // dropped, not answered
  release.Notify();
  stopper.join();
  EXPECT_EQ(pages.load(), 1);
  EXPECT_EQ(Metric("cdcview_connections_closed_total",
                   {{"port", "dynamodb"}, {"reason", "shutdown"}}),
            2);
  EXPECT_EQ(Metric("cdcview_connections_open", {{"port", "dynamodb"}}), 0);
}

// Shutdown closes idle connections at once and answers a request in flight before closing.
TEST_F(HttpServerTest, ShutdownFinishesRequestsInFlight) {
  absl::Notification entered, release;
  Start([&](const ApiRequest& request) {
    ApiResponse response;
    response.operation = "Query";
    response.body = "{\"late\":1}";
    if (!request.min_position.empty()) {
      entered.Notify();
      release.WaitForNotification();
    }
    return response;
  });
  Client idle(server_->port());
  EXPECT_EQ(idle.Post("{}").result_int(), 200);
  Client busy(server_->port());
  http::request<http::string_body> wait(http::verb::post, "/", 11);
  wait.set("x-cdcview-min-position", "Y3AB");
  wait.prepare_payload();
  http::write(busy.socket(), wait);
  entered.WaitForNotification();
  std::thread stopper([&] { server_->Shutdown(5000); });
  EXPECT_EQ(idle.ReadToClose(), "");  // closed without waiting for the grace period
  release.Notify();
  Response late = busy.Read();
  EXPECT_EQ(late.body(), "{\"late\":1}");
  EXPECT_FALSE(late.keep_alive());
  stopper.join();
  // No longer listening.
  asio::io_context ioc;
  tcp::socket probe(ioc);
  beast::error_code ec;
  probe.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server_->port()), ec);
  EXPECT_TRUE(ec);
}

// With a tokens file every request needs a SigV4 signature by one of its tokens.
// The headers aws::Sign adds to a Query of `body` signed by the token "reader" with `secret`.
std::map<std::string, std::string> SignedHeaders(const std::string& body,
                                                 const std::string& secret, absl::Time at) {
  aws::RequestToSign sign;
  sign.headers = {{"Host", "localhost"},
                  {"Content-Type", "application/x-amz-json-1.0"},
                  {"X-Amz-Target", "DynamoDB_20120810.Query"}};
  sign.body = body;
  aws::SignedParts parts =
      aws::Sign(sign, aws::SigningKey{"reader", secret, ""}, "eu-west-1", "dynamodb", at);
  std::map<std::string, std::string> headers;
  for (const auto& [name, value] : parts.added_headers) headers[name] = value;
  return headers;
}

class SignedHttpServerTest : public HttpServerTest {
 protected:
  static constexpr char kSecret[] = "reader-secret-0123456";
  static constexpr char kWrongSecret[] = "reader-secret-0123457";
  static constexpr char kBadSignature[] =
      "{\"__type\":\"com.amazonaws.dynamodb.v20120810#InvalidSignatureException\","
      "\"message\":\"The request signature we calculated does not match the signature you "
      "provided. Check your AWS Secret Access Key and signing method. Consult the service "
      "documentation for details.\"}";
  void TearDown() override { server_.reset(); }  // before the tokens and auth_ it uses
  // Starts the server with a tokens file of one token, "reader", its clock at now_; `clock`,
  // when given, records the thread of each signature check (each reads the clock once).
  void StartSigned(HttpServer::Handler handler = nullptr, ThreadLog* clock = nullptr) {
    const std::string path = dir_.Sub("tokens.yaml");
    std::ofstream(path) << "tokens:\n  - { name: reader, token: \"" << kSecret
                        << "\", views: [ByDay] }\n";
    auto tokens = security::TokenStore::Open(path);
    ASSERT_TRUE(tokens.ok()) << tokens.status();
    HttpServer::Options options;
    options.tokens = *tokens;
    options.auth_probe = &auth_;
    options.now = [now = now_, clock] {
      if (clock != nullptr) clock->Add();
      return now;
    };
    Start(std::move(handler), std::move(options));
  }

  test::TempDir dir_;
  security::AuthProbe auth_{metrics_->registry(), "dynamodb"};
  const absl::Time now_ = absl::FromUnixSeconds(1764680000);
};

TEST_F(SignedHttpServerTest, SignedRequestsCarryTheirPrincipal) {
  StartSigned();

  Client client(server_->port());
  Response unsigned_answer = client.Post("{}");
  EXPECT_EQ(unsigned_answer.result_int(), 400);
  EXPECT_EQ(unsigned_answer.body(),
            "{\"__type\":\"com.amazonaws.dynamodb.v20120810#MissingAuthenticationTokenException\","
            "\"message\":\"Request is missing Authentication Token\"}");

  auto signed_post = [&](const std::string& secret, absl::Time at) {
    const std::string body = "{\"TableName\":\"App\"}";
    return client.Post(body, SignedHeaders(body, secret, at));
  };
  Response good = signed_post(kSecret, now_ - absl::Minutes(14));
  EXPECT_EQ(good.result_int(), 200) << good.body();
  Response wrong = signed_post(kWrongSecret, now_);
  EXPECT_EQ(wrong.result_int(), 400);
  EXPECT_EQ(wrong.body(), kBadSignature);
  {
    absl::MutexLock lock(&mu_);
    ASSERT_EQ(seen_.size(), 1u);
    EXPECT_EQ(seen_[0].who, "reader");
  }
  EXPECT_EQ(Metric("cdcview_auth_refused_total", {{"port", "dynamodb"}, {"reason", "no_token"}}),
            1);
  EXPECT_EQ(Metric("cdcview_auth_refused_total", {{"port", "dynamodb"}, {"reason", "bad_token"}}),
            1);
}

// A body too long to be short is checked for its signature on the page thread that runs it,
// not on an I/O thread: a good signature reaches the handler there, a bad one is refused.
TEST_F(SignedHttpServerTest, ALongBodyIsSignedOnItsPageThread) {
  ThreadLog threads, clock;
  StartSigned([&](const ApiRequest& request) {
    threads.Add(request.who != nullptr ? request.who->name : "-");
    ApiResponse response;
    response.operation = "Query";
    response.body = "{}";
    return response;
  }, &clock);
  absl::Cleanup stop = [&] { server_.reset(); };  // before the logs go
  const std::string body =
      absl::StrCat("{\"TableName\":\"App\",\"Limit\":1,\"pad\":\"",
                   std::string(kMaxShortBody, 'x'), "\"}");
  Client client(server_->port());
  Response good = client.Post(body, SignedHeaders(body, kSecret, now_));
  EXPECT_EQ(good.result_int(), 200) << good.body();
  Response wrong = client.Post(body, SignedHeaders(body, kWrongSecret, now_));
  EXPECT_EQ(wrong.result_int(), 400);
  EXPECT_EQ(wrong.body(), kBadSignature);
  EXPECT_EQ(wrong["x-amz-crc32"], Crc32(wrong.body()));
  EXPECT_EQ(Metric("cdcview_auth_refused_total", {{"port", "dynamodb"}, {"reason", "bad_token"}}),
            1);
  EXPECT_EQ(threads.Calls(), (std::vector<std::string>{"dynamodb-page reader"}));
  // Each request: what needs no body on the I/O thread, the signature on the page thread.
  EXPECT_EQ(clock.Calls(), (std::vector<std::string>{"dynamodb-io", "dynamodb-page",
                                                     "dynamodb-io", "dynamodb-page"}));
}

// A long body without a signature is refused on the I/O thread, before it takes a place of
// dynamodb_max_pages: with the one place held, it is told what is missing, not to retry.
TEST_F(SignedHttpServerTest, AnUnsignedLongBodyTakesNoPlace) {
  limits_.dynamodb_max_pages = 1;
  absl::Notification entered, release;
  absl::Cleanup released = [&] {
    if (!release.HasBeenNotified()) release.Notify();
  };
  StartSigned([&](const ApiRequest&) {
    entered.Notify();
    release.WaitForNotificationWithTimeout(absl::Seconds(20));
    ApiResponse response;
    response.operation = "Query";
    response.body = "{}";
    return response;
  });
  const std::string body = absl::StrCat("{\"TableName\":\"App\",\"pad\":\"",
                                        std::string(kMaxShortBody, 'x'), "\"}");
  Client holder(server_->port()), other(server_->port());
  http::request<http::string_body> held(http::verb::post, "/", 11);
  held.set(http::field::host, "localhost");
  held.set(http::field::content_type, "application/x-amz-json-1.0");
  held.set("X-Amz-Target", "DynamoDB_20120810.Query");
  for (const auto& [name, value] : SignedHeaders(body, kSecret, now_)) held.set(name, value);
  held.body() = body;
  held.prepare_payload();
  http::write(holder.socket(), held);
  ASSERT_TRUE(entered.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_EQ(other.Post(body).body(),
            "{\"__type\":\"com.amazonaws.dynamodb.v20120810#MissingAuthenticationTokenException\","
            "\"message\":\"Request is missing Authentication Token\"}");
  release.Notify();
  EXPECT_EQ(holder.Read().result_int(), 200);
  EXPECT_EQ(Metric("cdcview_requests_refused_total", {{"port", "dynamodb"}, {"reason", "max_pages"}}),
            -1);  // no series: never refused
}

// The fixture's server with one I/O and one page thread, whose Scans hold the page thread
// until `release` (at most 20 s, so that a regression fails rather than hangs); `pages` counts
// the Scans built.
class PageQueueTest : public HttpServerTest {
 protected:
  void SetUp() override {
    HttpServerTest::SetUp();
    limits_.dynamodb_threads = 1;
    scan_.set("X-Amz-Target", "DynamoDB_20120810.Scan");
    scan_.body() = "{\"TableName\":\"App\"}";  // no Limit: long
    scan_.prepare_payload();
    waiting_scan_ = scan_;
    waiting_scan_.set("x-cdcview-min-position", "Y3AB");  // long and waits: a page-wait thread
  }
  void TearDown() override {
    if (!release_.HasBeenNotified()) release_.Notify();
    server_.reset();  // before release_ and pages_, which its handler uses
  }
  // `on_scan` runs on the thread that builds each Scan.
  void StartHolding(std::function<void()> on_scan = [] {}) {
    Start([this, on_scan](const ApiRequest& request) {
      if (request.target == "DynamoDB_20120810.Scan") {
        on_scan();
        ++pages_;
        release_.WaitForNotificationWithTimeout(absl::Seconds(20));
      }
      return Page();
    });
  }
  double Refused(const std::string& reason) {
    return Metric("cdcview_requests_refused_total", {{"port", "dynamodb"}, {"reason", reason}});
  }
  // Refused(reason) once it reaches `count`, or what it is after 2.5 s (a refusal is counted
  // on a pool's thread just after the client sees its connection end).
  double RefusedReaching(const std::string& reason, double count) {
    for (int i = 0; i < 500 && Refused(reason) < count; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return Refused(reason);
  }
  // What the Scan handlers answer.
  static ApiResponse Page() {
    ApiResponse response;
    response.operation = "Scan";
    response.body = "{\"page\":true}";
    return response;
  }

  http::request<http::string_body> scan_{http::verb::post, "/", 11};
  http::request<http::string_body> waiting_scan_;
  absl::Notification release_;
  std::atomic<int> pages_{0};
};

// A long request whose client closes while it queues is not built when its turn comes.
TEST_F(PageQueueTest, AQueuedLongRequestWhoseClientLeftIsNotBuilt) {
  StartHolding();
  Client running(server_->port());
  http::write(running.socket(), scan_);
  ASSERT_EQ(Reached(pages_, 1), 1);
  {
    Client gone(server_->port());
    http::write(gone.socket(), scan_);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // read and queued
  }
  release_.Notify();
  EXPECT_EQ(running.Read().body(), "{\"page\":true}");
  auto closed_by_client = [&] {
    return Metric("cdcview_connections_closed_total", {{"port", "dynamodb"}, {"reason", "client"}});
  };
  for (int i = 0; i < 500 && closed_by_client() < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(closed_by_client(), 1);
  EXPECT_EQ(Refused("client_gone"), 1);
  EXPECT_EQ(pages_.load(), 1);
  http::write(running.socket(), scan_);  // the page thread is free for the next
  EXPECT_EQ(running.Read().body(), "{\"page\":true}");
  EXPECT_EQ(pages_.load(), 2);
}

// A long request still queued for a page thread after dynamodb_request_timeout_ms is answered
// ThrottlingException saying how long it waited, and not built.
TEST_F(PageQueueTest, ALongRequestQueuedPastTheRequestTimeoutIsThrottled) {
  limits_.dynamodb_request_timeout_ms = 200;
  StartHolding();
  Client running(server_->port()), queued(server_->port());
  http::write(running.socket(), scan_);
  ASSERT_EQ(Reached(pages_, 1), 1);
  http::write(queued.socket(), scan_);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  release_.Notify();
  EXPECT_EQ(running.Read().body(), "{\"page\":true}");
  Response late = queued.Read();
  EXPECT_EQ(late.result_int(), 400);
  const std::string prefix =
      "{\"__type\":\"com.amazonaws.dynamodb.v20120810#ThrottlingException\",\"message\":"
      "\"waited ";
  const std::string suffix =
      " ms for a page thread, longer than server.dynamodb_request_timeout_ms (200 ms): long "
      "requests arrive faster than they are built; retry later\"}";
  ASSERT_TRUE(late.body().starts_with(prefix) && late.body().ends_with(suffix)) << late.body();
  const int waited = std::stoi(late.body().substr(prefix.size()));
  EXPECT_GT(waited, 200);
  EXPECT_LT(waited, 20000);
  EXPECT_TRUE(late.keep_alive());
  EXPECT_EQ(Refused("page_timeout"), 1);
  EXPECT_EQ(pages_.load(), 1);
  EXPECT_EQ(queued.Send(scan_).body(), "{\"page\":true}");  // on time now
}

// A long request with a consistency header runs on a page-wait thread and holds a place of
// dynamodb_max_pages and of dynamodb_max_waits meanwhile: with one of each, a plain long request
// and a short one with a consistency header are refused until it ends; a short one is not.
TEST_F(PageQueueTest, ALongRequestThatWaitsHoldsAPageAndAWait) {
  limits_.dynamodb_max_pages = 1;
  limits_.dynamodb_max_waits = 1;
  ThreadLog threads;
  StartHolding([&] { threads.Add(); });
  Client waiting(server_->port()), other(server_->port());
  http::request<http::string_body> scan_after = scan_;
  scan_after.set("x-cdcview-min-position", "Y3AB");
  http::write(waiting.socket(), scan_after);
  ASSERT_EQ(Reached(pages_, 1), 1);
  EXPECT_EQ(other.Send(scan_).body(),
            "{\"__type\":\"com.amazonaws.dynamodb.v20120810#ThrottlingException\",\"message\":"
            "\"too many long requests (Scan and Query pages, BatchGetItem) at once: 1 are queued "
            "or running (server.dynamodb_max_pages); retry later\"}");
  EXPECT_EQ(other.Post("{\"Limit\":1}", {{"x-cdcview-min-position", "Y3AB"}}).body(),
            "{\"__type\":\"com.amazonaws.dynamodb.v20120810#ThrottlingException\",\"message\":"
            "\"too many requests with a consistency header at once: 1 are running "
            "(server.dynamodb_max_waits); retry later\"}");
  EXPECT_EQ(other.Post("{\"Limit\":1}").result_int(), 200);  // short: not held up
  release_.Notify();
  EXPECT_EQ(waiting.Read().body(), "{\"page\":true}");
  EXPECT_EQ(threads.Calls(), std::vector<std::string>{"dynamodb-pgwait"});
  EXPECT_EQ(other.Send(scan_).body(), "{\"page\":true}");  // both places are free again
  EXPECT_EQ(other.Send(scan_after).body(), "{\"page\":true}");
  EXPECT_EQ(Refused("max_pages"), 1);
  EXPECT_EQ(Refused("max_waits"), 1);
}

// Long requests that wait build at most as many pages at once as there are page threads: three
// whose waits end together, with one page thread, build one after another.
TEST_F(PageQueueTest, PageWaitBuildsRunNoMoreAtOnceThanPageThreads) {
  absl::Mutex mu;
  int building = 0, most = 0, gated = 0;
  Start([&](const ApiRequest& request) {
    if (request.before_build) {
      EXPECT_TRUE(request.before_build().ok());
      absl::MutexLock lock(&mu);
      ++gated;
      most = std::max(most, ++building);
    }
    absl::SleepFor(absl::Milliseconds(100));
    if (request.before_build) {
      absl::MutexLock lock(&mu);
      --building;
    }
    return Page();
  });
  absl::Cleanup stop = [&] { server_.reset(); };  // before what the handler uses
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(std::make_unique<Client>(server_->port()));
    http::write(clients.back()->socket(), waiting_scan_);
  }
  for (auto& client : clients) EXPECT_EQ(client->Read().body(), "{\"page\":true}");
  absl::MutexLock lock(&mu);
  EXPECT_EQ(gated, 3);
  EXPECT_EQ(most, 1);
}

// The page threads and the page-wait builds share their build places: with one page thread,
// a page asked while a page-wait build holds the place waits for it, counted in
// cdcview_dynamodb_api_build_wait_seconds.
TEST_F(PageQueueTest, PageAndPageWaitBuildsShareTheirPlaces) {
  std::atomic<int> building{0}, most{0};
  auto build = [&] {
    const int now = ++building;
    for (int seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {
    }
  };
  Start([&](const ApiRequest& request) {
    if (request.before_build && !request.before_build().ok()) return Page();
    build();
    if (request.before_build) release_.WaitForNotificationWithTimeout(absl::Seconds(20));
    --building;
    ++pages_;
    return Page();
  });
  Client page_wait(server_->port()), page(server_->port());
  http::write(page_wait.socket(), waiting_scan_);
  ASSERT_EQ(Reached(building, 1), 1);
  http::write(page.socket(), scan_);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(building.load(), 1) << "the page was built beside the page-wait build";
  EXPECT_EQ(Metric("cdcview_dynamodb_api_build_wait_seconds", {}), 0);
  release_.Notify();
  EXPECT_EQ(page_wait.Read().body(), "{\"page\":true}");
  EXPECT_EQ(page.Read().body(), "{\"page\":true}");
  EXPECT_EQ(pages_.load(), 2);
  EXPECT_EQ(most.load(), 1);
  EXPECT_EQ(Metric("cdcview_dynamodb_api_build_wait_seconds", {}), 1);
  // It waited most of the 100 ms the page-wait build held the place.
  EXPECT_GE(HistogramSum(*metrics_, "cdcview_dynamodb_api_build_wait_seconds"), 0.05);
}

// A page whose client leaves while it waits for a build place (held by a page-wait build) is
// not built once it has the place.
TEST_F(PageQueueTest, APageWhoseClientLeftWhileItWaitedForABuildPlaceIsNotBuilt) {
  std::atomic<int> building{0};
  Start([&](const ApiRequest& request) {
    if (request.before_build) {
      if (!request.before_build().ok()) return Page();
      ++building;
      release_.WaitForNotificationWithTimeout(absl::Seconds(20));
    }
    ++pages_;
    return Page();
  });
  Client page_wait(server_->port());
  http::write(page_wait.socket(), waiting_scan_);
  ASSERT_EQ(Reached(building, 1), 1);
  {
    Client gone(server_->port());
    http::write(gone.socket(), scan_);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // on the page thread, waiting
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the close has arrived
  release_.Notify();
  EXPECT_EQ(page_wait.Read().body(), "{\"page\":true}");
  EXPECT_EQ(RefusedReaching("client_gone", 1), 1);
  EXPECT_EQ(pages_.load(), 1);  // the page-wait request's only
  EXPECT_EQ(Metric("cdcview_dynamodb_api_build_wait_seconds", {}), 1);
}

// A request that waits, whose client closes its connection during the wait, is not built
// when the wait ends: its hook answers CANCELLED, it is counted as client_gone, and the next
// request has the build place.
TEST_F(PageQueueTest, APageWaitRequestWhoseClientLeftDuringItsWaitIsNotBuilt) {
  std::atomic<int> waiting{0};
  std::vector<absl::Status> hooks;  // on the one page-wait thread at a time
  absl::Mutex mu;
  Start([&](const ApiRequest& request) {
    if (request.before_build) {
      ++waiting;
      release_.WaitForNotificationWithTimeout(absl::Seconds(20));  // the wait
      absl::Status hook = request.before_build();
      {
        absl::MutexLock lock(&mu);
        hooks.push_back(hook);
      }
      if (!hook.ok()) return Page();
    }
    ++pages_;
    return Page();
  });
  {
    Client gone(server_->port());
    http::write(gone.socket(), waiting_scan_);
    ASSERT_EQ(Reached(waiting, 1), 1);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the close has arrived
  release_.Notify();
  EXPECT_EQ(RefusedReaching("client_gone", 1), 1);
  EXPECT_EQ(pages_.load(), 0);
  {
    absl::MutexLock lock(&mu);
    ASSERT_EQ(hooks.size(), 1u);
    EXPECT_EQ(hooks[0], absl::CancelledError("the connection has ended"));
  }
  Client next(server_->port());
  http::write(next.socket(), waiting_scan_);
  EXPECT_EQ(next.Read().body(), "{\"page\":true}");
  EXPECT_EQ(pages_.load(), 1);
  EXPECT_EQ(Metric("cdcview_dynamodb_api_build_wait_seconds", {}), 0);
}

}  // namespace
}  // namespace cdcview::dynamodb
