#include "daemon/server/read_consistency.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/apply/applier.h"
#include "daemon/config/config.h"
#include "daemon/log/log.h"
#include "daemon/server/token_seal.h"
#include "daemon/server/view_reader.h"
#include "daemon/sources/record_queue.h"
#include "daemon/state/catalog.h"
#include "daemon/store/store.h"
#include "gtest/gtest.h"
#include "index_builders/coding.h"
#include "tests/fakes/fake_dead_letter_sink.h"
#include "tests/fakes/records.h"
#include "tests/fakes/temp_dir.h"
#include "tests/fakes/reader_fixture.h"
#include "tests/fakes/test_store.h"

namespace cdcview {
namespace {

using std::chrono::milliseconds;
using test::At;
using test::S;
using Kind = SourceConfig::Kind;

std::string Text(const absl::Status& status) { return std::string(status.message()); }

// Source 0 (Kafka, topic orders) and source 1 (file) feed App; source 2 (file) feeds Other.
constexpr char kConfigYaml[] = R"(
sources:
  - name: orders
    table: App
    kafka: { brokers: "127.0.0.1:9", topics: [orders], group: g }
  - name: sample
    table: App
    file: { path: unused.ndjson }
  - name: other
    table: Other
    file: { path: other.ndjson }
tables:
  - name: App
    key: { partition: PK }
    views:
      - name: ByDay
        partition_key: { attribute: day, type: S }
      - name: ByDayShards
        partition_key: { attribute: day, type: S }
        shards: { count: 4, suffix: "#{shard}" }
    aggregates:
      - name: PerDay
        group_by: { attribute: day, type: S }
        measures: [count]
  - name: Other
    key: { partition: PK }
)";

class ReadConsistencyTest : public test::ReaderFixture {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(OpenReader(kConfigYaml, [this] { return now_ms_.load(); },
                                       {&orders_, &sample_, &other_}));
    ASSERT_TRUE(applier_->RebuildViews().ok());
  }

  // One event of source `source` at partition/position, creating PK=pk in day `day`.
  void Apply(uint32_t source, std::string partition, std::string position, std::string pk,
             std::string day = "D", int64_t created_ms = 0) {
    std::vector<SourceRecord> batch = {test::Insert(
        config_.tables[source == 2 ? 1 : 0].key, {{"PK", S(pk)}, {"day", S(day)}},
        At(std::move(position)).Source(source).Partition(std::move(partition)).Created(created_ms))};
    ASSERT_TRUE(applier_->ApplyBatch(&batch).ok());
  }

  v1::QueryRequest Query(v1::ReadConsistency consistency) {
    v1::QueryRequest r;
    r.set_view("ByDay");
    r.mutable_partition_key()->set_s("D");
    *r.mutable_consistency() = std::move(consistency);
    return r;
  }
  static v1::ReadConsistency Kafka(const std::string& topic, int partition, int64_t offset) {
    v1::ReadConsistency c;
    auto* k = c.add_min_kafka_offsets();
    k->set_topic(topic);
    k->set_partition(partition);
    k->set_offset(offset);
    return c;
  }
  static v1::ReadConsistency Token(std::string token) {
    v1::ReadConsistency c;
    c.set_min_position(std::move(token));
    return c;
  }
  static v1::ReadConsistency Stale(double seconds) {
    v1::ReadConsistency c;
    c.set_max_staleness_seconds(seconds);
    return c;
  }
  static ViewReader::Deadline In(milliseconds ms) { return std::chrono::steady_clock::now() + ms; }

  test::FakeSourceHealth orders_{SourceState::kRunning}, sample_{SourceState::kRunning},
      other_{SourceState::kRunning};
  std::atomic<int64_t> now_ms_{0};
};

