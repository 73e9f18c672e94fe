// FakeHttpServer: a tiny scripted HTTP/1.1 server on 127.0.0.1 (port 0) for client tests.
// Each request gets the next scripted response (the last one repeats); requests are recorded.
// One connection at a time, keep-alive honoured. Thread-safe accessors.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace cdcview::test {

class FakeHttpServer {
 public:
  struct Response {
    int status = 200;
    std::string body;
  };
  struct Request {
    std::string method, path;
    std::map<std::string, std::string> headers;  // lowercase names
    std::string body;
  };

  explicit FakeHttpServer(std::vector<Response> script) : script_(std::move(script)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    ::listen(fd_, 8);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeHttpServer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    // The client keeps its connection alive: end it, or Serve would wait in recv forever.
    if (int client = client_.load(); client >= 0) ::shutdown(client, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/"; }
  std::vector<Request> requests() const {
    absl::MutexLock lock(&mu_);
    return requests_;
  }

 private:
  void Serve() {
    while (!stop_) {
      int client = ::accept(fd_, nullptr, nullptr);
      if (client < 0) return;
      client_ = client;
      if (stop_) ::shutdown(client, SHUT_RDWR);
      std::string buffer;
      while (HandleOne(client, &buffer)) {
      }
      client_ = -1;
      ::close(client);
    }
  }

  bool HandleOne(int client, std::string* buffer) {
    size_t header_end;
    while ((header_end = buffer->find("\r\n\r\n")) == std::string::npos) {
      if (!ReadMore(client, buffer)) return false;
    }
    Request request;
    std::string head = buffer->substr(0, header_end);
    size_t line_end = head.find("\r\n");
    std::string first = head.substr(0, line_end);
    request.method = first.substr(0, first.find(' '));
    request.path = first.substr(first.find(' ') + 1, first.rfind(' ') - first.find(' ') - 1);
    size_t pos = line_end;
    while (pos != std::string::npos && pos < head.size()) {
      size_t next = head.find("\r\n", pos + 2);
      std::string line = head.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
      size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(0, colon);
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        request.headers[name] = line.substr(line.find_first_not_of(' ', colon + 1));
      }
      pos = next;
    }
    size_t length = request.headers.contains("content-length")
                        ? std::stoul(request.headers["content-length"]) : 0;
    while (buffer->size() < header_end + 4 + length) {
      if (!ReadMore(client, buffer)) return false;
    }
    request.body = buffer->substr(header_end + 4, length);
    buffer->erase(0, header_end + 4 + length);
    Response response;
    {
      absl::MutexLock lock(&mu_);
      response = script_[std::min(requests_.size(), script_.size() - 1)];
      requests_.push_back(request);
    }
    std::string out = "HTTP/1.1 " + std::to_string(response.status) + " X\r\nContent-Length: " +
                      std::to_string(response.body.size()) +
                      "\r\nContent-Type: application/x-amz-json-1.0\r\n\r\n" + response.body;
    return ::send(client, out.data(), out.size(), MSG_NOSIGNAL) == ssize_t(out.size());
  }

  static bool ReadMore(int client, std::string* buffer) {
    char chunk[4096];
    ssize_t n = ::recv(client, chunk, sizeof chunk, 0);
    if (n <= 0) return false;
    buffer->append(chunk, size_t(n));
    return true;
  }

  std::vector<Response> script_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> client_{-1};
  std::thread thread_;
  mutable absl::Mutex mu_;
  std::vector<Request> requests_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cdcview::test
