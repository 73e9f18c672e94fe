// ClusterWatch against three members, each a real store, writer and WatchHub; members 1 and 2
// serve it over gRPC (ViewServer), member 0 is the one merging. Snapshots end in one
// snapshot_done, positions resume every member, a member that fails or does not answer ends
// the stream naming it, and a member's fell_behind ends it at the cluster's position.
#include "daemon/server/cluster_watch.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "daemon/apply/applier.h"
#include "daemon/log/log.h"
#include "daemon/metrics/metrics.h"
#include "daemon/server/view_service.h"
#include "gtest/gtest.h"
#include "tests/fakes/fake_dead_letter_sink.h"
#include "tests/fakes/records.h"
#include "tests/fakes/temp_dir.h"
#include "tests/fakes/test_store.h"

namespace cdcview {
namespace {

using test::At;
using test::S;
using Strings = std::vector<std::string>;
using Clock = std::chrono::steady_clock;

constexpr char kConfigYaml[] = R"(
sources:
  - name: src
    table: App
    file: { path: unused.ndjson }
tables:
  - name: App
    key: { partition: PK }
    views:
      - name: ByG
        partition_key: { attribute: g, type: S }
        sort_key: { attribute: PK, type: S }
        projection: ALL
)";

constexpr char kEveryMemberNeeded[] =
    "; every member is needed for a whole answer: retry when it is back";

// One member: its store, writer, hub and (for members other than 0) its gRPC server.
struct Member {
  explicit Member(const WatchConfig& watch) {
    EXPECT_EQ(test::OpenTestStore(kConfigYaml, dir.Sub("store"), &config, &store),
              absl::OkStatus());
    catalog = std::make_unique<Catalog>(config, store->max_key_size());
    published = std::make_unique<PublishedState>(*catalog, [] { return int64_t{0}; });
    applier = std::make_unique<Applier>(*catalog, store.get(), nullptr,
                                        std::vector<DeadLetterSink*>{&sink}, published.get());
    reader = std::make_unique<ViewReader>(*catalog, *store, *published);
    EXPECT_TRUE(applier->Recover().ok());
    EXPECT_TRUE(applier->RebuildViews().ok());
    hub = std::make_unique<WatchHub>(*catalog, *store, *published, *reader, watch, nullptr);
  }
  ~Member() { Stop(); }

  void Serve(ClusterWatch* cluster_watch = nullptr) {
    auto started = ViewServer::Start("127.0.0.1:0", *reader, nullptr, hub.get(), ServerConfig{},
                                     nullptr, nullptr, MainPortSecurity{}, nullptr,
                                     cluster_watch);
    ASSERT_TRUE(started.ok()) << started.status();
    server = *std::move(started);
    address = absl::StrCat("127.0.0.1:", server->port());
  }
  void Stop() {
    if (hub != nullptr) hub->Shutdown();
    if (server != nullptr) server->Shutdown(0);
  }

  // Items "<name>" with g = "G", one commit for all of them.
  void Put(const Strings& names, const std::string& v = "1") {
    std::vector<SourceRecord> batch;
    for (const std::string& name : names) {
      batch.push_back(test::Insert(config.tables[0].key, {{"PK", S(name)}, {"g", S("G")}, {"v", S(v)}},
                                   At(absl::StrCat(++position))));
    }
    ASSERT_TRUE(applier->ApplyBatch(&batch).ok());
  }

