#include "daemon/dynamodb/http_server.h"

#include <fcntl.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "daemon/dynamodb/sigv4_verify.h"
#include "daemon/log/log.h"
#include "daemon/server/listen_address.h"

namespace cdcview::dynamodb {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

constexpr char kJsonType[] = "application/x-amz-json-1.0";
constexpr size_t kReadChunk = 16 * 1024;
// Page threads run this many steps of nice below the I/O threads, so that a short request's
// I/O thread gets most of a CPU that a page being built also wants.
constexpr int kPageNice = 5;

std::string Crc32(std::string_view body) {
  return std::to_string(
      crc32_z(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<z_size_t>(body.size())));
}

// 52 characters of [A-Z0-9], the shape of DynamoDB's request ids.
std::string RequestId() {
  thread_local std::mt19937_64 random(std::random_device{}());
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id(52, 'A');
  for (char& c : id) c = kAlphabet[random() % 36];
  return id;
}

// "DynamoDB_20120810.Query" -> "Query"; the metrics keep only DynamoDB's names.
std::string_view OperationOf(std::string_view target) {
  const size_t dot = target.rfind('.');
  return dot == std::string_view::npos ? std::string_view() : target.substr(dot + 1);
}

std::string_view View(beast::string_view s) { return std::string_view(s.data(), s.size()); }

int OpenSpare() { return open("/dev/null", O_RDONLY | O_CLOEXEC); }

absl::StatusOr<int> ListenOn(const std::string& address) { return ListenSocket(address, "8000"); }

// Threads that run requests off the I/O threads: made as needed, up to `max_threads`, each
// running one request at a time; TrySubmit refuses past `max_in_flight` requests queued or
// running, or once closed. A task returns what to do once its place is given back (an answer
// posted from there finds the place free for the client's next request), or nothing. Threads run `nice` steps below the thread that made them (at most
// 19), so that they yield the CPU to the I/O threads. Close drops what has not started (its
// connection ends); Join waits for what runs.
class TaskPool {
 public:
  using Task = std::function<std::function<void()>()>;

  TaskPool(const char* name, uint32_t max_threads, uint32_t max_in_flight, int nice)
      : name_(name), max_threads_(max_threads), max_in_flight_(max_in_flight), nice_(nice) {}
  ~TaskPool() { Stop(); }

  bool TrySubmit(Task task) {
    absl::MutexLock lock(&mu_);
    if (stop_ || in_flight_ >= max_in_flight_) return false;
    ++in_flight_;
    queue_.push_back(std::move(task));
    if (queue_.size() > idle_ && threads_.size() < max_threads_) {
      threads_.emplace_back([this] { Run(); });
    }
    return true;
  }
  uint32_t max_in_flight() const { return max_in_flight_; }

  // Counts one request that runs elsewhere against max_in_flight; false at the cap or once
  // closed. Release gives the slot back.
  bool TryHold() {
    absl::MutexLock lock(&mu_);
    if (stop_ || in_flight_ >= max_in_flight_) return false;
    ++in_flight_;
    return true;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    --in_flight_;
  }

  void Stop() {
    Close();
    Join();
  }
  void Close() {
    std::deque<Task> dropped;
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
      dropped.swap(queue_);
      in_flight_ -= static_cast<uint32_t>(dropped.size());
    }
    dropped.clear();  // outside the lock: what a task holds may end a connection
  }
  void Join() {
    std::vector<std::thread> threads;
    {
      absl::MutexLock lock(&mu_);
      threads.swap(threads_);
    }
    for (std::thread& t : threads) t.join();
  }

 private:
  void Run() {
    pthread_setname_np(pthread_self(), name_);
    if (nice_ > 0) LowerPriority();
    absl::MutexLock lock(&mu_);
    for (;;) {
      ++idle_;
      mu_.Await(absl::Condition(this, &TaskPool::HasWorkOrStops));
      --idle_;
      if (queue_.empty()) return;  // stopping, nothing left
      Task task = std::move(queue_.front());
      queue_.pop_front();
      mu_.Unlock();
      std::function<void()> then = task();
      task = nullptr;  // what it holds goes before the slot is given back
      mu_.Lock();
      --in_flight_;
      if (then) {
        mu_.Unlock();
        then();
        then = nullptr;
        mu_.Lock();
      }
    }
  }

  bool HasWorkOrStops() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || !queue_.empty();
  }

  void LowerPriority() {
    errno = 0;
    const int base = getpriority(PRIO_PROCESS, 0);  // this thread's, as its maker's
    if (errno == 0 &&
        setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), std::min(19, base + nice_)) == 0) {
      return;
    }
    const int error = errno;
    static std::once_flag warned;
    std::call_once(warned, [this, error] {
      LogWarning(absl::StrCat("server.dynamodb: cannot lower the priority of the ", name_,
                              " threads (", std::strerror(error),
                              "); they share the CPU with the I/O threads as equals"));
    });
  }

  const char* const name_;
  const uint32_t max_threads_;
  const uint32_t max_in_flight_;
  const int nice_;
  mutable absl::Mutex mu_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  uint32_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  size_t idle_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

