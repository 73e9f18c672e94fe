#include "daemon/metrics/metrics_http_server.h"

#include <netdb.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <vector>

#include "CivetServer.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "daemon/security/auth_probe.h"
#include "daemon/security/tls_context.h"
#include "daemon/security/token_store.h"

namespace cdcview {
namespace {

constexpr char kChallenge[] = "Bearer realm=\"cdcview\"";
constexpr char kMetricsType[] = "text/plain; version=0.0.4; charset=utf-8";

const char* StatusText(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    default: return "Error";
  }
}

}  // namespace

class MetricsHttpServer::Handler : public CivetHandler {
 public:
  explicit Handler(const MetricsHttpServer& server) : server_(server) {}

  bool handleGet(CivetServer*, mg_connection* conn) override {
    Reply reply = server_.Scrape(mg_get_header(conn, "Authorization"));
    mg_response_header_start(conn, reply.status);
    mg_response_header_add_lines(conn, reply.headers.c_str());
    mg_response_header_add(conn, "Content-Length", std::to_string(reply.body.size()).c_str(), -1);
    mg_response_header_send(conn);
    mg_write(conn, reply.body.data(), reply.body.size());
    return true;
  }

 private:
  const MetricsHttpServer& server_;
};

MetricsHttpServer::MetricsHttpServer(Options options, std::function<std::string()> render)
    : options_(std::move(options)), render_(std::move(render)) {}

MetricsHttpServer::~MetricsHttpServer() {
  if (listen_fd_ < 0) return;
  stopping_ = true;
  if (acceptor_.joinable()) acceptor_.join();
  close(listen_fd_);
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, connection] : connections_) {
      if (connection.fd >= 0) shutdown(connection.fd, SHUT_RDWR);  // wakes its thread's poll
      threads.push_back(std::move(connection.thread));
    }
  }
  for (std::thread& thread : threads) thread.join();
}

MetricsHttpServer::Reply MetricsHttpServer::Scrape(const char* authorization) const {
  if (options_.tokens != nullptr) {
    absl::StatusOr<security::Principal> who =
        options_.tokens->Authenticate(authorization == nullptr ? "" : authorization);
    absl::Status refusal = who.ok() ? security::TokenStore::PermitMetrics(*who) : who.status();
    if (!refusal.ok()) {
      if (options_.refusals != nullptr) options_.refusals->RecordRefusal(refusal);
      // RFC 6750: no token, a token not accepted, a token without the right.
      const char* error = refusal.code() == absl::StatusCode::kPermissionDenied
                              ? ", error=\"insufficient_scope\""
                          : refusal.message() == security::kNoTokenMessage ? ""
                                                                            : ", error=\"invalid_token\"";
      return Reply{refusal.code() == absl::StatusCode::kPermissionDenied ? 403 : 401,
                   absl::StrCat("WWW-Authenticate: ", kChallenge, error,
                                "\r\nContent-Type: text/plain; charset=utf-8\r\n"),
                   absl::StrCat(refusal.message(), "\n")};
    }
  }
  return Reply{200, absl::StrCat("Content-Type: ", kMetricsType, "\r\n"), render_()};
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    Options options, std::function<std::string()> render) {
  std::unique_ptr<MetricsHttpServer> server(
      new MetricsHttpServer(std::move(options), std::move(render)));
  if (server->options_.tls != nullptr) {
    if (absl::Status s = server->ListenTls(); !s.ok()) return s;
    return server;
  }
  std::vector<std::string> civet_options = {"listening_ports", server->options_.listen,
                                            "num_threads", "2"};
  try {
    server->server_ = std::make_unique<CivetServer>(civet_options);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", server->options_.listen,
                                               ": ", e.what(),
                                               "; set server.metrics to a free host:port"));
  }
  server->handler_ = std::make_unique<Handler>(*server);
  server->server_->addHandler("/metrics", server->handler_.get());
  std::vector<int> ports = server->server_->getListeningPorts();
  server->port_ = ports.empty() ? 0 : ports.front();
  return server;
}