  test::TempDir dir;
  Config config;
  std::unique_ptr<Store> store;
  std::unique_ptr<Catalog> catalog;
  FakeDeadLetterSink sink;
  std::unique_ptr<PublishedState> published;
  std::unique_ptr<Applier> applier;
  std::unique_ptr<ViewReader> reader;
  std::unique_ptr<WatchHub> hub;
  std::unique_ptr<ViewServer> server;
  std::string address = "local";
  int position = 0;
};

// "entry A", "PUT A" (" @" with a position), "done @", "fell_behind @", "start @".
std::string Describe(const v1::WatchEvent& e) {
  const std::string at = e.position().empty() ? "" : " @";
  switch (e.event_case()) {
    case v1::WatchEvent::kSnapshotEntry:
      return "entry " + e.snapshot_entry().item().attributes().at("PK").s() + at;
    case v1::WatchEvent::kChange:
      return (e.change().op() == v1::EntryChange::PUT ? "PUT " : "DELETE ") +
             e.change().entry().item().attributes().at("PK").s() + at;
    case v1::WatchEvent::kSnapshotDone: return "done" + at;
    case v1::WatchEvent::kFellBehind: return "fell_behind" + at;
    default: return "start" + at;
  }
}

// A client of the merged stream on its own thread: what it received, and the status.
class Client {
 public:
  Client(ClusterWatch& watch, v1::WatchRequest request,
         Clock::time_point deadline = Clock::time_point::max())
      : stream_{[this](const v1::WatchEvent& e) {
                  absl::MutexLock lock(&mu_);
                  events_.push_back(e);
                  return !leave_;
                },
                [this] {
                  absl::MutexLock lock(&mu_);
                  return leave_;
                },
                [this](const absl::Status& s) {
                  absl::MutexLock lock(&mu_);
                  ended_ = s;
                }},
        thread_([this, &watch, request, deadline] {
          absl::Status s = watch.Run(request, stream_, deadline);
          absl::MutexLock lock(&mu_);
          status_ = s;
          done_ = true;
        }) {}
  ~Client() {
    Leave();
    thread_.join();
  }

  // Waits until `n` events arrived; their descriptions.
  Strings WaitFor(size_t n) {
    absl::MutexLock lock(&mu_);
    // Run by Await with mu_ held, which the analysis cannot see through the lambda.
    auto enough = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return events_.size() >= n || done_; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(10));
    Strings out;
    for (const v1::WatchEvent& e : events_) out.push_back(Describe(e));
    return out;
  }
  // Waits until the stream ended; its status.
  absl::Status Wait() {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&done_), absl::Seconds(10));
    EXPECT_TRUE(done_);
    return status_;
  }
  std::string PositionOf(size_t i) {
    absl::MutexLock lock(&mu_);
    return events_.at(i).position();
  }
  absl::Status ended() {
    absl::MutexLock lock(&mu_);
    return ended_;
  }
  void Leave() {
    absl::MutexLock lock(&mu_);
    leave_ = true;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::WatchEvent> events_ ABSL_GUARDED_BY(mu_);
  bool leave_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  absl::Status ended_ ABSL_GUARDED_BY(mu_);
  WatchStream stream_;
  std::thread thread_;
};

v1::WatchRequest Request(bool snapshot, bool start_position = false) {
  v1::WatchRequest r;
  r.set_view("ByG");
  r.set_snapshot(snapshot);
  r.set_start_position(start_position);
  return r;
}

class ClusterWatchTest : public ::testing::Test {
 protected:
  // Three members; `watch0` is member 0's watch config.
  // `merged`: the merging stream's own (its buffer bound).
  void Start(const WatchConfig& watch0 = WatchConfig{}, uint32_t max_wait_ms = 10000,
             const WatchConfig& merged = WatchConfig{}) {
    SetLogLevel(LogLevel::kWarning);
    members_.push_back(std::make_unique<Member>(watch0));
    for (int i = 1; i < 3; ++i) {
      members_.push_back(std::make_unique<Member>(WatchConfig{}));
      ASSERT_NO_FATAL_FAILURE(members_.back()->Serve());
    }
    StartPeers(max_wait_ms, merged);
  }
  void StartPeers(uint32_t max_wait_ms, const WatchConfig& merged = WatchConfig{}) {
    metrics_ = MetricsRegistry::Create();
    ClusterConfig cluster;
    cluster.members = 3;
    cluster.ordinal = 0;
    for (const auto& m : members_) cluster.peers.push_back(m->address);
    peers_ = std::make_unique<ClusterPeers>(cluster, ServerConfig{}, &metrics_->registry());
    watch_ = std::make_unique<ClusterWatch>(*members_[0]->hub, *peers_, merged, max_wait_ms);
  }
  // Member 0's server may still be serving a merged stream: stop it before the ClusterWatch
  // and the peers go.
  void TearDown() override {
    for (auto& m : members_) m->Stop();
  }
  Member& member(int i) { return *members_[i]; }

