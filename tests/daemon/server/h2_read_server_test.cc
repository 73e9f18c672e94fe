// The fast read port against gRPC's own C++ client: the same answers and errors as ViewReader,
// gRPC's framing and status conventions, reads that wait kept off the event loop, and a
// clean shutdown.
#include "daemon/server/h2_read_server.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cdcview/v1/view_service.grpc.pb.h"
#include "daemon/apply/applier.h"
#include "daemon/metrics/metrics.h"
#include "daemon/server/error_text.h"
#include "daemon/server/view_reader.h"
#include "gtest/gtest.h"
#include "index_builders/coding.h"
#include "tests/bench/h2_client.h"
#include "tests/fakes/reader_fixture.h"
#include "tests/fakes/records.h"

namespace cdcview {
namespace {

using google::protobuf::util::MessageDifferencer;
using std::chrono::milliseconds;
using test::At;
using test::N;
using test::S;

// Source 0 (Kafka, topic orders) feeds App.
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
    aggregates:
      - name: PerDay
        group_by: { attribute: day, type: S }
        measures: [count]
)";

class H2ReadServerTest : public test::ReaderFixture {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(OpenReader(kConfigYaml));
    ASSERT_TRUE(applier_->RebuildViews().ok());
    for (int i = 0; i < 5; ++i) Apply(absl::StrCat("P#", i), i < 3 ? "D1" : "D2", i + 1);
    auto metrics = MetricsRegistry::Start("");
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    metrics_ = std::move(*metrics);
    probe_ = std::make_unique<QueryProbe>(*metrics_, ViewServiceUnaryMethods());
    connections_ = std::make_unique<ConnectionProbe>(*metrics_, "fast_reads");
    ASSERT_NO_FATAL_FAILURE(StartServer(ServerConfig{}));
  }
  // (Re)starts the server with `limits`, and stub_ on a connection to it.
  void StartServer(const ServerConfig& limits) {
    stub_.reset();
    server_.reset();
    auto server = H2ReadServer::Start("127.0.0.1:0", *reader_, probe_.get(), "server.grpc",
                                      limits, connections_.get());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stub_ = NewStub();
  }
  // A stub on a connection of its own.
  std::unique_ptr<v1::ViewService::Stub> NewStub() const {
    grpc::ChannelArguments own;
    own.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return v1::ViewService::NewStub(grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", server_->port()), grpc::InsecureChannelCredentials(), own));
  }
  void TearDown() override {
    stub_.reset();
    server_.reset();
  }

  // PK=`pk` in day `day`, at Kafka partition orders/0, next offset `next`.
  void Apply(const std::string& pk, const std::string& day, int64_t next) {
    std::vector<SourceRecord> batch = {test::Insert(
        config_.tables[0].key, {{"PK", S(pk)}, {"day", S(day)}},
        At(absl::StrCat(next)).Source(0).Partition("orders/0"))};
    ASSERT_TRUE(applier_->ApplyBatch(&batch).ok());
  }

  static v1::QueryRequest Day(const std::string& day, uint32_t limit) {
    v1::QueryRequest q;
    q.set_view("ByDay");
    q.mutable_partition_key()->set_s(day);
    q.set_limit(limit);
    return q;
  }
  // Day(day, limit), read once orders/0's next offset is past `offset`.
  static v1::QueryRequest AfterOffset(const std::string& day, uint32_t limit, int64_t offset) {
    v1::QueryRequest q = Day(day, limit);
    auto* k = q.mutable_consistency()->add_min_kafka_offsets();
    k->set_topic("orders");
    k->set_partition(0);
    k->set_offset(offset);
    return q;
  }
  // `q` on the fast read port from another thread, with a 20 s deadline, through `stub`
  // (stub_ if null).
  std::future<std::pair<grpc::Status, v1::QueryResponse>> QueryInBackground(
      v1::QueryRequest q, v1::ViewService::Stub* stub = nullptr) {
    if (stub == nullptr) stub = stub_.get();
    return std::async(std::launch::async, [stub, q] {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
      v1::QueryResponse got;
      grpc::Status s = stub->Query(&ctx, q, &got);
      return std::make_pair(s, got);
    });
  }

  // The exposition line of `name` with labels `labels`, e.g. {method="Query"}.
  std::string Metric(const std::string& name, const std::string& labels) const {
    for (absl::string_view line : absl::StrSplit(metrics_->Render(), '\n')) {
      if (absl::StartsWith(line, name + labels + " ")) return std::string(line);
    }
    return "";
  }

  std::unique_ptr<MetricsRegistry> metrics_;
  std::unique_ptr<QueryProbe> probe_;
  std::unique_ptr<ConnectionProbe> connections_;
  std::unique_ptr<H2ReadServer> server_;
  // `rpc` on the fast read port; a failed call fails the test and returns an empty answer.
  template <typename Req, typename Resp>
  Resp CallOk(grpc::Status (v1::ViewService::Stub::*rpc)(grpc::ClientContext*, const Req&, Resp*),
              const Req& request) {
    grpc::ClientContext ctx;
    Resp got;
    const grpc::Status s = (stub_.get()->*rpc)(&ctx, request, &got);
    EXPECT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message();
    return got;
  }

  std::unique_ptr<v1::ViewService::Stub> stub_;
};

template <typename Message>
::testing::AssertionResult Same(const Message& got, const absl::StatusOr<Message>& want) {
  if (!want.ok()) return ::testing::AssertionFailure() << "the reader failed: " << want.status();
  if (MessageDifferencer::Equals(got, *want)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got " << got.ShortDebugString() << "\nwant "
                                       << want->ShortDebugString();
}

TEST_F(H2ReadServerTest, AnswersAreTheReadersForEveryUnaryMethod) {
  // A small page runs on the loop, a default-sized one (limit 0) on an offload thread.
  for (uint32_t limit : {2u, 0u}) {
    v1::QueryResponse got = CallOk(&v1::ViewService::Stub::Query, Day("D1", limit));
    EXPECT_TRUE(Same(got, reader_->Query(Day("D1", limit))));
    EXPECT_EQ(got.entries_size(), limit == 2 ? 2 : 3);
  }
  v1::ScanRequest scan;
  scan.set_view("ByDay");
  scan.set_limit(4);
  v1::ScanResponse scanned = CallOk(&v1::ViewService::Stub::Scan, scan);
  EXPECT_TRUE(Same(scanned, reader_->Scan(scan)));
  EXPECT_EQ(scanned.entries_size(), 4);

  v1::GetItemRequest get;
  get.set_table("App");
  (*get.mutable_key()->mutable_attributes())["PK"].set_s("P#4");
  v1::GetItemResponse item = CallOk(&v1::ViewService::Stub::GetItem, get);
  EXPECT_TRUE(Same(item, reader_->GetItem(get)));
  EXPECT_EQ(item.item().attributes().at("day").s(), "D2");

  v1::GetAggregateRequest aggregate;
  aggregate.set_aggregate("PerDay");
  aggregate.mutable_group()->set_s("D1");
  v1::AggregateGroup group = CallOk(&v1::ViewService::Stub::GetAggregate, aggregate);
  EXPECT_TRUE(Same(group, reader_->GetAggregate(aggregate)));
  EXPECT_EQ(group.members(), 3u);

  v1::ListAggregatesRequest list;
  list.set_aggregate("PerDay");
  v1::ListAggregatesResponse groups = CallOk(&v1::ViewService::Stub::ListAggregates, list);
  EXPECT_TRUE(Same(groups, reader_->ListAggregates(list)));
  EXPECT_EQ(groups.groups_size(), 2);

  EXPECT_TRUE(Same(CallOk(&v1::ViewService::Stub::ListViews, v1::ListViewsRequest()),
                   reader_->ListViews()));

  v1::DescribeViewRequest describe;
  describe.set_view("ByDay");
  v1::ViewDescription description = CallOk(&v1::ViewService::Stub::DescribeView, describe);
  EXPECT_TRUE(Same(description, reader_->DescribeView("ByDay")));
  EXPECT_EQ(description.item_count(), 5u);

  EXPECT_TRUE(Same(CallOk(&v1::ViewService::Stub::GetStatus, v1::GetStatusRequest()),
                   absl::StatusOr<v1::StatusResponse>(reader_->GetStatus())));

  v1::GetHotKeysRequest hot;
  hot.set_view("ByDay");
  EXPECT_TRUE(Same(CallOk(&v1::ViewService::Stub::GetHotKeys, hot), reader_->GetHotKeys(hot)));
  // Every call is timed under its method, as on the main port.
  EXPECT_EQ(Metric("cdcview_query_duration_seconds_count", "{method=\"Query\"}"),
            "cdcview_query_duration_seconds_count{method=\"Query\"} 2");
  EXPECT_EQ(Metric("cdcview_query_duration_seconds_count", "{method=\"GetHotKeys\"}"),
            "cdcview_query_duration_seconds_count{method=\"GetHotKeys\"} 1");
}

TEST_F(H2ReadServerTest, ErrorsCarryTheReadersCodeAndMessage) {
  // A view name with "%41", a control character and a non-ASCII letter: grpc-message is
  // percent-encoded on the wire and decoded by the client (unencoded, "%41" would arrive as
  // "A").
  v1::QueryRequest q = Day("D1", 1);
  q.set_view("By%41\x01æ");
  const absl::Status want = reader_->Query(q).status();
  ASSERT_TRUE(absl::IsNotFound(want)) << want;
  grpc::ClientContext ctx;
  v1::QueryResponse got;
  grpc::Status s = stub_->Query(&ctx, q, &got);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), std::string(want.message()));