TEST(PositionReachedTest, ComparesPositionsPerSourceKind) {
  auto reached = [](Kind kind, std::string partition, std::string applied, std::string wanted) {
    auto r = PositionReached(kind, partition, applied, wanted);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() && *r;
  };
  EXPECT_TRUE(reached(Kind::kKafka, "t/0", "57", "57"));
  EXPECT_TRUE(reached(Kind::kKafka, "t/0", "100", "57"));  // numeric, not text, order
  EXPECT_FALSE(reached(Kind::kKafka, "t/0", "41", "57"));
  EXPECT_FALSE(reached(Kind::kKafka, "t/0", "", "1"));  // a partition not seen yet
  EXPECT_TRUE(reached(Kind::kFile, "", "1200:31", "999:30"));
  EXPECT_FALSE(reached(Kind::kFile, "", "999:30", "1200:31"));
  // After a truncation or rotation the offset starts again, one generation up.
  EXPECT_TRUE(reached(Kind::kFile, "", "10:2:1:77", "1200:31:0:76"));
  EXPECT_FALSE(reached(Kind::kFile, "", "1200:31:0:76", "10:2:1:77"));
  EXPECT_TRUE(reached(Kind::kFile, "", "1200:31:0:76", "999:30"));
  EXPECT_TRUE(reached(Kind::kFile, "", "1200:31:0:76", "1200:31:0:76"));
  EXPECT_FALSE(reached(Kind::kFile, "", "1200:31", "10:2:1:77"));
  EXPECT_TRUE(reached(Kind::kDynamoDb, "shard-1", "TRIM_HORIZON", ""));
  EXPECT_TRUE(reached(Kind::kDynamoDb, "shard-1", "TRIM_HORIZON", "TRIM_HORIZON"));
  EXPECT_FALSE(reached(Kind::kDynamoDb, "shard-1", "TRIM_HORIZON", "100"));
  EXPECT_TRUE(reached(Kind::kDynamoDb, "shard-1", "100000000000000000000000000000", "99999999999999999999999"));
  EXPECT_FALSE(reached(Kind::kDynamoDb, "shard-1", "99999999999999999999999", "100000000000000000000000000000"));
  EXPECT_TRUE(reached(Kind::kDynamoDb, "shard-1", "END", "99999999999999999999999"));
  EXPECT_FALSE(reached(Kind::kDynamoDb, "shard-1", "99999999999999999999999", "END"));
  EXPECT_TRUE(reached(Kind::kDynamoDb, "scan/0", "DONE", "{\"PK\":{\"S\":\"a\"}}"));
  EXPECT_TRUE(reached(Kind::kDynamoDb, "scan/0", "{\"PK\":{\"S\":\"a\"}}", "{\"PK\":{\"S\":\"a\"}}"));
  EXPECT_FALSE(reached(Kind::kDynamoDb, "scan/0", "{\"PK\":{\"S\":\"b\"}}", "{\"PK\":{\"S\":\"a\"}}"));
  EXPECT_TRUE(reached(Kind::kDynamoDb, "snapshot", "done", "started"));
  EXPECT_TRUE(reached(Kind::kDynamoDb, "snapshot", "started", "started"));
  EXPECT_FALSE(reached(Kind::kDynamoDb, "snapshot", "started", "done"));
  EXPECT_TRUE(reached(Kind::kDynamoDb, "trimmed", "", "shard s of arn: records were trimmed"));

  EXPECT_EQ(Text(PositionReached(Kind::kKafka, "t/0", "1", "x1").status()),
            "position \"x1\" of partition \"t/0\" is not a Kafka next offset");
  EXPECT_EQ(Text(PositionReached(Kind::kFile, "", "1:1", "12").status()),
            "position \"12\" of partition \"\" is not a file position <byte "
            "offset>:<line>:<generation>:<inode>");
  EXPECT_EQ(Text(PositionReached(Kind::kFile, "", "1:1", "1:2:3").status()),
            "position \"1:2:3\" of partition \"\" is not a file position <byte "
            "offset>:<line>:<generation>:<inode>");
  EXPECT_EQ(Text(PositionReached(Kind::kDynamoDb, "s", "1", "LATEST").status()),
            "position \"LATEST\" of partition \"s\" is not a DynamoDB shard position "
            "(TRIM_HORIZON, a sequence number, END)");
  EXPECT_EQ(Text(PositionReached(Kind::kDynamoDb, "snapshot", "", "halfway").status()),
            "position \"halfway\" of partition \"snapshot\" is not a snapshot marker "
            "(started, done)");
}