  std::vector<std::unique_ptr<Member>> members_;
  std::unique_ptr<MetricsRegistry> metrics_;
  std::unique_ptr<ClusterPeers> peers_;
  std::unique_ptr<ClusterWatch> watch_;
};

TEST_F(ClusterWatchTest, SnapshotOfEveryMemberThenOneSnapshotDoneThenChanges) {
  ASSERT_NO_FATAL_FAILURE(Start());
  member(0).Put({"A", "D"});
  member(1).Put({"B"});
  member(2).Put({"C", "E"});
  Client client(*watch_, Request(true));
  Strings got = client.WaitFor(6);
  ASSERT_EQ(got.size(), 6u) << absl::StrJoin(got, ", ");
  EXPECT_EQ(got.back(), "done @");
  got.pop_back();
  // Each member's entries in its order; members interleaved as they arrive.
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (Strings{"entry A", "entry B", "entry C", "entry D", "entry E"}));

  member(2).Put({"F"});
  ASSERT_EQ(client.WaitFor(7).size(), 7u);
  member(1).Put({"G"});
  got = client.WaitFor(8);
  ASSERT_EQ(got.size(), 8u);
  EXPECT_EQ(Strings(got.begin() + 6, got.end()), (Strings{"PUT F @", "PUT G @"}));
  const std::string after_g = client.PositionOf(7);
  client.Leave();
  member(0).Put({"H"});  // the client leaves on its next event
  EXPECT_EQ(client.Wait(), absl::CancelledError("the client cancelled the stream"));

  // From G's position: every member resumes after what it had sent (member 0 had sent
  // nothing since its snapshot, so H is new; F and G are not sent again).
  member(1).Put({"I"});
  v1::WatchRequest resume = Request(false);
  resume.set_from_position(after_g);
  Client resumed(*watch_, resume);
  got = resumed.WaitFor(2);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (Strings{"PUT H @", "PUT I @"}));
}

// Without a snapshot each member starts at its head, and a member that has sent nothing
// resumes from there: a change it makes meanwhile is not lost.
TEST_F(ClusterWatchTest, StartPositionsResumeMembersThatSentNothing) {
  ASSERT_NO_FATAL_FAILURE(Start());
  member(0).Put({"old"});
  member(2).Put({"old2"});
  Client client(*watch_, Request(false, /*start_position=*/true));
  EXPECT_EQ(client.WaitFor(1), (Strings{"start @"}));
  const std::string start = client.PositionOf(0);
  member(1).Put({"A"});
  EXPECT_EQ(client.WaitFor(2), (Strings{"start @", "PUT A @"}));
  const std::string after_a = client.PositionOf(1);
  client.Leave();
  member(1).Put({"B"});
  EXPECT_EQ(client.Wait(), absl::CancelledError("the client cancelled the stream"));

  member(2).Put({"C"});
  member(0).Put({"D"});
  v1::WatchRequest resume = Request(false);
  resume.set_from_position(after_a);
  Client resumed(*watch_, resume);
  Strings got = resumed.WaitFor(3);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (Strings{"PUT B @", "PUT C @", "PUT D @"}));

  resume.set_from_position(start);
  Client from_start(*watch_, resume);
  got = from_start.WaitFor(4);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (Strings{"PUT A @", "PUT B @", "PUT C @", "PUT D @"}));
}

TEST_F(ClusterWatchTest, FellBehindOnAMemberEndsAtTheClusterPosition) {
  WatchConfig tight;
  tight.max_lag_changes = 1;
  ASSERT_NO_FATAL_FAILURE(Start(tight));
  Client client(*watch_, Request(false, /*start_position=*/true));
  EXPECT_EQ(client.WaitFor(1), (Strings{"start @"}));
  const std::string start = client.PositionOf(0);
  member(0).Put({"A", "B", "C"});  // three changes in one commit: three behind at once
  EXPECT_EQ(client.Wait(), absl::AbortedError(
                               "watcher fell behind on cluster member 0; resume with "
                               "from_position set to the fell_behind event's position"));
  EXPECT_EQ(client.WaitFor(2), (Strings{"start @", "fell_behind @"}));
  // Member 0 had sent nothing: the position is the start.
  EXPECT_EQ(client.PositionOf(1), start);

  // A resumed stream may start that far behind.
  v1::WatchRequest resume = Request(false);
  resume.set_from_position(start);
  Client resumed(*watch_, resume);
  EXPECT_EQ(resumed.WaitFor(3), (Strings{"PUT A @", "PUT B @", "PUT C @"}));
}

