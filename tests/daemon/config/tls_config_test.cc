// The server section's TLS, token and health fields: defaults (all off, /metrics following TLS),
// the key pair set together, and a client CA or tokens refused without TLS under them.
#include <string>
#include <vector>

#include "daemon/config/config.h"
#include "gtest/gtest.h"

namespace cdcview {
namespace {

constexpr char kTables[] = "tables: [ { name: T, key: { partition: PK } } ]\n";

std::string Text(const absl::Status& status) { return std::string(status.message()); }

absl::StatusOr<Config> Parse(const std::string& server,
                             const std::vector<ConfigSetting>& settings = {}) {
  return ParseConfig(server + kTables, "t.yaml", settings);
}

TEST(TlsConfigTest, OffByDefault) {
  absl::StatusOr<Config> config = Parse("");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->server.TlsEnabled());
  EXPECT_EQ(config->server.health, "");
  EXPECT_EQ(config->server.tls_client_ca_file, "");
  EXPECT_EQ(config->server.tokens_file, "");
  EXPECT_TRUE(config->server.tls_metrics);
}

TEST(TlsConfigTest, TheWholeSecureSetReadsBack) {
  absl::StatusOr<Config> config = Parse(
      "server:\n"
      "  health: 0.0.0.0:50054\n"
      "  tls_cert_file: /tls/tls.crt\n"
      "  tls_key_file: /tls/tls.key\n"
      "  tls_client_ca_file: /tls/ca.crt\n"
      "  tls_metrics: true\n"
      "  tokens_file: /auth/tokens.yaml\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->server.TlsEnabled());
  EXPECT_EQ(config->server.health, "0.0.0.0:50054");
  EXPECT_EQ(config->server.tls_cert_file, "/tls/tls.crt");
  EXPECT_EQ(config->server.tls_key_file, "/tls/tls.key");
  EXPECT_EQ(config->server.tls_client_ca_file, "/tls/ca.crt");
  EXPECT_TRUE(config->server.tls_metrics);
  EXPECT_EQ(config->server.tokens_file, "/auth/tokens.yaml");
}

TEST(TlsConfigTest, PlaintextMetricsAreRefusedWithTokensAndAllowedWithout) {
  const std::string tls = "server:\n  tls_cert_file: /tls/tls.crt\n  tls_key_file: /tls/tls.key\n";
  absl::StatusOr<Config> with_tokens =
      Parse(tls + "  tls_metrics: false\n  tokens_file: /auth/tokens.yaml\n");
  ASSERT_FALSE(with_tokens.ok());
  EXPECT_EQ(Text(with_tokens.status()),
            "t.yaml:4: server.tls_metrics: tls_metrics: false with tokens_file would send the "
            "scrape's bearer token in clear text: keep tls_metrics true, or leave tokens_file "
            "unset for a plaintext /metrics without tokens");
  absl::StatusOr<Config> without_tokens = Parse(tls + "  tls_metrics: false\n");
  ASSERT_TRUE(without_tokens.ok()) << without_tokens.status();
  EXPECT_FALSE(without_tokens->server.tls_metrics);
}

TEST(TlsConfigTest, TheKeyPairIsSetTogether) {
  absl::StatusOr<Config> cert_only = Parse("server: { tls_cert_file: /tls/tls.crt }\n");
  ASSERT_FALSE(cert_only.ok());
  EXPECT_EQ(Text(cert_only.status()),
            "t.yaml:1: server.tls_cert_file: tls_cert_file needs tls_key_file: set both (the "
            "certificate chain and its private key, PEM)");
  absl::StatusOr<Config> key_only = Parse("server: { tls_key_file: /tls/tls.key }\n");
  ASSERT_FALSE(key_only.ok());
  EXPECT_EQ(Text(key_only.status()),
            "t.yaml:1: server.tls_key_file: tls_key_file needs tls_cert_file: set both (the "
            "certificate chain and its private key, PEM)");
}

TEST(TlsConfigTest, AClientCaOrTokensNeedTls) {
  absl::StatusOr<Config> ca = Parse("server: { tls_client_ca_file: /tls/ca.crt }\n");
  ASSERT_FALSE(ca.ok());
  EXPECT_EQ(Text(ca.status()),
            "t.yaml:1: server.tls_client_ca_file: tls_client_ca_file needs TLS: set "
            "tls_cert_file and tls_key_file too");
  absl::StatusOr<Config> tokens = Parse("server: { tokens_file: /auth/tokens.yaml }\n");
  ASSERT_FALSE(tokens.ok());
  EXPECT_EQ(Text(tokens.status()),
            "t.yaml:1: server.tokens_file: tokens_file needs TLS, or a bearer token would cross "
            "the network in clear text: set tls_cert_file and tls_key_file too");
}

TEST(TlsConfigTest, SettableFromTheEnvironmentAndCheckedTheSame) {
  EXPECT_EQ(EnvironmentName("server.tls_cert_file"), "CDCVIEW_SERVER_TLS_CERT_FILE");
  EXPECT_EQ(EnvironmentName("server.tokens_file"), "CDCVIEW_SERVER_TOKENS_FILE");
  absl::StatusOr<Config> config =
      Parse("", {{"server.tls_cert_file", "/tls/tls.crt", "CDCVIEW_SERVER_TLS_CERT_FILE"},
                 {"server.tls_key_file", "/tls/tls.key", "CDCVIEW_SERVER_TLS_KEY_FILE"},
                 {"server.tokens_file", "/auth/t.yaml", "CDCVIEW_SERVER_TOKENS_FILE"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server.tokens_file, "/auth/t.yaml");
  absl::StatusOr<Config> half =
      Parse("", {{"server.tokens_file", "/auth/t.yaml", "CDCVIEW_SERVER_TOKENS_FILE"}});
  ASSERT_FALSE(half.ok());
  EXPECT_EQ(Text(half.status()),
            "CDCVIEW_SERVER_TOKENS_FILE: server.tokens_file: tokens_file needs TLS, or a bearer "
            "token would cross the network in clear text: set tls_cert_file and tls_key_file too");
}

TEST(TlsConfigTest, AnEmptyPathIsRefused) {
  absl::StatusOr<Config> config = Parse("server: { tls_cert_file: \"\", tls_key_file: k }\n");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(Text(config.status()).substr(0, 30), "t.yaml:1: server.tls_cert_file");
}

}  // namespace
}  // namespace cdcview