// A token taken during a backfill carries the Scan segments' LastEvaluatedKeys; waiting for
// them would hold every read until the Scan ends, so only the stream shards are required.
TEST(RequirementsForTest, DynamoDbScanSegmentsAreNotAwaited) {
  absl::StatusOr<Config> config = ParseConfig(
      "sources:\n"
      "  - name: app\n"
      "    table: App\n"
      "    dynamodb: { table_name: App, region: eu-west-1, snapshot: scan, scan_segments: 2 }\n"
      "tables: [ { name: App, key: { partition: PK } } ]\n",
      "t.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  v1::AppliedPosition applied;
  auto add = [&](std::string partition, std::string position) {
    auto* e = applied.add_entries();
    e->set_source("app");
    e->set_partition(std::move(partition));
    e->set_position(std::move(position));
  };
  add("scan/0", "{\"PK\":{\"S\":\"k17\"}}");
  add("scan/1", "DONE");
  add("snapshot", "started");
  add("trimmed", "shard shardId-0000 of arn: stream records were trimmed before they were read");
  add("shardId-0001", "4200");
  v1::ReadConsistency consistency;
  consistency.set_min_position(EncodePositionToken(applied));
  auto requirements = RequirementsFor(consistency, *config, 0);
  ASSERT_TRUE(requirements.ok()) << requirements.status();
  ASSERT_EQ(requirements->size(), 1u);
  EXPECT_EQ((*requirements)[0].partition, "shardId-0001");
  EXPECT_EQ((*requirements)[0].position, "4200");
  EXPECT_TRUE(IsScanPartition(Kind::kDynamoDb, "scan/3"));
  EXPECT_FALSE(IsScanPartition(Kind::kKafka, "scan/3"));  // a Kafka topic may be called scan
  EXPECT_TRUE(IsMarkerPartition(Kind::kDynamoDb, "snapshot"));
  EXPECT_TRUE(IsMarkerPartition(Kind::kDynamoDb, "trimmed"));
  EXPECT_FALSE(IsMarkerPartition(Kind::kDynamoDb, "shardId-0001"));
  EXPECT_FALSE(IsMarkerPartition(Kind::kKafka, "snapshot"));
}

TEST_F(ReadConsistencyTest, EveryResponseCarriesATokenOfItsAppliedPositions) {
  Apply(0, "orders/0", "57", "a");
  Apply(1, "", "120:4", "b");
  auto response = reader_->Query(Query({}));
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->applied().entries_size(), 2);
  auto decoded = DecodePositionToken(response->applied().token());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ((*decoded)[i].source(), response->applied().entries(i).source());
    EXPECT_EQ((*decoded)[i].partition(), response->applied().entries(i).partition());
    EXPECT_EQ((*decoded)[i].position(), response->applied().entries(i).position());
  }
  EXPECT_EQ((*decoded)[0].position(), "57");
  EXPECT_EQ((*decoded)[1].position(), "120:4");
  v1::GetItemRequest get;
  get.set_table("App");
  (*get.mutable_key()->mutable_attributes())["PK"].set_s("a");
  auto item = reader_->GetItem(get);
  ASSERT_TRUE(item.ok());
  EXPECT_EQ(item->applied().token(), response->applied().token());
}

// A sealed position token of version 1 whose body claims `count` entries and continues with
// `rest`.
std::string ForgedToken(uint64_t count, std::string rest) {
  std::string body = "cp\x01";
  PutVarint(count, &body);
  return SealToken(body + rest);
}

TEST(DecodePositionTokenTest, ACountTheBytesCannotHoldIsRefusedBeforeAnythingIsSized) {
  // 10^7 entries claimed in 30 bytes.
  std::string token = ForgedToken(10'000'000, std::string(30, '\0'));
  ASSERT_EQ(token.size(), 3u + 4 + 30 + 4);
  EXPECT_EQ(Text(DecodePositionToken(token).status()),
            "consistency.min_position: a token of 41 bytes claims 10000000 entries; it holds at "
            "most 10; pass AppliedPosition.token from an earlier response unchanged");
  // As many entries as bytes (what the old check let through): each entry needs three.
  token = ForgedToken(3000, std::string(3000, '\0'));
  EXPECT_EQ(Text(DecodePositionToken(token).status()),
            "consistency.min_position: a token of 3009 bytes claims 3000 entries; it holds at "
            "most 1000; pass AppliedPosition.token from an earlier response unchanged");
  EXPECT_TRUE(absl::IsInvalidArgument(DecodePositionToken(token).status()));
  // Exactly as many as fit: three empty strings each.
  auto decoded = DecodePositionToken(ForgedToken(1000, std::string(3000, '\0')));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->size(), 1000u);
}

TEST(DecodePositionTokenTest, ATokenLargerThanTheLimitIsRefusedUnread) {
  v1::AppliedPosition applied;
  auto* e = applied.add_entries();
  e->set_source("orders");
  e->set_partition("orders/0");
  e->set_position(std::string(100, '7'));
  const std::string token = EncodePositionToken(applied);
  ASSERT_TRUE(DecodePositionToken(token, token.size()).ok());
  EXPECT_EQ(Text(DecodePositionToken(token, token.size() - 1).status()),
            absl::StrCat("consistency.min_position: a token of ", token.size(),
                         " bytes is larger than any this daemon gives (at most ",
                         token.size() - 1,
                         "); pass AppliedPosition.token from an earlier response unchanged"));
  // Checked first: garbage of that size is refused for its size, not parsed.
  EXPECT_EQ(Text(DecodePositionToken(std::string(kPositionTokenFloor + 1, 'x')).status()),
            "consistency.min_position: a token of 65537 bytes is larger than any this daemon "
            "gives (at most 65536); pass AppliedPosition.token from an earlier response "
            "unchanged");
}