// A slot of a TaskPool held by a request that runs on another pool, given back when the last
// copy of the task holding it goes (run or dropped).
class PoolHold {
 public:
  static std::shared_ptr<PoolHold> Try(TaskPool& pool) {
    if (!pool.TryHold()) return nullptr;
    return std::shared_ptr<PoolHold>(new PoolHold(pool));
  }
  ~PoolHold() { pool_.Release(); }
  PoolHold(const PoolHold&) = delete;
  PoolHold& operator=(const PoolHold&) = delete;

 private:
  explicit PoolHold(TaskPool& pool) : pool_(pool) {}
  TaskPool& pool_;
};

// The places pages are built with: as many as page threads, shared by the page and the
// page-wait threads, so that however many waits end together no more pages are built at once
// than there are page threads (the waits are many, the CPUs are not). A page thread holds one
// for its whole request; a page-wait thread while it hashes a long body for its signature, and
// while it builds its page after the wait (ApiRequest::before_build). A wait for a place is
// counted (DynamoDbApiProbe::BuildWaited).
class BuildPlaces {
 public:
  BuildPlaces(uint32_t places, DynamoDbApiProbe* probe) : places_(places), probe_(probe) {}

  // Blocks until a place is free and takes it. With `refused_at_stop` (a page-wait request,
  // whose wait has ended), false without a place once Stop was called; without (a page
  // thread's request, accepted before the stop), it still waits: the places come free as the
  // builds that hold them end.
  bool Acquire(bool refused_at_stop) {
    const auto asked = std::chrono::steady_clock::now();
    bool waited;
    {
      absl::MutexLock lock(&mu_);
      waited = taken_ >= places_;
      mu_.Await(refused_at_stop ? absl::Condition(this, &BuildPlaces::FreeOrStopped)
                                : absl::Condition(this, &BuildPlaces::Free));
      if (refused_at_stop && stopped_) return false;
      ++taken_;
    }
    if (waited && probe_ != nullptr) {
      probe_->BuildWaited(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count());
    }
    return true;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    --taken_;
  }
  void Stop() {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
  }

 private:
  bool Free() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return taken_ < places_; }
  bool FreeOrStopped() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return taken_ < places_ || stopped_;
  }

  const uint32_t places_;
  DynamoDbApiProbe* const probe_;
  absl::Mutex mu_;
  uint32_t taken_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

// What Shutdown needs of a connection, whatever its stream.
class SessionBase : public std::enable_shared_from_this<SessionBase> {
 public:
  virtual ~SessionBase() = default;
  virtual void CloseIfIdle() = 0;  // both post to the connection's strand
  virtual void Close() = 0;
};

}  // namespace

class HttpServer::Impl {
 public:
  Impl(const ServerConfig& limits, Handler handler, Options options)
      : limits_(limits),
        handler_(std::move(handler)),
        options_(std::move(options)),
        waits_("dynamodb-wait", limits.dynamodb_max_waits, limits.dynamodb_max_waits, 0),
        pages_("dynamodb-page", limits.dynamodb_threads, limits.dynamodb_max_pages, kPageNice),
        // Its requests are counted by the places they hold of waits_ and pages_, which they
        // give back just before their own here: twice as many, so that it never refuses one.
        page_waits_("dynamodb-pgwait", limits.dynamodb_max_pages, 2 * limits.dynamodb_max_pages,
                    kPageNice),
        builds_(limits.dynamodb_threads, options_.probe),
        max_connections_(limits.dynamodb_max_connections),
        ioc_(static_cast<int>(limits.dynamodb_threads)),
        accept_strand_(asio::make_strand(ioc_)),
        acceptor_(accept_strand_),
        retry_timer_(accept_strand_) {
    if (options_.connections != nullptr) options_.connections->SetMax(max_connections_);
  }
  ~Impl() { Shutdown(0); }

  absl::Status Listen() {
    absl::StatusOr<int> fd = ListenOn(limits_.dynamodb);
    if (!fd.ok()) return fd.status();
    sockaddr_storage bound{};
    socklen_t length = sizeof bound;
    getsockname(*fd, reinterpret_cast<sockaddr*>(&bound), &length);
    const bool v6 = bound.ss_family == AF_INET6;
    port_ = ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                     : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    boost::system::error_code ec;
    acceptor_.assign(v6 ? tcp::v6() : tcp::v4(), *fd, ec);
    spare_fd_ = OpenSpare();
    if (ec || spare_fd_ < 0) {
      if (!ec) close(*fd);
      return absl::UnavailableError(absl::StrCat("cannot listen on ", limits_.dynamodb, ": ",
                                                 ec ? ec.message() : std::strerror(errno)));
    }
    asio::post(accept_strand_, [this] { Accept(); });
    // A connection whose request is on a wait thread has no operation pending: without this, the
    // threads would leave run() when every connection is there, and its answer never be sent.
    work_.emplace(ioc_.get_executor());
    for (uint32_t i = 0; i < limits_.dynamodb_threads; ++i) {
      threads_.emplace_back([this] {
        pthread_setname_np(pthread_self(), "dynamodb-io");
        ioc_.run();
      });
    }
    return absl::OkStatus();
  }

