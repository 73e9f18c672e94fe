// The fast read port with TLS and bearer tokens (H2ReadSecurity), against gRPC's own C++
// client: reads over TLS, handshakes that fail or stall, and the token checks' exact statuses
// and counters.
#include <arpa/inet.h>
#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "cdcview/v1/view_service.grpc.pb.h"
#include "daemon/metrics/metrics.h"
#include "daemon/security/auth_probe.h"
#include "daemon/security/tls_context.h"
#include "daemon/security/token_store.h"
#include "daemon/server/h2_read_server.h"
#include "gtest/gtest.h"
#include "tests/fakes/reader_fixture.h"
#include "tests/fakes/records.h"
#include "tests/fakes/test_pki.h"

namespace cdcview {
namespace {

using test::At;
using test::S;

constexpr char kConfigYaml[] = R"(
sources:
  - name: orders
    table: App
    kafka: { brokers: "127.0.0.1:9", topics: [orders], group: g }
tables:
  - name: App
    key: { partition: PK }
    views:
      - name: ByDay
        partition_key: { attribute: day, type: S }
        sort_key: { attribute: PK, type: S }
      - name: Secret
        partition_key: { attribute: PK, type: S }
    aggregates:
      - name: PerDay
        group_by: { attribute: day, type: S }
        measures: [count]
)";

constexpr char kTokensYaml[] = R"(
tokens:
  - name: orders-api
    token: "orders-api-token-0123456789"
    views: [ByDay, PerDay]
  - name: admin
    token: "admin-token-0123456789abcdef"
    views: all
)";

class H2ReadServerSecurityTest : public test::ReaderFixture {
 protected:
  H2ReadServerSecurityTest() : pki_(dir_.path()) {}

  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(OpenReader(kConfigYaml));
    ASSERT_TRUE(applier_->RebuildViews().ok());
    std::vector<SourceRecord> batch = {
        test::Insert(config_.tables[0].key, {{"PK", S("P#1")}, {"day", S("D1")}},
                     At("2").Source(0).Partition("orders/0"))};
    ASSERT_TRUE(applier_->ApplyBatch(&batch).ok());
    auto metrics = MetricsRegistry::Start("");
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    metrics_ = std::move(*metrics);
    connections_ = std::make_unique<ConnectionProbe>(*metrics_, "fast_reads");
    auto pair = pki_.Server("server", 4242);
    limits_.tls_cert_file = pair.cert;
    limits_.tls_key_file = pair.key;
  }

  // Starts the server with TLS (and tokens when `tokens`).
  void Start(bool tokens) {
    H2ReadSecurity security;
    security::TlsServerContext::Options options;
    options.port = "fast_reads";
    options.alpn = {"h2"};
    auto tls = security::TlsServerContext::Create(limits_, options, metrics_->registry());
    ASSERT_TRUE(tls.ok()) << tls.status();
    security.tls = *tls;
    if (tokens) {
      std::ofstream(dir_.Sub("tokens.yaml")) << kTokensYaml;
      auto store = security::TokenStore::Open(dir_.Sub("tokens.yaml"));
      ASSERT_TRUE(store.ok()) << store.status();
      auth_ = std::make_unique<security::AuthProbe>(metrics_->registry(), "fast_reads");
      security.tokens = *store;
      security.auth_probe = auth_.get();
    }
    auto server = H2ReadServer::Start("127.0.0.1:0", *reader_, nullptr, "server.grpc", limits_,
                                      connections_.get(), std::move(security));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }
  void TearDown() override { server_.reset(); }

  std::unique_ptr<v1::ViewService::Stub> Stub(std::shared_ptr<grpc::ChannelCredentials> creds) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetSslTargetNameOverride("localhost");
    return v1::ViewService::NewStub(grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", server_->port()), std::move(creds), args));
  }
  std::unique_ptr<v1::ViewService::Stub> TlsStub() {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = Read(pki_.ca_file());
    return Stub(grpc::SslCredentials(ssl));
  }
  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  static v1::QueryRequest Day(const std::string& view) {
    v1::QueryRequest q;
    q.set_view(view);
    q.mutable_partition_key()->set_s(view == "ByDay" ? "D1" : "P#1");
    q.set_limit(10);
    return q;
  }
  static grpc::Status Query(v1::ViewService::Stub& stub, const v1::QueryRequest& q,
                            const std::string& token, v1::QueryResponse* got = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    v1::QueryResponse ignored;
    return stub.Query(&ctx, q, got != nullptr ? got : &ignored);
  }

  // The value of the exposition line `name` + `labels` ("" when absent).
  std::string Metric(const std::string& name, const std::string& labels) const {
    for (absl::string_view line : absl::StrSplit(metrics_->Render(), '\n')) {
      if (absl::StartsWith(line, name + labels + " ")) {
        return std::string(line.substr(name.size() + labels.size() + 1));
      }
    }
    return "";
  }
  std::string Closed(const std::string& reason) const {
    return Metric("cdcview_connections_closed_total",
                  absl::StrCat("{port=\"fast_reads\",reason=\"", reason, "\"}"));
  }
  std::string Refused(const std::string& reason) const {
    return Metric("cdcview_auth_refused_total",
                  absl::StrCat("{port=\"fast_reads\",reason=\"", reason, "\"}"));
  }
  // Waits up to 5 s for `name`+`labels` to read `want`.
  bool MetricBecomes(const std::string& name, const std::string& labels, const std::string& want) {
    for (int i = 0; i < 500 && Metric(name, labels) != want; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return Metric(name, labels) == want;
  }
  // A TCP connection to the port; -1 on failure.
  int ConnectTcp() const {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(server_->port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      close(fd);
      return -1;
    }
    return fd;
  }

  test::TestPki pki_;
  ServerConfig limits_;
  std::unique_ptr<MetricsRegistry> metrics_;
  std::unique_ptr<ConnectionProbe> connections_;
  std::unique_ptr<security::AuthProbe> auth_;
  std::unique_ptr<H2ReadServer> server_;
};