TEST(PositionTokenSizeTest, IsTheSizeOfTheEncodedToken) {
  PositionMap positions;
  v1::AppliedPosition applied;
  EXPECT_EQ(PositionTokenSize(positions), EncodePositionToken(applied).size());
  for (int i = 0; i < 200; ++i) {  // a two-byte count, and two-byte lengths below
    std::string partition = absl::StrCat("shardId-", i), position(i * 3, '9');
    positions[{"app", partition}] = position;
    auto* e = applied.add_entries();
    e->set_source("app");
    e->set_partition(partition);
    e->set_position(position);
  }
  EXPECT_EQ(PositionTokenSize(positions), EncodePositionToken(applied).size());
  EXPECT_EQ(PositionTokenLimit(100), kPositionTokenFloor);
  EXPECT_EQ(PositionTokenLimit(50'000), 100'000u);
}

// A read takes tokens up to twice the size of the reader's own (at least the floor): one from
// a replica that stored a few more partitions is still read.
TEST_F(ReadConsistencyTest, TheTokenLimitFollowsTheStoredPositions) {
  Apply(0, "orders/0", "57", "a");
  // Offset 57, written with 40,000 leading zeros: two such entries make a token of over
  // 80,000 bytes.
  const std::string long_57 = std::string(40'000, '0') + "57";
  v1::AppliedPosition ahead;
  for (int i = 0; i < 2; ++i) {
    auto* e = ahead.add_entries();
    e->set_source("orders");
    e->set_partition("orders/0");
    e->set_position(long_57);
  }
  const std::string token = EncodePositionToken(ahead);
  ASSERT_GT(token.size(), 80'000u);
  EXPECT_EQ(Text(reader_->Query(Query(Token(token)), In(milliseconds(50))).status()),
            absl::StrCat("consistency.min_position: a token of ", token.size(),
                         " bytes is larger than any this daemon gives (at most 65536); pass "
                         "AppliedPosition.token from an earlier response unchanged"));
  // Once this reader stores a position over half that long, its own token could be as large.
  Apply(0, "orders/0", std::string(40'100, '0') + "58", "b");
  EXPECT_TRUE(reader_->Query(Query(Token(token)), In(milliseconds(50))).ok());
}

TEST_F(ReadConsistencyTest, MalformedTokensAreRejectedWithWhatToDo) {
  Apply(0, "orders/0", "57", "a");
  std::string token = reader_->Query(Query({}))->applied().token();
  std::string damaged = token;
  damaged[4] ^= 0x20;
  EXPECT_EQ(Text(reader_->Query(Query(Token(damaged))).status()),
            "consistency.min_position is malformed; pass AppliedPosition.token from an earlier "
            "response unchanged");
  EXPECT_EQ(Text(reader_->Query(Query(Token(token.substr(0, token.size() - 1)))).status()),
            "consistency.min_position is malformed; pass AppliedPosition.token from an earlier "
            "response unchanged");
  const std::string not_a_token =
      "consistency.min_position is not a position token; pass AppliedPosition.token from an "
      "earlier response (not a page token), unchanged";
  EXPECT_EQ(Text(reader_->Query(Query(Token("xyz"))).status()), not_a_token);
  EXPECT_EQ(Text(reader_->Query(Query(Token(EncodePageToken("fp", false, "k")))).status()),
            not_a_token);
  EXPECT_TRUE(absl::IsInvalidArgument(reader_->Query(Query(Token("xyz"))).status()));

  v1::AppliedPosition foreign;
  auto* e = foreign.add_entries();
  e->set_source("nope");
  e->set_partition("p");
  e->set_position("1");
  EXPECT_EQ(Text(reader_->Query(Query(Token(EncodePositionToken(foreign)))).status()),
            "consistency.min_position names source \"nope\", which this server does not read "
            "(sources: orders, sample, other); pass a token from a server with the same sources");
  e->set_source("orders");
  e->set_partition("orders/0");
  e->set_position("soon");
  EXPECT_EQ(Text(reader_->Query(Query(Token(EncodePositionToken(foreign)))).status()),
            "consistency.min_position: source orders: position \"soon\" of partition "
            "\"orders/0\" is not a Kafka next offset");
}

TEST_F(ReadConsistencyTest, SatisfiedPositionAnswersAtOnce) {
  Apply(0, "orders/0", "57", "a");
  std::string token = reader_->Query(Query({}))->applied().token();
  auto start = std::chrono::steady_clock::now();
  auto response = reader_->Query(Query(Token(token)), In(milliseconds(5000)));
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->entries_size(), 1);
  EXPECT_TRUE(reader_->Query(Query(Kafka("orders", 0, 56)), In(milliseconds(5000))).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1000));
}

TEST_F(ReadConsistencyTest, WaitsForALaterCommit) {
  Apply(0, "orders/0", "41", "a");
  std::thread writer([this] {
    std::this_thread::sleep_for(milliseconds(100));
    Apply(0, "orders/0", "50", "b");  // not enough yet
    std::this_thread::sleep_for(milliseconds(100));
    Apply(0, "orders/0", "57", "c");
  });
  auto response = reader_->Query(Query(Kafka("orders", 0, 56)), In(milliseconds(10000)));
  writer.join();
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->entries_size(), 3);  // c's write is visible: read-your-writes
  EXPECT_EQ(response->applied().entries(0).position(), "57");
}

TEST_F(ReadConsistencyTest, TimesOutNamingWhatIsNotApplied) {
  Apply(0, "orders/0", "41", "a");
  v1::AppliedPosition ahead;
  auto* e = ahead.add_entries();
  e->set_source("orders");
  e->set_partition("orders/0");
  e->set_position("57");
  auto start = std::chrono::steady_clock::now();
  absl::Status s = reader_->Query(Query(Token(EncodePositionToken(ahead))), In(milliseconds(300))).status();
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(300));
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_EQ(Text(s),
            "view ByDay: min_position not applied before the deadline: source orders partition "
            "orders/0: applied up to 41, waiting for 57");
  s = reader_->Query(Query(Kafka("orders", 3, 9)), In(milliseconds(50))).status();
  EXPECT_EQ(Text(s),
            "view ByDay: min_position not applied before the deadline: source orders partition "
            "orders/3: nothing applied yet, waiting for offset 9");
  // The file source's single partition has no name.
  e->set_source("sample");
  e->set_partition("");
  e->set_position("500:9");
  s = reader_->Query(Query(Token(EncodePositionToken(ahead))), In(milliseconds(50))).status();
  EXPECT_EQ(Text(s),
            "view ByDay: min_position not applied before the deadline: source sample: nothing "
            "applied yet, waiting for 500:9");
}

TEST_F(ReadConsistencyTest, SourceInErrorIsUnavailable) {
  Apply(0, "orders/0", "41", "a");
  orders_.Set(SourceState::kError, "broker 127.0.0.1:9 unreachable; check kafka.brokers");
  auto start = std::chrono::steady_clock::now();
  absl::Status s = reader_->Query(Query(Kafka("orders", 0, 56)), In(milliseconds(5000))).status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1000));
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_EQ(Text(s),
            "view ByDay: consistency cannot be reached (source orders partition orders/0: "
            "applied up to 41, waiting for offset 56) because source orders is in error: broker "
            "127.0.0.1:9 unreachable; check kafka.brokers");
  // Already applied: an error does not matter to what is already there.
  EXPECT_TRUE(reader_->Query(Query(Kafka("orders", 0, 40)), In(milliseconds(5000))).ok());
}