  v1::QueryRequest wrong_type = Day("D1", 1);
  wrong_type.mutable_partition_key()->set_n("1");
  grpc::ClientContext ctx2;
  s = stub_->Query(&ctx2, wrong_type, &got);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), std::string(reader_->Query(wrong_type).status().message()));
  EXPECT_EQ(Metric("cdcview_query_errors_total", "{method=\"Query\"}"),
            "cdcview_query_errors_total{method=\"Query\"} 2");
}

// A unary method added to the proto without a handler on this port fails here.
TEST_F(H2ReadServerTest, EveryUnaryMethodOfTheServiceIsServed) {
  grpc::GenericStub generic(grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                                grpc::InsecureChannelCredentials()));
  // `path` called with an empty request message.
  auto call = [&generic](const std::string& path) {
    grpc::CompletionQueue cq;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Slice empty("");
    grpc::ByteBuffer request(&empty, 1), response;
    grpc::Status status;
    auto reader = generic.PrepareUnaryCall(&ctx, path, request, &cq);
    reader->StartCall();
    reader->Finish(&response, &status, reinterpret_cast<void*>(1));
    void* tag = nullptr;
    bool ok = false;
    EXPECT_TRUE(cq.Next(&tag, &ok));
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
    return status;
  };
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          v1::ViewService::service_full_name());
  ASSERT_NE(service, nullptr);
  std::vector<std::string> unary;
  for (int i = 0; i < service->method_count(); ++i) {
    const google::protobuf::MethodDescriptor* m = service->method(i);
    const std::string path = absl::StrCat("/", service->full_name(), "/", m->name());
    const grpc::Status status = call(path);
    if (m->client_streaming() || m->server_streaming()) {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << path;
      EXPECT_EQ(status.error_message(),
                absl::StrCat("this port serves the unary reads of cdcview.v1.ViewService; ", path,
                             " is not one of them (Watch, health and reflection are on "
                             "server.grpc)"));
      continue;
    }
    unary.push_back(m->name());
    // Some methods refuse an empty request, but none may be unknown here.
    EXPECT_NE(status.error_code(), grpc::StatusCode::UNIMPLEMENTED)
        << path << " has no handler on the fast read port: " << status.error_message();
  }
  EXPECT_EQ(ViewServiceUnaryMethods(), unary);
  EXPECT_EQ(unary.size(), 9u);  // all but Watch, the one streaming method
}

