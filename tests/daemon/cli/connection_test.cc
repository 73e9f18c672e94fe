#include "daemon/cli/connection.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace cdcview {
namespace {

constexpr char kCert[] = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
constexpr char kKey[] = "-----BEGIN EC PRIVATE KEY-----\nMHcC\n-----END EC PRIVATE KEY-----\n";

class ConnectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("connection_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }

  std::filesystem::path dir_;
};

TEST_F(ConnectionTest, PlaintextWithoutFlags) {
  ConnectionFlags flags;
  EXPECT_FALSE(flags.tls());
  auto secrets = LoadConnectionSecrets(flags);
  ASSERT_TRUE(secrets.ok()) << secrets.status();
  EXPECT_EQ(secrets->token, "");
}

TEST_F(ConnectionTest, ReadsTheFilesAndTrimsTheToken) {
  ConnectionFlags flags;
  flags.tls_ca = Write("ca.crt", kCert);
  flags.cert = Write("client.crt", kCert);
  flags.key = Write("client.key", kKey);
  flags.token_file = Write("token", "  s3cret-token-0123456789\n\n");
  EXPECT_TRUE(flags.tls());
  auto secrets = LoadConnectionSecrets(flags);
  ASSERT_TRUE(secrets.ok()) << secrets.status();
  EXPECT_EQ(secrets->ca_pem, kCert);
  EXPECT_EQ(secrets->cert_pem, kCert);
  EXPECT_EQ(secrets->key_pem, kKey);
  EXPECT_EQ(secrets->token, "s3cret-token-0123456789");
}

TEST_F(ConnectionTest, AFlagWithoutItsPartnerSaysWhichIsMissing) {
  ConnectionFlags cert_only;
  cert_only.cert = Write("client.crt", kCert);
  EXPECT_EQ(LoadConnectionSecrets(cert_only).status().message(),
            "--cert needs --key (the client certificate's private key, PEM)");
  ConnectionFlags key_only;
  key_only.key = Write("client.key", kKey);
  EXPECT_EQ(LoadConnectionSecrets(key_only).status().message(),
            "--key needs --cert (the client certificate, PEM, that goes with the private key)");
  ConnectionFlags token_in_clear;
  token_in_clear.token_file = Write("token", "s3cret-token-0123456789");
  EXPECT_EQ(LoadConnectionSecrets(token_in_clear).status().message(),
            "--token-file needs TLS: pass --tls-ca FILE (the CA that signed the server's "
            "certificate); a bearer token sent in clear text is given to anyone on the path");
  ConnectionFlags name_in_clear;
  name_in_clear.server_name = "cdcview.example";
  EXPECT_EQ(LoadConnectionSecrets(name_in_clear).status().message(),
            "--server-name needs TLS: pass --tls-ca FILE (the CA that signed the server's "
            "certificate)");
}

TEST_F(ConnectionTest, UnreadableOrWrongFilesNameTheFlagAndThePath) {
  ConnectionFlags missing;
  missing.tls_ca = (dir_ / "nope.crt").string();
  EXPECT_EQ(LoadConnectionSecrets(missing).status().message(),
            "--tls-ca " + missing.tls_ca + ": cannot read it: No such file or directory");
  ConnectionFlags not_pem;
  not_pem.tls_ca = Write("ca.txt", "hello");
  EXPECT_EQ(LoadConnectionSecrets(not_pem).status().message(),
            "--tls-ca " + not_pem.tls_ca +
                ": not a PEM certificate (no \"-----BEGIN CERTIFICATE...-----\" line)");
  ConnectionFlags key_is_cert;
  key_is_cert.cert = Write("client.crt", kCert);
  key_is_cert.key = Write("client.key", kCert);
  EXPECT_EQ(LoadConnectionSecrets(key_is_cert).status().message(),
            "--key " + key_is_cert.key +
                ": not a PEM private key (no \"-----BEGIN ...PRIVATE KEY-----\" line)");
}

TEST_F(ConnectionTest, AnEmptyOrMultiWordTokenFileIsRefusedWithoutPrintingIt) {
  ConnectionFlags empty;
  empty.tls_ca = Write("ca.crt", kCert);
  empty.token_file = Write("token", " \n");
  EXPECT_EQ(LoadConnectionSecrets(empty).status().message(),
            "--token-file " + empty.token_file +
                ": the file is empty (it should hold the bearer token: the token: of an entry "
                "in the server's server.tokens_file)");
  ConnectionFlags two = empty;
  two.token_file = Write("token2", "first-secret-0123456789 second-secret-0123456789\n");
  std::string message(LoadConnectionSecrets(two).status().message());
  EXPECT_EQ(message, "--token-file " + two.token_file +
                         ": the token has white space or a control character inside; the file "
                         "should hold the token alone, on one line");
  EXPECT_EQ(message.find("secret"), std::string::npos);
}

// The messages below are what gRPC 1.51's C++ client reports for each failure.
TEST_F(ConnectionTest, HintsNameTheFlagThatLikelyFixesTheFailure) {
  ConnectionFlags plain;
  plain.addr = "127.0.0.1:50051";
  ConnectionFlags tls = plain;
  tls.tls_ca = "ca.crt";
  ConnectionFlags with_token = tls;
  with_token.token_file = "token";
  ConnectionFlags mtls = tls;
  mtls.cert = "client.crt";
  mtls.key = "client.key";

  EXPECT_EQ(ConnectionHint(grpc::UNAUTHENTICATED, "no bearer token", tls),
            " (the server wants a bearer token: pass --token-file FILE)");
  // The server's own message already names the flag.
  EXPECT_EQ(ConnectionHint(grpc::UNAUTHENTICATED,
                           "no bearer token: send the header \"authorization: Bearer <token>\" "
                           "(cdcview --token-file FILE)",
                           tls),
            "");
  EXPECT_EQ(ConnectionHint(grpc::UNAUTHENTICATED,
                           "the bearer token is not one of server.tokens_file's tokens", with_token),
            " (the token in --token-file token)");
  EXPECT_EQ(ConnectionHint(grpc::PERMISSION_DENIED, "token \"a\" may not read view \"v\"", with_token),
            " (the token in --token-file token)");

  // gRPC's UNAVAILABLE messages end in "ipv4:127.0.0.1:50051: <this>".
  struct Case {
    const char* failure;
    const ConnectionFlags& flags;
    const char* hint;
  };
  const Case cases[] = {
      {"Ssl handshake failed: SSL_ERROR_SSL: error:0A000086:SSL routines::certificate verify "
       "failed",
       tls,
       " (TLS handshake failed: pass --tls-ca with the CA that signed the server's "
       "certificate)"},
      {"Ssl handshake failed: SSL_ERROR_SSL: error:0A00010B:SSL routines::wrong version number",
       tls,
       " (TLS handshake failed: the server does not speak TLS on --addr: drop --tls-ca, --cert "
       "and --key, or check the port)"},
      {"Socket closed", plain,
       " (the server closed the connection: if cdcviewd on 127.0.0.1:50051 uses TLS, pass "
       "--tls-ca with the CA that signed its certificate)"},
      {"Socket closed", tls,
       " (the server closed the connection: if it requires a client certificate "
       "(server.tls_client_ca_file), pass --cert FILE --key FILE)"},
      // What a server that refused the client's certificate after the handshake leaves.
      {"Endpoint read failed", tls,
       " (the server closed the connection: if it requires a client certificate "
       "(server.tls_client_ca_file), pass --cert FILE --key FILE)"},
      {"Socket closed", mtls,
       " (the server closed the connection: it may not accept the client certificate in "
       "--cert, which must be signed by the CA in its server.tls_client_ca_file)"},
      {"Peer name 10.0.0.7 is not in peer certificate", tls,
       " (the server's certificate does not name the host in --addr: pass --server-name with a "
       "name it holds)"},
      {"Failed to connect to remote host: Connection refused", plain,
       " (is cdcviewd running on 127.0.0.1:50051?)"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ConnectionHint(grpc::UNAVAILABLE,
                             std::string("failed to connect to all addresses; last error: "
                                         "UNKNOWN: ipv4:127.0.0.1:50051: ") +
                                 c.failure,
                             c.flags),
              c.hint)
        << c.failure;
  }
  EXPECT_EQ(ConnectionHint(grpc::NOT_FOUND, "no view \"x\"", with_token), "");
}

}  // namespace
}  // namespace cdcview
