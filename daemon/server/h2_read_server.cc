#include "daemon/server/h2_read_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <google/protobuf/descriptor.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cdcview/v1/view_service.grpc.pb.h"
#include "daemon/log/log.h"
#include "daemon/log/log_throttle.h"
#include "daemon/server/error_text.h"
#include "daemon/server/listen_address.h"
#include "daemon/server/cluster_peers.h"
#include "daemon/server/read_consistency.h"
#include "daemon/server/read_permission.h"
#include "index_builders/coding.h"

namespace cdcview {
namespace {

using Deadline = ViewQueries::Deadline;
using Clock = std::chrono::steady_clock;

// Threads for reads that wait for a position (they sleep most of the time), and for the
// other offloaded reads (large pages, the O(views) and O(entries) calls): a wait never holds
// up a page.
constexpr int kWaitThreads = 8;
constexpr int kHeavyThreads = 2;
// A cluster member's port: every read but the local-only ones asks the other members and
// waits for their answers (network time, little CPU), off the loop.
constexpr int kFanOutThreads = 16;
// A waiting read asks the reader again every slice, so a reset, a client gone or a shutdown
// ends it within one slice instead of at its deadline.
constexpr auto kWaitSlice = std::chrono::milliseconds(200);
// Read per wake-up at most kReadChunksPerWake chunks of kReadChunk, flushing answers after
// each chunk: one connection's burst neither delays its first answers nor starves the others.
constexpr size_t kReadChunk = 16 << 10;
constexpr int kReadChunksPerWake = 16;
// While accept fails for want of descriptors or memory, the listener rests this long instead
// of waking the loop at once again (it stays readable).
constexpr auto kAcceptPause = std::chrono::milliseconds(100);
// Bytes of answers one connection's socket may owe before the loop stops producing more and
// stops reading its requests: a client that stops reading stops itself, not the loop.
constexpr size_t kMaxPendingOut = 1 << 20;
// Per connection. What their requests may buffer is bounded by
// server.fast_reads_max_buffered_per_connection.
constexpr uint32_t kMaxConcurrentStreams = 100;
// How often the loop looks for connections past their idle or request timeout.
constexpr auto kSweepInterval = std::chrono::milliseconds(50);

// What one call will do, once its request is parsed.
struct Prepared {
  bool cheap = false;        // may run on the loop, once no wait is needed
  bool runs_inline = false;  // cheap and no position to wait for
  bool waits = false;        // carries a position to wait for
  // The answer as gRPC frames it: 5 bytes of prefix (filled in by Answer), then the message.
  std::function<absl::StatusOr<std::string>(Deadline)> run;
};

// `who`: the token's principal when server.tokens_file is on (the request must name what it
// may read: PERMISSION_DENIED otherwise), else null.
using Prepare = std::function<absl::StatusOr<Prepared>(std::string_view message,
                                                       const security::Principal* who)>;

bool Waits(const v1::ReadConsistency& c) {
  return !c.min_position().empty() || c.min_kafka_offsets_size() > 0;
}

bool SmallPage(uint32_t limit) { return limit > 0 && limit <= H2ReadServer::kInlinePageLimit; }

// Whether `request` waits for a position (requests without ReadConsistency never do).
template <typename Req>
bool WaitsFor(const Req& request) {
  if constexpr (requires { request.consistency(); }) {
    return Waits(request.consistency());
  } else {
    return false;
  }
}

// How this port serves one unary method: its request and answer types (checked against the
// service descriptor) and how to prepare a call.
struct Handler {
  const google::protobuf::Descriptor* request;
  const google::protobuf::Descriptor* answer;
  Prepare prepare;
};

// The Handler for a method taking Req: parses it, runs `read(request, deadline)` (a StatusOr
// of the answer message), inline when `cheap(request)`.
template <typename Req, typename Read, typename Cheap>
Handler Unary(Read read, Cheap cheap) {
  using Answer = typename std::invoke_result_t<Read, const Req&, Deadline>::value_type;
  Prepare prepare = [read, cheap](std::string_view message,
                                  const security::Principal* who) -> absl::StatusOr<Prepared> {
    auto request = std::make_shared<Req>();
    if (!request->ParseFromArray(message.data(), static_cast<int>(message.size()))) {
      return absl::InternalError(absl::StrCat("cannot parse the request as ",
                                              Req::descriptor()->full_name(),
                                              "; is the client built from cdcview's proto/?"));
    }
    // A ListViews answer keeps the views the token may read.
    std::shared_ptr<const security::Principal> viewer;
    if (who != nullptr) {
      if (absl::Status permitted = PermitRead(*who, *request); !permitted.ok()) return permitted;
      if constexpr (std::is_same_v<Answer, v1::ListViewsResponse>) {
        if (!who->all_views) viewer = std::make_shared<const security::Principal>(*who);
      }
    }
    Prepared p;
    p.waits = WaitsFor(*request);
    p.cheap = cheap(*request);
    p.runs_inline = !p.waits && p.cheap;
    p.run = [read, request, viewer](Deadline deadline) -> absl::StatusOr<std::string> {
      auto answer = read(*request, deadline);
      if (!answer.ok()) return answer.status();
      if (viewer != nullptr) RestrictAnswer(*viewer, &*answer);
      // Serialized once, straight behind the room for gRPC's prefix.
      std::string framed(5, '\0');
      answer->AppendToString(&framed);
      return framed;
    };
    return p;
  };
  return Handler{Req::descriptor(), Answer::descriptor(), std::move(prepare)};
}

// One handler per unary method of cdcview.v1.ViewService, by method name: the only list of
// methods in this file. Paths and which methods are unary come from the service descriptor
// (Methods below); a unary method without an entry here answers UNIMPLEMENTED, and
// h2_read_server_test fails.
std::map<std::string, Handler, std::less<>> Handlers(const ViewQueries& r) {
  auto never = [](const auto&) { return false; };
  return {
      {"Query", Unary<v1::QueryRequest>(
                    [&r](const v1::QueryRequest& q, Deadline d) { return r.Query(q, d); },
                    [](const v1::QueryRequest& q) { return SmallPage(q.limit()); })},
      {"Scan", Unary<v1::ScanRequest>(
                   [&r](const v1::ScanRequest& q, Deadline d) { return r.Scan(q, d); },
                   [](const v1::ScanRequest& q) { return SmallPage(q.limit()); })},
      {"GetItem", Unary<v1::GetItemRequest>(
                      [&r](const v1::GetItemRequest& q, Deadline d) { return r.GetItem(q, d); },
                      [](const v1::GetItemRequest&) { return true; })},
      {"GetAggregate",
       Unary<v1::GetAggregateRequest>(
           [&r](const v1::GetAggregateRequest& q, Deadline d) { return r.GetAggregate(q, d); },
           [](const v1::GetAggregateRequest&) { return true; })},
      {"ListAggregates",
       Unary<v1::ListAggregatesRequest>(
           [&r](const v1::ListAggregatesRequest& q, Deadline d) { return r.ListAggregates(q, d); },
           [](const v1::ListAggregatesRequest& q) { return SmallPage(q.limit()); })},
      {"ListViews", Unary<v1::ListViewsRequest>(
                        [&r](const v1::ListViewsRequest&, Deadline) { return r.ListViews(); },
                        never)},
      {"DescribeView",
       Unary<v1::DescribeViewRequest>(
           [&r](const v1::DescribeViewRequest& q, Deadline) { return r.DescribeView(q.view()); },
           never)},
      {"GetStatus", Unary<v1::GetStatusRequest>(
                        [&r](const v1::GetStatusRequest&, Deadline) {
                          return absl::StatusOr<v1::StatusResponse>(r.GetStatus());
                        },
                        never)},
      {"GetHotKeys",
       Unary<v1::GetHotKeysRequest>(
           [&r](const v1::GetHotKeysRequest& q, Deadline) { return r.GetHotKeys(q); }, never)},
  };
}

const google::protobuf::ServiceDescriptor& ViewServiceDescriptor() {
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          v1::ViewService::service_full_name());
  if (service == nullptr) {
    LogError("cdcview.v1.ViewService is not in the generated descriptor pool");
    abort();
  }
  return *service;
}

// An HTTP/2 GOAWAY frame (last stream id 0) with error `code` and `why` as its debug data: for
// a connection nghttp2 does not speak on.
std::string GoawayFrame(uint32_t code, std::string_view why) {
  std::string frame(9 + 8, '\0');
  const uint32_t length = static_cast<uint32_t>(8 + why.size());
  frame[0] = static_cast<char>(length >> 16);
  frame[1] = static_cast<char>(length >> 8);
  frame[2] = static_cast<char>(length);
  frame[3] = 7;  // GOAWAY; no flags, stream 0, then the last stream id 0
  EncodeBigEndian32(code, frame.data() + 13);
  frame += why;
  return frame;
}

bool IsUnary(const google::protobuf::MethodDescriptor& m) {
  return !m.client_streaming() && !m.server_streaming();
}

struct Method {
  std::string name;  // "Query": the label of its metrics
  Prepare prepare;
};
using MethodTable = std::map<std::string, Method, std::less<>>;

// "/cdcview.v1.ViewService/<Method>" -> how to serve it, for every unary method that has a
// handler. A handler whose method is gone from the proto, or whose types are not the method's,
// is a programming error caught at start. `fans_out`: `r` asks other cluster members, so no
// call runs on the loop, and a wait for a position is the fan-out's own (one call, not slices).
MethodTable Methods(const ViewQueries& r, bool fans_out) {
  auto handlers = Handlers(r);
  const google::protobuf::ServiceDescriptor& service = ViewServiceDescriptor();
  MethodTable table;
  for (int i = 0; i < service.method_count(); ++i) {
    const google::protobuf::MethodDescriptor& m = *service.method(i);
    auto h = handlers.find(m.name());
    if (!IsUnary(m) || h == handlers.end()) continue;
    if (h->second.request != m.input_type() || h->second.answer != m.output_type()) {
      LogError(absl::StrCat("the fast read port's handler for ", m.full_name(), " takes ",
                            h->second.request->full_name(), " and answers ",
                            h->second.answer->full_name(), "; the method takes ",
                            m.input_type()->full_name(), " and answers ",
                            m.output_type()->full_name()));
      abort();
    }
    Prepare prepare = std::move(h->second.prepare);
    if (fans_out) {
      prepare = [inner = std::move(prepare)](std::string_view message,
                                             const security::Principal* who) {
        absl::StatusOr<Prepared> p = inner(message, who);
        if (p.ok()) p->cheap = p->runs_inline = p->waits = false;
        return p;
      };
    }
    table.emplace(absl::StrCat("/", service.full_name(), "/", m.name()),
                  Method{m.name(), std::move(prepare)});
    handlers.erase(h);
  }
  for (const auto& [name, handler] : handlers) {
    LogError(absl::StrCat("the fast read port has a handler for ", name, ", which is not a unary "
                          "method of ", service.full_name()));
    abort();
  }
  return table;
}

}  // namespace

