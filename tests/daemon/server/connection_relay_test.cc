#include "daemon/server/connection_relay.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"

namespace cdcview {
namespace {

// A unix socket the relay connects to; Accept hands the test the far end.
class Target {
 public:
  explicit Target(const std::string& path) : path_(path) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    path.copy(addr.sun_path, sizeof addr.sun_path - 1);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(listen(fd_, 16), 0);
  }
  ~Target() { close(fd_); }
  int Accept() { return accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_;
};

// Reads until end of stream (or `limit` bytes); blocking, with a 10 s bound per wait.
std::string ReadAll(int fd, size_t limit = SIZE_MAX) {
  std::string out;
  char buf[65536];
  while (out.size() < limit) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 10000) != 1) {
      ADD_FAILURE() << "no data for 10 s after " << out.size() << " bytes";
      break;
    }
    ssize_t n = read(fd, buf, std::min(sizeof buf, limit - out.size()));
    if (n <= 0) break;
    out.append(buf, n);
  }
  return out;
}

void WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    ASSERT_GT(n, 0) << std::strerror(errno);
    done += n;
  }
}

class ConnectionRelayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto relay = ConnectionRelay::Start(target_.path(), [this](uint64_t n) { closed_ += n; });
    ASSERT_TRUE(relay.ok()) << relay.status();
    relay_ = std::move(*relay);
  }
  // A client connection (its relay end non-blocking, as accepted) and the target's end.
  void Connect(int* client, int* backend) {
    int pair[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
    fcntl(pair[1], F_SETFL, O_NONBLOCK);
    ASSERT_EQ(relay_->Add(pair[1]), 0);
    *client = pair[0];
    *backend = target_.Accept();
    ASSERT_GE(*backend, 0);
  }
  bool WaitClosed(uint64_t n) {
    for (int i = 0; i < 1000 && closed_.load() < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return closed_.load() == n;
  }

  test::TempDir dir_;
  Target target_{dir_.Sub("s")};
  std::atomic<uint64_t> closed_{0};
  std::unique_ptr<ConnectionRelay> relay_;
};

TEST_F(ConnectionRelayTest, CopiesLargeStreamsBothWaysExactly) {
  int client, backend;
  Connect(&client, &backend);
  // More than the socket buffers and the relay's pending bound hold: flow control must work.
  std::string up(8 << 20, '\0'), down(8 << 20, '\0');
  for (size_t i = 0; i < up.size(); ++i) {
    up[i] = static_cast<char>(i * 7 + 1);
    down[i] = static_cast<char>(i * 13 + 5);
  }
  std::string got_up, got_down;
  std::thread writer_up([&] { WriteAll(client, up); });
  std::thread writer_down([&] { WriteAll(backend, down); });
  std::thread reader_up([&] { got_up = ReadAll(backend, up.size()); });
  got_down = ReadAll(client, down.size());
  writer_up.join();
  writer_down.join();
  reader_up.join();
  EXPECT_TRUE(got_up == up);
  EXPECT_TRUE(got_down == down);
  EXPECT_EQ(relay_->relayed(), 1u);
  close(client);
  close(backend);
  EXPECT_TRUE(WaitClosed(1));
  EXPECT_EQ(relay_->relayed(), 0u);
}

TEST_F(ConnectionRelayTest, PassesTheClientsHalfCloseAndEndsWhenTheTargetCloses) {
  int client, backend;
  Connect(&client, &backend);
  WriteAll(client, "request");
  ASSERT_EQ(shutdown(client, SHUT_WR), 0);
  EXPECT_EQ(ReadAll(backend), "request");  // then end of stream
  EXPECT_EQ(closed_.load(), 0u);          // the answer may still come
  WriteAll(backend, "answer");
  close(backend);
  EXPECT_EQ(ReadAll(client), "answer");
  EXPECT_TRUE(WaitClosed(1));
  close(client);
}

TEST_F(ConnectionRelayTest, TheTargetClosingEndsAnIdleClient) {
  int client, backend;
  Connect(&client, &backend);
  WriteAll(backend, "goaway");
  close(backend);
  EXPECT_EQ(ReadAll(client), "goaway");
  EXPECT_TRUE(WaitClosed(1));
  close(client);
}

TEST_F(ConnectionRelayTest, ATargetClosingWhileTheClientDoesNotReadLeavesTheRelayAsleep) {
  int client, backend;
  Connect(&client, &backend);
  // The target sends until every buffer on the way is full (the client reads nothing), so the
  // relay holds bytes for the client and has stopped reading the target; then it closes.
  fcntl(backend, F_SETFL, O_NONBLOCK);
  std::string sent;
  const std::string chunk(4096, 'x');
  for (size_t i = 0;; ++i) {
    std::string piece = chunk;
    piece[0] = static_cast<char>('a' + i % 26);
    const ssize_t n = write(backend, piece.data(), piece.size());
    if (n > 0) {
      sent.append(piece, 0, n);
      continue;
    }
    ASSERT_EQ(errno, EAGAIN) << std::strerror(errno);
    pollfd p{backend, POLLOUT, 0};
    if (poll(&p, 1, 1000) == 0) break;  // the relay took nothing more for 1 s
  }
  ASSERT_GT(sent.size(), ConnectionRelay::kMaxPendingBytes);
  close(backend);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the hang-up is seen
  const uint64_t before = relay_->wakeups();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  // Asleep: a relay woken by the hang-up on every wait counts many thousands here.
  EXPECT_LE(relay_->wakeups() - before, 2u);
  EXPECT_EQ(closed_.load(), 0u);  // the client has not had everything yet
  EXPECT_TRUE(ReadAll(client) == sent);  // all of it, then end of stream
  EXPECT_TRUE(WaitClosed(1));
  close(client);
}

// Each client has sent its request before Add, so the relay pumps the pair as soon as it is
// watched, while Add may still be running on this thread (a race TSan reports if Add touches
// the pair after it is in the epoll set).
TEST_F(ConnectionRelayTest, RelaysClientsThatSentBeforeTheyWereAdded) {
  constexpr int kClients = 50;
  for (int i = 0; i < kClients; ++i) {
    int pair[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
    fcntl(pair[1], F_SETFL, O_NONBLOCK);
    const std::string request = "request " + std::to_string(i);
    WriteAll(pair[0], request);
    ASSERT_EQ(relay_->Add(pair[1]), 0);
    const int backend = target_.Accept();
    ASSERT_GE(backend, 0);
    EXPECT_EQ(ReadAll(backend, request.size()), request);
    WriteAll(backend, "answer " + std::to_string(i));
    close(backend);
    EXPECT_EQ(ReadAll(pair[0]), "answer " + std::to_string(i));
    close(pair[0]);
  }
  EXPECT_TRUE(WaitClosed(kClients));
  EXPECT_EQ(relay_->relayed(), 0u);
}

TEST_F(ConnectionRelayTest, AClientResetEndsThePair) {
  int client, backend;
  Connect(&client, &backend);
  close(client);
  EXPECT_EQ(ReadAll(backend), "");
  EXPECT_TRUE(WaitClosed(1));
  close(backend);
}

TEST_F(ConnectionRelayTest, AnUnreachableTargetLeavesTheClientToTheCaller) {
  auto relay = ConnectionRelay::Start(dir_.Sub("missing"), nullptr);
  ASSERT_TRUE(relay.ok());
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  EXPECT_EQ((*relay)->Add(pair[1]), ENOENT);
  EXPECT_EQ(fcntl(pair[1], F_GETFD), FD_CLOEXEC);  // still open: the caller's to close
  EXPECT_EQ((*relay)->relayed(), 0u);
  close(pair[0]);
  close(pair[1]);
}

TEST_F(ConnectionRelayTest, StopClosesEveryRelayedConnection) {
  int client, backend;
  Connect(&client, &backend);
  relay_->Stop();
  EXPECT_EQ(closed_.load(), 1u);
  EXPECT_EQ(ReadAll(client), "");
  EXPECT_EQ(ReadAll(backend), "");
  close(client);
  close(backend);
}

}  // namespace
}  // namespace cdcview
