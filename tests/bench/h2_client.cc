#include "tests/bench/h2_client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "index_builders/coding.h"

namespace cdcview::bench {
namespace {

using Clock = std::chrono::steady_clock;

// One call in flight: its framed request and where the answer goes.
struct Stream {
  std::string framed;  // gRPC's 5-byte prefix (not compressed, big-endian length) + message
  size_t offset = 0;   // how much of `framed` nghttp2 has taken
  Clock::time_point scheduled;
  H2Call* call = nullptr;
  bool closed = false;
};

struct Session {
  int fd = -1;
  nghttp2_session* h2 = nullptr;
  size_t open_streams = 0;
  Clock::time_point last_close;
  std::string error;  // the first failure a callback saw
  ~Session() {
    if (h2 != nullptr) nghttp2_session_del(h2);
    if (fd >= 0) close(fd);
  }
};

ssize_t OnSend(nghttp2_session*, const uint8_t* data, size_t length, int, void* user) {
  auto* s = static_cast<Session*>(user);
  ssize_t n = send(s->fd, data, length, MSG_NOSIGNAL);
  if (n >= 0) return n;
  if (errno == EAGAIN || errno == EWOULDBLOCK) return NGHTTP2_ERR_WOULDBLOCK;
  s->error = absl::StrCat("sending to the server: ", strerror(errno));
  return NGHTTP2_ERR_CALLBACK_FAILURE;
}

int OnHeader(nghttp2_session* h2, const nghttp2_frame* frame, const uint8_t* name, size_t namelen,
             const uint8_t* value, size_t valuelen, uint8_t, void*) {
  if (frame->hd.type != NGHTTP2_HEADERS) return 0;
  auto* stream = static_cast<Stream*>(nghttp2_session_get_stream_user_data(h2, frame->hd.stream_id));
  if (stream == nullptr) return 0;
  std::string_view n(reinterpret_cast<const char*>(name), namelen);
  std::string_view v(reinterpret_cast<const char*>(value), valuelen);
  if (n == ":status") {
    int status = 0;
    stream->call->http_status = absl::SimpleAtoi(absl::string_view(v.data(), v.size()), &status) ? status : -1;
  } else if (n == "grpc-status") {
    int status = -1;
    // Not a number: an answer no gRPC server sends; counted as a failed call (-1).
    stream->call->grpc_status =
        absl::SimpleAtoi(absl::string_view(v.data(), v.size()), &status) ? status : -1;
  } else if (n == "grpc-message") {
    // Percent-encoded on the wire (gRPC over HTTP/2).
    std::string& m = stream->call->grpc_message;
    m.clear();
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i] == '%' && i + 2 < v.size() && isxdigit(static_cast<unsigned char>(v[i + 1])) &&
          isxdigit(static_cast<unsigned char>(v[i + 2]))) {
        m.push_back(static_cast<char>(std::stoi(std::string(v.substr(i + 1, 2)), nullptr, 16)));
        i += 2;
      } else {
        m.push_back(v[i]);
      }
    }
  }
  return 0;
}

int OnData(nghttp2_session* h2, uint8_t, int32_t stream_id, const uint8_t* data, size_t len, void*) {
  auto* stream = static_cast<Stream*>(nghttp2_session_get_stream_user_data(h2, stream_id));
  if (stream != nullptr) stream->call->response.append(reinterpret_cast<const char*>(data), len);
  return 0;
}

int OnClose(nghttp2_session* h2, int32_t stream_id, uint32_t, void* user) {
  auto* stream = static_cast<Stream*>(nghttp2_session_get_stream_user_data(h2, stream_id));
  if (stream == nullptr || stream->closed) return 0;
  stream->closed = true;
  stream->call->latency_us =
      std::chrono::duration<double, std::micro>(Clock::now() - stream->scheduled).count();
  std::string& r = stream->call->response;
  r.erase(0, std::min<size_t>(5, r.size()));  // gRPC's frame prefix
  auto* s = static_cast<Session*>(user);
  --s->open_streams;
  s->last_close = Clock::now();
  return 0;
}

