// The cluster: block: members, the ordinal as a number or a StatefulSet pod name, the peers as
// a list or a {i} template, the sources a cluster cannot split, the variables and --set, and
// --print-config.
#include <map>
#include <string>
#include <vector>

#include "daemon/config/config.h"
#include "daemon/config/config_yaml.h"
#include "gtest/gtest.h"

namespace cdcview {
namespace {

constexpr char kTables[] = "tables: [ { name: T, key: { partition: PK } } ]\n";
constexpr char kKafka[] =
    "sources: [ { name: k, table: T, kafka: { brokers: \"b:9092\", topics: [t], group: g } } ]\n";

absl::StatusOr<Config> Parse(const std::string& yaml,
                             const std::vector<ConfigSetting>& settings = {}) {
  return ParseConfig(yaml + kTables, "c.yaml", settings);
}

std::string Error(const std::string& yaml, const std::vector<ConfigSetting>& settings = {}) {
  absl::StatusOr<Config> config = Parse(yaml, settings);
  if (config.ok()) return "(no error)";
  return std::string(config.status().message());
}

TEST(ClusterConfigTest, WithoutTheBlockTheDaemonIsStandalone) {
  absl::StatusOr<Config> config = Parse(kKafka);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->cluster.Enabled());
  EXPECT_EQ(config->cluster, ClusterConfig{});
}

TEST(ClusterConfigTest, ReadsMembersOrdinalAndPeers) {
  absl::StatusOr<Config> config =
      Parse(std::string("cluster:\n"
                        "  members: 3\n"
                        "  ordinal: 1\n"
                        "  peers: [\"10.0.0.1:50051\", \"10.0.0.2:50051\", \"10.0.0.3:50051\"]\n") +
            kKafka);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->cluster.Enabled());
  EXPECT_EQ(config->cluster.members, 3u);
  EXPECT_EQ(config->cluster.ordinal, 1u);
  EXPECT_EQ(config->cluster.peers, (std::vector<std::string>{"10.0.0.1:50051", "10.0.0.2:50051",
                                                             "10.0.0.3:50051"}));
}

TEST(ClusterConfigTest, OrdinalMayBeAStatefulSetPodName) {
  for (const auto& [given, ordinal] : std::vector<std::pair<std::string, uint32_t>>{
           {"0", 0}, {"2", 2}, {"cdcview-2", 2}, {"my-views-0", 0}, {"\"1\"", 1}}) {
    SCOPED_TRACE(given);
    absl::StatusOr<Config> config = Parse("cluster: { members: 3, ordinal: " + given +
                                          ", peers: \"p-{i}:1\" }\n");
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->cluster.ordinal, ordinal);
  }
}

TEST(ClusterConfigTest, PeersTemplateIsExpandedForEveryOrdinal) {
  absl::StatusOr<Config> config = Parse(
      "cluster: { members: 3, ordinal: 0, peers: \"cdcview-{i}.cdcview-members:50051\" }\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->cluster.peers,
            (std::vector<std::string>{"cdcview-0.cdcview-members:50051",
                                      "cdcview-1.cdcview-members:50051",
                                      "cdcview-2.cdcview-members:50051"}));
}

TEST(ClusterConfigTest, MembersFromOneTo1024) {
  EXPECT_EQ(Error("cluster: { members: 0, ordinal: 0, peers: \"p{i}:1\" }\n"),
            "c.yaml:1: cluster.members: expected a whole number from 1 to 1024, got \"0\" (at "
            "most 1024: every member keeps a channel to every other and asks each of them on "
            "every read)");
  EXPECT_EQ(Error("cluster: { members: 1025, ordinal: 0, peers: \"p{i}:1\" }\n"),
            "c.yaml:1: cluster.members: expected a whole number from 1 to 1024, got \"1025\" (at "
            "most 1024: every member keeps a channel to every other and asks each of them on "
            "every read)");
  EXPECT_EQ(Error("cluster: { ordinal: 0, peers: \"p{i}:1\" }\n"),
            "c.yaml:1: cluster.members: is required");
  EXPECT_EQ(Error("cluster: { members: 2, peers: \"p{i}:1\" }\n"),
            "c.yaml:1: cluster.ordinal: is required");
  EXPECT_EQ(Error("cluster: { members: 2, ordinal: 0 }\n"), "c.yaml:1: cluster.peers: is required");
  EXPECT_EQ(Error("cluster: { members: 2, ordinal: 0, peers: \"p{i}:1\", size: 2 }\n"),
            "c.yaml:1: cluster: unknown field \"size\" (expected one of members, ordinal, "
            "peers)");
}

