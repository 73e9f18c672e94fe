// HttpClient's cancel flag: a request to a server that never answers ends when it is raised.
#include "daemon/aws/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace cdcview::aws {
namespace {

// A listening socket nobody accepts from: the kernel completes the connection and takes the
// request, and no response ever comes.
class SilentServer {
 public:
  SilentServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    ::listen(fd_, 8);
    url_ = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)) + "/";
  }
  ~SilentServer() { ::close(fd_); }
  const std::string& url() const { return url_; }

 private:
  int fd_ = -1;
  std::string url_;
};

TEST(HttpClientTest, ARaisedCancelFlagEndsARequestInFlight) {
  SilentServer server;
  std::atomic<bool> cancel{false};
  HttpClient client(HttpClient::Options{std::chrono::milliseconds(5000),
                                        std::chrono::milliseconds(30000), &cancel});
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    cancel = true;
  });
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<HttpResponse> response = client.Post(server.url(), {}, "{}");
  const auto took = std::chrono::steady_clock::now() - start;
  canceller.join();
  ASSERT_FALSE(response.ok());
  EXPECT_TRUE(absl::IsCancelled(response.status())) << response.status();
  EXPECT_EQ(std::string(response.status().message()),
            "request to " + server.url() + " cancelled: stopping");
  // libcurl calls the progress callback at least once a second while waiting.
  EXPECT_LT(took, std::chrono::milliseconds(2500));
  EXPECT_GE(took, std::chrono::milliseconds(300));

  // Raised before a request: it is not sent at all.
  absl::StatusOr<HttpResponse> again = client.Get(server.url(), {});
  EXPECT_EQ(std::string(again.status().message()),
            "request to " + server.url() + " not sent: stopping");
}

TEST(HttpClientTest, WithoutACancelFlagTheTimeoutStillApplies) {
  SilentServer server;
  HttpClient client(HttpClient::Options{std::chrono::milliseconds(1000),
                                        std::chrono::milliseconds(400)});
  absl::StatusOr<HttpResponse> response = client.Get(server.url(), {});
  EXPECT_TRUE(absl::IsDeadlineExceeded(response.status())) << response.status();
}

}  // namespace
}  // namespace cdcview::aws