// A frame nghttp2 gave up on (after a GOAWAY, say): a request that will never be answered.
int OnNotSent(nghttp2_session*, const nghttp2_frame* frame, int error, void* user) {
  auto* s = static_cast<Session*>(user);
  if (frame->hd.type == NGHTTP2_HEADERS && s->error.empty()) {
    s->error = absl::StrCat("a request could not be sent: ", nghttp2_strerror(error));
  }
  return 0;
}

ssize_t ReadRequest(nghttp2_session*, int32_t, uint8_t* buf, size_t length, uint32_t* flags,
                    nghttp2_data_source* source, void*) {
  auto* stream = static_cast<Stream*>(source->ptr);
  size_t n = std::min(length, stream->framed.size() - stream->offset);
  memcpy(buf, stream->framed.data() + stream->offset, n);
  stream->offset += n;
  if (stream->offset == stream->framed.size()) *flags |= NGHTTP2_DATA_FLAG_EOF;
  return static_cast<ssize_t>(n);
}

absl::Status Connect(int port, Session* s) {
  s->fd = socket(AF_INET, SOCK_STREAM, 0);
  if (s->fd < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(s->fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return absl::UnavailableError(
        absl::StrCat("connecting to 127.0.0.1:", port, ": ", strerror(errno), "; is the server up?"));
  }
  int one = 1;
  const int flags = fcntl(s->fd, F_GETFL);
  if (setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0 || flags < 0 ||
      fcntl(s->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return absl::InternalError(absl::StrCat("setting up the socket: ", strerror(errno)));
  }

  nghttp2_session_callbacks* cb;
  nghttp2_session_callbacks_new(&cb);
  nghttp2_session_callbacks_set_send_callback(cb, OnSend);
  nghttp2_session_callbacks_set_on_header_callback(cb, OnHeader);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, OnData);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, OnClose);
  nghttp2_session_callbacks_set_on_frame_not_send_callback(cb, OnNotSent);
  int rv = nghttp2_session_client_new(&s->h2, cb, s);
  nghttp2_session_callbacks_del(cb);
  if (rv != 0) return absl::InternalError(absl::StrCat("nghttp2 session: ", nghttp2_strerror(rv)));
  // Large receive windows, so that flow control never holds an answer back.
  nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
                                       {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 24}};
  nghttp2_submit_settings(s->h2, NGHTTP2_FLAG_NONE, settings, 2);
  nghttp2_session_set_local_window_size(s->h2, NGHTTP2_FLAG_NONE, 0, 1 << 30);
  return absl::OkStatus();
}

nghttp2_nv Header(std::string_view name, std::string_view value) {
  return {reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
          reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(), value.size(),
          NGHTTP2_NV_FLAG_NONE};
}

absl::Status Flush(Session* s) {
  int rv = nghttp2_session_send(s->h2);
  if (rv != 0) {
    return absl::InternalError(
        absl::StrCat("HTTP/2 send: ", s->error.empty() ? nghttp2_strerror(rv) : s->error));
  }
  return absl::OkStatus();
}

// Reads what the server has sent; false once the connection is closed.
absl::StatusOr<bool> Receive(Session* s) {
  uint8_t buf[64 * 1024];
  for (;;) {
    ssize_t n = recv(s->fd, buf, sizeof buf, 0);
    if (n == 0) return false;
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      if (errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat("reading from the server: ", strerror(errno)));
    }
    ssize_t used = nghttp2_session_mem_recv(s->h2, buf, static_cast<size_t>(n));
    if (used < 0) {
      return absl::InternalError(absl::StrCat("HTTP/2 receive: ", nghttp2_strerror(static_cast<int>(used))));
    }
  }
}

}  // namespace

