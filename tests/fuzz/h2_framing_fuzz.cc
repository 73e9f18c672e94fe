// The fast read port (daemon/server/h2_read_server.h) on arbitrary client bytes: each input is
// what one client connection sends (HTTP/2 preface, frames, gRPC messages), written to a real
// H2ReadServer over loopback TCP; the client then half-closes and reads until the server
// closes. The server's own connection code runs unchanged: nghttp2 and our callbacks, the
// request limits, gRPC's framing, the handlers and a real ViewReader on a small store.
// Properties: no crash, no sanitizer finding, and the server closes every connection whose
// client has stopped sending (a connection it kept open would hang here, and libFuzzer reports
// the timeout). The limits are small so that inputs of a few KB reach them.
//
// Seeds (CDCVIEW_FUZZ_SEEDS): nghttp2's own client session, serializing real gRPC requests for
// every unary method, plus calls the port must refuse (Watch, a wrong content type, a
// compressed or oversized message, a bad grpc-timeout, a read that waits for a position).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cdcview/v1/view_service.pb.h"
#include "daemon/apply/applier.h"
#include "daemon/config/config.h"
#include "daemon/log/log.h"
#include "daemon/server/h2_read_server.h"
#include "daemon/server/view_reader.h"
#include "daemon/state/catalog.h"
#include "daemon/state/published_state.h"
#include "daemon/store/store.h"
#include "index_builders/coding.h"
#include "tests/fakes/fake_dead_letter_sink.h"
#include "tests/fakes/records.h"
#include "tests/fuzz/fuzz_support.h"

namespace cdcview {
namespace {

// The store, writer state and reader behind the server; built once, removed at exit.
struct Backend {
  std::string dir;
  Config config;
  std::unique_ptr<Store> store;
  std::unique_ptr<Catalog> catalog;
  std::unique_ptr<PublishedState> published;
  FakeDeadLetterSink sink;
  std::unique_ptr<Applier> applier;
  std::unique_ptr<ViewReader> reader;
  std::unique_ptr<H2ReadServer> server;
};

void Check(const absl::Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "h2_framing set-up: %s: %s\n", what, status.ToString().c_str());
  std::abort();
}

Backend& TheBackend() {
  static Backend* b = [] {
    SetLogLevel(LogLevel::kError);  // the port logs refusals; a fuzzer makes thousands
    auto* b = new Backend;
    std::string pattern = (std::filesystem::temp_directory_path() / "cdcview-fuzz-XXXXXX").string();
    fuzz::Require(mkdtemp(pattern.data()) != nullptr, "mkdtemp");
    b->dir = pattern;
    std::atexit([] { std::filesystem::remove_all(TheBackend().dir); });
    absl::StatusOr<Config> parsed = ParseConfig(fuzz::kConfigYaml, "fuzz.yaml");
    Check(parsed.status(), "config");
    b->config = *std::move(parsed);
    b->config.storage.path = b->dir;
    b->config.storage.map_size = 16 << 20;
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(b->config.storage, b->config.tables);
    Check(store.status(), "store");
    b->store = *std::move(store);
    b->catalog = std::make_unique<Catalog>(b->config, b->store->max_key_size());
    b->published = std::make_unique<PublishedState>(*b->catalog, [] { return int64_t{0}; });
    b->applier = std::make_unique<Applier>(
        *b->catalog, b->store.get(), nullptr,
        std::vector<DeadLetterSink*>(b->config.sources.size(), &b->sink), b->published.get());
    Check(b->applier->Recover(), "recover");
    Check(b->applier->RebuildViews(), "rebuild");
    for (int i = 0; i < 5; ++i) {
      std::vector<SourceRecord> batch = {test::Insert(
          b->config.tables[0].key,
          {{"PK", test::S(absl::StrCat("P#", i))}, {"day", test::S(i < 3 ? "D1" : "D2")}},
          test::At(absl::StrCat(i + 1)).Source(0).Partition("orders/0"))};
      Check(b->applier->ApplyBatch(&batch), "apply");
    }
    b->reader = std::make_unique<ViewReader>(*b->catalog, *b->store, *b->published);
    ServerConfig limits;
    limits.max_wait_ms = 1;
    limits.fast_reads_max_request_bytes = 2048;
    limits.fast_reads_max_buffered_per_connection = 4096;
    limits.fast_reads_max_buffered_bytes = 8192;
    limits.fast_reads_max_waits_per_connection = 2;
    absl::StatusOr<std::unique_ptr<H2ReadServer>> server =
        H2ReadServer::Start("127.0.0.1:0", *b->reader, nullptr, "server.grpc", limits);
    Check(server.status(), "server");
    b->server = *std::move(server);
    return b;
  }();
  return *b;
}

// One connection: sends `input`, half-closes, reads until the server closes. Aborts if the
// server has not closed 10 s after the last byte was sent.
void Converse(int port, std::string_view input) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  fuzz::Require(fd >= 0, "socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // Each connection ends in TIME_WAIT on this side (the client closes first): from a new
  // loopback address each time (127.1.0.0/16), so that thousands of connections a second do not
  // use up one address's ports.
  static uint32_t next_source = 0;
  sockaddr_in source{};
  source.sin_family = AF_INET;
  source.sin_addr.s_addr = htonl(0x7F010000u | (1 + next_source++ % 0xFFFE));
  fuzz::Require(bind(fd, reinterpret_cast<sockaddr*>(&source), sizeof source) == 0, "bind");
  // An interrupted connect (EINTR) goes on in the background: called again, it reports it.
  while (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && errno != EISCONN) {
    fuzz::Require(errno == EINTR || errno == EALREADY, "connect");
    pollfd p{fd, POLLOUT, 0};
    poll(&p, 1, 100);
  }
  size_t sent = 0;
  bool half_closed = false;
  char buf[16 << 10];
  while (true) {
    if (!half_closed && sent == input.size()) {
      shutdown(fd, SHUT_WR);
      half_closed = true;
    }
    pollfd p{fd, static_cast<short>(POLLIN | (half_closed ? 0 : POLLOUT)), 0};
    // libFuzzer's -timeout alarm interrupts poll (EINTR): that is no answer from the server.
    const int ready = poll(&p, 1, 10000);
    if (ready < 0 && errno == EINTR) continue;
    fuzz::Require(ready > 0, "the server closes a connection whose client stopped sending");
    if (p.revents & POLLOUT) {
      ssize_t n = send(fd, input.data() + sent, input.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent += static_cast<size_t>(n);
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        break;  // the server closed first (EPIPE, ECONNRESET): it may, after a protocol error
      }
    }
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;
    }
  }
  close(fd);
}