TEST_F(H2ReadServerTest, WatchIsUnimplementedNamingTheMainPort) {
  grpc::ClientContext ctx;
  v1::WatchRequest q;
  q.set_view("ByDay");
  auto stream = stub_->Watch(&ctx, q);
  v1::WatchEvent event;
  EXPECT_FALSE(stream->Read(&event));
  grpc::Status s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(s.error_message(),
            "this port serves the unary reads of cdcview.v1.ViewService; "
            "/cdcview.v1.ViewService/Watch is not one of them (Watch, health and reflection are "
            "on server.grpc)");
}

TEST_F(H2ReadServerTest, AReadThatWaitsDoesNotHoldTheLoop) {
  // Read-your-writes for offset 9 of orders/0 (applied up to next offset 6): it waits on an
  // offload thread. Were it on the loop, the point query below could not be answered until
  // the wait ended, and the wait ends only after that query (Apply below).
  auto waited = QueryInBackground(AfterOffset("D3", 0, 9));
  std::this_thread::sleep_for(milliseconds(100));  // the waiting read is in
  EXPECT_EQ(waited.wait_for(milliseconds(0)), std::future_status::timeout);
  grpc::ClientContext ctx;
  v1::QueryResponse point;
  ASSERT_TRUE(stub_->Query(&ctx, Day("D2", 1), &point).ok());
  EXPECT_EQ(point.entries_size(), 1);
  EXPECT_EQ(waited.wait_for(milliseconds(0)), std::future_status::timeout);
  Apply("P#9", "D3", 10);
  auto [status, got] = waited.get();
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(got.entries_size(), 1);
  EXPECT_EQ(got.entries(0).item().attributes().at("PK").s(), "P#9");
}