// The merged stream holds at most max_stream_buffer_bytes of events its client has not taken:
// with a client that takes nothing, member 0's part blocks, and its hub's stalled-stream bound
// ends it, and the merged stream with it. (An unbounded buffer would take every change and
// leave the stream open.)
TEST_F(ClusterWatchTest, TheBufferIsBoundedSoAStalledClientIsCutOff) {
  WatchConfig hub0;
  hub0.stalled_stream_timeout_ms = 100;
  WatchConfig merged;
  merged.max_stream_buffer_bytes = 1;
  ASSERT_NO_FATAL_FAILURE(Start(hub0, 10000, merged));
  absl::Mutex mu;
  absl::Status ended;
  bool has_ended = false;
  int writes = 0;
  absl::Notification snapshot_done;
  WatchStream stalled{[&](const v1::WatchEvent& e) {
                        absl::MutexLock lock(&mu);
                        ++writes;
                        if (e.event_case() != v1::WatchEvent::kChange) {
                          snapshot_done.Notify();
                          return true;
                        }
                        // Reads nothing more (until a test without the bound gives up).
                        mu.AwaitWithTimeout(absl::Condition(&has_ended), absl::Seconds(5));
                        return false;
                      },
                      [] { return false; },
                      [&](const absl::Status& s) {
                        absl::MutexLock lock(&mu);
                        ended = s;
                        has_ended = true;
                      }};
  std::thread writer([&] {
    // After the snapshot: four changes, one commit each.
    snapshot_done.WaitForNotification();
    for (const char* name : {"A", "B", "C", "D"}) member(0).Put({name});
  });
  const absl::Status status = watch_->Run(Request(true), stalled, Clock::time_point::max());
  writer.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_TRUE(absl::StartsWith(status.message(),
                               "watch stream cut off: the client read nothing for 100 ms"))
      << status;
  absl::MutexLock lock(&mu);
  EXPECT_EQ(ended, status);
  EXPECT_EQ(writes, 2);  // snapshot_done, then the first change, which never returned
}

TEST_F(ClusterWatchTest, AMemberThatStopsEndsTheStreamNamingIt) {
  ASSERT_NO_FATAL_FAILURE(Start());
  Client client(*watch_, Request(true));
  EXPECT_EQ(client.WaitFor(1), (Strings{"done @"}));
  member(2).Stop();
  const absl::Status want = absl::UnavailableError(absl::StrCat(
      "cluster member 2 (", member(2).address,
      ") did not answer: the server is shutting down; resume with from_position on another "
      "server or after the restart",
      kEveryMemberNeeded));
  EXPECT_EQ(client.Wait(), want);
  EXPECT_EQ(client.ended(), want);  // what the client receives
  // Member 2 ended its stream; member 1's was cancelled by this side, which is no error.
  std::string metrics = metrics_->Render();
  EXPECT_NE(metrics.find("cdcview_cluster_fanout_errors_total{code=\"UNAVAILABLE\",peer=\"2\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_EQ(metrics.find("cdcview_cluster_fanout_errors_total{code=\"CANCELLED\""),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("cdcview_cluster_fanout_seconds_count{peer=\"1\"} 1"),
            std::string::npos)
      << metrics;

  // Down from the start: refused before any event.
  Client refused(*watch_, Request(true));
  absl::Status s = refused.Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StartsWith(
      s.message(), absl::StrCat("cluster member 2 (", member(2).address, ") did not answer: ")))
      << s;
  EXPECT_TRUE(absl::EndsWith(s.message(), kEveryMemberNeeded)) << s;
  EXPECT_EQ(refused.WaitFor(1), Strings{});
}