std::optional<std::chrono::steady_clock::duration> ParseGrpcTimeout(std::string_view text) {
  if (text.size() < 2 || text.size() > 9) return std::nullopt;
  uint64_t n = 0;
  for (char c : text.substr(0, text.size() - 1)) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  // In whole nanoseconds per unit: exact, where a double would lose a nanosecond ("15n").
  std::chrono::nanoseconds unit;
  switch (text.back()) {
    case 'H': unit = std::chrono::hours(1); break;
    case 'M': unit = std::chrono::minutes(1); break;
    case 'S': unit = std::chrono::seconds(1); break;
    case 'm': unit = std::chrono::milliseconds(1); break;
    case 'u': unit = std::chrono::microseconds(1); break;
    case 'n': unit = std::chrono::nanoseconds(1); break;
    default: return std::nullopt;
  }
  const std::chrono::nanoseconds longest = kLongestGrpcTimeout;
  if (n >= static_cast<uint64_t>(longest / unit)) return Clock::duration(longest);
  return std::chrono::duration_cast<Clock::duration>(unit * static_cast<int64_t>(n));
}

std::vector<std::string> ViewServiceUnaryMethods() {
  const google::protobuf::ServiceDescriptor& service = ViewServiceDescriptor();
  std::vector<std::string> names;
  for (int i = 0; i < service.method_count(); ++i) {
    if (IsUnary(*service.method(i))) names.push_back(service.method(i)->name());
  }
  return names;
}