// More waits than wait threads, on one connection: a read whose position is applied, a point
// query (on the loop) or a page (off it), is still answered at once, and the waits go on.
TEST_F(H2ReadServerTest, AReadWhosePositionIsAppliedNeverQueuesBehindWaits) {
  ServerConfig limits;
  limits.fast_reads_max_waits_per_connection = 100;
  ASSERT_NO_FATAL_FAILURE(StartServer(limits));
  std::vector<std::future<std::pair<grpc::Status, v1::QueryResponse>>> waits;
  for (int i = 0; i < 16; ++i) waits.push_back(QueryInBackground(AfterOffset("D3", i % 2, 99)));
  std::this_thread::sleep_for(milliseconds(300));  // all of them are waiting
  for (uint32_t limit : {1u, 0u}) {  // on the loop; on the offload threads
    const auto start = std::chrono::steady_clock::now();
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    v1::QueryResponse got;
    grpc::Status s = stub_->Query(&ctx, AfterOffset("D1", limit, 2), &got);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(got.entries_size(), limit == 1 ? 1 : 3);
    EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(500)) << limit;
  }
  for (auto& w : waits) EXPECT_EQ(w.wait_for(milliseconds(0)), std::future_status::timeout);
  Apply("P#9", "D3", 100);  // every wait is answered, the ninth and later ones too
  for (auto& w : waits) {
    auto [status, got] = w.get();
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(got.entries_size(), 1);
  }
}

TEST_F(H2ReadServerTest, WaitsPerConnectionAreCappedByName) {
  ServerConfig limits;
  limits.fast_reads_max_waits_per_connection = 2;
  ASSERT_NO_FATAL_FAILURE(StartServer(limits));
  auto first = QueryInBackground(AfterOffset("D3", 1, 99));
  auto second = QueryInBackground(AfterOffset("D3", 0, 99));  // a page: checked off the loop
  std::this_thread::sleep_for(milliseconds(300));
  grpc::ClientContext ctx;
  v1::QueryResponse got;
  grpc::Status s = stub_->Query(&ctx, AfterOffset("D3", 1, 99), &got);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(s.error_message(),
            "2 reads on this connection are already waiting for their position "
            "(server.fast_reads_max_waits_per_connection); retry with backoff");
  EXPECT_EQ(Metric("cdcview_requests_refused_total",
                   "{port=\"fast_reads\",reason=\"waits_per_connection\"}"),
            "cdcview_requests_refused_total{port=\"fast_reads\",reason=\"waits_per_connection\"} 1");
  // Another connection has waits of its own; a read that needs no wait is not one.
  auto other_stub = NewStub();
  auto other = QueryInBackground(AfterOffset("D3", 1, 99), other_stub.get());
  grpc::ClientContext applied;
  EXPECT_TRUE(stub_->Query(&applied, AfterOffset("D1", 1, 2), &got).ok());
  Apply("P#9", "D3", 100);
  for (auto* w : {&first, &second, &other}) EXPECT_TRUE(w->get().first.ok());
  // The ended waits no longer count.
  grpc::ClientContext again;
  again.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  EXPECT_TRUE(stub_->Query(&again, AfterOffset("D3", 1, 99), &got).ok());
}

