// A Kafka client's secrets: which resolved properties join them, and that librdkafka's own
// text (a refused value, a log line) leaves them out. No broker: librdkafka's conf and log
// text alone.
#include "daemon/sources/kafka_client_secrets.h"

#include <librdkafka/rdkafka.h>
#include <stdlib.h>

#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace cdcview {
namespace {

struct ConfDeleter {
  void operator()(rd_kafka_conf_t* conf) const { rd_kafka_conf_destroy(conf); }
};

TEST(KafkaClientSecretsTest, ResolvedSecretPropertiesJoinTheSecrets) {
  ::setenv("CDCVIEW_TEST_KAFKA_SECRET", "s3cr3t-from-env", 1);
  ClientSecrets secrets;
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> resolved = ResolveProperties(
      {{"sasl.password", "${env:CDCVIEW_TEST_KAFKA_SECRET}"},
       {"ssl.key.password", "literal-s3cr3t"},
       {"sasl.username", "cdc"}},
      "sources[0].kafka", &secrets);
  ::unsetenv("CDCVIEW_TEST_KAFKA_SECRET");
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(*resolved, (std::vector<std::pair<std::string, std::string>>{
                           {"sasl.password", "s3cr3t-from-env"},
                           {"sasl.username", "cdc"},
                           {"ssl.key.password", "literal-s3cr3t"}}));
  EXPECT_EQ(secrets.values, (std::vector<std::string>{"s3cr3t-from-env", "literal-s3cr3t"}));
}

// librdkafka quotes a value it refuses: a secret in it does not reach the error.
TEST(KafkaClientSecretsTest, ARefusedValueIsRedactedInTheError) {
  std::unique_ptr<rd_kafka_conf_t, ConfDeleter> conf(rd_kafka_conf_new());
  ClientSecrets secrets{{"s3cr3t"}};
  absl::Status s = SetConf(conf.get(), "security.protocol", "sasl_s3cr3t",
                           "sources[1].kafka.properties.security.protocol", secrets);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(s.message()),
            "sources[1].kafka.properties.security.protocol: Invalid value \"sasl_<redacted>\" "
            "for configuration property \"security.protocol\"");
  EXPECT_TRUE(SetConf(conf.get(), "sasl.password", "s3cr3t", "f", secrets).ok());
}

// The user kept the value out of the file: it is a secret whatever the property's name.
TEST(KafkaClientSecretsTest, AReferencedValueIsASecretUnderAnyName) {
  ::setenv("CDCVIEW_TEST_KAFKA_SECRET", "/run/s3cr3t/ca.pem", 1);
  ClientSecrets secrets;
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> resolved = ResolveProperties(
      {{"ssl.ca.location", "${env:CDCVIEW_TEST_KAFKA_SECRET}"}, {"sasl.username", "cdc"}},
      "sources[0].kafka", &secrets);
  ::unsetenv("CDCVIEW_TEST_KAFKA_SECRET");
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(secrets.values, (std::vector<std::string>{"/run/s3cr3t/ca.pem"}));
  EXPECT_EQ(KafkaLogLine("rdkafka#consumer-1", "SSL",
                         "error:80000002:system library::No such file or directory: calling "
                         "fopen(/run/s3cr3t/ca.pem, r)",
                         secrets),
            "librdkafka rdkafka#consumer-1 SSL: error:80000002:system library::No such file or "
            "directory: calling fopen(<redacted>, r)");
}

TEST(KafkaClientSecretsTest, ALogLineIsRedacted) {
  ClientSecrets secrets{{"/run/s3cr3t/ca.pem", "s3cr3t"}};
  EXPECT_EQ(KafkaLogLine("rdkafka#consumer-1", "SSL",
                         "error:80000002:system library::No such file or directory: calling "
                         "fopen(/run/s3cr3t/ca.pem, r); s3cr3t",
                         secrets),
            "librdkafka rdkafka#consumer-1 SSL: error:80000002:system library::No such file or "
            "directory: calling fopen(<redacted>, r); <redacted>");
}

}  // namespace
}  // namespace cdcview