// ---- seeds: real client sessions, serialized by nghttp2's client side

struct Call {
  using Headers = std::vector<std::pair<std::string, std::string>>;
  Call(std::string path, std::string body, Headers headers = {},
       std::string content_type = "application/grpc")
      : path(std::move(path)), body(std::move(body)), headers(std::move(headers)),
        content_type(std::move(content_type)) {}
  std::string path;
  std::string body;  // the gRPC-framed request body
  Headers headers;   // besides :method ... te
  std::string content_type;
};

std::string Framed(const google::protobuf::Message& m, uint8_t flag = 0) {
  std::string out(5, '\0');
  out[0] = static_cast<char>(flag);
  const std::string message = m.SerializeAsString();
  EncodeBigEndian32(static_cast<uint32_t>(message.size()), out.data() + 1);
  return out + message;
}

std::string Method(const std::string& name) { return "/cdcview.v1.ViewService/" + name; }

struct Body {
  std::string_view bytes;
  size_t at = 0;
};

ssize_t ReadBody(nghttp2_session*, int32_t, uint8_t* buf, size_t length, uint32_t* flags,
                 nghttp2_data_source* source, void*) {
  auto* body = static_cast<Body*>(source->ptr);
  const size_t n = std::min(length, body->bytes.size() - body->at);
  std::memcpy(buf, body->bytes.data() + body->at, n);
  body->at += n;
  if (body->at == body->bytes.size()) *flags |= NGHTTP2_DATA_FLAG_EOF;
  return static_cast<ssize_t>(n);
}