absl::Status MetricsHttpServer::ListenTls() {
  const std::string& listen = options_.listen;
  auto fail = [&listen](const std::string& why) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics over TLS on ", listen, ": ",
                                               why, "; set server.metrics to a free host:port"));
  };
  size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return fail("expected host:port");
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int rv = getaddrinfo(host.empty() ? nullptr : host.c_str(), listen.c_str() + colon + 1, &hints,
                           &found);
      rv != 0) {
    return fail(gai_strerror(rv));
  }
  std::string error = "no address";
  for (addrinfo* a = found; a != nullptr && listen_fd_ < 0; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 64) == 0) {
      listen_fd_ = fd;
    } else {
      error = std::strerror(errno);
      close(fd);
    }
  }
  freeaddrinfo(found);
  if (listen_fd_ < 0) return fail(error);
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &length);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
  return absl::OkStatus();
}

void MetricsHttpServer::AcceptLoop() {
  // OpenSSL writes to the socket with write(): a client gone before our reply or close_notify
  // would raise SIGPIPE, which ends the process. Blocked here, and in the connection threads
  // (they inherit the mask), the write fails with EPIPE instead.
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  while (!stopping_) {
    ReapFinished();
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    // Non-blocking: every wait of a connection is a poll with a deadline.
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;  // EMFILE and friends: the next poll tries again
    absl::MutexLock lock(&mu_);
    if (open_connections_ >= kMaxConnections) {
      close(fd);
      continue;
    }
    const uint64_t id = next_id_++;
    ++open_connections_;
    // Its thread ends by taking mu_, so it finds its entry in place.
    Connection& connection = connections_[id];
    connection.fd = fd;
    connection.thread = std::thread([this, id, fd] { Serve(id, fd); });
  }
}

void MetricsHttpServer::ReapFinished() {
  std::vector<std::thread> finished;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = connections_.begin(); it != connections_.end();) {
      if (it->second.fd >= 0) {
        ++it;
        continue;
      }
      finished.push_back(std::move(it->second.thread));
      it = connections_.erase(it);
    }
  }
  for (std::thread& thread : finished) thread.join();
}

namespace {

using Clock = std::chrono::steady_clock;

// After an SSL call on a non-blocking socket returned `result`: waits until the socket is ready
// for what the call wants, or until `deadline`. False when the call failed for good or the
// deadline passed (the connection is to be closed).
bool AwaitSocket(SSL* ssl, int fd, int result, Clock::time_point deadline) {
  short events = 0;
  switch (SSL_get_error(ssl, result)) {
    case SSL_ERROR_WANT_READ: events = POLLIN; break;
    case SSL_ERROR_WANT_WRITE: events = POLLOUT; break;
    default: return false;
  }
  for (;;) {
    const int64_t left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    int ready = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 60'000)));
    if (ready > 0) return true;  // readable, writable, or hung up: the next call tells
    if (ready < 0 && errno != EINTR) return false;
  }
}

}  // namespace