TEST_F(H2ReadServerTest, AWaitWithoutADeadlineEndsAtServerMaxWaitMs) {
  ServerConfig limits;
  limits.max_wait_ms = 700;
  ASSERT_NO_FATAL_FAILURE(StartServer(limits));
  grpc::ClientContext ctx;  // no deadline
  v1::QueryResponse got;
  const auto start = std::chrono::steady_clock::now();
  grpc::Status s = stub_->Query(&ctx, AfterOffset("D3", 0, 99), &got);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(s.error_message(),
            "view ByDay: min_position not applied before the deadline (the request had none; "
            "the server waits at most 700 ms, server.max_wait_ms): source orders partition "
            "orders/0: applied up to 5, waiting for offset 99");
  EXPECT_GE(took, milliseconds(700));
  EXPECT_LT(took, milliseconds(2000));
}

TEST_F(H2ReadServerTest, AWaitEndsAtTheClientsDeadline) {
  // The lean client sends grpc-timeout and keeps no deadline of its own, so the answer is the
  // server's: it must come a tenth before the 300 ms the header gives (WaitDeadline, so that
  // a client with that deadline still receives it), with the reader's message.
  bench::H2Options timeout;
  timeout.headers = {{"grpc-timeout", "300m"}};
  auto run = bench::RunH2OpenLoop(server_->port(), "/cdcview.v1.ViewService/Query",
                                  {AfterOffset("D3", 1, 99).SerializeAsString()}, 100, 0.01,
                                  timeout);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->calls.size(), 1u);
  const bench::H2Call& call = run->calls[0];
  EXPECT_EQ(call.grpc_status, 4);  // DEADLINE_EXCEEDED
  EXPECT_TRUE(absl::StartsWith(
      call.grpc_message,
      "view ByDay: min_position not applied before the deadline: source orders partition"))
      << call.grpc_message;
  EXPECT_GE(call.latency_us, 270'000);
  EXPECT_LT(call.latency_us, 5'000'000);
  grpc::ClientContext ctx2;
  ctx2.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::QueryResponse point;
  EXPECT_TRUE(stub_->Query(&ctx2, Day("D2", 1), &point).ok());
}

TEST_F(H2ReadServerTest, OversizedAndCompressedRequestsAreRefusedByName) {
  v1::QueryRequest big = Day("D1", 1);
  big.set_view(std::string(4 << 20, 'v'));  // server.fast_reads_max_request_bytes's default
  grpc::ClientContext ctx;
  v1::QueryResponse got;
  grpc::Status s = stub_->Query(&ctx, big, &got);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(s.error_message(),
            "the request is larger than 4194304 bytes (server.fast_reads_max_request_bytes)");
  EXPECT_EQ(Metric("cdcview_requests_refused_total", "{port=\"fast_reads\",reason=\"body_limit\"}"),
            "cdcview_requests_refused_total{port=\"fast_reads\",reason=\"body_limit\"} 1");

  grpc::ClientContext gzip;
  gzip.set_compression_algorithm(GRPC_COMPRESS_GZIP);
  // gRPC's client sends short messages uncompressed even when asked to compress; not this one.
  v1::QueryRequest long_name = Day("D1", 1);
  long_name.set_view(std::string(100000, 'v'));
  s = stub_->Query(&gzip, long_name, &got);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(s.error_message(),
            "compressed messages (grpc-encoding gzip) are not served here; send them "
            "uncompressed");

  // The connection is still good.
  grpc::ClientContext ctx2;
  EXPECT_TRUE(stub_->Query(&ctx2, Day("D1", 1), &got).ok());
}