// What a client sends for `calls` on one connection: preface, SETTINGS, then each call's
// HEADERS and DATA; `goaway` ends with the client's GOAWAY.
std::string ClientBytes(const std::vector<Call>& calls, bool goaway = false) {
  nghttp2_session_callbacks* cb;
  nghttp2_session_callbacks_new(&cb);
  nghttp2_session* h2;
  fuzz::Require(nghttp2_session_client_new(&h2, cb, nullptr) == 0, "nghttp2 client");
  nghttp2_session_callbacks_del(cb);
  nghttp2_submit_settings(h2, NGHTTP2_FLAG_NONE, nullptr, 0);
  std::string out;  // nghttp2 starts it with the client preface
  std::vector<std::unique_ptr<Body>> bodies;
  for (const Call& call : calls) {
    std::vector<std::pair<std::string, std::string>> all = {
        {":method", "POST"}, {":scheme", "http"}, {":path", call.path},
        {":authority", "127.0.0.1"}, {"content-type", call.content_type}, {"te", "trailers"}};
    all.insert(all.end(), call.headers.begin(), call.headers.end());
    std::vector<nghttp2_nv> nv;
    for (auto& [n, v] : all) {
      nv.push_back({reinterpret_cast<uint8_t*>(n.data()), reinterpret_cast<uint8_t*>(v.data()),
                    n.size(), v.size(), NGHTTP2_NV_FLAG_NONE});
    }
    bodies.push_back(std::make_unique<Body>(Body{call.body}));
    nghttp2_data_provider provider;
    provider.source.ptr = bodies.back().get();
    provider.read_callback = ReadBody;
    fuzz::Require(nghttp2_submit_request(h2, nullptr, nv.data(), nv.size(), &provider, nullptr) > 0,
                  "submit request");
    // Each call's frames before the next call's HEADERS, as a client sending them one by one.
    while (true) {
      const uint8_t* data;
      ssize_t n = nghttp2_session_mem_send(h2, &data);
      if (n <= 0) break;
      out.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
    }
  }
  if (goaway) nghttp2_submit_goaway(h2, NGHTTP2_FLAG_NONE, 0, NGHTTP2_NO_ERROR, nullptr, 0);
  while (true) {
    const uint8_t* data;
    ssize_t n = nghttp2_session_mem_send(h2, &data);
    if (n <= 0) break;
    out.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
  }
  nghttp2_session_del(h2);
  return out;
}

void WriteSeeds(const std::string& dir) {
  v1::QueryRequest query;
  query.set_view("ByDay");
  query.mutable_partition_key()->set_s("D1");
  query.set_limit(2);
  v1::QueryRequest waits = query;
  waits.mutable_consistency()->add_min_kafka_offsets()->set_topic("orders");
  waits.mutable_consistency()->mutable_min_kafka_offsets(0)->set_offset(1000);
  v1::QueryRequest big = query;
  big.set_limit(1000);
  v1::ScanRequest scan;
  scan.set_view("ByDay");
  scan.set_limit(3);
  v1::GetItemRequest get;
  get.set_table("App");
  (*get.mutable_key()->mutable_attributes())["PK"].set_s("P#1");
  v1::GetAggregateRequest aggregate;
  aggregate.set_aggregate("PerDay");
  aggregate.mutable_group()->set_s("D1");
  v1::ListAggregatesRequest list_aggregates;
  list_aggregates.set_aggregate("PerDay");
  v1::DescribeViewRequest describe;
  describe.set_view("ByDay");
  const v1::ListViewsRequest no_fields;
  const std::vector<std::pair<std::string, std::vector<Call>>> seeds = {
      {"query", {{Method("Query"), Framed(query)}}},
      {"query_timeout", {{Method("Query"), Framed(query), {{"grpc-timeout", "5S"}}}}},
      {"query_bad_timeout", {{Method("Query"), Framed(query), {{"grpc-timeout", "5X"}}}}},
      {"query_waits", {{Method("Query"), Framed(waits), {{"grpc-timeout", "20m"}}}}},
      {"query_large_page", {{Method("Query"), Framed(big)}}},
      {"scan", {{Method("Scan"), Framed(scan)}}},
      {"get_item", {{Method("GetItem"), Framed(get)}}},
      {"get_aggregate", {{Method("GetAggregate"), Framed(aggregate)}}},
      {"list_aggregates", {{Method("ListAggregates"), Framed(list_aggregates)}}},
      {"list_views", {{Method("ListViews"), Framed(no_fields)}}},
      {"describe_view", {{Method("DescribeView"), Framed(describe)}}},
      {"get_status", {{Method("GetStatus"), Framed(no_fields)}}},
      {"watch", {{Method("Watch"), Framed(query)}}},
      {"wrong_content_type", {{Method("Query"), Framed(query), {}, "application/json"}}},
      {"compressed", {{Method("Query"), Framed(query, 1), {{"grpc-encoding", "gzip"}}}}},
      {"oversized", {{Method("Query"), std::string("\0\0\0\x10\0", 5) + std::string(3000, 'x')}}},
      {"unframed", {{Method("Query"), query.SerializeAsString()}}},
      {"three_calls_goaway",
       {{Method("Query"), Framed(query)}, {Method("GetItem"), Framed(get)},
        {Method("ListViews"), Framed(no_fields)}}},
  };
  for (const auto& [name, calls] : seeds) {
    fuzz::WriteSeed(dir, name, ClientBytes(calls, name == "three_calls_goaway"));
  }
}

}  // namespace
}  // namespace cdcview

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  cdcview::fuzz::WriteSeedsIfAsked(cdcview::WriteSeeds);
  cdcview::TheBackend();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cdcview::Converse(cdcview::TheBackend().server->port(), cdcview::fuzz::Bytes(data, size));
  return 0;
}