absl::StatusOr<H2OpenLoopResult> RunH2OpenLoop(int port, const std::string& path,
                                               const std::vector<std::string>& requests,
                                               double qps, double seconds,
                                               const H2Options& options) {
  if (requests.empty()) return absl::InvalidArgumentError("no requests to send");
  Session s;
  if (absl::Status st = Connect(port, &s); !st.ok()) return st;
  const std::string authority = absl::StrCat("127.0.0.1:", port);
  const uint64_t total = static_cast<uint64_t>(qps * seconds);
  const auto interval = std::chrono::duration<double>(1.0 / qps);
  const auto t0 = Clock::now() + std::chrono::milliseconds(50);
  // A client starved so long that it reaches a send only this late stops sending.
  const auto give_up =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds * 3));
  // Answers still missing this long after the last send are an error, not a figure.
  constexpr auto kAnswerTimeout = std::chrono::seconds(10);
  Clock::time_point last_send = t0;

  H2OpenLoopResult out;
  out.calls.resize(total);
  std::vector<Stream> streams(total);
  uint64_t next = 0;  // the next call to send
  s.last_close = t0;
  for (;;) {
    Clock::time_point now = Clock::now();
    while (next < total) {
      auto scheduled = t0 + std::chrono::duration_cast<Clock::duration>(interval * double(next));
      if (scheduled > now) break;
      if (now > give_up) {
        out.not_sent = total - next;
        out.calls.resize(next);
        streams.resize(next);  // nothing past `next` was submitted: no pointer into them
        next = out.calls.size();
        break;
      }
      Stream& stream = streams[next];
      stream.scheduled = scheduled;
      stream.call = &out.calls[next];
      const std::string& msg = requests[next % requests.size()];
      if (options.framed) {
        stream.framed = msg;
      } else {
        stream.framed.resize(5 + msg.size());
        stream.framed[0] = 0;
        EncodeBigEndian32(static_cast<uint32_t>(msg.size()), stream.framed.data() + 1);
        memcpy(stream.framed.data() + 5, msg.data(), msg.size());
      }
      std::vector<nghttp2_nv> headers = {Header(":method", "POST"),
                                         Header(":scheme", "http"),
                                         Header(":path", path),
                                         Header(":authority", authority),
                                         Header("content-type", options.content_type),
                                         Header("te", "trailers")};
      for (const auto& [name, value] : options.headers) headers.push_back(Header(name, value));
      nghttp2_data_provider body;
      body.source.ptr = &stream;
      body.read_callback = ReadRequest;
      int32_t id = nghttp2_submit_request(s.h2, nullptr, headers.data(), headers.size(), &body, &stream);
      if (id < 0) return absl::InternalError(absl::StrCat("HTTP/2 request: ", nghttp2_strerror(id)));
      ++s.open_streams;
      ++next;
      last_send = now;
    }
    if (absl::Status st = Flush(&s); !st.ok()) return st;
    if (!s.error.empty()) return absl::InternalError(s.error);
    const bool all_sent = next >= out.calls.size();
    if (all_sent && s.open_streams == 0) break;
    now = Clock::now();  // after the flush: the sleep below must end on schedule
    if (all_sent && now > last_send + kAnswerTimeout) {
      return absl::DeadlineExceededError(
          absl::StrCat(s.open_streams, " calls still unanswered 10 s after the last send"));
    }

    Clock::duration wait = std::chrono::milliseconds(100);
    if (!all_sent) {
      auto scheduled = t0 + std::chrono::duration_cast<Clock::duration>(interval * double(next));
      wait = std::max<Clock::duration>(Clock::duration::zero(), scheduled - now);
    }
    if (options.spin) wait = Clock::duration::zero();
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
    timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    pollfd pfd{s.fd, static_cast<short>(POLLIN | (nghttp2_session_want_write(s.h2) ? POLLOUT : 0)),
               0};
    int ready = ppoll(&pfd, 1, &ts, nullptr);
    if (ready < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("ppoll: ", strerror(errno)));
    }
    if (ready > 0 && (pfd.revents & (POLLIN | POLLHUP | POLLERR))) {
      absl::StatusOr<bool> open = Receive(&s);
      if (!open.ok()) return open.status();
      if (!*open) {
        if (s.open_streams > 0 || !all_sent) {
          return absl::UnavailableError(absl::StrCat("the server closed the connection with ",
                                                     s.open_streams, " calls unanswered"));
        }
        break;
      }
    }
  }
  out.seconds = std::chrono::duration<double>(s.last_close - t0).count();
  return out;
}

}  // namespace cdcview::bench
