// Secret references in Kafka properties: resolution, the loader's errors, and --print-config.
#include "daemon/config/secret_reference.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "daemon/config/config.h"
#include "daemon/config/config_yaml.h"
#include "gtest/gtest.h"

namespace cdcview {
namespace {

std::string Text(const absl::Status& status) {
  return std::string(status.message().data(), status.message().size());
}

class SecretReferenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("cdcview-secret-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    ::unsetenv("CDCVIEW_TEST_SECRET");
  }
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  // A config with one Kafka source whose properties are `properties` (YAML flow mapping).
  static absl::StatusOr<Config> Parse(const std::string& properties) {
    return ParseConfig(
        "sources:\n"
        "  - name: k\n"
        "    table: T\n"
        "    kafka:\n"
        "      brokers: b:9093\n"
        "      topics: [t]\n"
        "      group: g\n"
        "      properties: " + properties + "\n"
        "tables:\n"
        "  - name: T\n"
        "    key: { partition: id }\n",
        "c.yaml");
  }

  std::filesystem::path dir_;
};

TEST_F(SecretReferenceTest, SecretPropertiesAreKnownByName) {
  for (const char* name : {"sasl.password", "ssl.key.password", "ssl.keystore.password",
                           "ssl.key.pem", "sasl.oauthbearer.client.secret", "ssl_key",
                           "some.future.Password", "x.SECRET.y", "sasl.oauthbearer.config",
                           "ssl.ca.pem", "sasl.oauthbearer.assertion.private.key.passphrase",
                           "sasl.oauthbearer.assertion.private.key.pem"}) {
    EXPECT_TRUE(IsSecretProperty(name)) << name;
  }
  for (const char* name : {"sasl.username", "ssl.key.location", "ssl.ca.location",
                           "security.protocol", "sasl.mechanism", "ssl.certificate.pem"}) {
    EXPECT_FALSE(IsSecretProperty(name)) << name;
  }
}

TEST_F(SecretReferenceTest, PlainValuesStayAsTheyAre) {
  EXPECT_EQ(*ResolveSecretReference("hunter2"), "hunter2");
  EXPECT_EQ(*ResolveSecretReference("$env:X"), "$env:X");
  EXPECT_EQ(*ResolveSecretReference("${env:X"), "${env:X");
  EXPECT_EQ(*ResolveSecretReference(""), "");
}

TEST_F(SecretReferenceTest, EnvironmentReference) {
  ::setenv("CDCVIEW_TEST_SECRET", "s3cr3t value", 1);
  EXPECT_EQ(*ResolveSecretReference("${env:CDCVIEW_TEST_SECRET}"), "s3cr3t value");
  ::unsetenv("CDCVIEW_TEST_SECRET");
  EXPECT_EQ(Text(ResolveSecretReference("${env:CDCVIEW_TEST_SECRET}").status()),
            "the environment variable CDCVIEW_TEST_SECRET named by ${env:CDCVIEW_TEST_SECRET} is "
            "not set: set it in cdcviewd's environment (in Kubernetes, "
            "env.valueFrom.secretKeyRef), or give the value as ${file:PATH}");
  ::setenv("CDCVIEW_TEST_SECRET", "", 1);
  EXPECT_EQ(Text(ResolveSecretReference("${env:CDCVIEW_TEST_SECRET}").status()),
            "the environment variable CDCVIEW_TEST_SECRET named by ${env:CDCVIEW_TEST_SECRET} is "
            "empty: set it in cdcviewd's environment (in Kubernetes, "
            "env.valueFrom.secretKeyRef), or give the value as ${file:PATH}");
}

TEST_F(SecretReferenceTest, FileReferenceDropsTrailingLineBreaksOnly) {
  std::string path = Write("password", "  pass word \r\n\n");
  EXPECT_EQ(*ResolveSecretReference("${file:" + path + "}"), "  pass word ");
  std::string pem = Write("key.pem", "-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----\n");
  EXPECT_EQ(*ResolveSecretReference("${file:" + pem + "}"),
            "-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----");
}

TEST_F(SecretReferenceTest, FileReferenceErrorsSayWhatToDo) {
  const std::string missing = (dir_ / "absent").string();
  EXPECT_EQ(Text(ResolveSecretReference("${file:" + missing + "}").status()),
            "cannot read the file " + missing + " named by ${file:" + missing +
                "}: No such file or directory; mount the secret there (in Kubernetes, a "
                "volume from a Secret) or correct the path");
  const std::string dir = dir_.string();
  EXPECT_EQ(Text(ResolveSecretReference("${file:" + dir + "}").status()),
            "the file " + dir + " named by ${file:" + dir +
                "} is not a regular file; give the file that holds the value");
  std::string big = Write("big", std::string(kMaxSecretFileBytes + 1, 'x'));
  EXPECT_EQ(Text(ResolveSecretReference("${file:" + big + "}").status()),
            "the file " + big + " named by ${file:" + big +
                "} is larger than 1048576 bytes; give the file that holds only the value");
}

// /proc/self/pagemap is a regular file that stat says is empty, and holds far more than the
// cap: the cap holds on what is read, not on what stat says.
TEST_F(SecretReferenceTest, AFileThatStatSaysIsEmptyIsReadNoFurtherThanTheCap) {
  const std::string path = "/proc/self/pagemap";
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  ASSERT_TRUE(S_ISREG(st.st_mode));
  ASSERT_EQ(st.st_size, 0);
  EXPECT_EQ(Text(ResolveSecretReference("${file:" + path + "}").status()),
            "the file " + path + " named by ${file:" + path +
                "} is larger than 1048576 bytes; give the file that holds only the value");
}

TEST_F(SecretReferenceTest, OtherReferencesAreRefusedWithoutEchoingThem) {
  for (const char* value : {"${vault:x}", "${env:}", "${file:}", "${}"}) {
    absl::StatusOr<std::string> resolved = ResolveSecretReference(value);
    ASSERT_FALSE(resolved.ok()) << value;
    EXPECT_EQ(Text(resolved.status()),
              "a value written ${...} must be ${env:NAME} (an environment variable) or "
              "${file:PATH} (a file's contents)");
  }
}

TEST_F(SecretReferenceTest, TheLoaderKeepsTheReferenceAndNamesThePropertyOnError) {
  std::string path = Write("password", "from-file\n");
  ::setenv("CDCVIEW_TEST_SECRET", "from-env", 1);
  absl::StatusOr<Config> config = Parse(
      "{ sasl.password: \"${file:" + path + "}\", ssl.key.password: \"${env:CDCVIEW_TEST_SECRET}\" }");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->sources[0].kafka.properties,
            (std::map<std::string, std::string>{
                {"sasl.password", "${file:" + path + "}"},
                {"ssl.key.password", "${env:CDCVIEW_TEST_SECRET}"}}));