TEST_F(H2ReadServerTest, AnOverLongViewNameIsAnsweredAtOnce) {
  v1::QueryRequest q = Day("D1", 1);
  q.set_view(std::string(70000, 'v'));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::QueryResponse got;
  const auto start = std::chrono::steady_clock::now();
  grpc::Status s = stub_->Query(&ctx, q, &got);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "view name of 70000 bytes is longer than any view can have (at most 1024 bytes); "
            "views: ByDay");
}

// Answers every call with NOT_FOUND and `message`.
class FailingQueries : public ViewQueries {
 public:
  explicit FailingQueries(std::string message) : error_(absl::NotFoundError(message)) {}
  absl::StatusOr<v1::QueryResponse> Query(const v1::QueryRequest&, Deadline) const override {
    return error_;
  }
  absl::StatusOr<v1::ScanResponse> Scan(const v1::ScanRequest&, Deadline) const override {
    return error_;
  }
  absl::StatusOr<v1::GetItemResponse> GetItem(const v1::GetItemRequest&,
                                              Deadline) const override {
    return error_;
  }
  absl::StatusOr<v1::AggregateGroup> GetAggregate(const v1::GetAggregateRequest&,
                                                  Deadline) const override {
    return error_;
  }
  absl::StatusOr<v1::ListAggregatesResponse> ListAggregates(const v1::ListAggregatesRequest&,
                                                            Deadline) const override {
    return error_;
  }
  absl::StatusOr<v1::ListViewsResponse> ListViews() const override { return error_; }
  absl::StatusOr<v1::ViewDescription> DescribeView(const std::string&) const override {
    return error_;
  }
  v1::StatusResponse GetStatus() const override { return {}; }
  absl::StatusOr<v1::HotKeysResponse> GetHotKeys(const v1::GetHotKeysRequest&) const override {
    return error_;
  }

 private:
  const absl::Status error_;
};

// However long the reader's message, the call is answered (nghttp2 sends no header block over
// 64 KiB, and gRPC's client takes none over 16 KiB): the message is cut to a bound.
TEST(H2ReadServerErrorsTest, AnyErrorMessageIsAnsweredCutToABound) {
  // Percent-encoded on the wire: '%' and 'æ' take three bytes each there.
  // The first 991 bytes would end inside an 'æ'.
  std::string message = "x";
  while (message.size() < 100000) message += "100% æ ";
  FailingQueries failing(message);
  auto server = H2ReadServer::Start("127.0.0.1:0", failing, nullptr, "server.grpc");
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::ViewService::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", (*server)->port()), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::ViewDescription got;
  v1::DescribeViewRequest request;
  request.set_view("ByDay");
  const auto start = std::chrono::steady_clock::now();
  grpc::Status s = stub->DescribeView(&ctx, request, &got);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(),
            message.substr(0, 990) + "... (message of 100001 bytes cut)");  // 'æ' left out whole
  EXPECT_EQ(s.error_message().size(), kMaxStatusMessageBytes - 1);
}