TEST_F(ReadConsistencyTest, SourceFallingIntoErrorWhileWaitedForIsUnavailable) {
  std::thread breaker([this] {
    std::this_thread::sleep_for(milliseconds(100));
    orders_.Set(SourceState::kError, "lost");
  });
  absl::Status s = reader_->Query(Query(Kafka("orders", 0, 1)), In(milliseconds(5000))).status();
  breaker.join();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
}

TEST_F(ReadConsistencyTest, AWaitEndsWhenTheWriterStops) {
  Apply(0, "orders/0", "41", "a");
  std::thread stopper([this] {
    std::this_thread::sleep_for(milliseconds(100));
    Apply(0, "orders/0", "50", "b");  // the last commit
    published_->SetWriterStopped();
  });
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = reader_->Query(Query(Kafka("orders", 0, 56)), In(milliseconds(60000))).status();
  // Answered when the writer stopped, not at the deadline.
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(30000));
  stopper.join();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_EQ(Text(s),
            "view ByDay: consistency cannot be reached here (source orders partition orders/0: "
            "applied up to 50, waiting for offset 56) because cdcviewd is shutting down and "
            "applies nothing more; retry against another replica or after its restart");
  // What was applied before the stop is answered as before, without a request deadline too.
  auto applied = reader_->Query(Query(Kafka("orders", 0, 49)));
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(applied->entries_size(), 2);
}

TEST_F(ReadConsistencyTest, KafkaTopicsAndOtherTables) {
  EXPECT_EQ(Text(reader_->Query(Query(Kafka("payments", 0, 1))).status()),
            "consistency.min_kafka_offsets: no source reads topic \"payments\" (topics read: "
            "orders)");
  EXPECT_EQ(Text(reader_->Query(Query(Kafka("orders", -1, 1))).status()),
            "consistency.min_kafka_offsets: topic orders partition -1 offset 1: partition and "
            "offset must not be negative");
  // A position of another table's source does not hold up this view's reads.
  v1::AppliedPosition elsewhere;
  auto* e = elsewhere.add_entries();
  e->set_source("other");
  e->set_position("99999:99");
  EXPECT_TRUE(reader_->Query(Query(Token(EncodePositionToken(elsewhere))), In(milliseconds(100))).ok());
  v1::GetItemRequest get;
  get.set_table("Other");
  (*get.mutable_key()->mutable_attributes())["PK"].set_s("x");
  *get.mutable_consistency() = Token(EncodePositionToken(elsewhere));
  EXPECT_EQ(Text(reader_->GetItem(get, In(milliseconds(50))).status()),
            "table Other: min_position not applied before the deadline: source other: nothing "
            "applied yet, waiting for 99999:99");
}