TEST_F(H2ReadServerSecurityTest, ReadsOverTlsAnswerAsTheReader) {
  ASSERT_NO_FATAL_FAILURE(Start(/*tokens=*/false));
  auto stub = TlsStub();
  v1::QueryResponse got;
  grpc::Status s = Query(*stub, Day("ByDay"), "", &got);
  ASSERT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message();
  auto want = reader_->Query(Day("ByDay"), ViewQueries::Deadline::max());
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(got, *want))
      << got.ShortDebugString() << "\nwant " << want->ShortDebugString();
  ASSERT_EQ(got.entries_size(), 1);
  // A large answer (offloaded, over many TLS records) comes whole.
  std::vector<SourceRecord> batch;
  for (int i = 0; i < 400; ++i) {
    batch.push_back(test::Insert(
        config_.tables[0].key,
        {{"PK", S(absl::StrCat("P#", i, std::string(100, 'x')))}, {"day", S("D9")}},
        At(absl::StrCat(3 + i)).Source(0).Partition("orders/0")));
  }
  ASSERT_TRUE(applier_->ApplyBatch(&batch).ok());
  v1::QueryRequest large = Day("ByDay");
  large.mutable_partition_key()->set_s("D9");
  large.set_limit(1000);
  v1::QueryResponse all;
  grpc::Status large_status = Query(*stub, large, "", &all);
  ASSERT_TRUE(large_status.ok()) << large_status.error_code() << ": "
                                 << large_status.error_message();
  EXPECT_EQ(all.entries_size(), 400);
  EXPECT_GT(all.ByteSizeLong(), 3 * 16384u);
  EXPECT_EQ(Closed("tls_handshake"), "");
}