TEST(GrpcTimeoutTest, ParsesEveryUnitAndCapsLongOnes) {
  using std::chrono::hours;
  using std::chrono::microseconds;
  using std::chrono::nanoseconds;
  using std::chrono::seconds;
  EXPECT_EQ(ParseGrpcTimeout("1S"), seconds(1));
  EXPECT_EQ(ParseGrpcTimeout("250m"), milliseconds(250));
  EXPECT_EQ(ParseGrpcTimeout("7u"), microseconds(7));
  EXPECT_EQ(ParseGrpcTimeout("12345678n"), nanoseconds(12345678));
  // Exact, not through a double: 15n, 65u and 1001m each lost a nanosecond that way.
  EXPECT_EQ(ParseGrpcTimeout("15n"), nanoseconds(15));
  EXPECT_EQ(ParseGrpcTimeout("65u"), microseconds(65));
  EXPECT_EQ(ParseGrpcTimeout("1001m"), milliseconds(1001));
  EXPECT_EQ(ParseGrpcTimeout("2M"), seconds(120));
  EXPECT_EQ(ParseGrpcTimeout("3H"), hours(3));
  // 99,999,999 hours would overflow nanoseconds; deadlines that far are a year.
  EXPECT_EQ(ParseGrpcTimeout("99999999H"), kLongestGrpcTimeout);
  for (const char* bad : {"", "S", "1", "1x", "+1S", " 1S", "-1S", "123456789S", "1.5S"}) {
    EXPECT_EQ(ParseGrpcTimeout(bad), std::nullopt) << bad;
  }
}

TEST_F(H2ReadServerTest, AStreamingCallIsRefusedAtOnceNotWhenItsRequestEnds) {
  // Reflection's bidirectional stream: the client keeps its side open. The answer must come
  // on the headers, or the client would wait until its deadline.
  grpc::GenericStub generic(grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                                grpc::InsecureChannelCredentials()));
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto call = generic.PrepareCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                  &cq);
  void* tag = nullptr;
  bool ok = false;
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(cq.Next(&tag, &ok));
  grpc::ByteBuffer ignored;
  call->Read(&ignored, reinterpret_cast<void*>(2));
  ASSERT_TRUE(cq.Next(&tag, &ok));
  EXPECT_FALSE(ok);  // no message: the call is over
  grpc::Status status;
  const auto start = std::chrono::steady_clock::now();
  call->Finish(&status, reinterpret_cast<void*>(3));
  ASSERT_TRUE(cq.Next(&tag, &ok));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(status.error_message(),
            "this port serves the unary reads of cdcview.v1.ViewService; "
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo is not one of them "
            "(Watch, health and reflection are on server.grpc)");
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

TEST_F(H2ReadServerTest, AWaitWithoutADeadlineEndsAtTheReadersCapWithItsWording) {
  grpc::ClientContext ctx;  // no deadline: no grpc-timeout header
  v1::QueryResponse got;
  const auto start = std::chrono::steady_clock::now();
  grpc::Status s = stub_->Query(&ctx, AfterOffset("D3", 1, 99), &got);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(absl::StartsWith(s.error_message(),
                               "view ByDay: min_position not applied before the deadline (the "
                               "request had none; the server waits at most 10 s, server.max_wait_ms): "
                               "source orders"))
      << s.error_message();
  EXPECT_GE(took, std::chrono::seconds(10));  // server.max_wait_ms's default
  EXPECT_LT(took, std::chrono::seconds(13));
}

TEST_F(H2ReadServerTest, ShutdownEndsAWaitingReadPromptly) {
  auto waited = QueryInBackground(AfterOffset("D3", 1, 99));
  std::this_thread::sleep_for(milliseconds(200));  // the waiting read is in
  const auto start = std::chrono::steady_clock::now();
  server_->Shutdown(5000);
  // The wait ends within a slice of the shutdown; its answer goes out before the port closes.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  // Not the client's deadline (20 s): UNAVAILABLE, which a client retries elsewhere.
  grpc::Status s = waited.get().first;
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(s.error_message(),
            "the fast read port is shutting down; retry the read on another replica or after "
            "the restart");
}