TEST_F(ReadConsistencyTest, MaxStalenessBothWays) {
  // Sources with nothing to read; orders is the one that counts.
  sample_.Set(SourceState::kCaughtUp);
  other_.Set(SourceState::kCaughtUp);
  now_ms_ = 20000;
  // Running and nothing applied since start: how far behind is not known, so not fresh.
  EXPECT_EQ(Text(reader_->Query(Query(Stale(5))).status()),
            "view ByDay cannot be shown fresh: source orders has applied no batch since the "
            "daemon started; max_staleness_seconds is 5");
  Apply(0, "orders/0", "1", "a", "D", 7700);  // 12.3 s old when committed
  auto s = reader_->Query(Query(Stale(5))).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_EQ(Text(s), "view ByDay is 12.3 s behind (source orders); max_staleness_seconds is 5");
  EXPECT_TRUE(reader_->Query(Query(Stale(12.5))).ok());
  v1::ScanRequest scan;
  scan.set_view("ByDay");
  *scan.mutable_consistency() = Stale(2.5);
  EXPECT_EQ(Text(reader_->Scan(scan).status()),
            "view ByDay is 12.3 s behind (source orders); max_staleness_seconds is 2.5");
  // So do aggregate reads, against the aggregate's table.
  v1::GetAggregateRequest per_day;
  per_day.set_aggregate("PerDay");
  per_day.mutable_group()->set_s("D");
  *per_day.mutable_consistency() = Stale(5);
  EXPECT_EQ(Text(reader_->GetAggregate(per_day).status()),
            "aggregate PerDay is 12.3 s behind (source orders); max_staleness_seconds is 5");
  v1::ListAggregatesRequest list;
  list.set_aggregate("PerDay");
  *list.mutable_consistency() = Stale(5);
  EXPECT_EQ(Text(reader_->ListAggregates(list).status()),
            "aggregate PerDay is 12.3 s behind (source orders); max_staleness_seconds is 5");
  *per_day.mutable_consistency() = Stale(13);
  ASSERT_TRUE(reader_->GetAggregate(per_day).ok());
  EXPECT_EQ(reader_->GetAggregate(per_day)->members(), 1u);
  // A sharded view's merged read checks it too.
  v1::QueryRequest merged = Query(Stale(5));
  merged.set_view("ByDayShards");
  EXPECT_EQ(Text(reader_->Query(merged).status()),
            "view ByDayShards is 12.3 s behind (source orders); max_staleness_seconds is 5");
  // Caught up: its last batch's lag is history, as for readiness.
  orders_.Set(SourceState::kCaughtUp);
  EXPECT_TRUE(reader_->Query(Query(Stale(5))).ok());
  sample_.Set(SourceState::kError, "cannot open unused.ndjson");
  EXPECT_EQ(Text(reader_->Query(Query(Stale(5))).status()),
            "view ByDay cannot be shown fresh: source sample is in error (cannot open "
            "unused.ndjson); max_staleness_seconds is 5");
  // Other's only source is fine; App's sources do not matter to it.
  v1::GetItemRequest get;
  get.set_table("Other");
  (*get.mutable_key()->mutable_attributes())["PK"].set_s("x");
  *get.mutable_consistency() = Stale(1);
  EXPECT_TRUE(reader_->GetItem(get).ok());
  // A snapshot scan's items carry no creation time: the table is partial until it ends.
  other_.Set(SourceState::kBackfilling);
  EXPECT_EQ(Text(reader_->GetItem(get).status()),
            "table Other cannot be shown fresh: source other is backfilling (a snapshot scan); "
            "max_staleness_seconds is 1");
  other_.Set(SourceState::kCaughtUp);
  EXPECT_EQ(Text(reader_->Query(Query(Stale(-1))).status()),
            "consistency.max_staleness_seconds is -1; give a bound in seconds (>= 0; 0: no bound)");
}