// Handshakes run on the offload threads; many at once all complete, each on its connection.
TEST_F(H2ReadServerSecurityTest, ManyHandshakesAtOnceAllComplete) {
  ASSERT_NO_FATAL_FAILURE(Start(/*tokens=*/false));
  constexpr int kClients = 32;
  std::vector<std::unique_ptr<v1::ViewService::Stub>> stubs;
  for (int i = 0; i < kClients; ++i) stubs.push_back(TlsStub());
  std::vector<std::thread> threads;
  std::atomic<int> ok{0}, retried{0};
  absl::Mutex mu;
  std::vector<std::string> failures;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      // gRPC 1.51's client now and then gives up on one of many
      // simultaneous TLS connections by itself: it closes with close_notify after the server
      // finished the handshake (the server counts reason="client", no tls_handshake failure),
      // reporting "failed to connect to all addresses ... No such file or directory". Such a
      // client tries once more on a new channel (the old one closed, so it cannot reconnect
      // behind the count); the server must still serve every one.
      for (int attempt = 0; attempt < 2; ++attempt) {
        v1::QueryResponse got;
        if (attempt > 0) stubs[i] = TlsStub();
        grpc::Status s = Query(*stubs[i], Day("ByDay"), "", &got);
        if (s.ok() && got.entries_size() == 1) {
          ++ok;
          return;
        }
        absl::MutexLock lock(&mu);
        failures.push_back(absl::StrCat("client ", i, " attempt ", attempt, ": code ",
                                        s.error_code(), " \"", s.error_message(), "\", ",
                                        got.entries_size(), " entries"));
        if (s.error_code() != grpc::StatusCode::UNAVAILABLE || attempt > 0) return;
        ++retried;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok.load(), kClients) << absl::StrJoin(failures, "; ");
  EXPECT_LE(retried.load(), 1) << absl::StrJoin(failures, "; ");
  EXPECT_EQ(Metric("cdcview_connections_opened_total", "{port=\"fast_reads\"}"),
            std::to_string(kClients + retried.load()));
  EXPECT_EQ(Closed("tls_handshake"), "");
}

TEST_F(H2ReadServerSecurityTest, AtTheCapATlsConnectionIsClosedWithoutAHandshake) {
  limits_.fast_reads_max_connections = 1;
  ASSERT_NO_FATAL_FAILURE(Start(/*tokens=*/false));
  auto first = TlsStub();
  ASSERT_TRUE(Query(*first, Day("ByDay"), "").ok());
  grpc::Status second = Query(*TlsStub(), Day("ByDay"), "");
  EXPECT_EQ(second.error_code(), grpc::StatusCode::UNAVAILABLE) << second.error_message();
  EXPECT_EQ(Metric("cdcview_connections_refused_total",
                   "{port=\"fast_reads\",reason=\"max_connections\"}"),
            "1");
  EXPECT_EQ(Closed("tls_handshake"), "");
  EXPECT_TRUE(Query(*first, Day("ByDay"), "").ok());
}

TEST_F(H2ReadServerSecurityTest, APlaintextClientFailsTheHandshake) {
  ASSERT_NO_FATAL_FAILURE(Start(/*tokens=*/false));
  auto plain = Stub(grpc::InsecureChannelCredentials());
  grpc::Status s = Query(*plain, Day("ByDay"), "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_TRUE(MetricBecomes("cdcview_connections_closed_total",
                            "{port=\"fast_reads\",reason=\"tls_handshake\"}", "1"))
      << Closed("tls_handshake");
}

TEST_F(H2ReadServerSecurityTest, AClientWithoutTheClientCasCertificateFailsTheHandshake) {
  limits_.tls_client_ca_file = pki_.ca_file();
  ASSERT_NO_FATAL_FAILURE(Start(/*tokens=*/false));
  grpc::Status none = Query(*TlsStub(), Day("ByDay"), "");
  EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAVAILABLE) << none.error_message();

  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = Read(pki_.ca_file());
  auto client = pki_.Client("client");
  ssl.pem_cert_chain = Read(client.cert);
  ssl.pem_private_key = Read(client.key);
  grpc::Status with = Query(*Stub(grpc::SslCredentials(ssl)), Day("ByDay"), "");
  EXPECT_TRUE(with.ok()) << with.error_code() << ": " << with.error_message();
  EXPECT_NE(Closed("tls_handshake"), "");
}

TEST_F(H2ReadServerSecurityTest, AStalledHandshakeIsClosedAtTheRequestTimeout) {
  limits_.fast_reads_request_timeout_ms = 300;
  ASSERT_NO_FATAL_FAILURE(Start(/*tokens=*/false));
  // Before the first connect: the server's clock for `silent` starts at its accept.
  const auto start = std::chrono::steady_clock::now();
  const int silent = ConnectTcp();
  ASSERT_GE(silent, 0);
  // Half a ClientHello's record header: the handshake never gets going.
  const int partial = ConnectTcp();
  ASSERT_GE(partial, 0);
  ASSERT_EQ(send(partial, "\x16\x03\x01", 3, 0), 3);
  for (int fd : {silent, partial}) {
    pollfd p{fd, POLLIN, 0};
    ASSERT_EQ(poll(&p, 1, 5000), 1);
    char byte;
    // Closed without a byte: nothing can be said before the handshake.
    EXPECT_EQ(recv(fd, &byte, 1, 0), 0);
    close(fd);
  }
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, std::chrono::milliseconds(250));
  EXPECT_LT(took, std::chrono::milliseconds(2000));
  EXPECT_TRUE(MetricBecomes("cdcview_connections_closed_total",
                            "{port=\"fast_reads\",reason=\"request_timeout\"}", "2"));
  // The port still serves.
  EXPECT_TRUE(Query(*TlsStub(), Day("ByDay"), "").ok());
}