TEST_F(H2ReadServerTest, RequestsNoGrpcClientSendsGetClearAnswers) {
  // One call with `body` and `options` on the lean HTTP/2 client.
  auto call = [&](const std::string& body, const bench::H2Options& options) {
    // One call a second for one second: a single send, which a client slowed by a sanitizer
    // still reaches inside the loop's give-up window (3 s).
    auto run = bench::RunH2OpenLoop(server_->port(), "/cdcview.v1.ViewService/Query", {body},
                                    1, 1.0, options);
    EXPECT_TRUE(run.ok()) << run.status();
    EXPECT_EQ(run.ok() ? run->calls.size() : 0u, 1u);
    return run.ok() && !run->calls.empty() ? run->calls[0] : bench::H2Call{};
  };
  const std::string query = Day("D1", 1).SerializeAsString();

  bench::H2Options json;
  json.content_type = "application/json";
  EXPECT_EQ(call(query, json).http_status, 415);  // not gRPC: HTTP's answer
  bench::H2Options grpc_web;
  grpc_web.content_type = "application/grpc-web";
  EXPECT_EQ(call(query, grpc_web).http_status, 415);

  bench::H2Options plus_proto;
  plus_proto.content_type = "application/grpc+proto";
  bench::H2Call ok = call(query, plus_proto);
  EXPECT_EQ(ok.grpc_status, 0) << ok.grpc_message;
  v1::QueryResponse parsed;
  EXPECT_TRUE(parsed.ParseFromString(ok.response));
  EXPECT_EQ(parsed.entries_size(), 1);

  bench::H2Options bad_timeout;
  bad_timeout.headers = {{"grpc-timeout", "1x"}};
  bench::H2Call timeout = call(query, bad_timeout);
  EXPECT_EQ(timeout.http_status, 200);
  EXPECT_EQ(timeout.grpc_status, 3);
  EXPECT_EQ(timeout.grpc_message, "malformed grpc-timeout header");

  // Two messages in one unary request, and a prefix that promises more than arrives.
  bench::H2Options framed;
  framed.framed = true;
  auto frame = [](const std::string& message) {
    std::string f(1, '\0');
    PutBigEndian32(static_cast<uint32_t>(message.size()), &f);
    return f + message;
  };
  const std::string framing_error = "expected one length-prefixed gRPC message in the request body";
  bench::H2Call two = call(frame(query) + frame(query), framed);
  EXPECT_EQ(two.grpc_status, 13);
  EXPECT_EQ(two.grpc_message, framing_error);
  bench::H2Call short_body = call(frame(query).substr(0, 8), framed);
  EXPECT_EQ(short_body.grpc_status, 13);
  EXPECT_EQ(short_body.grpc_message, framing_error);
  // A compressed-flag byte with no grpc-encoding is a broken prefix, not compression.
  std::string flagged = frame(query);
  flagged[0] = 1;
  bench::H2Call no_encoding = call(flagged, framed);
  EXPECT_EQ(no_encoding.grpc_status, 13);
  EXPECT_EQ(no_encoding.grpc_message,
            "malformed gRPC message prefix: compressed flag without a grpc-encoding");
  // Not a QueryRequest at all.
  bench::H2Call garbage = call(frame("\xff\xff\xff"), framed);
  EXPECT_EQ(garbage.grpc_status, 13);
  EXPECT_EQ(garbage.grpc_message,
            "cannot parse the request as cdcview.v1.QueryRequest; is the client built from "
            "cdcview's proto/?");
}

TEST_F(H2ReadServerTest, ShutdownClosesThePort) {
  grpc::ClientContext ctx;
  v1::QueryResponse got;
  ASSERT_TRUE(stub_->Query(&ctx, Day("D1", 1), &got).ok());
  const int port = server_->port();
  server_->Shutdown(1000);
  auto fresh = v1::ViewService::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                                            grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx2;
  ctx2.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  EXPECT_EQ(fresh->Query(&ctx2, Day("D1", 1), &got).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(H2ReadServerTest, AnAddressThatIsNotHostPortIsNamed) {
  auto bad = H2ReadServer::Start("localhost", *reader_, nullptr, "server.grpc");
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_EQ(bad.status().message(),
            "\"localhost\" is not host:port (e.g. 127.0.0.1:50052 or [::1]:50052)");
  auto taken = H2ReadServer::Start(absl::StrCat("127.0.0.1:", server_->port()), *reader_, nullptr,
                                   "server.grpc");
  EXPECT_TRUE(absl::IsUnavailable(taken.status())) << taken.status();
  EXPECT_EQ(taken.status().message(),
            absl::StrCat("cannot listen on 127.0.0.1:", server_->port(), ": Address already in use"));
}

}  // namespace
}  // namespace cdcview