// A source that stops delivering without an error is not fresh forever; one that says it is
// caught up is not while its records wait in the queue or in a batch the writer retries.
TEST_F(ReadConsistencyTest, StalenessGrowsWhileNothingIsCommittedAndCountsUnappliedRecords) {
  sample_.Set(SourceState::kCaughtUp);
  now_ms_ = 20000;
  Apply(0, "orders/0", "1", "a", "D", 18000);  // 2 s old when committed
  EXPECT_TRUE(reader_->Query(Query(Stale(5))).ok());
  now_ms_ = 50000;  // running, and nothing committed for 30 s
  EXPECT_EQ(Text(reader_->Query(Query(Stale(5))).status()),
            "view ByDay is 32.0 s behind (source orders); max_staleness_seconds is 5");

  orders_.Set(SourceState::kCaughtUp);  // idle: fresh
  EXPECT_TRUE(reader_->Query(Query(Stale(5))).ok());
  RecordQueue queue(10);
  applier_->WatchQueue(&queue);
  ASSERT_TRUE(queue.Push(test::Insert(config_.tables[0].key, {{"PK", S("b")}, {"day", S("D")}},
                                      At("2").Source(0).Partition("orders/0"))));
  EXPECT_EQ(queue.Queued(0), 1u);
  EXPECT_EQ(queue.Queued(1), 0u);
  EXPECT_TRUE(published_->HasUnapplied(0));
  EXPECT_FALSE(published_->HasUnapplied(1));
  EXPECT_EQ(Text(reader_->Query(Query(Stale(5))).status()),
            "view ByDay is 32.0 s behind (source orders); max_staleness_seconds is 5");

  // Popped, and its batch fails (a dead letter of source 1 cannot be written): still unapplied.
  std::vector<SourceRecord> batch;
  ASSERT_TRUE(queue.PopBatch(10, milliseconds(0), &batch));
  EXPECT_EQ(queue.Queued(0), 0u);
  batch.push_back(test::Rejected(absl::InvalidArgumentError("line 3: malformed JSON"),
                                 "malformed_json", At("3:3").Source(1)));
  sink_.FailWith(absl::UnavailableError("disk full"));
  ASSERT_FALSE(applier_->ApplyBatch(&batch).ok());
  EXPECT_TRUE(published_->HasUnapplied(0));
  EXPECT_TRUE(published_->HasUnapplied(1));
  // Both are behind now; sample never committed anything since start, so its lag is unknown
  // (not the 50 s since start), whatever the bound.
  EXPECT_EQ(Text(reader_->Query(Query(Stale(5))).status()),
            "view ByDay cannot be shown fresh: source sample has applied no batch since the "
            "daemon started; max_staleness_seconds is 5");
  EXPECT_EQ(Text(reader_->Query(Query(Stale(1e6))).status()),
            "view ByDay cannot be shown fresh: source sample has applied no batch since the "
            "daemon started; max_staleness_seconds is 1e+06");
  sink_.FailWith(absl::OkStatus());
  ASSERT_TRUE(applier_->ApplyBatch(&batch).ok());
  EXPECT_FALSE(published_->HasUnapplied(0));
  EXPECT_TRUE(reader_->Query(Query(Stale(5))).ok());
  EXPECT_EQ(published_->Counters(0).last_commit_ms, 50000);
}

TEST_F(ReadConsistencyTest, AwaitConsistencyIsReusableForOtherReads) {
  Apply(0, "orders/0", "57", "a");
  EXPECT_TRUE(reader_->AwaitConsistency(Kafka("orders", 0, 56), 0, "aggregate Likes",
                                        In(milliseconds(100))).ok());
  EXPECT_EQ(Text(reader_->AwaitConsistency(Kafka("orders", 0, 57), 0, "aggregate Likes",
                                           In(milliseconds(50)))),
            "aggregate Likes: min_position not applied before the deadline: source orders "
            "partition orders/0: applied up to 57, waiting for offset 57");
}

// ---- Hot keys ----

std::string Describe(const google::protobuf::RepeatedPtrField<v1::HotKey>& keys) {
  std::string out;
  for (const v1::HotKey& k : keys) {
    absl::StrAppend(&out, k.key().s(), " ", k.writes_per_second(), "/s ", k.share(), " +-",
                    k.error_bound(), "; ");
  }
  return out;
}