TEST_F(H2ReadServerSecurityTest, TokensAreCheckedWithExactStatuses) {
  ASSERT_NO_FATAL_FAILURE(Start(/*tokens=*/true));
  auto stub = TlsStub();
  grpc::Status none = Query(*stub, Day("ByDay"), "");
  EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(none.error_message(),
            "no bearer token: send the header \"authorization: Bearer <token>\" (cdcview "
            "--token-file FILE)");
  grpc::Status bad = Query(*stub, Day("ByDay"), "not-a-token-0123456789");
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(bad.error_message(), "the bearer token is not one of server.tokens_file's tokens");
  grpc::Status denied = Query(*stub, Day("Secret"), "orders-api-token-0123456789");
  EXPECT_EQ(denied.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(denied.error_message(),
            "token \"orders-api\" may not read view \"Secret\": add the view to its views in "
            "server.tokens_file");
  v1::QueryResponse got;
  grpc::Status allowed = Query(*stub, Day("ByDay"), "orders-api-token-0123456789", &got);
  EXPECT_TRUE(allowed.ok()) << allowed.error_message();
  EXPECT_EQ(got.entries_size(), 1);
  EXPECT_TRUE(Query(*stub, Day("Secret"), "admin-token-0123456789abcdef").ok());

  // An aggregate is named like a view; a table's items need views: all; ListViews lists what
  // the token may read, GetStatus is open to any valid token.
  auto as_orders = [](grpc::ClientContext* ctx) {
    ctx->AddMetadata("authorization", "Bearer orders-api-token-0123456789");
  };
  grpc::ClientContext item_ctx;
  as_orders(&item_ctx);
  v1::GetItemRequest item;
  item.set_table("App");
  (*item.mutable_key()->mutable_attributes())["PK"].set_s("P#1");
  v1::GetItemResponse item_got;
  grpc::Status item_status = stub->GetItem(&item_ctx, item, &item_got);
  EXPECT_EQ(item_status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(item_status.error_message(),
            "token \"orders-api\" may not read table \"App\"'s items: only a token with views: "
            "all may (server.tokens_file)");
  grpc::ClientContext admin_item_ctx;
  admin_item_ctx.AddMetadata("authorization", "Bearer admin-token-0123456789abcdef");
  EXPECT_TRUE(stub->GetItem(&admin_item_ctx, item, &item_got).ok());
  EXPECT_EQ(item_got.item().attributes().at("day").s(), "D1");
  grpc::ClientContext aggregate_ctx;
  as_orders(&aggregate_ctx);
  v1::GetAggregateRequest aggregate;
  aggregate.set_aggregate("PerDay");
  aggregate.mutable_group()->set_s("D1");
  v1::AggregateGroup group;
  grpc::Status aggregate_status = stub->GetAggregate(&aggregate_ctx, aggregate, &group);
  EXPECT_TRUE(aggregate_status.ok()) << aggregate_status.error_message();
  grpc::ClientContext list_ctx;
  as_orders(&list_ctx);
  v1::ListViewsResponse views;
  ASSERT_TRUE(stub->ListViews(&list_ctx, v1::ListViewsRequest(), &views).ok());
  ASSERT_EQ(views.views_size(), 1);
  EXPECT_EQ(views.views(0).name(), "ByDay");
  grpc::ClientContext status_ctx;
  as_orders(&status_ctx);
  v1::StatusResponse status;
  EXPECT_TRUE(stub->GetStatus(&status_ctx, v1::GetStatusRequest(), &status).ok());

  EXPECT_EQ(Refused("no_token"), "1");
  EXPECT_EQ(Refused("bad_token"), "1");
  EXPECT_EQ(Refused("view_denied"), "2");
}

}  // namespace
}  // namespace cdcview
