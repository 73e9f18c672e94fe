// GrpcListener against a real grpc::Server: the cap refuses by closing at once and counts it,
// gRPC's idle timeout applies to handed-over connections and frees their slots, running out of
// descriptors refuses without losing the listener, and health checks are answered through it.
#include "daemon/server/grpc_listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/metrics/connection_probe.h"
#include "daemon/metrics/metrics.h"
#include "gtest/gtest.h"

namespace cdcview {
namespace {

using std::chrono::milliseconds;

// Connects `fd` (a TCP socket) to the loopback `port`; false on failure.
bool ConnectSocket(int fd, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
}

int Connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (!ConnectSocket(fd, port)) {
    close(fd);
    return -1;
  }
  return fd;
}

// True once the server has closed `fd` (EOF or reset), waiting at most `wait`; a served
// connection gets gRPC's SETTINGS frame, which is read and skipped.
bool ClosedByServer(int fd, milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  char buf[4096];
  while (true) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return true;
  }
}

// The value of one metric line of `text` ("name{labels} value"), -1 if absent.
double Metric(const std::string& text, const std::string& series) {
  size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

template <typename F>
bool Eventually(F&& predicate, milliseconds wait = milliseconds(5000)) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < deadline) {
    if (predicate()) return true;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return predicate();
}

class GrpcListenerTest : public ::testing::Test {
 protected:
  void Start(uint32_t max_connections, int idle_ms = INT_MAX) {
    auto metrics = MetricsRegistry::Start("");
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    metrics_ = std::move(*metrics);
    probe_ = std::make_unique<ConnectionProbe>(
        *metrics_, "grpc", std::vector<std::string>{GrpcListener::kClosedReason});
    auto listener = GrpcListener::Listen("127.0.0.1:0");
    ASSERT_TRUE(listener.ok()) << listener.status();
    listener_ = std::move(*listener);
    // Reflection gives the server a sync service, which gRPC needs to poll its queue.
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    grpc::ServerBuilder builder;
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, idle_ms);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    server_->GetHealthCheckService()->SetServingStatus("", true);
    listener_->Start(server_.get(), max_connections, probe_.get());
  }

  void TearDown() override {
    for (int fd : clients_) close(fd);
    if (listener_) listener_->Stop();
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
  }

  int Client() {
    int fd = Connect(listener_->port());
    clients_.push_back(fd);
    return fd;
  }

  bool HealthAnswers() {
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", listener_->port()),
                                       grpc::InsecureChannelCredentials());
    grpc::GenericStub stub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + milliseconds(2000));
    grpc::Slice empty("");
    grpc::ByteBuffer request(&empty, 1), response;
    grpc::Status status;
    std::atomic<bool> done{false};
    stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                   [&](grpc::Status s) {
                     status = s;
                     done = true;
                   });
    // The deadline ends the call well within this wait; ctx must outlive it.
    EXPECT_TRUE(Eventually([&] { return done.load(); }, milliseconds(10000)));
    return done && status.ok();
  }

  std::string Metrics() { return metrics_->Render(); }

  std::unique_ptr<MetricsRegistry> metrics_;
  std::unique_ptr<ConnectionProbe> probe_;
  std::unique_ptr<GrpcListener> listener_;
  std::unique_ptr<grpc::Server> server_;
  std::vector<int> clients_;
};

TEST_F(GrpcListenerTest, BeyondTheCapConnectionsAreClosedAtOnceAndCounted) {
  Start(/*max_connections=*/2);
  int a = Client();
  int b = Client();
  ASSERT_TRUE(Eventually([&] { return listener_->open_connections() == 2; }));
  int c = Client();
  int d = Client();
  EXPECT_TRUE(ClosedByServer(c, milliseconds(2000)));
  EXPECT_TRUE(ClosedByServer(d, milliseconds(2000)));
  EXPECT_FALSE(ClosedByServer(a, milliseconds(200)));
  EXPECT_FALSE(ClosedByServer(b, milliseconds(200)));
  std::string m = Metrics();
  EXPECT_EQ(Metric(m, "cdcview_connections_refused_total{port=\"grpc\",reason=\"max_connections\"}"), 2);
  EXPECT_EQ(Metric(m, "cdcview_connections_opened_total{port=\"grpc\"}"), 2);
  EXPECT_EQ(Metric(m, "cdcview_connections_open{port=\"grpc\"}"), 2);
  EXPECT_EQ(Metric(m, "cdcview_connections_max{port=\"grpc\"}"), 2);

  // A client that leaves frees its slot: gRPC closes its side, the listener notices.
  close(a);
  ASSERT_TRUE(Eventually([&] { return listener_->open_connections() == 1; }));
  EXPECT_EQ(Metric(Metrics(), "cdcview_connections_closed_total{port=\"grpc\",reason=\"ended\"}"), 1);
  EXPECT_TRUE(HealthAnswers());
}

