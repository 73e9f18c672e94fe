// The lean HTTP/2 client of query_bench against a real ViewServer: its answers must be the
// server's, byte for byte, and its errors must say what went wrong, or its figures mean nothing.
#include "tests/bench/h2_client.h"

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "cdcview/v1/view_service.pb.h"
#include "daemon/metrics/metrics.h"
#include "daemon/server/view_reader.h"
#include "daemon/server/view_service.h"
#include "tests/bench/workload.h"

namespace cdcview::bench {
namespace {

constexpr char kQueryPath[] = "/cdcview.v1.ViewService/Query";

class H2ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = MakeTempDir(::testing::TempDir(), "h2-client-test");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *dir;
    auto bench = BenchStore::Open(DefaultConfigPath(), dir_ + "/store", 64ull << 20);
    ASSERT_TRUE(bench.ok()) << bench.status();
    bench_ = std::move(*bench);
    workload_ = GenerateWorkload({20'000, 7, 0}, nullptr, nullptr, [](double) {});
    ASSERT_FALSE(workload_.live_votes.empty());
    ASSERT_TRUE(bench_->applier().ApplyBatch(&workload_.records).ok());
    reader_ = std::make_unique<ViewReader>(bench_->catalog(), bench_->store(), bench_->published());
    auto server = ViewServer::Start("127.0.0.1:0", *reader_, nullptr);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    server_->SetServing(true);
  }
  void TearDown() override {
    server_.reset();
    reader_.reset();
    bench_.reset();
    if (!dir_.empty()) RemoveTree(dir_);
  }

  v1::QueryRequest PointQuery(size_t i) const {
    const auto& vote = workload_.live_votes[i % workload_.live_votes.size()];
    v1::QueryRequest q;
    q.set_view("GSI1");
    q.mutable_partition_key()->set_s(vote.partition);
    q.mutable_sort()->set_op(v1::SortCondition::EQ);
    q.mutable_sort()->mutable_value()->set_s(vote.user);
    q.set_limit(1);
    return q;
  }

  std::string dir_;
  std::unique_ptr<BenchStore> bench_;
  Workload workload_;
  std::unique_ptr<ViewReader> reader_;
  std::unique_ptr<ViewServer> server_;
};

TEST_F(H2ClientTest, AnswersAreTheServersAnswersInSendOrder) {
  std::vector<std::string> requests;
  std::vector<v1::QueryResponse> expected;
  for (size_t i = 0; i < 7; ++i) {
    v1::QueryRequest q = PointQuery(i * 13);
    requests.push_back(q.SerializeAsString());
    auto answer = reader_->Query(q, ViewReader::Deadline::max());
    ASSERT_TRUE(answer.ok()) << answer.status();
    ASSERT_EQ(answer->entries_size(), 1);
    expected.push_back(*answer);
  }
  // 100 calls at 1,000 per second: the requests cycle, each answer matches its request,
  // whether the client sleeps between sends or spins.
  for (const bool spin : {false, true}) {
    SCOPED_TRACE(spin ? "spinning" : "sleeping");
    H2Options options;
    options.spin = spin;
    auto run = RunH2OpenLoop(server_->port(), kQueryPath, requests, 1000, 0.1, options);
    ASSERT_TRUE(run.ok()) << run.status();
    ASSERT_EQ(run->calls.size(), 100u);
    EXPECT_EQ(run->not_sent, 0u);
    EXPECT_GT(run->seconds, 0.09);
    for (size_t k = 0; k < run->calls.size(); ++k) {
      const H2Call& call = run->calls[k];
      ASSERT_EQ(call.grpc_status, 0) << "call " << k << ": " << call.grpc_message;
      v1::QueryResponse got;
      ASSERT_TRUE(got.ParseFromString(call.response)) << "call " << k;
      // Items are maps, whose serialized order is not fixed: compare as messages.
      EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(
          got, expected[k % expected.size()]))
          << "call " << k << ": " << got.ShortDebugString();
      EXPECT_GT(call.latency_us, 0) << "call " << k;
    }
  }
}

TEST_F(H2ClientTest, ErrorsCarryTheServersStatusAndMessage) {
  v1::QueryRequest q = PointQuery(0);
  // The message echoes the name; gRPC percent-encodes '%' and bytes outside printable ASCII.
  q.set_view("No%Such View\xc3\xbc");
  auto expected = reader_->Query(q, ViewReader::Deadline::max());
  ASSERT_EQ(expected.status().code(), absl::StatusCode::kNotFound);
  auto run = RunH2OpenLoop(server_->port(), kQueryPath, {q.SerializeAsString()}, 100, 0.03);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->calls.size(), 3u);
  for (const H2Call& call : run->calls) {
    EXPECT_EQ(call.grpc_status, 5);  // NOT_FOUND
    EXPECT_EQ(call.grpc_message, expected.status().message());
    EXPECT_NE(call.grpc_message.find("No%Such View\xc3\xbc"), std::string::npos) << call.grpc_message;
  }
}

TEST_F(H2ClientTest, NoServerIsAnErrorNamingTheAddress) {
  const int port = server_->port();
  server_->Shutdown(0);
  auto run = RunH2OpenLoop(port, kQueryPath, {PointQuery(0).SerializeAsString()}, 100, 0.01);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(run.status().message(), "connecting to 127.0.0.1:" + std::to_string(port) +
                                        ": Connection refused; is the server up?");
}

TEST_F(H2ClientTest, NoRequestsIsAnError) {
  auto run = RunH2OpenLoop(server_->port(), kQueryPath, {}, 100, 0.01);
  EXPECT_EQ(run.status(), absl::InvalidArgumentError("no requests to send"));
}

}  // namespace
}  // namespace cdcview::bench
