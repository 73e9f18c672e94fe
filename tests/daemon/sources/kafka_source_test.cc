// KafkaSource against librdkafka's in-process mock cluster: consuming, stored positions,
// seeking on (re)assignment, rejections, back-pressure, offset commits, dead-letter topic,
// broker outage. The real-broker tests are in tests/integration/test_kafka.py.
#include "daemon/sources/kafka_source.h"

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cdcview/v1/change_event.pb.h"
#include "daemon/sources/record_queue.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"

namespace cdcview {
namespace {

using std::chrono::milliseconds;

// Waits (at most 30 s, so a hang fails instead of blocking) until `done` holds.
bool WaitFor(const std::function<bool()>& done, int seconds = 30) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

std::string Record(const std::string& pk, int n, bool with_time = true) {
  return R"({"eventName":"INSERT","dynamodb":{"Keys":{"PK":{"S":")" + pk +
         R"("}},"NewImage":{"PK":{"S":")" + pk + R"("},"n":{"N":")" + std::to_string(n) +
         R"("}},"SequenceNumber":")" + std::to_string(n + 1) + "\"" +
         (with_time ? R"(,"ApproximateCreationDateTime":1740787200)" : "") + "}}";
}

// A mock cluster with one broker, and a producer to fill its topics.
class MockKafka {
 public:
  MockKafka() {
    char error[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "client.id", "mock-owner", error, sizeof error);
    owner_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, error, sizeof error);
    cluster_ = rd_kafka_mock_cluster_new(owner_, 1);
    bootstrap_ = rd_kafka_mock_cluster_bootstraps(cluster_);
    conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap_.c_str(), error, sizeof error);
    rd_kafka_conf_set(conf, "linger.ms", "0", error, sizeof error);
    producer_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, error, sizeof error);
  }
  ~MockKafka() {
    rd_kafka_destroy(producer_);
    rd_kafka_mock_cluster_destroy(cluster_);
    rd_kafka_destroy(owner_);
  }

  void CreateTopic(const std::string& topic, int partitions) {
    ASSERT_EQ(rd_kafka_mock_topic_create(cluster_, topic.c_str(), partitions, 1),
              RD_KAFKA_RESP_ERR_NO_ERROR);
  }

  // Produces and waits for the acknowledgement. `value` nullptr: a null value.
  void Produce(const std::string& topic, int partition, const std::string& key,
               const std::string* value, int64_t timestamp_ms = 0) {
    rd_kafka_resp_err_t err = rd_kafka_producev(
        producer_, RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(partition),
        RD_KAFKA_V_KEY(key.data(), key.size()),
        RD_KAFKA_V_VALUE(value ? const_cast<char*>(value->data()) : nullptr,
                         value ? value->size() : 0),
        RD_KAFKA_V_TIMESTAMP(timestamp_ms), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_END);
    ASSERT_EQ(err, RD_KAFKA_RESP_ERR_NO_ERROR);
    ASSERT_EQ(rd_kafka_flush(producer_, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
  }
  void Produce(const std::string& topic, int partition, const std::string& key,
               const std::string& value, int64_t timestamp_ms = 0) {
    Produce(topic, partition, key, &value, timestamp_ms);
  }

  // The group's committed offset of topic/partition (-1001 when none).
  int64_t Committed(const std::string& group, const std::string& topic, int partition) {
    char error[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap_.c_str(), error, sizeof error);
    rd_kafka_conf_set(conf, "group.id", group.c_str(), error, sizeof error);
    rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, error, sizeof error);
    rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(list, topic.c_str(), partition);
    int64_t offset = -1;
    if (rd_kafka_committed(rk, list, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
      offset = list->elems[0].offset;
    }
    rd_kafka_topic_partition_list_destroy(list);
    rd_kafka_destroy(rk);
    return offset;
  }

  const std::string& bootstrap() const { return bootstrap_; }
  rd_kafka_mock_cluster_t* cluster() { return cluster_; }

 private:
  rd_kafka_t* owner_ = nullptr;
  rd_kafka_mock_cluster_t* cluster_ = nullptr;
  rd_kafka_t* producer_ = nullptr;
  std::string bootstrap_;
};

// The writer's positions as the test sets them (what Applier::PositionsOf would return).
class Positions {
 public:
  void Set(const std::string& partition, const std::string& position) {
    std::lock_guard<std::mutex> lock(mu_);
    positions_[partition] = position;
  }
  PositionLookup Lookup() {
    return [this] {
      std::lock_guard<std::mutex> lock(mu_);
      return positions_;
    };
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::string> positions_;
};

class KafkaSourceTest : public ::testing::Test {
 protected:
  SourceConfig Config(const std::string& topic, const std::string& group) {
    SourceConfig config;
    config.name = "orders";
    config.table = "App";
    config.kind = SourceConfig::Kind::kKafka;
    config.kafka.brokers = kafka_.bootstrap();
    config.kafka.topics = {topic};
    config.kafka.group = group;
    config.kafka.dead_letter_path = dir_.Sub("dead.ndjson");
    // Fast group protocol for tests.
    config.kafka.properties = {{"heartbeat.interval.ms", "100"},
                               {"session.timeout.ms", "6000"},
                               {"topic.metadata.refresh.interval.ms", "500"}};
    return config;
  }

  // Pops records until `n` arrived (or 30 s passed).
  std::vector<SourceRecord> Take(RecordQueue* queue, size_t n) {
    std::vector<SourceRecord> out;
    WaitFor([&] {
      queue->PopBatchFor(n - out.size(), milliseconds(20), &out);
      return out.size() >= n;
    });
    return out;
  }

  std::string Topic() {
    // Group coordination state lives per group in the mock: a fresh topic and group per test.
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    return std::string("t_") + info->name();
  }

  test::TempDir dir_;
  MockKafka kafka_;
};

TEST_F(KafkaSourceTest, ConsumesEveryMessageAsARecordInPartitionOrder) {
  const std::string topic = Topic();
  kafka_.CreateTopic(topic, 2);
  for (int i = 0; i < 6; ++i) kafka_.Produce(topic, i % 2, "k" + std::to_string(i), Record("P#" + std::to_string(i), i));
  kafka_.Produce(topic, 0, "k6", Record("P#6", 6, /*with_time=*/false), 1740787299000);

  KafkaSource source(3, Config(topic, topic), nullptr);
  RecordQueue queue(100);
  auto unix_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  const int64_t started = unix_ms();
  ASSERT_TRUE(source.Start({}, &queue).ok());
  std::vector<SourceRecord> records = Take(&queue, 7);
  const int64_t taken = unix_ms();
  ASSERT_EQ(records.size(), 7u);
  std::map<std::string, std::vector<int64_t>> offsets;
  for (const SourceRecord& r : records) {
    offsets[r.partition].push_back(r.offset);
    EXPECT_GE(r.received_ms, started);
    EXPECT_LE(r.received_ms, taken);
    EXPECT_EQ(r.source, 3u);
    EXPECT_EQ(r.next_position, std::to_string(r.offset + 1));
    EXPECT_EQ(r.locator, r.partition + "@" + std::to_string(r.offset));
    ASSERT_TRUE(r.event.has_value()) << r.rejection;
    EXPECT_EQ(r.raw.rfind(R"({"eventName":"INSERT")", 0), 0u);
    const std::string pk = r.event->keys.at("PK").scalar();
    EXPECT_EQ(r.raw_key, "k" + pk.substr(2));
    // The event's own time; the message timestamp only when the event has none.
    EXPECT_EQ(r.event->creation_time_ms, pk == "P#6" ? 1740787299000 : 1740787200000);
  }
  EXPECT_EQ(offsets[topic + "/0"], (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(offsets[topic + "/1"], (std::vector<int64_t>{0, 1, 2}));
  EXPECT_TRUE(WaitFor([&] { return SourceStateName(source.Health().state) == "caught_up"; }))
      << SourceStateName(source.Health().state);
  std::vector<std::string> assigned = source.Assignment();
  EXPECT_EQ(assigned, (std::vector<std::string>{topic + "/0", topic + "/1"}));
  source.Stop();
  EXPECT_EQ(SourceStateName(source.Health().state), "stopped");
}

TEST_F(KafkaSourceTest, StartsEachPartitionAtItsStoredOffset) {
  const std::string topic = Topic();
  kafka_.CreateTopic(topic, 2);
  for (int i = 0; i < 10; ++i) kafka_.Produce(topic, i % 2, "k", Record("P#" + std::to_string(i), i));
  Positions positions;
  positions.Set(topic + "/0", "3");  // partition 1 has none: `start` (earliest)
  KafkaSource source(0, Config(topic, topic), nullptr);
  source.SetPositionLookup(positions.Lookup());
  RecordQueue queue(100);
  ASSERT_TRUE(source.Start({{topic + "/0", "3"}}, &queue).ok());
  std::vector<SourceRecord> records = Take(&queue, 7);
  std::map<std::string, std::vector<int64_t>> offsets;
  for (const SourceRecord& r : records) offsets[r.partition].push_back(r.offset);
  EXPECT_EQ(offsets[topic + "/0"], (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(offsets[topic + "/1"], (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST_F(KafkaSourceTest, LatestStartSkipsWhatIsThere) {
  const std::string topic = Topic();
  kafka_.CreateTopic(topic, 1);
  for (int i = 0; i < 3; ++i) kafka_.Produce(topic, 0, "k", Record("P#" + std::to_string(i), i));
  SourceConfig config = Config(topic, topic);
  config.kafka.start = KafkaSourceConfig::Start::kLatest;
  KafkaSource source(0, config, nullptr);
  RecordQueue queue(100);
  ASSERT_TRUE(source.Start({}, &queue).ok());
  ASSERT_TRUE(WaitFor([&] { return SourceStateName(source.Health().state) == "caught_up"; }));
  kafka_.Produce(topic, 0, "k", Record("P#9", 9));
  std::vector<SourceRecord> records = Take(&queue, 1);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].offset, 3);
}

// Two daemons given one group id (by mistake, or as replicas): each assigns itself every
// partition, so each reads every message and serves whole views; none gets a group's share.
TEST_F(KafkaSourceTest, TwoSourcesInOneGroupEachReadEveryPartition) {
  const std::string topic = Topic();
  kafka_.CreateTopic(topic, 3);
  for (int i = 0; i < 9; ++i) kafka_.Produce(topic, i % 3, "k", Record("P#" + std::to_string(i), i));
  KafkaSource first(0, Config(topic, topic), nullptr);
  KafkaSource second(0, Config(topic, topic), nullptr);
  RecordQueue first_queue(100), second_queue(100);
  ASSERT_TRUE(first.Start({}, &first_queue).ok());
  ASSERT_TRUE(second.Start({}, &second_queue).ok());
  const std::vector<std::string> all = {topic + "/0", topic + "/1", topic + "/2"};
  for (const auto& pair : {std::pair{&first, &first_queue}, std::pair{&second, &second_queue}}) {
    KafkaSource* source = pair.first;  // named, not a structured binding: lambdas capture it
    RecordQueue* queue = pair.second;
    std::map<std::string, std::vector<int64_t>> offsets;
    for (const SourceRecord& r : Take(queue, 9)) offsets[r.partition].push_back(r.offset);
    EXPECT_EQ(offsets, (std::map<std::string, std::vector<int64_t>>{
                           {all[0], {0, 1, 2}}, {all[1], {0, 1, 2}}, {all[2], {0, 1, 2}}}));
    EXPECT_TRUE(WaitFor([&] { return source->Health().state == SourceState::kCaughtUp; }));
    EXPECT_EQ(source->Assignment(), all);
    EXPECT_EQ(source->Health().partitions, all);
  }
}

// A member of a three-member cluster reads partitions 1 and 4 of six, from the start, and is
// backfilling until the writer applied them up to where they ended when it took them.
TEST_F(KafkaSourceTest, AClusterMemberReadsItsShareAndBackfillsIt) {
  const std::string topic = Topic();
  kafka_.CreateTopic(topic, 6);
  // Partition 1: 3 messages, partition 4: 1; the others 1 each.
  for (int p : {0, 1, 1, 1, 2, 3, 4, 5}) kafka_.Produce(topic, p, "k", Record("P#" + std::to_string(p), p));
  Positions positions;
  KafkaSource source(0, Config(topic, topic), nullptr, ClusterConfig{3, 1, {"a:1", "b:1", "c:1"}});
  source.SetPositionLookup(positions.Lookup());
  RecordQueue queue(100);
  ASSERT_TRUE(source.Start({}, &queue).ok());
  std::map<std::string, std::vector<int64_t>> offsets;
  for (const SourceRecord& r : Take(&queue, 4)) offsets[r.partition].push_back(r.offset);
  EXPECT_EQ(offsets, (std::map<std::string, std::vector<int64_t>>{{topic + "/1", {0, 1, 2}},
                                                                  {topic + "/4", {0}}}));
  std::vector<SourceRecord> more;
  queue.PopBatchFor(100, milliseconds(500), &more);
  EXPECT_TRUE(more.empty()) << more.size() << " records of partitions not this member's";
  EXPECT_EQ(source.Assignment(), (std::vector<std::string>{topic + "/1", topic + "/4"}));
  SourceHealth health = source.Health();
  EXPECT_EQ(health.state, SourceState::kBackfilling);
  EXPECT_EQ(health.progress, 0);
  // Two of the four messages applied.
  positions.Set(topic + "/1", "2");
  EXPECT_TRUE(WaitFor([&] { return source.Health().progress == 0.5; }))
      << source.Health().progress;
  EXPECT_EQ(source.Health().state, SourceState::kBackfilling);
  positions.Set(topic + "/1", "3");
  positions.Set(topic + "/4", "1");
  EXPECT_TRUE(WaitFor([&] { return source.Health().state == SourceState::kCaughtUp; }))
      << SourceStateName(source.Health().state);
  EXPECT_EQ(source.Health().progress, 0);
}

// A partition with a stored position is not backfilling: the member read it before.
// A restarted member resumes at its stored offsets and is not whole until it has applied what
// the partition held when it took it: backfilling from there (2 of 4) to the end.
TEST_F(KafkaSourceTest, AClusterMemberResumingAPartitionBackfillsWhatItLacks) {
  const std::string topic = Topic();
  kafka_.CreateTopic(topic, 2);
  for (int i = 0; i < 4; ++i) kafka_.Produce(topic, 1, "k", Record("P#" + std::to_string(i), i));
  Positions positions;
  positions.Set(topic + "/1", "2");
  KafkaSource source(0, Config(topic, topic), nullptr, ClusterConfig{2, 1, {"a:1", "b:1"}});
  source.SetPositionLookup(positions.Lookup());
  RecordQueue queue(100);
  ASSERT_TRUE(source.Start({{topic + "/1", "2"}}, &queue).ok());
  std::vector<SourceRecord> records = Take(&queue, 2);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].offset, 2);
  EXPECT_EQ(source.Health().state, SourceState::kBackfilling);
  EXPECT_EQ(source.Health().progress, 0);
  positions.Set(topic + "/1", "4");  // the writer applied both
  EXPECT_TRUE(WaitFor([&] { return source.Health().state == SourceState::kCaughtUp; }))
      << SourceStateName(source.Health().state);
  EXPECT_EQ(source.Assignment(), (std::vector<std::string>{topic + "/1"}));
}

// One that stopped with every record applied resumes caught up, with nothing to backfill.
TEST_F(KafkaSourceTest, AClusterMemberResumingAtTheEndIsCaughtUp) {
  const std::string topic = Topic();
  kafka_.CreateTopic(topic, 2);
  for (int i = 0; i < 4; ++i) kafka_.Produce(topic, 1, "k", Record("P#" + std::to_string(i), i));
  Positions positions;
  positions.Set(topic + "/1", "4");
  KafkaSource source(0, Config(topic, topic), nullptr, ClusterConfig{2, 1, {"a:1", "b:1"}});
  source.SetPositionLookup(positions.Lookup());
  RecordQueue queue(100);
  ASSERT_TRUE(source.Start({{topic + "/1", "4"}}, &queue).ok());
  EXPECT_TRUE(WaitFor([&] { return source.Health().state == SourceState::kCaughtUp; }))
      << SourceStateName(source.Health().state);
  EXPECT_EQ(queue.size(), 0u);
}

// A member that owns none of the topic's partitions has nothing to read: caught up.
TEST_F(KafkaSourceTest, AClusterMemberOwningNoPartitionIsCaughtUp) {
  const std::string topic = Topic();
  kafka_.CreateTopic(topic, 2);
  KafkaSource source(0, Config(topic, topic), nullptr, ClusterConfig{3, 2, {"a:1", "b:1", "c:1"}});
  RecordQueue queue(100);
  ASSERT_TRUE(source.Start({}, &queue).ok());
  EXPECT_TRUE(WaitFor([&] { return source.Health().state == SourceState::kCaughtUp; }))
      << SourceStateName(source.Health().state);
  EXPECT_TRUE(source.Assignment().empty());
}

TEST_F(KafkaSourceTest, UndecodableMessagesBecomeRejections) {
  const std::string topic = Topic();
  kafka_.CreateTopic(topic, 1);
  kafka_.Produce(topic, 0, "a", std::string(R"({"eventName":"INSERT","dyn)"));
  kafka_.Produce(topic, 0, "b", std::string(R"({"eventName":"UPSERT","dynamodb":{}})"));
  kafka_.Produce(topic, 0, "c", std::string());
  kafka_.Produce(topic, 0, "d", Record("P#1", 1));
  KafkaSource source(0, Config(topic, topic), nullptr);
  RecordQueue queue(100);
  ASSERT_TRUE(source.Start({}, &queue).ok());
  std::vector<SourceRecord> r = Take(&queue, 4);
  ASSERT_EQ(r.size(), 4u);
  const std::string p = topic + "/0";
  EXPECT_FALSE(r[0].event.has_value());
  EXPECT_EQ(r[0].reason, "malformed_json");
  EXPECT_EQ(r[0].rejection.message().substr(0, p.size() + 4), p + "@0: ");
  EXPECT_EQ(r[0].raw, R"({"eventName":"INSERT","dyn)");
  EXPECT_EQ(r[0].raw_key, "a");
  EXPECT_EQ(r[1].reason, "bad_record");
  EXPECT_EQ(std::string(r[1].rejection.message()),
            p + "@1: eventName: expected INSERT, MODIFY or REMOVE, got \"UPSERT\"");
  EXPECT_EQ(r[2].reason, "malformed_json");  // an empty value is no DynamoDB record
  EXPECT_TRUE(r[3].event.has_value());
  EXPECT_EQ(r[3].next_position, "4");
}

TEST_F(KafkaSourceTest, DebeziumTombstonesAdvanceWithoutAnEvent) {
  const std::string topic = Topic();
  kafka_.CreateTopic(topic, 1);
  kafka_.Produce(topic, 0, R"({"PK":"A"})", std::string(R"({"op":"c","after":{"PK":"A","v":1},"ts_ms":5})"));
  kafka_.Produce(topic, 0, R"({"PK":"A"})", nullptr);
  kafka_.Produce(topic, 0, R"({"PK":"A"})", std::string(R"({"op":"x","after":{}})"));
  SourceConfig config = Config(topic, topic);
  config.kafka.format = KafkaSourceConfig::Format::kDebeziumJson;
  KafkaSource source(0, config, nullptr);
  RecordQueue queue(100);
  ASSERT_TRUE(source.Start({}, &queue).ok());
  std::vector<SourceRecord> r = Take(&queue, 3);
  ASSERT_EQ(r.size(), 3u);
  ASSERT_TRUE(r[0].event.has_value()) << r[0].rejection;
  EXPECT_EQ(r[0].event->keys, (Item{{"PK", AttributeValue::String("A")}}));
  EXPECT_EQ(r[0].event->creation_time_ms, 5);
  EXPECT_FALSE(r[1].event.has_value());
  EXPECT_TRUE(r[1].rejection.ok());
  EXPECT_EQ(r[1].next_position, "2");
  EXPECT_EQ(r[2].reason, "bad_record");
  EXPECT_EQ(std::string(r[2].rejection.message()),
            topic + "/0@2: op: expected \"c\", \"u\", \"d\" or \"r\", got \"x\"");
}

TEST_F(KafkaSourceTest, ProtobufEventsAndGarbage) {
  const std::string topic = Topic();
  kafka_.CreateTopic(topic, 1);
  v1::ChangeEvent event;
  event.set_kind(v1::ChangeEvent::MODIFY);
  (*event.mutable_keys()->mutable_attributes())["PK"].set_s("A");
  (*event.mutable_new_image()->mutable_attributes())["v"].set_n("2.50");
  event.set_sequence_number("9");
  kafka_.Produce(topic, 0, "A", event.SerializeAsString(), 1740787200000);
  kafka_.Produce(topic, 0, "B", std::string("\xff\xff\xff not protobuf"));
  SourceConfig config = Config(topic, topic);
  config.kafka.format = KafkaSourceConfig::Format::kProtobuf;
  KafkaSource source(0, config, nullptr);
  RecordQueue queue(100);
  ASSERT_TRUE(source.Start({}, &queue).ok());
  std::vector<SourceRecord> r = Take(&queue, 2);
  ASSERT_EQ(r.size(), 2u);
  ASSERT_TRUE(r[0].event.has_value()) << r[0].rejection;
  EXPECT_EQ(r[0].event->kind, ChangeEvent::Kind::kModify);
  EXPECT_EQ(r[0].event->new_image->at("v").scalar(), "2.5");
  EXPECT_EQ(r[0].event->sequence_number, "9");
  EXPECT_EQ(r[0].event->creation_time_ms, 1740787200000);  // none in the event: the message's
  EXPECT_EQ(r[1].reason, "bad_protobuf");
}

TEST_F(KafkaSourceTest, PausesWhenTheQueueIsFullAndLosesNothing) {
  const std::string topic = Topic();
  kafka_.CreateTopic(topic, 2);
  for (int i = 0; i < 60; ++i) kafka_.Produce(topic, i % 2, "k", Record("P#" + std::to_string(i), i));
  KafkaSource source(0, Config(topic, topic), nullptr);
  RecordQueue queue(4);
  ASSERT_TRUE(source.Start({}, &queue).ok());
  ASSERT_TRUE(WaitFor([&] { return source.paused(); }));
  EXPECT_EQ(queue.size(), 4u);
  std::vector<SourceRecord> all;
  ASSERT_TRUE(WaitFor([&] {
    queue.PopBatchFor(1, milliseconds(5), &all);  // a slow writer
    return all.size() >= 60;
  }));
  std::map<std::string, std::vector<int64_t>> offsets;
  for (const SourceRecord& r : all) offsets[r.partition].push_back(r.offset);
  std::vector<int64_t> want(30);
  for (int i = 0; i < 30; ++i) want[i] = i;
  EXPECT_EQ(offsets[topic + "/0"], want);  // every offset once, in order
  EXPECT_EQ(offsets[topic + "/1"], want);
  EXPECT_TRUE(WaitFor([&] { return !source.paused(); }));
  std::vector<SourceRecord> extra;
  queue.PopBatchFor(10, milliseconds(300), &extra);
  EXPECT_TRUE(extra.empty());
}

TEST_F(KafkaSourceTest, CommitsTheWritersPositionsToTheGroup) {
  const std::string topic = Topic();
  kafka_.CreateTopic(topic, 2);
  for (int i = 0; i < 4; ++i) kafka_.Produce(topic, i % 2, "k", Record("P#" + std::to_string(i), i));
  Positions positions;
  KafkaSource source(0, Config(topic, topic), nullptr);
  source.SetPositionLookup(positions.Lookup());
  RecordQueue queue(100);
  ASSERT_TRUE(source.Start({}, &queue).ok());
  ASSERT_EQ(Take(&queue, 4).size(), 4u);
  positions.Set(topic + "/0", "2");
  positions.Set(topic + "/1", "1");
  EXPECT_TRUE(WaitFor([&] {
    return kafka_.Committed(topic, topic, 0) == 2 && kafka_.Committed(topic, topic, 1) == 1;
  }));
}

// The first message of topic "dlt": its value, key and the headers named.
struct DeadLetterMessage {
  std::string value;
  std::string key;
  std::map<std::string, std::string> headers;
};

DeadLetterMessage ReadDeadLetter(const std::string& bootstrap,
                                 const std::vector<std::string>& header_names) {
  char error[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap.c_str(), error, sizeof error);
  rd_kafka_conf_set(conf, "group.id", "reader", error, sizeof error);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, error, sizeof error);
  rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(list, "dlt", 0)->offset = RD_KAFKA_OFFSET_BEGINNING;
  rd_kafka_assign(rk, list);
  rd_kafka_topic_partition_list_destroy(list);
  rd_kafka_message_t* m = nullptr;
  WaitFor([&] {
    m = rd_kafka_consumer_poll(rk, 100);
    if (m != nullptr && m->err) {
      rd_kafka_message_destroy(m);
      m = nullptr;
    }
    return m != nullptr;
  });
  DeadLetterMessage out;
  EXPECT_NE(m, nullptr);
  if (m != nullptr) {
    out.value.assign(static_cast<const char*>(m->payload), m->len);
    out.key.assign(static_cast<const char*>(m->key), m->key_len);
    rd_kafka_headers_t* headers = nullptr;
    EXPECT_EQ(rd_kafka_message_headers(m, &headers), RD_KAFKA_RESP_ERR_NO_ERROR);
    for (const std::string& name : header_names) {
      const void* value = nullptr;
      size_t size = 0;
      out.headers[name] =
          headers != nullptr && rd_kafka_header_get_last(headers, name.c_str(), &value, &size) ==
                                    RD_KAFKA_RESP_ERR_NO_ERROR
              ? std::string(static_cast<const char*>(value), size)
              : "<missing>";
    }
    rd_kafka_message_destroy(m);
  }
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  return out;
}

// A rejected record of partition orders/4 at `offset`.
SourceRecord Rejected(int64_t offset, std::string raw, std::string key) {
  SourceRecord record;
  record.partition = "orders/4";
  record.offset = offset;
  record.locator = "orders/4@" + std::to_string(offset);
  record.raw = std::move(raw);
  record.raw_key = std::move(key);
  return record;
}

TEST_F(KafkaSourceTest, DeadLetterTopicGetsTheMessageWithItsOrigin) {
  kafka_.CreateTopic("dlt", 1);
  SourceConfig config = Config(Topic(), "group");
  config.kafka.dead_letter_topic = "dlt";
  KafkaSource source(0, config, nullptr);
  const SourceRecord record = Rejected(17, "{\"eventName\":", "key-1");
  ASSERT_TRUE(source.dead_letters()->Write(record, absl::InvalidArgumentError("orders/4@17: bad")).ok());

  DeadLetterMessage m = ReadDeadLetter(
      kafka_.bootstrap(), {"cdcview.source.topic", "cdcview.source.partition",
                           "cdcview.source.offset", "cdcview.reason", "cdcview.value.bytes"});
  EXPECT_EQ(m.value, record.raw);
  EXPECT_EQ(m.key, "key-1");
  EXPECT_EQ(m.headers, (std::map<std::string, std::string>{
                           {"cdcview.source.topic", "orders"},
                           {"cdcview.source.partition", "4"},
                           {"cdcview.source.offset", "17"},
                           {"cdcview.reason", "orders/4@17: bad"},
                           {"cdcview.value.bytes", "<missing>"}}));
}

// A message the source topic allowed but the producer (message.max.bytes, 1,000,000 by
// default) or the dead-letter topic refuses would fail its batch for ever: its head goes
// instead, with its size.
TEST_F(KafkaSourceTest, ADeadLetterTooLargeToProduceGoesCutToItsHeadWithItsSize) {
  kafka_.CreateTopic("dlt", 1);
  SourceConfig config = Config(Topic(), "group");
  config.kafka.dead_letter_topic = "dlt";
  KafkaSource source(0, config, nullptr);
  const SourceRecord record = Rejected(18, "{\"eventName\":\"" + std::string(2000000, 'x'), "key-2");
  ASSERT_TRUE(source.dead_letters()->Write(record, absl::InvalidArgumentError("orders/4@18: bad")).ok());

  DeadLetterMessage m =
      ReadDeadLetter(kafka_.bootstrap(), {"cdcview.source.offset", "cdcview.value.bytes"});
  EXPECT_EQ(m.value, record.raw.substr(0, 4096));
  EXPECT_EQ(m.key, "key-2");
  EXPECT_EQ(m.headers, (std::map<std::string, std::string>{
                           {"cdcview.source.offset", "18"},
                           {"cdcview.value.bytes", std::to_string(record.raw.size())}}));
}

TEST_F(KafkaSourceTest, WithoutADeadLetterTopicRejectionsGoToTheFile) {
  const std::string topic = Topic();
  KafkaSource source(0, Config(topic, topic), nullptr);
  SourceRecord record;
  record.locator = "x/0@1";
  record.raw = "{";
  ASSERT_TRUE(source.dead_letters()->Write(record, absl::InvalidArgumentError("x/0@1: bad")).ok());
  auto* file = dynamic_cast<FileDeadLetterSink*>(source.dead_letters());
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->path(), dir_.Sub("dead.ndjson"));
}

TEST_F(KafkaSourceTest, BrokerOutageIsAnErrorUntilItIsBack) {
  const std::string topic = Topic();
  kafka_.CreateTopic(topic, 1);
  kafka_.Produce(topic, 0, "k", Record("P#1", 1));
  SourceConfig config = Config(topic, topic);
  config.kafka.properties["reconnect.backoff.max.ms"] = "200";
  KafkaSource source(0, config, nullptr);
  RecordQueue queue(100);
  ASSERT_TRUE(source.Start({}, &queue).ok());
  ASSERT_EQ(Take(&queue, 1).size(), 1u);
  ASSERT_EQ(rd_kafka_mock_broker_set_down(kafka_.cluster(), 1), RD_KAFKA_RESP_ERR_NO_ERROR);
  EXPECT_TRUE(WaitFor([&] { return SourceStateName(source.Health().state) == "error"; })) << SourceStateName(source.Health().state);
  EXPECT_NE(source.Health().error.find("cannot reach the Kafka brokers " + kafka_.bootstrap()),
            std::string::npos)
      << source.Health().error;
  ASSERT_EQ(rd_kafka_mock_broker_set_up(kafka_.cluster(), 1), RD_KAFKA_RESP_ERR_NO_ERROR);
  EXPECT_TRUE(WaitFor([&] { return SourceStateName(source.Health().state) != "error"; })) << source.Health().error;
  kafka_.Produce(topic, 0, "k", Record("P#2", 2));
  std::vector<SourceRecord> more = Take(&queue, 1);
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(more[0].offset, 1);
}

// Leaving the group needs the coordinator; with the broker down, Stop still returns within
// kSourceStopTimeout (part of the daemon's drain bound) instead of waiting for it.
TEST_F(KafkaSourceTest, StopIsBoundedWhenTheBrokerIsGone) {
  const std::string topic = Topic();
  kafka_.CreateTopic(topic, 1);
  kafka_.Produce(topic, 0, "k", Record("P#1", 1));
  SourceConfig config = Config(topic, topic);
  KafkaSource source(0, config, nullptr);
  RecordQueue queue(100);
  ASSERT_TRUE(source.Start({}, &queue).ok());
  ASSERT_EQ(Take(&queue, 1).size(), 1u);
  ASSERT_EQ(rd_kafka_mock_broker_set_down(kafka_.cluster(), 1), RD_KAFKA_RESP_ERR_NO_ERROR);
  const auto start = std::chrono::steady_clock::now();
  source.Stop();
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, kSourceStopTimeout + std::chrono::seconds(2))
      << std::chrono::duration_cast<milliseconds>(took).count() << " ms";
  ASSERT_EQ(rd_kafka_mock_broker_set_up(kafka_.cluster(), 1), RD_KAFKA_RESP_ERR_NO_ERROR);
}

TEST_F(KafkaSourceTest, RefusesPositionsItDidNotWrite) {
  KafkaSource source(0, Config("t", "g"), nullptr);
  RecordQueue queue(10);
  absl::Status s = source.Start({{"", "120:5"}}, &queue);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(s.message()),
            "stored position \"\" -> \"120:5\" of source \"orders\" is not "
            "\"<topic>/<partition>\" -> \"<next offset>\"; was the store written by another "
            "kind of source?");
  EXPECT_EQ(SourceStateName(source.Health().state), "error");
}

TEST_F(KafkaSourceTest, RefusesUnknownProperties) {
  SourceConfig config = Config("t", "g");
  config.kafka.properties["no.such.property"] = "1";
  KafkaSource source(2, config, nullptr);
  RecordQueue queue(10);
  absl::Status s = source.Start({}, &queue);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(s.message()).rfind("sources[2].kafka.properties.no.such.property: ", 0), 0u)
      << s.message();
}

// The loader checked the reference; a secret file gone by the time the source starts (or
// restarts) stops it with the property named, and what to do.
TEST_F(KafkaSourceTest, ASecretFileGoneSinceTheConfigWasLoadedNamesTheProperty) {
  SourceConfig config = Config("t", "g");
  const std::string missing = dir_.Sub("kafka-password");
  config.kafka.properties["sasl.password"] = "${file:" + missing + "}";
  KafkaSource source(2, config, nullptr);
  RecordQueue queue(10);
  absl::Status s = source.Start({}, &queue);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(s.message()),
            "sources[2].kafka.properties.sasl.password: cannot read the file " + missing +
                " named by ${file:" + missing +
                "}: No such file or directory; mount the secret there (in Kubernetes, a volume "
                "from a Secret) or correct the path");
  EXPECT_EQ(source.Health().error, std::string(s.message()));
}