namespace {

// gRPC's content types: application/grpc, optionally +proto or ;parameters.
bool IsGrpcContentType(std::string_view type) {
  constexpr std::string_view kGrpc = "application/grpc";
  if (type.substr(0, kGrpc.size()) != kGrpc) return false;
  std::string_view rest = type.substr(kGrpc.size());
  return rest.empty() || rest == "+proto" || rest.front() == ';' || rest.substr(0, 7) == "+proto;";
}

// grpc-message is percent-encoded: bytes outside printable ASCII, and '%'.
std::string PercentEncode(std::string_view text) {
  std::string out;
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (unsigned char c : text) {
    if (c >= 0x20 && c <= 0x7e && c != '%') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

nghttp2_nv Header(std::string_view name, std::string_view value) {
  return {reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
          reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(), value.size(),
          NGHTTP2_NV_FLAG_NONE};
}

// "host:port" or "[v6]:port" -> a bound, listening, non-blocking socket.
absl::StatusOr<int> Listen(const std::string& address) { return ListenSocket(address, "50052"); }

}  // namespace

// The event loop, its connections and the offload threads. Everything but the offload queues,
// the finished list and `stopping_` belongs to the loop thread.
class H2ReadServer::Loop {
 public:
  Loop(const ViewQueries& reader, const ViewQueries* local_only, QueryProbe* probe,
       std::string grpc_setting, const ServerConfig& limits, ConnectionProbe* connections,
       H2ReadSecurity security)
      : methods_(Methods(reader, local_only != nullptr)),
        local_methods_(local_only != nullptr ? Methods(*local_only, false) : MethodTable()),
        heavy_threads_(local_only != nullptr ? kFanOutThreads : kHeavyThreads),
        probe_(probe),
        grpc_setting_(std::move(grpc_setting)),
        limits_(limits),
        connection_probe_(connections),
        security_(std::move(security)),
        max_connections_(limits.fast_reads_max_connections) {
    if (connection_probe_ != nullptr) connection_probe_->SetMax(max_connections_);
  }

  void SetMaxConnections(uint32_t max) {
    max_connections_.store(max, std::memory_order_relaxed);
    if (connection_probe_ != nullptr) connection_probe_->SetMax(max);
  }

  ~Loop() {
    for (int fd : {listen_fd_, epoll_fd_, wake_fd_}) {
      if (fd >= 0) close(fd);
    }
  }

  absl::Status Open(const std::string& address) {
    absl::StatusOr<int> fd = Listen(address);
    if (!fd.ok()) return fd.status();
    listen_fd_ = *fd;
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
    port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epoll_fd_ < 0 || wake_fd_ < 0) {
      return absl::InternalError(absl::StrCat("H2ReadServer: epoll/eventfd: ", std::strerror(errno)));
    }
    Watch(listen_fd_, EPOLLIN, kListenTag);
    Watch(wake_fd_, EPOLLIN, kWakeTag);
    thread_ = std::thread([this] { Run(); });
    for (int i = 0; i < kWaitThreads; ++i) workers_.emplace_back([this] { Work(kWaits); });
    for (int i = 0; i < heavy_threads_; ++i) workers_.emplace_back([this] { Work(kHeavy); });
    return absl::OkStatus();
  }

  int port() const { return port_; }

  void Shutdown(int grace_ms) {
    absl::MutexLock once(&shutdown_mu_);
    if (!thread_.joinable()) return;
    grace_until_ = Clock::now() + std::chrono::milliseconds(grace_ms);
    stopping_.store(true);
    Wake();
    thread_.join();
    {
      absl::MutexLock lock(&mu_);
      offload_stop_ = true;
    }
    ready_[kWaits].SignalAll();
    ready_[kHeavy].SignalAll();
    for (std::thread& t : workers_) t.join();  // a running wait ends within kWaitSlice
    workers_.clear();
  }

 private:
  static constexpr uint64_t kListenTag = 0;
  static constexpr uint64_t kWakeTag = 1;

  struct Connection;
  struct Stream {
    Connection* conn = nullptr;
    int32_t id = 0;
    std::string path, content_type, encoding;
    std::string authorization;  // the header's value, when tokens are on
    bool local_only = false;    // the cluster's local-only marker (local_methods_ answer)
    // Who the token is, once its HEADERS were checked (tokens on).
    std::optional<security::Principal> who;
    std::optional<Clock::duration> timeout;
    bool bad_timeout = false;
    Clock::time_point begun;     // its HEADERS arrived
    bool request_ended = false;  // the client ended its side (END_STREAM)
    std::string body;  // counted in conn->buffered and the loop's buffered_
    // Refused before its request ended (a limit on request bytes): the status it answers.
    std::optional<absl::Status> refused;
    bool answered = false;  // an answer was submitted (or the stream refused)
    // Set when the stream closes: an offloaded read for it stops at its next slice. Made only
    // for reads that go off the loop (none for the inline ones).
    std::shared_ptr<std::atomic<bool>> gone;
    // The answer: message bytes with gRPC's prefix, then the trailers' status.
    std::string out;
    size_t sent = 0;
    ~Stream() {
      if (gone) gone->store(true);
      conn->loop->Unbuffer(this);
    }
  };
  struct Connection {
    Loop* loop = nullptr;
    uint64_t serial = 0;
    int fd = -1;
    nghttp2_session* h2 = nullptr;
    // TLS: the connection's OpenSSL state, fed and drained through memory BIOs it owns
    // (net_in: bytes from the socket; net_out: records for it). Null in plaintext. Shared
    // with a handshake step running off the loop, which may outlive the connection.
    SSL* ssl = nullptr;
    std::shared_ptr<SSL> ssl_owner;
    BIO* net_in = nullptr;
    BIO* net_out = nullptr;
    bool handshaken = false;
    // A handshake step runs on an offload thread: until it is back, the loop neither reads
    // the socket nor touches the SSL or its BIOs.
    bool handshake_out = false;
    // Bytes for the socket that it has not taken yet: nghttp2's frames, or in TLS the records
    // that carry them.
    std::string pending;
    uint32_t events = EPOLLIN;  // what epoll watches for
    Clock::time_point opened;
    bool got_settings = false;  // the client's preface and SETTINGS arrived
    Clock::time_point idle_since;  // when its last stream closed (or it opened)
    // Why it ends, once Receive or Flush says it does (ConnectionProbe's reasons).
    std::string_view end_reason = "error";
    size_t buffered = 0;  // request bytes its streams hold
    uint32_t waits = 0;   // its reads handed to the wait pool and not delivered yet
    // Declared after `buffered`: destroyed first, a stream gives its bytes back.
    std::map<int32_t, std::unique_ptr<Stream>> streams;
    ~Connection() {
      if (h2 != nullptr) nghttp2_session_del(h2);
      if (fd >= 0) close(fd);
    }
  };
  // A read handed to the offload threads, and its answer.
  struct Job {
    uint64_t conn = 0;
    int32_t stream = 0;
    std::shared_ptr<std::atomic<bool>> gone;
    std::string method;
    Prepared call;
    Deadline deadline;
    bool capped = false;  // a wait the request gave no deadline: server.max_wait_ms
    // A large read with a position: looked at once (no wait) on the heavy pool; if the
    // position is not applied, it goes back to the loop (needs_wait) for the wait pool.
    bool check_first = false;
    bool needs_wait = false;
    bool counts_wait = false;  // counted in its connection's `waits`
    Clock::time_point start;
    absl::StatusOr<std::string> answer;
    // Or a TLS handshake step of connection `conn` (its CPU kept off the loop): the session,
    // and what SSL_do_handshake said.
    std::shared_ptr<SSL> handshake;
    int handshake_rc = 0;
    int handshake_error = 0;
    std::string handshake_why;  // OpenSSL's reason when it failed
  };
  // The offload pools (see kWaitThreads): reads that wait for a position, and the others.
  enum Pool { kWaits, kHeavy, kPools };

  void Watch(int fd, uint32_t events, uint64_t tag, int op = EPOLL_CTL_ADD) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = tag;
    epoll_ctl(epoll_fd_, op, fd, &ev);
  }

  void Wake() {
    uint64_t one = 1;
    ssize_t n = write(wake_fd_, &one, sizeof one);
    (void)n;  // a full counter already wakes the loop
  }

  // ---- the loop