TEST_F(ReadConsistencyTest, HotKeysPerViewTableAndLogicalKey) {
  now_ms_ = 1000;
  int n = 0;
  auto put = [&](const std::string& day, int times) {
    for (int i = 0; i < times; ++i) {
      ++n;
      Apply(1, "", absl::StrCat(n, ":1"), absl::StrCat("I", n), day);
    }
  };
  put("DAY#1#0", 4);
  put("DAY#1#1", 3);
  put("DAY#X", 2);
  put("DAY#1#9", 1);  // shard 9 of 4: not a shard suffix, a key of its own
  Apply(1, "", "100:1", "I1", "DAY#X");  // I1 moves: a delete in DAY#1#0 and a put in DAY#X
  now_ms_ = 11000;

  v1::GetHotKeysRequest request;
  request.set_view("ByDayShards");
  auto r = reader_->GetHotKeys(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->window_seconds(), 10);
  EXPECT_DOUBLE_EQ(r->total_writes_per_second(), 1.2);
  EXPECT_EQ(Describe(r->keys()),
            "DAY#1#0 0.5/s 0.416667 +-0; DAY#1#1 0.3/s 0.25 +-0; DAY#X 0.3/s 0.25 +-0; "
            "DAY#1#9 0.1/s 0.0833333 +-0; ");
  EXPECT_EQ(r->shard_count(), 4u);
  EXPECT_EQ(Describe(r->logical_keys()),
            "DAY#1 0.8/s 0.666667 +-0; DAY#X 0.3/s 0.25 +-0; DAY#1#9 0.1/s 0.0833333 +-0; ");
  request.set_limit(1);
  EXPECT_EQ(Describe(reader_->GetHotKeys(request)->keys()), "DAY#1#0 0.5/s 0.416667 +-0; ");
  EXPECT_EQ(Describe(reader_->GetHotKeys(request)->logical_keys()), "DAY#1 0.8/s 0.666667 +-0; ");

  v1::GetHotKeysRequest table;
  table.set_table("App");
  r = reader_->GetHotKeys(table);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->total_writes_per_second(), 1.1);  // 11 applied events
  EXPECT_EQ(r->keys(0).key().s(), "I1");
  EXPECT_DOUBLE_EQ(r->keys(0).writes_per_second(), 0.2);
  EXPECT_EQ(r->keys_size(), 10);
  EXPECT_EQ(r->shard_count(), 0u);

  table.set_table("Nope");
  EXPECT_EQ(Text(reader_->GetHotKeys(table).status()),
            "table \"Nope\" does not exist (tables: App, Other)");
  request.set_view("Nope");
  EXPECT_EQ(Text(reader_->GetHotKeys(request).status()),
            "view \"Nope\" does not exist (views: ByDay, ByDayShards)");
  request.set_table("App");
  EXPECT_EQ(Text(reader_->GetHotKeys(request).status()),
            "GetHotKeys: set exactly one of view and table (a view's entry partition keys, or a "
            "table's item partition keys)");
}

TEST_F(ReadConsistencyTest, HotKeysBeforeAnyWriteAreZeroNotNaN) {
  now_ms_ = 5000;
  v1::GetHotKeysRequest request;
  request.set_view("ByDayShards");
  auto r = reader_->GetHotKeys(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->window_seconds(), 0.0);
  EXPECT_EQ(r->total_writes_per_second(), 0.0);
  EXPECT_EQ(r->keys_size(), 0);
  EXPECT_EQ(r->logical_keys_size(), 0);
  v1::GetHotKeysRequest table;
  table.set_table("App");
  r = reader_->GetHotKeys(table);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->total_writes_per_second(), 0.0);
}

// Once the sketch is full, a shard without a counter may have had up to the windows' smallest
// count: a logical key's sum adds that for each absent shard, so it stays an upper bound.
TEST_F(ReadConsistencyTest, LogicalHotKeysCountAbsentShardsAtTheirMost) {
  now_ms_ = 1000;
  int n = 0;
  auto put = [&](const std::string& day) {
    ++n;
    Apply(1, "", absl::StrCat(n, ":1"), absl::StrCat("I", n), day);
  };
  for (int i = 0; i < 10; ++i) put("DAY#1#0");
  // 64 more keys: the 64th finds the 64 counters in use and takes over one holding 1.
  for (int i = 0; i < 64; ++i) put(absl::StrCat("K", i));
  now_ms_ = 11000;
  v1::GetHotKeysRequest request;
  request.set_view("ByDayShards");
  request.set_limit(1);
  auto r = reader_->GetHotKeys(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Describe(r->keys()), "DAY#1#0 1/s 0.135135 +-0; ");
  // Shards 1..3 have no counter: each may have had 1 write. 10 + 3 = 13 of 74.
  EXPECT_EQ(Describe(r->logical_keys()), "DAY#1 1.3/s 0.175676 +-3; ");
}

TEST(WaitDeadlineTest, AWaitGivesUpATenthBeforeTheCallsDeadlineAtMost200Ms) {
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  const auto now = std::chrono::steady_clock::time_point(seconds(1000));
  EXPECT_EQ(WaitDeadline(now + seconds(30), now), now + seconds(30) - milliseconds(200));
  EXPECT_EQ(WaitDeadline(now + seconds(1), now), now + milliseconds(900));
  EXPECT_EQ(WaitDeadline(now + milliseconds(50), now), now + milliseconds(45));
  EXPECT_EQ(WaitDeadline(now, now), now);
  EXPECT_EQ(WaitDeadline(now - seconds(1), now), now - seconds(1));
}

}  // namespace
}  // namespace cdcview
