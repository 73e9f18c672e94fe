// The field tables: what a table-driven block reads and prints, field by field, and the
// environment variables that come from the sections' tables.
#include "daemon/config/config_fields.h"

#include <string>
#include <variant>
#include <vector>

#include "daemon/config/config.h"
#include "daemon/config/config_yaml.h"
#include "gtest/gtest.h"

namespace cdcview {
namespace {

std::string Text(const absl::Status& status) {
  return std::string(status.message().data(), status.message().size());
}

// Every name of every choice stands for its own value, and the value prints as that name.
template <typename S>
void ExpectChoicesRoundTrip(const config_fields::FieldTable<S>& table) {
  for (const config_fields::Field<S>& field : table) {
    const auto* choice = std::get_if<config_fields::ChoiceRule<S>>(&field.rule);
    if (choice == nullptr) continue;
    for (size_t i = 0; i < choice->names.size(); ++i) {
      SCOPED_TRACE(std::string(field.key) + ": " + std::string(choice->names[i]));
      S block;
      choice->set(block, i);
      EXPECT_EQ(choice->get(block), i);
    }
  }
}

TEST(ConfigFieldsTest, EveryChoiceNameRoundTrips) {
  ExpectChoicesRoundTrip(config_fields::KafkaSourceFields());
  ExpectChoicesRoundTrip(config_fields::DynamoDbSourceFields());
}

TEST(ConfigFieldsTest, EveryKafkaFormatIsReadAndPrinted) {
  for (const auto& [name, format] :
       std::vector<std::pair<std::string, KafkaSourceConfig::Format>>{
           {"dynamodb-json", KafkaSourceConfig::Format::kDynamoDbJson},
           {"debezium-json", KafkaSourceConfig::Format::kDebeziumJson},
           {"protobuf", KafkaSourceConfig::Format::kProtobuf}}) {
    SCOPED_TRACE(name);
    absl::StatusOr<Config> config = ParseConfig(
        "sources: [ { name: k, table: T, kafka: { brokers: \"b:1\", topics: [t], group: g,\n"
        "             format: " + name + " } } ]\n"
        "tables: [ { name: T, key: { partition: id } } ]\n",
        "t.yaml");
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->sources[0].kafka.format, format);
    EXPECT_NE(ConfigToYaml(*config).find("      format: \"" + name + "\"\n"), std::string::npos);
  }
}

// Required fields are checked in the table's order, after the block's keys are known.
TEST(ConfigFieldsTest, RequiredFieldsOfASourceBlock) {
  auto error = [](const std::string& kafka) {
    return Text(ParseConfig("sources: [ { name: k, table: T, kafka: " + kafka + " } ]\n"
                            "tables: [ { name: T, key: { partition: id } } ]\n",
                            "t.yaml")
                    .status());
  };
  EXPECT_EQ(error("{ topics: [t], group: g }"), "t.yaml:1: sources[0].kafka.brokers: is required");
  EXPECT_EQ(error("{ brokers: b, group: g }"), "t.yaml:1: sources[0].kafka.topics: is required");
  EXPECT_EQ(error("{ brokers: b, topics: [t] }"), "t.yaml:1: sources[0].kafka.group: is required");
  EXPECT_EQ(error("{ brokers: b, topics: [t], group: g, bogus: 1 }"),
            "t.yaml:1: sources[0].kafka: unknown field \"bogus\" (expected one of brokers, "
            "topics, group, format, dead_letter_topic, dead_letter_path, start, key_attributes, "
            "properties, tombstone_horizon_seconds)");
}

// The variables are the sections' fields but storage.path, server.grpc and server.metrics
// (their own flags), then the cluster's, in the order --print-config prints them; deploy
// manifests name them.
TEST(ConfigFieldsTest, EnvironmentSettablePathsAreTheSectionsFields) {
  EXPECT_EQ(EnvironmentSettablePaths(),
            (std::vector<std::string>{
                "storage.map_size", "storage.max_map_size", "storage.write_map",
                "storage.flush_interval_ms", "storage.verify_at_start", "storage.backup_dir", "server.fast_reads", "server.dynamodb",
                "server.ready_max_lag_seconds",
                "server.max_wait_ms", "server.fast_reads_max_request_bytes",
                "server.fast_reads_max_buffered_per_connection",
                "server.fast_reads_max_buffered_bytes", "server.fast_reads_max_waits_per_connection",
                "server.fast_reads_max_connections", "server.fast_reads_idle_timeout_ms",
                "server.fast_reads_request_timeout_ms", "server.dynamodb_threads",
                "server.dynamodb_max_connections", "server.dynamodb_max_request_bytes",
                "server.dynamodb_idle_timeout_ms", "server.dynamodb_request_timeout_ms",
                "server.dynamodb_max_waits", "server.dynamodb_max_pages",
                "server.grpc_max_connections",
                "server.grpc_max_connection_idle_seconds", "server.grpc_max_connection_age_seconds",
                "server.grpc_max_connection_age_grace_seconds",
                "server.grpc_min_ping_interval_seconds", "server.grpc_max_ping_strikes",
                "server.fd_reserve", "server.health", "server.tls_cert_file",
                "server.tls_key_file", "server.tls_client_ca_file", "server.tls_metrics",
                "server.tokens_file", "apply.batch_size", "apply.max_delay_ms", "apply.queue_capacity",
                "apply.log_counts_seconds", "apply.tombstone_compaction_step", "watch.retain_changes", "watch.max_lag_changes",
                "watch.max_stream_buffer_bytes", "watch.stalled_stream_timeout_ms",
                "watch.max_streams", "cluster.members", "cluster.ordinal", "cluster.peers"}));
}

}  // namespace
}  // namespace cdcview