  void Run() {
    pthread_setname_np(pthread_self(), "h2-reads");
    std::vector<epoll_event> events(64);
    bool draining = false;
    while (true) {
      if (stopping_.load() && !draining) {
        draining = true;
        StopListening();
        // GOAWAY with the largest stream id first: the client opens no new streams, and
        // those already on their way are still served.
        for (auto& [serial, conn] : connections_) nghttp2_submit_shutdown_notice(conn->h2);
        FlushAll();
      }
      if (draining && (Drained() || Clock::now() >= grace_until_)) break;
      int timeout = -1;
      if (!connections_.empty()) timeout = static_cast<int>(kSweepInterval.count());
      if (draining) timeout = 10;
      if (accept_paused_) {
        if (Clock::now() >= accept_resume_) {
          accept_paused_ = false;
          Watch(listen_fd_, EPOLLIN, kListenTag);
        } else {
          timeout = 10;
        }
      }
      int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), timeout);
      for (int i = 0; i < n; ++i) {
        const uint64_t tag = events[i].data.u64;
        if (tag == kListenTag) {
          Accept();
        } else if (tag == kWakeTag) {
          uint64_t count;
          ssize_t r = read(wake_fd_, &count, sizeof count);
          (void)r;
          DeliverFinished();
        } else {
          auto it = connections_.find(tag);
          if (it == connections_.end()) continue;
          Connection* conn = it->second.get();
          bool alive = true;
          if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) alive = Receive(conn);
          if (alive) alive = Flush(conn);
          if (!alive) Drop(conn, conn->end_reason);
        }
      }
      if (!draining) Sweep();
    }
    // Every answer is out (or the grace period is over): the final GOAWAY, then close.
    for (auto& [serial, conn] : connections_) {
      nghttp2_submit_goaway(conn->h2, NGHTTP2_FLAG_NONE,
                            nghttp2_session_get_last_proc_stream_id(conn->h2), NGHTTP2_NO_ERROR,
                            nullptr, 0);
      Flush(conn.get());
    }
    while (!connections_.empty()) Drop(connections_.begin()->second.get(), "shutdown");
  }

  // Closes the connections past their request or idle timeout, each with a GOAWAY that says
  // which (an idle one's NO_ERROR lets a gRPC client reconnect quietly when it needs to).
  void Sweep() {
    const Clock::time_point now = Clock::now();
    if (now < next_sweep_) return;
    next_sweep_ = now + kSweepInterval;
    const auto request_timeout = std::chrono::milliseconds(limits_.fast_reads_request_timeout_ms);
    const auto idle_timeout = std::chrono::milliseconds(limits_.fast_reads_idle_timeout_ms);
    std::vector<std::pair<Connection*, bool>> closing;  // (connection, idle)
    for (auto& [serial, conn] : connections_) {
      bool late = !conn->got_settings && now - conn->opened >= request_timeout;
      for (const auto& [id, stream] : conn->streams) {
        late = late || (!stream->request_ended && now - stream->begun >= request_timeout);
      }
      if (late) {
        closing.emplace_back(conn.get(), false);
      } else if (conn->streams.empty() && now - conn->idle_since >= idle_timeout) {
        closing.emplace_back(conn.get(), true);
      }
    }
    for (auto [conn, idle] : closing) {
      const std::string why =
          idle ? absl::StrCat("no call for ", limits_.fast_reads_idle_timeout_ms,
                              " ms (server.fast_reads_idle_timeout_ms)")
               : absl::StrCat("the preface or a request took longer than ",
                              limits_.fast_reads_request_timeout_ms,
                              " ms to arrive (server.fast_reads_request_timeout_ms)");
      const uint32_t code = idle ? NGHTTP2_NO_ERROR : NGHTTP2_ENHANCE_YOUR_CALM;
      Flush(conn);
      if (conn->got_settings) {
        nghttp2_submit_goaway(conn->h2, NGHTTP2_FLAG_NONE,
                              nghttp2_session_get_last_proc_stream_id(conn->h2), code,
                              reinterpret_cast<const uint8_t*>(why.data()), why.size());
      } else if (conn->ssl == nullptr || conn->handshaken) {
        // nghttp2 sends nothing more before the client's preface: the frame is ours.
        QueueFrames(conn, GoawayFrame(code, why));
      }  // else a TLS handshake that never finished: there is no channel to say it on
      Flush(conn);
      Drop(conn, idle ? "idle" : "request_timeout");
    }
  }

  void StopListening() {
    if (listen_fd_ < 0) return;
    if (!accept_paused_) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
    accept_paused_ = false;
    close(listen_fd_);
    listen_fd_ = -1;
  }

  // No stream open and no answer waiting for a socket.
  bool Drained() const {
    for (const auto& [serial, conn] : connections_) {
      if (!conn->streams.empty() || !conn->pending.empty() ||
          (Speaks(*conn) && nghttp2_session_want_write(conn->h2))) {
        return false;
      }
    }
    return true;
  }

  void FlushAll() {
    std::vector<Connection*> dead;
    for (auto& [serial, conn] : connections_) {
      if (!Flush(conn.get())) dead.push_back(conn.get());
    }
    for (Connection* conn : dead) Drop(conn, conn->end_reason);
  }

  void Accept() {
    while (listen_fd_ >= 0) {
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // The listener stays readable: rest it instead of spinning on it.
          if (!accept_failing_) {
            LogWarning(absl::StrCat("fast read port: cannot accept connections: ",
                                    std::strerror(errno),
                                    "; raise the open-files limit (ulimit -n) or close idle "
                                    "clients"));
          }
          accept_failing_ = true;
          accept_paused_ = true;
          accept_resume_ = Clock::now() + kAcceptPause;
          epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
        }
        return;
      }
      accept_failing_ = false;
      if (connections_.size() >= max_connections_.load(std::memory_order_relaxed)) {
        RefuseConnection(fd);
        continue;
      }
      refusing_ = false;
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto conn = std::make_unique<Connection>();
      conn->loop = this;
      conn->serial = ++last_serial_;
      conn->fd = fd;
      conn->opened = conn->idle_since = Clock::now();
      if (!NewSession(conn.get())) continue;
      if (security_.tls != nullptr && !StartTls(conn.get())) continue;
      Watch(fd, EPOLLIN, conn->serial);
      Connection* raw = conn.get();
      connections_.emplace(conn->serial, std::move(conn));
      if (connection_probe_ != nullptr) connection_probe_->Opened();
      if (!Flush(raw)) Drop(raw, raw->end_reason);
    }
  }

  // A connection over the cap: our SETTINGS and a GOAWAY naming the cap (whatever of it the
  // socket takes at once), then closed.
  void RefuseConnection(int fd) {
    const std::string why = absl::StrCat("the fast read port has ", connections_.size(),
                                         " connections open, its limit "
                                         "(server.fast_reads_max_connections); retry later");
    if (security_.tls == nullptr) {
      std::string frames = {0, 0, 0, 4, 0, 0, 0, 0, 0};  // an empty SETTINGS frame
      frames += GoawayFrame(NGHTTP2_ENHANCE_YOUR_CALM, why);
      ssize_t n = send(fd, frames.data(), frames.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      (void)n;  // a client that cannot take it sees the connection close
    }  // TLS: the GOAWAY would need the handshake whose CPU the cap saves
    close(fd);
    if (connection_probe_ != nullptr) connection_probe_->Refused("max_connections");
    if (!refusing_) LogWarning(absl::StrCat("fast read port: ", why));
    refusing_ = true;  // logged once per run of refusals
  }

  bool NewSession(Connection* conn) {
    nghttp2_session_callbacks* cb;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, OnBeginHeaders);
    nghttp2_session_callbacks_set_on_header_callback(cb, OnHeader);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, OnData);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, OnFrame);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, OnClose);
    int rv = nghttp2_session_server_new(&conn->h2, cb, conn);
    nghttp2_session_callbacks_del(cb);
    if (rv != 0) {
      LogWarning(absl::StrCat("fast read port: nghttp2 session: ", nghttp2_strerror(rv)));
      return false;
    }
    nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, kMaxConcurrentStreams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20}};
    nghttp2_submit_settings(conn->h2, NGHTTP2_FLAG_NONE, settings, std::size(settings));
    nghttp2_session_set_local_window_size(conn->h2, NGHTTP2_FLAG_NONE, 0, 4 << 20);
    return true;
  }

  // False when the connection is over (closed by the client, or broken).
  bool Receive(Connection* conn) {
    if (conn->handshake_out) return true;  // read once the step is back
    uint8_t buf[kReadChunk];
    for (int chunk = 0; chunk < kReadChunksPerWake && conn->pending.size() < kMaxPendingOut;
         ++chunk) {
      ssize_t n = read(conn->fd, buf, sizeof buf);
      if (n == 0 || (n < 0 && errno == ECONNRESET)) conn->end_reason = "client";
      if (n == 0) return false;
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      if (conn->ssl != nullptr) {
        if (!ReceiveTls(conn, buf, static_cast<size_t>(n))) return false;
        if (conn->handshake_out) return true;  // the rest waits for the step
      } else if (!Deliver(conn, buf, static_cast<size_t>(n))) {
        return false;
      }
      if (static_cast<size_t>(n) < sizeof buf) return true;
    }
    return true;  // more may wait: level-triggered epoll comes back
  }

  // Hands `n` bytes of the client's HTTP/2 to nghttp2, then its answers to the socket. False
  // when the connection is over.
  bool Deliver(Connection* conn, const uint8_t* data, size_t n) {
    ssize_t used = nghttp2_session_mem_recv(conn->h2, data, n);
    if (used < 0) {
      Flush(conn);  // the GOAWAY nghttp2 queued, naming the protocol error
      conn->end_reason = "error";
      return false;
    }
    // The answers to what this chunk held go out before the next chunk is read.
    return Flush(conn);
  }

  // TLS: the connection's SSL, reading from and writing to its memory BIOs, on the context
  // current now (a certificate rotated since serves this connection; open ones keep theirs).
  bool StartTls(Connection* conn) {
    std::shared_ptr<SSL_CTX> ctx = security_.tls->Current();
    conn->ssl = SSL_new(ctx.get());  // holds its own reference to ctx
    if (conn->ssl != nullptr) conn->ssl_owner.reset(conn->ssl, SSL_free);
    conn->net_in = BIO_new(BIO_s_mem());
    conn->net_out = BIO_new(BIO_s_mem());
    if (conn->ssl == nullptr || conn->net_in == nullptr || conn->net_out == nullptr) {
      if (conn->ssl == nullptr) {
        BIO_free(conn->net_in);
        BIO_free(conn->net_out);
      }
      LogWarning("fast read port: cannot make a TLS session (out of memory?)");
      return false;
    }
    // An empty net_in means "more to come", not the end of the stream.
    BIO_set_mem_eof_return(conn->net_in, -1);
    SSL_set_bio(conn->ssl, conn->net_in, conn->net_out);
    SSL_set_accept_state(conn->ssl);
    return true;
  }

  // TLS: `n` bytes from the socket into the session: the handshake's next step, or the
  // HTTP/2 they carry to nghttp2. False when the connection is over.
  bool ReceiveTls(Connection* conn, const uint8_t* data, size_t n) {
    if (BIO_write(conn->net_in, data, static_cast<int>(n)) != static_cast<int>(n)) return false;
    if (conn->handshaken) return ReadTls(conn);
    // The handshake's key exchange, signature and client-certificate check take a few hundred
    // microseconds of CPU a step: an offload thread does them, so that a burst of new
    // connections does not hold up the reads of the open ones.
    auto job = std::make_unique<Job>();
    job->conn = conn->serial;
    job->handshake = conn->ssl_owner;
    {
      absl::MutexLock lock(&mu_);
      if (offloaded_ < kMaxOffloaded) {
        ++offloaded_;
        queues_[kHeavy].push_back(std::move(job));
      }
    }
    if (job == nullptr) {
      ready_[kHeavy].Signal();
      conn->handshake_out = true;
      SetEvents(conn, 0);  // the socket waits in the kernel until the step is back
      return true;
    }
    StepHandshake(job.get());  // the offload threads are full: here, as a fallback
    return HandshakeStepped(conn, *job);
  }

  // A handshake step, on whichever thread holds the session.
  static void StepHandshake(Job* job) {
    ERR_clear_error();
    job->handshake_rc = SSL_do_handshake(job->handshake.get());
    job->handshake_error = SSL_get_error(job->handshake.get(), job->handshake_rc);
    if (job->handshake_rc != 1) {
      char why[256] = "the client closed it";
      if (unsigned long code = ERR_peek_error(); code != 0) {
        ERR_error_string_n(code, why, sizeof why);
      }
      job->handshake_why = why;
    }
  }

  // On the loop, once a handshake step is done: its flight to the client, then (handshake
  // complete) the HTTP/2 that came with the client's last flight. False when it failed.
  bool HandshakeStepped(Connection* conn, const Job& job) {
    conn->handshake_out = false;
    if (job.handshake_rc != 1) {
      if (job.handshake_error == SSL_ERROR_WANT_READ ||
          job.handshake_error == SSL_ERROR_WANT_WRITE) {
        return Flush(conn);  // watches the socket again
      }
      HandshakeFailed(conn, job.handshake_why);
      return false;
    }
    conn->handshaken = true;
    return ReadTls(conn);
  }

  // TLS: the HTTP/2 the records in net_in carry, to nghttp2. False when the connection is over.
  bool ReadTls(Connection* conn) {
    uint8_t plain[kReadChunk];
    while (true) {
      ERR_clear_error();
      const int got = SSL_read(conn->ssl, plain, sizeof plain);
      if (got <= 0) {
        const int error = SSL_get_error(conn->ssl, got);
        if (error == SSL_ERROR_WANT_READ) break;
        // close_notify is the client's end; anything else a broken record.
        conn->end_reason = error == SSL_ERROR_ZERO_RETURN ? "client" : "error";
        Flush(conn);
        return false;
      }
      if (!Deliver(conn, plain, static_cast<size_t>(got))) return false;
    }
    return Flush(conn);  // the handshake's last flight, a TLS 1.3 key update's answer
  }

  // Sends the alert OpenSSL made (whatever the socket takes) and logs why, a few a minute.
  void HandshakeFailed(Connection* conn, const std::string& why) {
    conn->end_reason = "tls_handshake";
    TakeTlsOutput(conn);
    ssize_t w = send(conn->fd, conn->pending.data(), conn->pending.size(),
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;  // the connection closes either way
    if (handshake_log_.Admit("tls")) {
      LogWarning(absl::StrCat("fast read port: a TLS handshake failed: ", why,
                              " (cdcview_connections_closed_total{port=\"fast_reads\","
                              "reason=\"tls_handshake\"} counts them)"));
    }
  }

  // Whether nghttp2 may speak on the connection: plaintext, or TLS once the handshake is done.
  static bool Speaks(const Connection& conn) { return conn.ssl == nullptr || conn.handshaken; }

  // Queues `frames` (HTTP/2, made here) for the socket, encrypted in TLS.
  void QueueFrames(Connection* conn, std::string_view frames) {
    if (conn->ssl == nullptr) {
      conn->pending += frames;
      return;
    }
    Encrypt(conn, frames);
    TakeTlsOutput(conn);
  }

  // TLS: `plain` as records into net_out. A memory BIO takes everything, so SSL_write fails
  // only on a broken session (false).
  static bool Encrypt(Connection* conn, std::string_view plain) {
    ERR_clear_error();
    size_t written = 0;
    return plain.empty() ||
           (SSL_write_ex(conn->ssl, plain.data(), plain.size(), &written) == 1 &&
            written == plain.size());
  }

  // TLS: the records OpenSSL wrote into net_out, appended to what the socket owes.
  static void TakeTlsOutput(Connection* conn) {
    const size_t ready = BIO_ctrl_pending(conn->net_out);
    if (ready == 0) return;
    const size_t at = conn->pending.size();
    conn->pending.resize(at + ready);
    const int got = BIO_read(conn->net_out, conn->pending.data() + at, static_cast<int>(ready));
    conn->pending.resize(at + static_cast<size_t>(std::max(got, 0)));
  }

  // nghttp2's frames into `pending` (encrypted in TLS), up to kMaxPendingOut. False on an
  // nghttp2 or OpenSSL error.
  bool Produce(Connection* conn) {
    if (conn->ssl == nullptr) {
      while (conn->pending.size() < kMaxPendingOut) {
        const uint8_t* data = nullptr;
        ssize_t n = nghttp2_session_mem_send(conn->h2, &data);
        if (n < 0) return false;
        if (n == 0) break;
        conn->pending.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
      }
      return true;
    }
    if (conn->handshake_out) return true;
    if (conn->handshaken) {
      // Gathered first, so that OpenSSL makes full records rather than one per frame.
      tls_plain_.clear();
      while (conn->pending.size() + tls_plain_.size() < kMaxPendingOut) {
        const uint8_t* data = nullptr;
        ssize_t n = nghttp2_session_mem_send(conn->h2, &data);
        if (n < 0) return false;
        if (n == 0) break;
        tls_plain_.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
      }
      if (!tls_plain_.empty() && !Encrypt(conn, tls_plain_)) return false;
    }
    TakeTlsOutput(conn);
    return true;
  }

  // Hands nghttp2's frames to the socket. False when the connection is over.
  bool Flush(Connection* conn) {
    while (true) {
      if (!Produce(conn)) return false;
      if (conn->pending.empty()) break;
      ssize_t w = send(conn->fd, conn->pending.data(), conn->pending.size(), MSG_NOSIGNAL);
      if (w < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
        if (errno == ECONNRESET || errno == EPIPE) conn->end_reason = "client";
        return false;
      }
      conn->pending.erase(0, static_cast<size_t>(w));
    }
    // Answers the socket has not taken wait for it to drain; past kMaxPendingOut, so do the
    // connection's requests (not read until then).
    SetEvents(conn, (conn->pending.size() < kMaxPendingOut && !conn->handshake_out ? EPOLLIN
                                                                                   : 0u) |
                        (conn->pending.empty() ? 0u : EPOLLOUT));
    if (conn->pending.size() > 0 || !Speaks(*conn) || nghttp2_session_want_read(conn->h2) ||
        nghttp2_session_want_write(conn->h2)) {
      return true;
    }
    // Both sides are done: the client's GOAWAY was answered.
    conn->end_reason = "client";
    return false;
  }

  void SetEvents(Connection* conn, uint32_t events) {
    if (events == conn->events) return;
    conn->events = events;
    Watch(conn->fd, events, conn->serial, EPOLL_CTL_MOD);
  }

  // `reason`: one of ConnectionProbe's.
  void Drop(Connection* conn, std::string_view reason) {
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, conn->fd, nullptr);
    connections_.erase(conn->serial);
    if (connection_probe_ != nullptr) connection_probe_->Closed(reason);
  }

  // ---- nghttp2 callbacks (on the loop thread, inside mem_recv or mem_send)

  static int OnBeginHeaders(nghttp2_session* h2, const nghttp2_frame* frame, void* user) {
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    auto* conn = static_cast<Connection*>(user);
    auto stream = std::make_unique<Stream>();
    stream->conn = conn;
    stream->id = frame->hd.stream_id;
    stream->begun = Clock::now();
    nghttp2_session_set_stream_user_data(h2, stream->id, stream.get());
    conn->streams.emplace(stream->id, std::move(stream));
    return 0;
  }

  static int OnHeader(nghttp2_session* h2, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t, void*) {
    auto* s = static_cast<Stream*>(nghttp2_session_get_stream_user_data(h2, frame->hd.stream_id));
    if (s == nullptr || frame->hd.type != NGHTTP2_HEADERS) return 0;
    std::string_view n(reinterpret_cast<const char*>(name), namelen);
    std::string_view v(reinterpret_cast<const char*>(value), valuelen);
    if (n == ":path") {
      s->path = v;
    } else if (n == "content-type") {
      s->content_type = v;
    } else if (n == "grpc-encoding") {
      s->encoding = v;
    } else if (n == "grpc-timeout") {
      s->timeout = ParseGrpcTimeout(v);
      s->bad_timeout = !s->timeout.has_value();
    } else if (n == "authorization" && s->conn->loop->security_.tokens != nullptr) {
      s->authorization = v;
    } else if (n == kLocalOnlyMetadata) {
      s->local_only = v == "1";
    }
    return 0;
  }

  static int OnData(nghttp2_session* h2, uint8_t, int32_t id, const uint8_t* data, size_t len,
                    void* user) {
    auto* s = static_cast<Stream*>(nghttp2_session_get_stream_user_data(h2, id));
    if (s == nullptr || s->answered) return 0;
    auto* conn = static_cast<Connection*>(user);
    Loop* loop = conn->loop;
    const ServerConfig& limits = loop->limits_;
    // One message of at most the limit is kept; bytes past it only make the framing check
    // fail, so they need not be stored.
    const size_t most = limits.fast_reads_max_request_bytes + 6;
    const size_t take = std::min(len, most - std::min(s->body.size(), most));
    if (conn->buffered + take > limits.fast_reads_max_buffered_per_connection) {
      return loop->Refuse(s, absl::StrCat("this connection's unfinished requests would hold more "
                                          "than ",
                                          limits.fast_reads_max_buffered_per_connection,
                                          " bytes (server.fast_reads_max_buffered_per_connection)"
                                          "; send fewer large requests at once"));
    }
    if (loop->buffered_ + take > limits.fast_reads_max_buffered_bytes) {
      return loop->Refuse(s, absl::StrCat("the fast read port's unfinished requests would hold "
                                          "more than ",
                                          limits.fast_reads_max_buffered_bytes,
                                          " bytes (server.fast_reads_max_buffered_bytes); retry "
                                          "with backoff"));
    }
    s->body.append(reinterpret_cast<const char*>(data), take);
    conn->buffered += take;
    loop->buffered_ += take;
    // Refused as soon as the prefix says it is too large, not once it has all arrived.
    if (s->body.size() >= 5 &&
        DecodeBigEndian32(s->body.data() + 1) > limits.fast_reads_max_request_bytes) {
      return loop->Refuse(s, absl::StrCat("the request is larger than ",
                                          limits.fast_reads_max_request_bytes,
                                          " bytes (server.fast_reads_max_request_bytes)"));
    }
    return 0;
  }

  // Answers `s`, whose request has not ended, RESOURCE_EXHAUSTED: it would pass a limit on
  // request bytes. What it holds is freed now; what its client still sends is dropped.
  int Refuse(Stream* s, std::string message) {
    Unbuffer(s);
    s->refused = absl::ResourceExhaustedError(std::move(message));
    if (connection_probe_ != nullptr) connection_probe_->RequestRefused("body_limit");
    Dispatch(s);
    return 0;
  }

  // Frees the request bytes `s` holds.
  void Unbuffer(Stream* s) {
    s->conn->buffered -= s->body.size();
    buffered_ -= s->body.size();
    std::string().swap(s->body);
  }

  static int OnFrame(nghttp2_session* h2, const nghttp2_frame* frame, void* user) {
    if (frame->hd.type == NGHTTP2_SETTINGS) static_cast<Connection*>(user)->got_settings = true;
    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) return 0;
    auto* s = static_cast<Stream*>(nghttp2_session_get_stream_user_data(h2, frame->hd.stream_id));
    if (s == nullptr) return 0;
    if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) s->request_ended = true;
    if (s->answered) return 0;
    Loop* loop = static_cast<Connection*>(user)->loop;
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
      loop->Authenticate(s);
    }
    if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) {
      loop->Dispatch(s);
    } else if (frame->hd.type == NGHTTP2_HEADERS && (!loop->Serves(*s) || s->refused)) {
      // A call refused on its headers (its token) is answered before its body is held.
      // A call this port does not serve is answered at once, not at the end of a request
      // stream that may never end (a streaming call such as reflection's).
      loop->Dispatch(s);
    }
    return 0;
  }

  static int OnClose(nghttp2_session*, int32_t id, uint32_t, void* user) {
    auto* conn = static_cast<Connection*>(user);
    conn->streams.erase(id);  // an offloaded answer finds it gone
    if (conn->streams.empty()) conn->idle_since = Clock::now();
    return 0;
  }

  // ---- calls

  // Tokens on: who the call's bearer token is, or the refusal it answers (counted) once
  // dispatched. Before its body arrives, so no byte of an unauthenticated request is held.
  void Authenticate(Stream* s) {
    if (security_.tokens == nullptr || !Serves(*s)) return;
    absl::StatusOr<security::Principal> who = security_.tokens->Authenticate(s->authorization);
    std::string().swap(s->authorization);
    if (who.ok()) {
      s->who = *std::move(who);
      return;
    }
    if (security_.auth_probe != nullptr) security_.auth_probe->RecordRefusal(who.status());
    s->refused = who.status();
  }

  bool Serves(const Stream& s) const {
    return IsGrpcContentType(s.content_type) && methods_.find(s.path) != methods_.end();
  }

  // Answers stream `s` (or hands it to the offload threads): once its request ended, or
  // earlier for a call refused on its headers or a request too large.
  void Dispatch(Stream* s) {
    s->answered = true;
    if (!IsGrpcContentType(s->content_type)) {
      // Not a gRPC request: HTTP's answer, as the gRPC spec asks.
      nghttp2_nv headers[] = {Header(":status", "415")};
      nghttp2_submit_response(s->conn->h2, s->id, headers, std::size(headers), nullptr);
      return;
    }
    // An answer given before the request ended ends the stream on our side; what the client
    // still sends is dropped (OnData), and its gRPC library cancels the rest. A RST_STREAM
    // (NO_ERROR) on top would make gRPC 1.51's client report it instead of the status.
    const MethodTable& methods =
        s->local_only && !local_methods_.empty() ? local_methods_ : methods_;
    auto method = methods.find(s->path);
    if (method == methods.end()) {
      return Answer(s, absl::UnimplementedError(absl::StrCat(
                           "this port serves the unary reads of cdcview.v1.ViewService; ",
                           s->path.empty() ? "no method" : s->path,
                           " is not one of them (Watch, health and reflection are on ",
                           grpc_setting_, ")")));
    }
    const Clock::time_point start = Clock::now();
    if (s->refused) return Finish(s, method->second.name, start, *s->refused);
    if (s->bad_timeout) {
      return Finish(s, method->second.name, start,
                    absl::InvalidArgumentError("malformed grpc-timeout header"));
    }
    const std::string& b = s->body;
    if (b.size() < 5 || DecodeBigEndian32(b.data() + 1) != b.size() - 5) {
      return Finish(s, method->second.name, start,
                    absl::InternalError(
                        "expected one length-prefixed gRPC message in the request body"));
    }
    if (b[0] != 0) {
      return Finish(s, method->second.name, start,
                    b[0] == 1 && !s->encoding.empty() && s->encoding != "identity"
                        ? absl::UnimplementedError(absl::StrCat(
                              "compressed messages (grpc-encoding ", s->encoding,
                              ") are not served here; send them uncompressed"))
                        : absl::InternalError("malformed gRPC message prefix: compressed flag "
                                              "without a grpc-encoding"));
    }
    absl::StatusOr<Prepared> call =
        method->second.prepare(std::string_view(b).substr(5), s->who ? &*s->who : nullptr);
    Unbuffer(s);
    if (!call.ok()) {
      if (absl::IsPermissionDenied(call.status()) && security_.auth_probe != nullptr) {
        security_.auth_probe->RecordRefusal(call.status());
      }
      return Finish(s, method->second.name, start, call.status());
    }
    Deadline deadline = s->timeout ? WaitDeadline(start + *s->timeout, start) : Deadline::max();
    if (call->runs_inline) {
      return Finish(s, method->second.name, start, call->run(deadline));
    }
    if (call->waits && call->cheap) {
      // A position already applied is answered now, on the loop: such a read never queues
      // behind the waits. A deadline already past makes the reader look once and not wait.
      absl::StatusOr<std::string> answer = call->run(start);
      if (!absl::IsDeadlineExceeded(answer.status())) {
        return Finish(s, method->second.name, start, std::move(answer));
      }
    }
    // A wait without a deadline is capped at server.max_wait_ms, as the reader caps one (the
    // slices below pass it finite deadlines, so the reader would not); a client's own deadline
    // is kept, less the margin that lets the wait's answer reach it (WaitDeadline).
    const bool capped = call->waits && !s->timeout;
    if (capped) deadline = start + std::chrono::milliseconds(limits_.max_wait_ms);
    auto job = std::make_unique<Job>();
    job->conn = s->conn->serial;
    job->stream = s->id;
    job->method = method->second.name;
    job->deadline = deadline;
    job->capped = capped;
    job->start = start;
    job->check_first = call->waits && !call->cheap;
    const Pool pool = call->waits && call->cheap ? kWaits : kHeavy;
    job->call = *std::move(call);
    Offload(s, std::move(job), pool);
  }

  // Hands `job`, the read of stream `s`, to `pool`, or answers RESOURCE_EXHAUSTED when one of
  // the limits on reads off the loop is reached.
  void Offload(Stream* s, std::unique_ptr<Job> job, Pool pool) {
    if (pool == kWaits && s->conn->waits >= limits_.fast_reads_max_waits_per_connection) {
      if (connection_probe_ != nullptr) connection_probe_->RequestRefused("waits_per_connection");
      return Finish(s, job->method, job->start,
                    absl::ResourceExhaustedError(absl::StrCat(
                        s->conn->waits, " reads on this connection are already waiting for "
                        "their position (server.fast_reads_max_waits_per_connection); retry "
                        "with backoff")));
    }
    absl::ReleasableMutexLock lock(&mu_);
    if (offloaded_ >= kMaxOffloaded) {
      lock.Release();
      return Finish(s, job->method, job->start,
                    absl::ResourceExhaustedError(absl::StrCat(
                        kMaxOffloaded, " reads are already waiting or running off the event "
                                       "loop; retry with backoff")));
    }
    ++offloaded_;
    if (pool == kWaits) {
      ++s->conn->waits;
      job->counts_wait = true;
    }
    if (s->gone == nullptr) s->gone = std::make_shared<std::atomic<bool>>(false);
    job->gone = s->gone;
    queues_[pool].push_back(std::move(job));
    lock.Release();
    ready_[pool].Signal();
  }

  void Finish(Stream* s, const std::string& method, Clock::time_point start,
              absl::StatusOr<std::string> answer) {
    if (probe_ != nullptr) {
      probe_->Observe(method, std::chrono::duration<double>(Clock::now() - start).count(), answer.ok());
    }
    Answer(s, std::move(answer));
  }

  void Answer(Stream* s, absl::StatusOr<std::string> answer) {
    nghttp2_session* h2 = s->conn->h2;
    if (!answer.ok()) {
      // Trailers-only: the status in the one HEADERS frame that ends the stream. nghttp2
      // copies the header values (no NO_COPY flags), so locals do. The message is bounded:
      // nghttp2 does not send a header block over 64 KiB at all (nor close the stream), and
      // gRPC clients refuse one over 16 KiB.
      const std::string status = std::to_string(static_cast<int>(answer.status().code()));
      const std::string bounded = BoundStatusMessage(answer.status().message());
      const std::string encoded = PercentEncode(bounded);
      nghttp2_nv headers[] = {Header(":status", "200"), Header("content-type", "application/grpc"),
                              Header("grpc-accept-encoding", "identity"),
                              Header("grpc-status", status), Header("grpc-message", encoded)};
      nghttp2_submit_response(h2, s->id, headers, std::size(headers), nullptr);
      return;
    }
    s->out = *std::move(answer);  // framed by Prepared::run; the prefix is filled in here
    const size_t n = s->out.size() - 5;
    EncodeBigEndian32(static_cast<uint32_t>(n), s->out.data() + 1);
    nghttp2_nv headers[] = {Header(":status", "200"), Header("content-type", "application/grpc"),
                            Header("grpc-accept-encoding", "identity")};
    nghttp2_data_provider body;
    body.source.ptr = s;
    body.read_callback = ReadAnswer;
    nghttp2_submit_response(h2, s->id, headers, std::size(headers), &body);
  }

  // Feeds the answer to nghttp2, then ends the stream with the trailers.
  static ssize_t ReadAnswer(nghttp2_session* h2, int32_t id, uint8_t* buf, size_t length,
                            uint32_t* flags, nghttp2_data_source* source, void*) {
    auto* s = static_cast<Stream*>(source->ptr);
    const size_t n = std::min(length, s->out.size() - s->sent);
    std::memcpy(buf, s->out.data() + s->sent, n);
    s->sent += n;
    if (s->sent == s->out.size()) {
      *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
      nghttp2_nv trailers[] = {Header("grpc-status", "0")};
      if (int rv = nghttp2_submit_trailer(h2, id, trailers, std::size(trailers)); rv != 0) {
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;  // resets the stream
      }
    }
    return static_cast<ssize_t>(n);
  }

  // ---- offload threads

  void Work(Pool pool) {
    pthread_setname_np(pthread_self(), pool == kWaits ? "h2-waits" : "h2-offload");
    while (true) {
      std::unique_ptr<Job> job;
      {
        absl::MutexLock lock(&mu_);
        while (!offload_stop_ && queues_[pool].empty()) ready_[pool].Wait(&mu_);
        if (offload_stop_) return;  // the loop is gone: nobody would get the answers
        job = std::move(queues_[pool].front());
        queues_[pool].pop_front();
      }
      if (job->handshake != nullptr) {
        StepHandshake(job.get());
      } else if (job->gone->load()) {
        job->answer = absl::CancelledError("the client went away");  // delivered to nobody
      } else if (job->check_first) {
        job->answer = job->call.run(Clock::now());  // a look, no wait (see Dispatch)
        job->needs_wait = absl::IsDeadlineExceeded(job->answer.status());
      } else if (!RunSlice(job.get())) {
        // Still waiting: behind the other waits, so that more waits than threads all advance.
        {
          absl::MutexLock lock(&mu_);
          queues_[pool].push_back(std::move(job));
        }
        ready_[pool].Signal();
        continue;
      }
      if (probe_ != nullptr && job->handshake == nullptr && !job->gone->load() &&
          !job->needs_wait) {
        probe_->Observe(job->method,
                        std::chrono::duration<double>(Clock::now() - job->start).count(),
                        job->answer.ok());
      }
      {
        absl::MutexLock lock(&mu_);
        finished_.push_back(std::move(job));
      }
      Wake();
    }
  }

  // Runs a read that does not wait, or one slice of a wait: a wait runs in slices, so that a
  // stream reset, a client gone or a shutdown ends it early, and so that more waits than
  // threads take turns. False: the wait goes on.
  bool RunSlice(Job* job) {
    if (!job->call.waits) {
      job->answer = job->call.run(job->deadline);
      return true;
    }
    const auto slice_end = std::min(job->deadline, Clock::now() + kWaitSlice);
    job->answer = job->call.run(slice_end);
    if (!absl::IsDeadlineExceeded(job->answer.status())) return true;
    if (job->gone->load()) return true;  // nobody to answer
    if (slice_end < job->deadline) {
      if (!stopping_.load()) return false;
      // Not the client's deadline: a retry elsewhere, or after the restart, can succeed.
      job->answer = absl::UnavailableError(
          "the fast read port is shutting down; retry the read on another replica or "
          "after the restart");
      return true;
    }
    if (job->capped) {  // the reader's own wording for a request without a deadline
      std::string message(job->answer.status().message());
      const std::string_view phrase = ViewQueries::kNotAppliedInTime;
      const size_t at = message.find(phrase);
      if (at != std::string::npos) {
        message.insert(at + phrase.size(),
                       ViewQueries::CappedWaitNote(std::chrono::milliseconds(limits_.max_wait_ms)));
        job->answer = absl::DeadlineExceededError(message);
      }
    }
    return true;
  }

  void DeliverFinished() {
    std::vector<std::unique_ptr<Job>> done;
    {
      absl::MutexLock lock(&mu_);
      done.swap(finished_);
      offloaded_ -= done.size();
    }
    std::vector<uint64_t> touched;
    for (auto& job : done) {
      auto conn = connections_.find(job->conn);
      if (conn == connections_.end()) continue;  // the client went away
      if (job->handshake != nullptr) {
        if (!HandshakeStepped(conn->second.get(), *job)) {
          Drop(conn->second.get(), conn->second->end_reason);
        }
        continue;
      }
      if (job->counts_wait) --conn->second->waits;
      auto stream = conn->second->streams.find(job->stream);
      if (stream == conn->second->streams.end()) continue;  // reset by the client
      touched.push_back(job->conn);
      if (job->needs_wait) {
        job->check_first = job->needs_wait = false;
        Offload(stream->second.get(), std::move(job), kWaits);
      } else {
        Answer(stream->second.get(), std::move(job->answer));
      }
    }
    for (uint64_t serial : touched) {
      auto conn = connections_.find(serial);
      if (conn != connections_.end() && !Flush(conn->second.get())) {
        Drop(conn->second.get(), conn->second->end_reason);
      }
    }
  }

  const MethodTable methods_;
  // A cluster member's own reads, for calls with the local-only marker; empty standalone.
  const MethodTable local_methods_;
  const int heavy_threads_;
  QueryProbe* const probe_;
  const std::string grpc_setting_;
  const ServerConfig limits_;
  ConnectionProbe* const connection_probe_;
  const H2ReadSecurity security_;
  std::string tls_plain_;  // Produce's buffer, kept between calls
  LogThrottle handshake_log_{3, 60'000};  // failed handshakes logged, a few a minute
  // limits_.fast_reads_max_connections, or less when the open-files budget leaves less
  // (SetMaxConnections, from the application's thread).
  std::atomic<uint32_t> max_connections_;
  size_t buffered_ = 0;  // request bytes all streams hold
  Clock::time_point next_sweep_;
  bool refusing_ = false;  // connections are being refused at the cap (logged once)
  int listen_fd_ = -1, epoll_fd_ = -1, wake_fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  absl::Mutex shutdown_mu_;  // one Shutdown at a time
  std::atomic<bool> stopping_{false};
  Clock::time_point grace_until_;  // written before stopping_ is set
  bool accept_paused_ = false;     // the listener is out of epoll until accept_resume_
  bool accept_failing_ = false;    // logged once per run of failures
  Clock::time_point accept_resume_;
  uint64_t last_serial_ = kWakeTag;  // connections' tags follow the listen and wake tags
  std::map<uint64_t, std::unique_ptr<Connection>> connections_;

  absl::Mutex mu_;
  absl::CondVar ready_[kPools];  // queues_[pool] has a job, or offload_stop_
  std::deque<std::unique_ptr<Job>> queues_[kPools] ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Job>> finished_ ABSL_GUARDED_BY(mu_);
  size_t offloaded_ ABSL_GUARDED_BY(mu_) = 0;
  bool offload_stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

H2ReadServer::H2ReadServer(std::unique_ptr<Loop> loop) : loop_(std::move(loop)) {}

H2ReadServer::~H2ReadServer() { Shutdown(0); }

absl::StatusOr<std::unique_ptr<H2ReadServer>> H2ReadServer::Start(
    const std::string& address, const ViewQueries& reader, QueryProbe* probe,
    std::string grpc_setting, const ServerConfig& limits, ConnectionProbe* connections,
    H2ReadSecurity security, const ViewQueries* local_only) {
  auto loop = std::make_unique<Loop>(reader, local_only, probe, std::move(grpc_setting), limits,
                                     connections, std::move(security));
  if (absl::Status s = loop->Open(address); !s.ok()) return s;
  return std::unique_ptr<H2ReadServer>(new H2ReadServer(std::move(loop)));
}

int H2ReadServer::port() const { return loop_->port(); }
void H2ReadServer::SetMaxConnections(uint32_t max) { loop_->SetMaxConnections(max); }

void H2ReadServer::Shutdown(int grace_ms) { loop_->Shutdown(grace_ms); }

}  // namespace cdcview