TEST(ClusterConfigTest, OrdinalAtOrAboveMembersNamesBoth) {
  EXPECT_EQ(Error("cluster: { members: 3, ordinal: 3, peers: \"p{i}:1\" }\n"),
            "c.yaml:1: cluster.ordinal: ordinal 3 is not below members (3): members are "
            "numbered 0 to 2; set cluster.members to the StatefulSet's replicas");
  EXPECT_EQ(Error("cluster: { members: 3, ordinal: cdcview-5, peers: \"p{i}:1\" }\n"),
            "c.yaml:1: cluster.ordinal: ordinal 5 (from \"cdcview-5\") is not below members "
            "(3): members are numbered 0 to 2; set cluster.members to the StatefulSet's "
            "replicas");
}

TEST(ClusterConfigTest, OrdinalThatIsNoNumberNorPodName) {
  const std::string expected =
      "c.yaml:1: cluster.ordinal: expected this member's number, 0 to 2, or a StatefulSet pod "
      "name ending in it like cdcview-2, got ";
  EXPECT_EQ(Error("cluster: { members: 3, ordinal: cdcview, peers: \"p{i}:1\" }\n"),
            expected + "\"cdcview\"");
  EXPECT_EQ(Error("cluster: { members: 3, ordinal: cdcview-, peers: \"p{i}:1\" }\n"),
            expected + "\"cdcview-\"");
  EXPECT_EQ(Error("cluster: { members: 3, ordinal: -1, peers: \"p{i}:1\" }\n"),
            expected + "\"-1\"");
  EXPECT_EQ(Error("cluster: { members: 3, ordinal: [1], peers: \"p{i}:1\" }\n"),
            expected + "a list");
}

TEST(ClusterConfigTest, PeersMustNameEveryMember) {
  EXPECT_EQ(Error("cluster: { members: 3, ordinal: 0, peers: [\"a:1\", \"b:1\"] }\n"),
            "c.yaml:1: cluster.peers: expected 3 addresses, one per member (members: 3), got 2; "
            "list every member's gRPC address by ordinal, or give one string with {i} for the "
            "ordinal");
  EXPECT_EQ(Error("cluster: { members: 2, ordinal: 0, peers: [\"a:1\", \"b\"] }\n"),
            "c.yaml:1: cluster.peers[1]: expected host:port like 10.0.0.2:50051, got \"b\"");
  EXPECT_EQ(Error("cluster: { members: 2, ordinal: 0, peers: \"a:1\" }\n"),
            "c.yaml:1: cluster.peers: expected a list of 2 host:port addresses (every member's "
            "gRPC address, by ordinal), or one string with {i} for the ordinal like "
            "\"cdcview-{i}.cdcview-members:50051\", got \"a:1\"");
  EXPECT_EQ(Error("cluster: { members: 2, ordinal: 0, peers: \"cdcview-{i}\" }\n"),
            "c.yaml:1: cluster.peers: member 0's address \"cdcview-0\" is not host:port like "
            "cdcview-0.cdcview-members:50051");
}

TEST(ClusterConfigTest, AFileSourceIsRefusedWithWhyAndWhatInstead) {
  EXPECT_EQ(Error("cluster: { members: 2, ordinal: 0, peers: \"p{i}:1\" }\n"
                  "sources: [ { name: f, table: T, file: { path: in.ndjson } } ]\n"),
            "c.yaml:2: sources[0].file: a file source cannot be split between the members of a "
            "cluster: a file has one reader, which would hold every item; run standalone "
            "replicas instead (leave out cluster:, each daemon reads the whole file), or "
            "produce the changes to a Kafka topic and read that with a kafka source");
}