// librdkafka quotes a value it refuses; a secret of the client in it stays out of the
// error and the source's health.
TEST_F(KafkaSourceTest, ASecretInARefusedValueStaysOutOfTheErrorAndHealth) {
  SourceConfig config = Config("t", "g");
  config.kafka.properties["sasl.password"] = "s3cr3t";
  config.kafka.properties["security.protocol"] = "sasl_s3cr3t";
  KafkaSource source(2, config, nullptr);
  RecordQueue queue(10);
  absl::Status s = source.Start({}, &queue);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(s.message()),
            "sources[2].kafka.properties.security.protocol: Invalid value \"sasl_<redacted>\" for "
            "configuration property \"security.protocol\"");
  EXPECT_EQ(source.Health().error, std::string(s.message()));
}

// A referenced value is a secret whatever its property's name.
TEST_F(KafkaSourceTest, AReferencedValueStaysOutOfTheErrorAndHealth) {
  SourceConfig config = Config("t", "g");
  ::setenv("CDCVIEW_TEST_KAFKA_SECRET", "sasl_s3cr3t", 1);
  config.kafka.properties["security.protocol"] = "${env:CDCVIEW_TEST_KAFKA_SECRET}";
  KafkaSource source(2, config, nullptr);
  RecordQueue queue(10);
  absl::Status s = source.Start({}, &queue);
  ::unsetenv("CDCVIEW_TEST_KAFKA_SECRET");
  EXPECT_EQ(std::string(s.message()),
            "sources[2].kafka.properties.security.protocol: Invalid value \"<redacted>\" for "
            "configuration property \"security.protocol\"");
  EXPECT_EQ(source.Health().error, std::string(s.message()));
}

}  // namespace
}  // namespace cdcview