  ::unsetenv("CDCVIEW_TEST_SECRET");
  config = Parse("{ sasl.username: cdc, sasl.password: \"${env:CDCVIEW_TEST_SECRET}\" }");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(Text(config.status()),
            "c.yaml:8: sources[0].kafka.properties.sasl.password: the environment variable "
            "CDCVIEW_TEST_SECRET named by ${env:CDCVIEW_TEST_SECRET} is not set: set it in "
            "cdcviewd's environment (in Kubernetes, env.valueFrom.secretKeyRef), or give the "
            "value as ${file:PATH}");
}

TEST_F(SecretReferenceTest, PrintConfigRedactsSecretsWrittenInTheFileAndShowsReferences) {
  ::setenv("CDCVIEW_TEST_SECRET", "from-env", 1);
  absl::StatusOr<Config> config = Parse(
      "{ sasl.password: hunter2-literal, ssl.key.pem: \"-----BEGIN PRIVATE KEY-----\", "
      "sasl.oauthbearer.client.secret: \"${env:CDCVIEW_TEST_SECRET}\", sasl.username: cdc, "
      "my.custom.secret: 12345, sasl.oauthbearer.config: \"principal=cdc scope=s3cr3t\" }");
  ASSERT_TRUE(config.ok()) << config.status();
  const std::string yaml = ConfigToYaml(*config);
  EXPECT_NE(yaml.find("      properties:\n"
                      "        my.custom.secret: \"<redacted>\"\n"
                      "        sasl.oauthbearer.client.secret: \"${env:CDCVIEW_TEST_SECRET}\"\n"
                      "        sasl.oauthbearer.config: \"<redacted>\"\n"
                      "        sasl.password: \"<redacted>\"\n"
                      "        sasl.username: \"cdc\"\n"
                      "        ssl.key.pem: \"<redacted>\"\n"),
            std::string::npos)
      << yaml;
  for (const char* secret : {"hunter2", "BEGIN PRIVATE", "from-env", "12345", "s3cr3t"}) {
    EXPECT_EQ(yaml.find(secret), std::string::npos) << secret << " in\n" << yaml;
  }
}

}  // namespace
}  // namespace cdcview