TEST(ClusterConfigTest, ADynamoDbSourceIsRefusedWithWhyAndWhatInstead) {
  EXPECT_EQ(Error("cluster: { members: 2, ordinal: 0, peers: \"p{i}:1\" }\n"
                  "sources: [ { name: d, table: T, dynamodb: { table_name: Orders } } ]\n"),
            "c.yaml:2: sources[0].dynamodb: a DynamoDB source cannot be split between the "
            "members of a cluster: a DynamoDB Streams shard allows only two readers at once, "
            "and shards split and close as the table changes, so no fixed rule can give each "
            "member its share; run standalone replicas instead (leave out cluster:, at most two "
            "per stream), or bridge the stream to a Kafka topic and read that with a kafka "
            "source");
}

TEST(ClusterConfigTest, AKafkaSourceMustStartAtTheEarliestOffset) {
  EXPECT_EQ(Error("cluster: { members: 2, ordinal: 0, peers: \"p{i}:1\" }\n"
                  "sources:\n"
                  "  - name: k\n"
                  "    table: T\n"
                  "    kafka: { brokers: \"b:9092\", topics: [t], group: g,\n"
                  "             start: latest }\n"),
            "c.yaml:6: sources[0].kafka.start: latest cannot be used in a cluster: a member that "
            "gains partitions when the cluster is resized must read their whole history; use "
            "start: earliest");
  // The same source is fine without cluster:.
  EXPECT_TRUE(Parse("sources: [ { name: k, table: T, kafka: { brokers: \"b:9092\", topics: [t], "
                    "group: g, start: latest } } ]\n")
                  .ok());
}

TEST(ClusterConfigTest, VariablesAndSetFlagsSetEveryField) {
  std::map<std::string, std::string> env = {
      {"CDCVIEW_CLUSTER_MEMBERS", "3"},
      {"CDCVIEW_CLUSTER_ORDINAL", "cdcview-2"},
      {"CDCVIEW_CLUSTER_PEERS", "cdcview-{i}.members:50051"}};
  std::vector<ConfigSetting> settings = SettingsFromEnvironment([&](const char* name) {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
  ASSERT_EQ(settings.size(), 3u);
  absl::StatusOr<Config> config = Parse(kKafka, settings);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->cluster.members, 3u);
  EXPECT_EQ(config->cluster.ordinal, 2u);
  EXPECT_EQ(config->cluster.peers[2], "cdcview-2.members:50051");

  absl::StatusOr<ConfigSetting> peers = ParseSetFlag("cluster.peers=[\"a:1\", \"b:2\"]");
  ASSERT_TRUE(peers.ok());
  config = Parse(std::string("cluster: { members: 2, ordinal: 0, peers: \"x{i}:1\" }\n") + kKafka,
                 {*peers, {"cluster.ordinal", "1", "--set cluster.ordinal=1"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->cluster.ordinal, 1u);
  EXPECT_EQ(config->cluster.peers, (std::vector<std::string>{"a:1", "b:2"}));

  EXPECT_EQ(Error(std::string("cluster: { members: 2, ordinal: 0, peers: \"x{i}:1\" }\n"),
                  {{"cluster.ordinal", "cdcview-2", "CDCVIEW_CLUSTER_ORDINAL"}}),
            "CDCVIEW_CLUSTER_ORDINAL: cluster.ordinal: ordinal 2 (from \"cdcview-2\") is not "
            "below members (2): members are numbered 0 to 1; set cluster.members to the "
            "StatefulSet's replicas");
}

TEST(ClusterConfigTest, PrintedOnlyForAClusterAndReadBackTheSame) {
  absl::StatusOr<Config> config =
      Parse(std::string("cluster: { members: 2, ordinal: cdcview-1, peers: \"c-{i}:7\" }\n") +
            kKafka);
  ASSERT_TRUE(config.ok()) << config.status();
  const std::string yaml = ConfigToYaml(*config);
  EXPECT_NE(yaml.find("cluster:\n"
                      "  members: 2\n"
                      "  ordinal: 1\n"
                      "  peers: [\"c-0:7\", \"c-1:7\"]\n"
                      "sources:\n"),
            std::string::npos)
      << yaml;
  absl::StatusOr<Config> again = ParseConfig(yaml, "printed.yaml");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->cluster, config->cluster);

  absl::StatusOr<Config> standalone = Parse(kKafka);
  ASSERT_TRUE(standalone.ok()) << standalone.status();
  EXPECT_EQ(ConfigToYaml(*standalone).find("cluster"), std::string::npos);
}

}  // namespace
}  // namespace cdcview