TEST_F(GrpcListenerTest, IdleConnectionsAreClosedByGrpcAndTheirSlotsFreed) {
  Start(/*max_connections=*/1, /*idle_ms=*/300);
  int silent = Client();  // never sends the HTTP/2 preface
  EXPECT_TRUE(ClosedByServer(silent, milliseconds(3000)));
  ASSERT_TRUE(Eventually([&] { return listener_->open_connections() == 0; }));
  EXPECT_TRUE(HealthAnswers());
}

TEST_F(GrpcListenerTest, OutOfDescriptorsRefusesAndTheListenerLives) {
  Start(/*max_connections=*/100);
  // The accept thread runs before descriptors run out: a new thread's first steps may need one
  // (UBSan's vptr check asks the kernel, through a pipe, whether memory is readable).
  ASSERT_TRUE(Eventually([&] { return HealthAnswers(); }));
  // ...and that connection is gone, so no descriptor frees up while the test holds them all.
  ASSERT_TRUE(Eventually(
      [&] { return Metric(Metrics(), "cdcview_connections_open{port=\"grpc\"}") == 0; }));
  rlimit before{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &before), 0);
  // The clients' sockets first (they are this process's descriptors too), then every
  // descriptor the limit allows is taken: accept4 has none left and fails with EMFILE.
  std::vector<int> waiting;
  for (int i = 0; i < 3; ++i) {
    waiting.push_back(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    clients_.push_back(waiting.back());
  }
  int highest = 0;
  for (int fd = 0; fd < 4096; ++fd) {
    if (fcntl(fd, F_GETFD) != -1) highest = fd;
  }
  rlimit tight{static_cast<rlim_t>(highest + 1), before.rlim_max};
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &tight), 0);
  std::vector<int> fillers;
  while (true) {
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) break;
    fillers.push_back(fd);
  }
  for (int fd : waiting) ASSERT_TRUE(ConnectSocket(fd, listener_->port()));
  for (int fd : waiting) EXPECT_TRUE(ClosedByServer(fd, milliseconds(3000)));
  for (int fd : fillers) close(fd);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &before), 0);
  std::string m = Metrics();
  EXPECT_EQ(Metric(m, "cdcview_connections_refused_total{port=\"grpc\",reason=\"fd_limit\"}"), 3);
  EXPECT_EQ(Metric(m, "cdcview_connections_opened_total{port=\"grpc\"}"), 1);
  // Descriptors free again: the same listener serves.
  EXPECT_TRUE(Eventually([&] { return HealthAnswers(); }));
  EXPECT_EQ(Metric(Metrics(), "cdcview_connections_opened_total{port=\"grpc\"}"), 2);
}

TEST(GrpcListenerListenTest, BadAddressesAreNamed) {
  auto no_port = GrpcListener::Listen("127.0.0.1");
  EXPECT_EQ(no_port.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(no_port.status().message(),
            "\"127.0.0.1\" is not host:port (e.g. 127.0.0.1:50051 or [::1]:50051)");
  auto first = GrpcListener::Listen("127.0.0.1:0");
  ASSERT_TRUE(first.ok());
  auto taken = GrpcListener::Listen(absl::StrCat("127.0.0.1:", (*first)->port()));
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(taken.status().message(), absl::StrCat("cannot listen on 127.0.0.1:", (*first)->port(),
                                                   ": Address already in use"));
}

}  // namespace
}  // namespace cdcview