void MetricsHttpServer::Serve(uint64_t id, int fd) {
  std::shared_ptr<SSL_CTX> ctx = options_.tls->Current();
  SSL* ssl = SSL_new(ctx.get());
  bool open = ssl != nullptr && SSL_set_fd(ssl, fd) == 1;
  const Clock::time_point handshake_deadline = Clock::now() + kHandshakeTimeout;
  for (int result; open && (result = SSL_accept(ssl)) != 1;) {
    open = AwaitSocket(ssl, fd, result, handshake_deadline);
  }
  if (open) {
    std::string buffer;
    while (open) {
      // One request head (a scrape has no body): its first byte within kIdleTimeout (bytes
      // already read count as arrived now), all of it within kRequestHeadTimeout of the first.
      bool started = !buffer.empty();
      Clock::time_point deadline = Clock::now() + (started ? kRequestHeadTimeout : kIdleTimeout);
      size_t end;
      while ((end = buffer.find("\r\n\r\n")) == std::string::npos &&
             buffer.size() <= kMaxRequestHeadBytes) {
        char chunk[4096];
        int got = SSL_read(ssl, chunk, sizeof chunk);
        if (got > 0) {
          if (!started) {
            started = true;
            deadline = Clock::now() + kRequestHeadTimeout;
          }
          buffer.append(chunk, static_cast<size_t>(got));
        } else if (stopping_ || !AwaitSocket(ssl, fd, got, deadline)) {
          open = false;
          break;
        }
      }
      if (!open) break;
      Reply reply;
      bool head = false;
      if (end == std::string::npos) {
        reply = Reply{400, "Content-Type: text/plain; charset=utf-8\r\n",
                      "request head too long\n"};
        open = false;
      } else {
        std::vector<std::string> lines = absl::StrSplit(buffer.substr(0, end), "\r\n");
        buffer.erase(0, end + 4);
        std::vector<std::string> request = absl::StrSplit(lines[0], ' ');
        std::string authorization;
        bool has_authorization = false;
        bool has_body = false;
        for (size_t i = 1; i < lines.size(); ++i) {
          size_t colon = lines[i].find(':');
          if (colon == std::string::npos) continue;
          std::string name = absl::AsciiStrToLower(lines[i].substr(0, colon));
          std::string value(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
          if (name == "authorization") {
            authorization = value;
            has_authorization = true;
          } else if (name == "connection" && absl::EqualsIgnoreCase(value, "close")) {
            open = false;
          } else if ((name == "content-length" && value != "0") || name == "transfer-encoding") {
            has_body = true;
          }
        }
        if (request.size() != 3 || !absl::StartsWith(request[2], "HTTP/1.") || has_body) {
          reply = Reply{400, "Content-Type: text/plain; charset=utf-8\r\n",
                        "expected GET /metrics HTTP/1.1 without a body\n"};
          open = false;
        } else {
          if (request[2] == "HTTP/1.0") open = false;
          std::string_view path = request[1];
          path = path.substr(0, path.find('?'));
          head = request[0] == "HEAD";
          if (request[0] != "GET" && !head) {
            reply = Reply{405, "Allow: GET, HEAD\r\nContent-Type: text/plain; charset=utf-8\r\n",
                          "only GET and HEAD\n"};
          } else if (path != "/metrics") {
            reply = Reply{404, "Content-Type: text/plain; charset=utf-8\r\n", "not found: the "
                          "metrics are at /metrics\n"};
          } else {
            reply = Scrape(has_authorization ? authorization.c_str() : nullptr);
          }
        }
      }
      // With tokens, only a scrape that passed them keeps the connection.
      if (options_.tokens != nullptr && reply.status != 200) open = false;
      std::string out = absl::StrCat("HTTP/1.1 ", reply.status, " ", StatusText(reply.status),
                                     "\r\n", reply.headers, "Content-Length: ", reply.body.size(),
                                     "\r\n", open ? "" : "Connection: close\r\n", "\r\n");
      if (!head) out += reply.body;
      // TlsServerContext's contexts allow partial writes: write until all is out.
      const Clock::time_point write_deadline = Clock::now() + kIdleTimeout;
      for (size_t sent = 0; sent < out.size();) {
        size_t written = 0;
        int result = SSL_write_ex(ssl, out.data() + sent, out.size() - sent, &written);
        if (result == 1) {
          sent += written;
        } else if (!AwaitSocket(ssl, fd, result, write_deadline)) {
          open = false;
          break;
        }
      }
    }
    SSL_shutdown(ssl);  // one try at close_notify; the socket is non-blocking
  }
  SSL_free(ssl);
  absl::MutexLock lock(&mu_);
  // Closed under mu_: until the entry is marked, no other connection can get this number.
  close(fd);
  connections_.at(id).fd = -1;
  --open_connections_;
}

}  // namespace cdcview