// A member whose Watch takes the call and sends nothing.
class SilentWatch final : public v1::ViewService::Service {
 public:
  grpc::Status Watch(grpc::ServerContext* ctx, const v1::WatchRequest*,
                     grpc::ServerWriter<v1::WatchEvent>*) override {
    while (!ctx->IsCancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return grpc::Status::CANCELLED;
  }
};

TEST_F(ClusterWatchTest, AMemberThatDoesNotAnswerEndsTheStreamAfterTheBound) {
  members_.push_back(std::make_unique<Member>(WatchConfig{}));
  members_.push_back(std::make_unique<Member>(WatchConfig{}));
  ASSERT_NO_FATAL_FAILURE(members_.back()->Serve());
  SilentWatch silent;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&silent);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  members_.push_back(std::make_unique<Member>(WatchConfig{}));
  members_.back()->address = absl::StrCat("127.0.0.1:", port);
  StartPeers(/*max_wait_ms=*/2000);

  const auto started = Clock::now();
  Client client(*watch_, Request(false));
  EXPECT_EQ(client.Wait(),
            absl::UnavailableError(absl::StrCat(
                "cluster member 2 (", members_[2]->address,
                ") did not answer: its Watch stream sent nothing within 2000 ms",
                kEveryMemberNeeded)));
  EXPECT_LT(Clock::now() - started, std::chrono::seconds(10));
  server->Shutdown();
}

TEST_F(ClusterWatchTest, PositionsOfAnotherKindAreRefused) {
  ASSERT_NO_FATAL_FAILURE(Start());
  v1::WatchRequest request = Request(false);
  request.set_from_position("nonsense");
  Client malformed(*watch_, request);
  EXPECT_EQ(malformed.Wait(),
            absl::InvalidArgumentError(
                "from_position is malformed; pass a WatchEvent.position unchanged, or watch "
                "again without from_position (with snapshot) to start over"));

  request.set_from_position(EncodeWatchPosition("ByG", "fp", 7));
  Client own(*watch_, request);
  EXPECT_EQ(own.Wait(), absl::InvalidArgumentError(
                            "from_position is one cluster member's own position (from a Watch "
                            "sent with x-cdcview-local-only); pass a position from a Watch of "
                            "the cluster, or watch again with snapshot"));

  request.set_from_position(EncodeClusterWatchPosition({"a", "b"}));
  Client resized(*watch_, request);
  EXPECT_EQ(resized.Wait(), absl::InvalidArgumentError(
                                "from_position was issued by a cluster of 2 members and this "
                                "one has 3, so partitions have moved between members: watch "
                                "again with snapshot"));
}

TEST(ClusterWatchPositionTest, RoundTrips) {
  const Strings positions = {"p0", std::string("p\0" "1", 3), "p2"};
  auto decoded = DecodeClusterWatchPosition(EncodeClusterWatchPosition(positions), 3);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, positions);
  std::string damaged = EncodeClusterWatchPosition(positions);
  damaged[3] ^= 1;
  EXPECT_EQ(DecodeClusterWatchPosition(damaged, 3).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeClusterWatchPosition(EncodeClusterWatchPosition({"a", "", "c"}), 3)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// Member 0's gRPC port: a call without the marker gets the cluster's stream, one with it
// (another member merging) member 0's own.
TEST_F(ClusterWatchTest, TheWatchHandlerMergesUnlessTheCallIsLocalOnly) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_NO_FATAL_FAILURE(member(0).Serve(watch_.get()));
  member(0).Put({"A"});
  member(1).Put({"B"});
  member(2).Put({"C"});
  auto stub = v1::ViewService::NewStub(
      grpc::CreateChannel(member(0).address, grpc::InsecureChannelCredentials()));
  auto read_snapshot = [&](bool local_only) {
    grpc::ClientContext ctx;
    if (local_only) ctx.AddMetadata(kLocalOnlyMetadata, "1");
    auto reader = stub->Watch(&ctx, Request(true));
    Strings got;
    v1::WatchEvent e;
    while (reader->Read(&e)) {
      got.push_back(Describe(e));
      if (e.has_snapshot_done()) break;
    }
    ctx.TryCancel();
    (void)reader->Finish();
    std::sort(got.begin(), got.end());
    return got;
  };
  EXPECT_EQ(read_snapshot(false), (Strings{"done @", "entry A", "entry B", "entry C"}));
  EXPECT_EQ(read_snapshot(true), (Strings{"done @", "entry A"}));
}

}  // namespace
}  // namespace cdcview