  int port() const { return port_; }

  void SetMaxConnections(uint32_t max) {
    max_connections_ = max;
    if (options_.connections != nullptr) options_.connections->SetMax(max);
  }

  void Shutdown(int grace_ms) {
    if (shut_down_.exchange(true)) return;
    stopping_ = true;
    builds_.Stop();
    if (threads_.empty()) return;  // never listened
    asio::post(accept_strand_, [this] {
      boost::system::error_code ec;
      acceptor_.close(ec);
      retry_timer_.cancel();
    });
    // Idle connections go now; those with a request in flight as soon as it is answered.
    const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(grace_ms);
    do {
      ForEachSession([](SessionBase& s) { s.CloseIfIdle(); });
      if (open_.load() == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } while (Clock::now() < deadline);
    // What has not started by now is not answered: its connection ends with the others.
    waits_.Close();
    pages_.Close();
    page_waits_.Close();
    ForEachSession([](SessionBase& s) { s.Close(); });
    const Clock::time_point closing = Clock::now() + std::chrono::seconds(1);
    while (open_.load() > 0 && Clock::now() < closing) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    work_.reset();
    ioc_.stop();
    for (std::thread& t : threads_) t.join();
    // Waits still running end by their own deadline (server.max_wait_ms at most).
    waits_.Join();
    pages_.Join();
    page_waits_.Join();
    if (spare_fd_ >= 0) close(spare_fd_);
    spare_fd_ = -1;
  }

  // ---- used by the sessions ----
  const ServerConfig& limits() const { return limits_; }
  const Options& options() const { return options_; }
  const Handler& handler() const { return handler_; }
  TaskPool& waits() { return waits_; }
  TaskPool& pages() { return pages_; }
  TaskPool& page_waits() { return page_waits_; }
  BuildPlaces& builds() { return builds_; }
  bool stopping() const { return stopping_.load(); }

  void Ended(uint64_t id, std::string_view reason) {
    {
      absl::MutexLock lock(&mu_);
      sessions_.erase(id);
    }
    open_.fetch_sub(1);
    if (options_.connections != nullptr) options_.connections->Closed(reason);
  }

 private:
  void Accept() {
    acceptor_.async_accept(asio::make_strand(ioc_),
                           [this](boost::system::error_code ec, tcp::socket socket) {
                             OnAccept(ec, std::move(socket));
                           });
  }

  void OnAccept(boost::system::error_code ec, tcp::socket socket) {
    if (stopping_ || ec == asio::error::operation_aborted) return;
    if (ec) {
      if (ec.value() == EMFILE || ec.value() == ENFILE) {
        OutOfDescriptors();
      } else {
        Accept();  // ECONNABORTED and the like: that client is gone
      }
      return;
    }
    if (open_.load() >= max_connections_.load()) {
      RefuseAtCap(std::move(socket));
      Accept();
      return;
    }
    refusing_ = false;
    open_.fetch_add(1);
    if (options_.connections != nullptr) options_.connections->Opened();
    StartSession(std::move(socket));
    Accept();
  }

  // The connection that could not be taken is accepted through the spare descriptor and closed,
  // so that its client learns at once; without a spare, accepting waits a moment instead of
  // spinning on EMFILE.
  void OutOfDescriptors() {
    if (!out_of_fds_) {
      out_of_fds_ = true;
      LogWarning(absl::StrCat("server.dynamodb: out of file descriptors (", std::strerror(EMFILE),
                              "); refusing connections until some are free (raise the open-files "
                              "limit or lower server.dynamodb_max_connections)"));
    }
    if (spare_fd_ >= 0) {
      close(spare_fd_);
      int excess = accept4(acceptor_.native_handle(), nullptr, nullptr, SOCK_CLOEXEC);
      if (excess >= 0) {
        if (options_.connections != nullptr) options_.connections->Refused("fd_limit");
        close(excess);
      }
      spare_fd_ = OpenSpare();
    }
    if (spare_fd_ >= 0) {
      Accept();
      return;
    }
    retry_timer_.expires_after(std::chrono::milliseconds(100));
    retry_timer_.async_wait([this](boost::system::error_code wait_ec) {
      if (wait_ec || stopping_) return;
      if (spare_fd_ < 0) spare_fd_ = OpenSpare();
      Accept();
    });
  }

  void RefuseAtCap(tcp::socket socket) {
    if (options_.connections != nullptr) options_.connections->Refused("max_connections");
    if (!refusing_) {
      refusing_ = true;
      LogWarning(absl::StrCat("server.dynamodb: ", max_connections_.load(),
                              " connections open (server.dynamodb_max_connections); closing new "
                              "ones until some end"));
    }
    if (options_.tls == nullptr) {
      // Best effort, never blocking: what a client that reads first sees.
      ApiResponse refusal = ErrorResponse(
          503, "ThrottlingException",
          absl::StrCat("too many connections: the DynamoDB endpoint holds at most ",
                       max_connections_.load(),
                       " (server.dynamodb_max_connections); retry later"),
          "unknown");
      const std::string answer = absl::StrCat(
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: ", kJsonType,
          "\r\nx-amzn-RequestId: ", RequestId(), "\r\nx-amz-crc32: ", Crc32(refusal.body),
          "\r\nContent-Length: ", refusal.body.size(), "\r\nConnection: close\r\n\r\n",
          refusal.body);
      [[maybe_unused]] ssize_t sent =
          send(socket.native_handle(), answer.data(), answer.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    boost::system::error_code ec;
    socket.close(ec);
  }

  void StartSession(tcp::socket socket);

  template <typename F>
  void ForEachSession(F f) {
    std::vector<std::shared_ptr<SessionBase>> live;
    {
      absl::MutexLock lock(&mu_);
      for (auto& [id, weak] : sessions_) {
        if (auto s = weak.lock()) live.push_back(std::move(s));
      }
    }
    for (auto& s : live) f(*s);
  }

  const ServerConfig limits_;
  const Handler handler_;
  const Options options_;
  TaskPool waits_;
  TaskPool pages_;
  // Long requests with a consistency header: each holds a place of waits_ and of pages_.
  TaskPool page_waits_;
  BuildPlaces builds_;
  std::atomic<uint32_t> max_connections_;
  std::atomic<uint32_t> open_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> shut_down_{false};
  int port_ = 0;
  int spare_fd_ = -1;
  // On the accept strand only.
  bool refusing_ = false;
  bool out_of_fds_ = false;
  absl::Mutex mu_;
  std::map<uint64_t, std::weak_ptr<SessionBase>> sessions_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> threads_;
  // Destroyed before the members above: its pending handlers hold sessions, whose ends use them.
  asio::io_context ioc_;
  asio::strand<asio::io_context::executor_type> accept_strand_;
  tcp::acceptor acceptor_;
  asio::steady_timer retry_timer_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
};

namespace {

template <typename Stream>
constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

}  // namespace

// One connection: its stream, read buffer, the request being handled and its answer. Runs on
// its strand; a request on a wait thread holds a reference and posts its answer back.
template <typename Stream>
class Session : public SessionBase {
 public:
  Session(HttpServer::Impl& server, uint64_t id, Stream stream)
      : server_(server), id_(id), stream_(std::move(stream)) {}
  ~Session() override {
    // A connection whose request was dropped at shutdown never saw an error of its own.
    const bool dropped = server_.stopping() && std::string_view(reason_) == "error";
    server_.Ended(id_, dropped ? "shutdown" : reason_);
  }

  void Start() {
    if constexpr (kTls<Stream>) {
      Lowest().expires_after(RequestTimeout());
      stream_.async_handshake(asio::ssl::stream_base::server,
                              [self = Self()](boost::system::error_code ec) {
                                if (ec) {
                                  self->reason_ = ec == beast::error::timeout ? "request_timeout"
                                                  : self->closing_            ? "shutdown"
                                                                              : "tls_handshake";
                                  return;
                                }
                                self->ReadFirst();
                              });
    } else {
      ReadFirst();
    }
  }

  void CloseIfIdle() override {
    asio::post(stream_.get_executor(), [self = Self()] {
      if (!self->idle_) return;
      self->closing_ = true;
      self->Lowest().cancel();
    });
  }

  void Close() override {
    asio::post(stream_.get_executor(), [self = Self()] {
      self->closing_ = true;
      absl::MutexLock lock(&self->socket_mu_);
      self->Lowest().close();
    });
  }

 private:
  std::shared_ptr<Session> Self() {
    return std::static_pointer_cast<Session>(shared_from_this());
  }
  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(stream_); }
  std::chrono::milliseconds RequestTimeout() const {
    return std::chrono::milliseconds(server_.limits().dynamodb_request_timeout_ms);
  }

  const char* ReasonOf(const boost::system::error_code& ec) const {
    if (ec == beast::error::timeout) return "request_timeout";
    if (closing_ || server_.stopping()) return "shutdown";
    if (ec == asio::error::eof || ec == http::error::end_of_stream ||
        ec == http::error::partial_message ||
        ec == asio::error::connection_reset || ec == asio::ssl::error::stream_truncated) {
      return "client";
    }
    return "error";
  }

  // Waits for the next request's first bytes: the idle timeout runs until they come.
  void ReadFirst() {
    if (server_.stopping() || closing_) {
      reason_ = "shutdown";
      return;
    }
    if (buffer_.size() > 0) {
      ReadRequest();
      return;
    }
    idle_ = true;
    Lowest().expires_after(std::chrono::milliseconds(server_.limits().dynamodb_idle_timeout_ms));
    stream_.async_read_some(buffer_.prepare(kReadChunk),
                            [self = Self()](boost::system::error_code ec, size_t n) {
                              self->idle_ = false;
                              if (ec) {
                                self->reason_ = ec == beast::error::timeout ? "idle"
                                                                             : self->ReasonOf(ec);
                                return;
                              }
                              self->buffer_.commit(n);
                              self->ReadRequest();
                            });
  }

  // The rest of the request, head and body, within the request timeout of its first byte.
  void ReadRequest() {
    parser_.emplace();
    parser_->header_limit(HttpServer::kMaxHeaderBytes);
    parser_->body_limit(server_.limits().dynamodb_max_request_bytes);
    Lowest().expires_after(RequestTimeout());
    http::async_read(stream_, buffer_, *parser_,
                     [self = Self()](boost::system::error_code ec, size_t) {
                       self->OnRequest(ec);
                     });
  }

  void OnRequest(boost::system::error_code ec) {
    started_ = Clock::now();
    if (ec == http::error::body_limit || ec == http::error::header_limit) {
      const bool body = ec == http::error::body_limit;
      if (server_.options().connections != nullptr) {
        server_.options().connections->RequestRefused(body ? "body_limit" : "header_limit");
      }
      // The fields read so far (a body over the limit is seen from Content-Length, once the
      // head has been read, though the parser does not call it done).
      const std::string_view operation = OperationOf(View(parser_->get()["X-Amz-Target"]));
      linger_ = true;
      keep_alive_ = false;
      Reply(ErrorResponse(
          body ? 413 : 431, "ValidationException",
          body ? absl::StrCat("the request body is larger than ",
                              server_.limits().dynamodb_max_request_bytes,
                              " bytes (server.dynamodb_max_request_bytes)")
               : absl::StrCat("the request head is larger than ", HttpServer::kMaxHeaderBytes,
                              " bytes"),
          std::string(operation)));
      return;
    }
    if (ec) {
      if (ec.category() == http::make_error_code(http::error::bad_target).category() &&
          ec != http::error::partial_message && ec != http::error::end_of_stream) {
        // Not HTTP/1.1 as a client sends it: say so once and close.
        linger_ = true;
        keep_alive_ = false;
        Reply(ErrorResponse(400, "SerializationException",
                            absl::StrCat("malformed HTTP request: ", ec.message()), ""));
        return;
      }
      reason_ = ReasonOf(ec);
      return;
    }
    Handle(parser_->release());
  }

  void Handle(http::request<http::string_body> request) {
    request_ = std::move(request);
    keep_alive_ = request_.keep_alive();
    const std::string_view target = View(request_["X-Amz-Target"]);
    const std::string operation(OperationOf(target));
    const std::string_view path = View(request_.target());
    if (path != "/") {
      Reply(ErrorResponse(404, "UnknownOperationException",
                          "cdcview's DynamoDB endpoint answers POST / (the DynamoDB JSON 1.0 "
                          "protocol) and GET / (health)",
                          operation));
      return;
    }
    if (request_.method() == http::verb::get) {
      ApiResponse health;
      health.body = "healthy: cdcview";
      health.operation = "health";
      Reply(std::move(health), "text/plain; charset=utf-8");
      return;
    }
    if (request_.method() != http::verb::post) {
      Reply(ErrorResponse(405, "UnknownOperationException",
                          "cdcview's DynamoDB endpoint answers POST / (the DynamoDB JSON 1.0 "
                          "protocol) and GET / (health)",
                          operation));
      return;
    }
    const std::string_view type = View(request_[http::field::content_type]);
    const std::string_view media = type.substr(0, type.find(';'));
    if (!type.empty() && media != "application/x-amz-json-1.0" &&
        media != "application/x-amz-json-1.1") {
      Reply(ErrorResponse(400, "SerializationException",
                          "Content-Type must be application/x-amz-json-1.0 (or 1.1)", operation));
      return;
    }
    operation_ = operation;
    // A body too long to be short is hashed for its signature on the thread that runs it; the
    // rest of the signature is checked here.
    const bool sign_later =
        server_.options().tokens != nullptr && request_.body().size() > kMaxShortBody;
    sign_later_ = sign_later;
    if (server_.options().tokens != nullptr && !Authenticated(/*read_body=*/!sign_later)) return;
    api_ = ApiRequest{};
    api_.target = target;
    api_.body = request_.body();
    api_.min_position = View(request_["x-cdcview-min-position"]);
    api_.min_kafka_offsets = View(request_["x-cdcview-min-kafka-offsets"]);
    api_.max_staleness_seconds = View(request_["x-cdcview-max-staleness-seconds"]);
    api_.who = who_ ? &*who_ : nullptr;
    const auto& runs_short = server_.options().runs_short;
    const bool long_request = runs_short && !runs_short(api_);
    const bool waits = server_.options().offload_all || MayWait(api_);
    if (!waits && !long_request) {
      if (sign_later && !Authenticated(/*read_body=*/true)) return;
      sign_later_ = false;
      api_.inline_bytes = kShortPageBytes;
      api_.inline_shards = kShortMergeShards;
      ApiResponse response = server_.handler()(api_);
      if (!response.run_long) {
        Reply(std::move(response));
        return;
      }
      // It reads more than a short request may here: again, on a page thread.
      api_.inline_bytes = 0;
      api_.inline_shards = 0;
      if (!RunOn(server_.pages(), /*queued_for_page=*/true)) {
        RefusePages();
      } else if (DynamoDbApiProbe* probe = server_.options().probe) {
        probe->Moved();
      }
      return;
    }
    if (waits && long_request) {
      // It waits as a wait and builds a page: a place of each, on a thread of the pages' priority.
      std::shared_ptr<PoolHold> page = PoolHold::Try(server_.pages());
      if (page == nullptr) {
        RefusePages();
        return;
      }
      std::shared_ptr<PoolHold> wait = PoolHold::Try(server_.waits());
      // A cluster member's builds wait on its peers, not on its CPU: they take no build place.
      const bool gate = !server_.options().offload_all;
      if (wait == nullptr || !RunOn(server_.page_waits(), /*queued_for_page=*/false, gate,
                                    {std::move(page), std::move(wait)})) {
        RefuseWaits();
      }
    } else if (waits) {
      if (!RunOn(server_.waits(), /*queued_for_page=*/false)) RefuseWaits();
    } else if (!RunOn(server_.pages(), /*queued_for_page=*/true)) {
      RefusePages();
    }
  }

  // Checks the request's SigV4 signature against the tokens, setting who_ and api_.who: the
  // refusal to answer when it does not hold. Without `read_body`, only what does not need the
  // body (PrecheckSigV4), and who_ is not set. On the strand, or on the pool thread that runs
  // the request.
  std::optional<ApiResponse> Authenticate(bool read_body = true) {
    SignedRequest signed_request;
    signed_request.method = View(request_.method_string());
    signed_request.target = View(request_.target());
    for (const auto& field : request_) {
      signed_request.headers.emplace_back(View(field.name_string()), View(field.value()));
    }
    signed_request.body = request_.body();
    SigV4Verdict verdict =
        read_body ? VerifySigV4(signed_request, *server_.options().tokens, server_.options().now())
                  : PrecheckSigV4(signed_request, *server_.options().tokens, server_.options().now());
    if (!verdict.ok) {
      if (security::AuthProbe* probe = server_.options().auth_probe) {
        probe->RecordRefusal(absl::UnauthenticatedError(
            verdict.error_type == "MissingAuthenticationTokenException"
                ? security::kNoTokenMessage
                : verdict.message));
      }
      return ErrorResponse(400, verdict.error_type, verdict.message, operation_);
    }
    if (read_body) {
      who_ = std::move(verdict.who);
      api_.who = &*who_;
    }
    return std::nullopt;
  }

  // On the strand: whether the signature holds (as far as Authenticate checks); when not, its
  // refusal is answered.
  bool Authenticated(bool read_body) {
    std::optional<ApiResponse> refusal = Authenticate(read_body);
    if (refusal.has_value()) Reply(std::move(*refusal));
    return !refusal.has_value();
  }

  void RefusePages() {
    if (RefusedAtStop()) return;
    RefuseBusy("max_pages", "long requests (Scan and Query pages, BatchGetItem)",
               server_.pages(), "are queued or running", "dynamodb_max_pages");
  }
  void RefuseWaits() {
    if (RefusedAtStop()) return;
    RefuseBusy("max_waits", "requests with a consistency header", server_.waits(), "are running",
               "dynamodb_max_waits");
  }

  // A pool refuses every request once the server is stopping: 503 saying so, not a cap's
  // refusal. False when the server is not stopping.
  bool RefusedAtStop() {
    if (!server_.stopping()) return false;
    Reply(ErrorResponse(
        503, "ServiceUnavailable",
        absl::StrCat("the request is not answered because ", ViewQueries::kStopping), operation_));
    return true;
  }

  // A pool at its cap: ThrottlingException naming the field (SDKs retry it with back-off),
  // counted under `reason`.
  void RefuseBusy(const char* reason, absl::string_view what, const TaskPool& pool,
                  absl::string_view state, absl::string_view field) {
    CountRefused(reason);
    Reply(ErrorResponse(400, "ThrottlingException",
                        absl::StrCat("too many ", what, " at once: ", pool.max_in_flight(), " ",
                                     state, " (server.", field, "); retry later"),
                        operation_));
  }

  void CountRefused(const char* reason) {
    if (server_.options().connections != nullptr) {
      server_.options().connections->RequestRefused(reason);
    }
  }

  // Hands the request to `pool`, whose thread posts the answer back to this connection's
  // strand; false when the pool refuses it. `holds`: places of other pools the request keeps
  // until it has run.
  bool RunOn(TaskPool& pool, bool queued_for_page, bool gate = false,
             std::vector<std::shared_ptr<PoolHold>> holds = {}) {
    return pool.TrySubmit([self = Self(), queued_for_page, gate, holds = std::move(holds)] {
      return self->Run(queued_for_page, gate);
    });
  }

  // What a look at the connection finds: the client there, gone, or the connection closed by
  // this end (shutdown, a timeout).
  enum class Peer { kThere, kLeft, kClosedHere };

  // On a pool's thread; returns what sends the answer, for once the request's places are
  // given back. A request that queued for a page thread is not built when its client has
  // gone, nor after waiting longer than the request timeout (ThrottlingException: the page
  // threads are behind); else it runs with a build place. With `gate` (a page-wait thread), a
  // long body is hashed for its signature with a build place, and the page built with another
  // once the wait has ended.
  std::function<void()> Run(bool queued_for_page, bool gate) {
    if (queued_for_page) {
      server_.builds().Acquire(/*refused_at_stop=*/false);
      absl::Cleanup release = [this] { server_.builds().Release(); };
      if (const Peer peer = ClientLeft(); peer != Peer::kThere) return Gone(peer);
      const auto waited =
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_);
      if (waited > RequestTimeout()) {
        CountRefused("page_timeout");
        return ReplyLater(ErrorResponse(
            400, "ThrottlingException",
            absl::StrCat("waited ", waited.count(),
                         " ms for a page thread, longer than server.dynamodb_request_timeout_ms (",
                         RequestTimeout().count(),
                         " ms): long requests arrive faster than they are built; retry later"),
            operation_));
      }
      return Answer();
    }
    if (sign_later_ && gate) {
      if (!server_.builds().Acquire(/*refused_at_stop=*/true)) {
        return ReplyLater(ErrorResponse(
            503, "ServiceUnavailable",
            absl::StrCat("the request is not answered because ", ViewQueries::kStopping),
            operation_));
      }
      absl::Cleanup release = [this] { server_.builds().Release(); };
      if (std::optional<ApiResponse> refusal = Authenticate()) {
        return ReplyLater(std::move(*refusal));
      }
      sign_later_ = false;
    }
    if (!gate) return Answer();
    // After its wait, a page is built with a build place, and not for a client that has gone.
    bool building = false;
    Peer peer = Peer::kThere;
    api_.before_build = [this, &building, &peer]() -> absl::Status {
      if (building) return absl::OkStatus();  // one place per request, however often asked
      building = server_.builds().Acquire(/*refused_at_stop=*/true);
      if (!building) {
        return absl::UnavailableError(
            absl::StrCat("the page is not built because ", ViewQueries::kStopping));
      }
      peer = ClientLeft();
      if (peer != Peer::kThere) return absl::CancelledError("the connection has ended");
      return absl::OkStatus();
    };
    std::function<void()> answer = Answer();
    api_.before_build = nullptr;
    if (building) server_.builds().Release();
    if (peer != Peer::kThere) return Gone(peer);
    return answer;
  }

  // The request's connection ended before it was built: it is not answered. When the client
  // left, that is counted and the connection ends as the client's doing; when this end closed
  // it (shutdown, a timeout), as that already recorded.
  std::function<void()> Gone(Peer peer) {
    if (peer == Peer::kLeft) {
      CountRefused("client_gone");
      asio::post(stream_.get_executor(), [self = Self()] { self->reason_ = "client"; });
    }
    return nullptr;
  }

  // Checks a long body's signature when it is still to check, then answers the request.
  std::function<void()> Answer() {
    if (sign_later_) {
      if (std::optional<ApiResponse> refusal = Authenticate()) {
        return ReplyLater(std::move(*refusal));
      }
    }
    return ReplyLater(server_.handler()(api_));
  }

  // On a pool's thread: the answer's CRC is computed here; what it returns sends the answer
  // on the strand.
  std::function<void()> ReplyLater(ApiResponse response) {
    std::string crc = Crc32(response.body);
    return [self = Self(), response = std::move(response), crc = std::move(crc)]() mutable {
      asio::post(self->stream_.get_executor(),
                 [self, response = std::move(response), crc = std::move(crc)]() mutable {
                   self->Reply(std::move(response), kJsonType, std::move(crc));
                 });
    };
  }

  // Whether the client has closed its side or reset the connection while its request queued
  // (as a proxy takes a client that hangs up as gone): a look at the socket that takes
  // nothing from it, so a TLS close_notify or a pipelined request before the FIN does not
  // hide it.
  Peer ClientLeft() {
    absl::MutexLock lock(&socket_mu_);
    if (!Lowest().socket().is_open()) return Peer::kClosedHere;
    pollfd watch{Lowest().socket().native_handle(), POLLRDHUP, 0};
    const bool left =
        poll(&watch, 1, 0) > 0 && (watch.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
    return left ? Peer::kLeft : Peer::kThere;
  }

  // `crc`: the body's Crc32 when the thread that made the answer computed it.
  void Reply(ApiResponse answer, const char* content_type = kJsonType, std::string crc = {}) {
    if (DynamoDbApiProbe* probe = server_.options().probe;
        probe != nullptr && content_type == kJsonType) {
      probe->Observe(answer.operation, answer.error_type.empty() ? "ok" : answer.error_type,
                     std::chrono::duration<double>(Clock::now() - started_).count());
    }
    if (answer.error_type == "AccessDeniedException") {
      if (security::AuthProbe* auth = server_.options().auth_probe) {
        auth->RecordRefusal(absl::PermissionDeniedError(""));
      }
    }
    response_.emplace();
    response_->version(11);
    response_->result(static_cast<unsigned>(answer.http_status));
    response_->set(http::field::content_type, content_type);
    response_->set("x-amzn-RequestId", RequestId());
    response_->set("x-amz-crc32", crc.empty() ? Crc32(answer.body) : std::move(crc));
    if (!answer.applied_position.empty()) {
      response_->set("x-cdcview-applied-position", answer.applied_position);
    }
    response_->body() = std::move(answer.body);
    response_->keep_alive(keep_alive_ && !server_.stopping() && !closing_);
    response_->prepare_payload();
    // What is held: this one answer; a client that does not read it has the request timeout.
    Lowest().expires_after(RequestTimeout());
    http::async_write(stream_, *response_,
                      [self = Self()](boost::system::error_code ec, size_t) {
                        self->OnWritten(ec);
                      });
  }

  void OnWritten(boost::system::error_code ec) {
    const bool keep = response_->keep_alive();
    response_.reset();
    request_ = {};
    who_.reset();
    if (ec) {
      reason_ = ec == beast::error::timeout ? "write_timeout" : ReasonOf(ec);
      return;
    }
    if (keep) {
      ReadFirst();
      return;
    }
    reason_ = linger_ ? "request_refused" : server_.stopping() || closing_ ? "shutdown" : "client";
    boost::system::error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
    if (linger_) {
      // What the client still sends (the rest of a body over the limit) is read and dropped, so
      // that closing does not reset the connection before the client read the answer.
      Lowest().expires_after(HttpServer::kLingerTime);
      Discard();
    }
  }

  void Discard() {
    Lowest().async_read_some(asio::buffer(discard_),
                             [self = Self()](boost::system::error_code ec, size_t) {
                               if (!ec) self->Discard();
                             });
  }

  HttpServer::Impl& server_;
  const uint64_t id_;
  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> request_;
  std::optional<security::Principal> who_;
  ApiRequest api_;
  std::string operation_;   // the request's operation, for its refusals
  bool sign_later_ = false;  // the signature is checked on the thread that runs the request
  // Held while the socket is closed from the strand and while a pool thread looks at it.
  absl::Mutex socket_mu_;
  std::optional<http::response<http::string_body>> response_;
  Clock::time_point started_ = Clock::now();
  bool keep_alive_ = true;
  bool idle_ = false;
  bool closing_ = false;
  bool linger_ = false;
  const char* reason_ = "error";
  std::array<char, 4096> discard_;
};

void HttpServer::Impl::StartSession(tcp::socket socket) {
  uint64_t id;
  {
    absl::MutexLock lock(&mu_);
    id = next_id_++;
  }
  std::shared_ptr<SessionBase> session;
  if (options_.tls != nullptr) {
    // Asio's context takes ownership of a handle: it gets a reference of its own, which it drops
    // when it goes at the end of this block; the connection's SSL keeps the context alive.
    std::shared_ptr<SSL_CTX> current = options_.tls->Current();
    SSL_CTX_up_ref(current.get());
    asio::ssl::context context(current.get());
    using TlsStream = beast::ssl_stream<beast::tcp_stream>;
    session = std::make_shared<Session<TlsStream>>(*this, id,
                                                   TlsStream(std::move(socket), context));
  } else {
    session = std::make_shared<Session<beast::tcp_stream>>(*this, id,
                                                           beast::tcp_stream(std::move(socket)));
  }
  {
    absl::MutexLock lock(&mu_);
    sessions_.emplace(id, session);
  }
  if (options_.tls != nullptr) {
    std::static_pointer_cast<Session<beast::ssl_stream<beast::tcp_stream>>>(session)->Start();
  } else {
    std::static_pointer_cast<Session<beast::tcp_stream>>(session)->Start();
  }
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Shutdown(0); }

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const ServerConfig& limits,
                                                               Handler handler, Options options) {
  if (limits.dynamodb_threads == 0) {
    return absl::InvalidArgumentError(
        "server.dynamodb_threads is 0: the caller resolves it to a thread count first");
  }
  auto impl = std::make_unique<Impl>(limits, std::move(handler), std::move(options));
  if (absl::Status s = impl->Listen(); !s.ok()) return s;
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

int HttpServer::port() const { return impl_->port(); }

void HttpServer::SetMaxConnections(uint32_t max) { impl_->SetMaxConnections(max); }

void HttpServer::Shutdown(int grace_ms) { impl_->Shutdown(grace_ms); }

}  // namespace cdcview::dynamodb
