#include "daemon/security/tls_context.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <prometheus/registry.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"
#include "tests/fakes/test_pki.h"

namespace cdcview::security {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// What a client saw of one handshake, driven in memory between a client SSL and `server`.
struct Handshake {
  bool ok = false;          // both sides finished and the server accepted the client
  std::string alpn;         // the protocol the server selected
  long peer_serial = -1;    // the serial of the certificate the server presented
  std::string server_error; // OpenSSL's reason when the server side failed
  int version = 0;          // the TLS version agreed
};

struct ClientOptions {
  std::vector<std::string> alpn;
  std::string ca_file;  // verify the server against it when set
  test::TestPki::Pair client_pair;
  int max_version = 0;  // the client's highest TLS version; 0: OpenSSL's
};
ClientOptions OfferingAlpn(std::vector<std::string> alpn) {
  ClientOptions options;
  options.alpn = std::move(alpn);
  return options;
}
ClientOptions WithCertificate(test::TestPki::Pair pair) {
  ClientOptions options;
  options.client_pair = std::move(pair);
  return options;
}
ClientOptions UpToVersion(int max_version) {
  ClientOptions options;
  options.max_version = max_version;
  return options;
}

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

Handshake RunHandshake(SSL* server, const ClientOptions& options) {
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> client_ctx(SSL_CTX_new(TLS_client_method()),
                                                                SSL_CTX_free);
  if (!options.ca_file.empty()) {
    EXPECT_EQ(SSL_CTX_load_verify_locations(client_ctx.get(), options.ca_file.c_str(), nullptr),
              1);
    SSL_CTX_set_verify(client_ctx.get(), SSL_VERIFY_PEER, nullptr);
  }
  if (options.max_version != 0) {
    // Old versions need the lowest security level to be offered at all.
    SSL_CTX_set_security_level(client_ctx.get(), 0);
    SSL_CTX_set_min_proto_version(client_ctx.get(), TLS1_VERSION);
    SSL_CTX_set_max_proto_version(client_ctx.get(), options.max_version);
  }
  if (!options.client_pair.cert.empty()) {
    EXPECT_EQ(SSL_CTX_use_certificate_chain_file(client_ctx.get(),
                                                 options.client_pair.cert.c_str()),
              1);
    EXPECT_EQ(SSL_CTX_use_PrivateKey_file(client_ctx.get(), options.client_pair.key.c_str(),
                                          SSL_FILETYPE_PEM),
              1);
  }
  std::unique_ptr<SSL, decltype(&SSL_free)> client(SSL_new(client_ctx.get()), SSL_free);
  SSL_set_tlsext_host_name(client.get(), "localhost");
  if (!options.alpn.empty()) {
    std::string wire;
    for (const std::string& p : options.alpn) wire += static_cast<char>(p.size()) + p;
    SSL_set_alpn_protos(client.get(), reinterpret_cast<const unsigned char*>(wire.data()),
                        wire.size());
  }
  BIO* client_bio = nullptr;
  BIO* server_bio = nullptr;
  BIO_new_bio_pair(&client_bio, 0, &server_bio, 0);
  SSL_set_bio(client.get(), client_bio, client_bio);
  SSL_set_bio(server, server_bio, server_bio);
  SSL_set_connect_state(client.get());
  SSL_set_accept_state(server);

  Handshake result;
  bool client_done = false;
  bool server_done = false;
  bool failed = false;
  for (int round = 0; round < 50 && !failed && !(client_done && server_done); ++round) {
    if (!client_done) {
      int rc = SSL_do_handshake(client.get());
      int error = SSL_get_error(client.get(), rc);
      client_done = rc == 1;
      failed = rc != 1 && error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE;
    }
    if (!server_done && !failed) {
      ERR_clear_error();
      int rc = SSL_do_handshake(server);
      int error = SSL_get_error(server, rc);
      server_done = rc == 1;
      if (rc != 1 && error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE) {
        failed = true;
        char text[256];
        ERR_error_string_n(ERR_peek_error(), text, sizeof(text));
        result.server_error = text;
      }
    }
  }
  if (client_done && server_done) {
    // TLS 1.3 verifies the client's certificate after the client finished: a byte exchanged
    // proves the server accepted it.
    char byte = 'x';
    EXPECT_EQ(SSL_write(client.get(), &byte, 1), 1);
    char got = 0;
    result.ok = SSL_read(server, &got, 1) == 1 && got == 'x';
    result.version = SSL_version(client.get());
  }
  const unsigned char* alpn = nullptr;
  unsigned int alpn_length = 0;
  SSL_get0_alpn_selected(client.get(), &alpn, &alpn_length);
  result.alpn.assign(reinterpret_cast<const char*>(alpn), alpn_length);
  if (X509* peer = SSL_get0_peer_certificate(client.get())) {
    result.peer_serial = ASN1_INTEGER_get(X509_get0_serialNumber(peer));
  }
  return result;
}

class TlsServerContextTest : public ::testing::Test {
 protected:
  TlsServerContextTest() : pki_(dir_.path()) {
    auto pair = pki_.Server("server", 1001);
    server_.tls_cert_file = pair.cert;
    server_.tls_key_file = pair.key;
  }

  absl::StatusOr<std::shared_ptr<TlsServerContext>> Create(
      std::vector<std::string> alpn = {"h2"}) {
    TlsServerContext::Options options;
    options.port = "fast_reads";
    options.alpn = std::move(alpn);
    options.now = [this] { return now_; };
    return TlsServerContext::Create(server_, std::move(options), registry_);
  }

  Handshake Connect(SSL_CTX* ctx, ClientOptions options = {}) {
    if (options.ca_file.empty()) options.ca_file = pki_.ca_file();
    std::unique_ptr<SSL, decltype(&SSL_free)> server(SSL_new(ctx), SSL_free);
    return RunHandshake(server.get(), options);
  }

  double Metric(const std::string& name, const std::map<std::string, std::string>& labels) {
    for (const auto& family : registry_.Collect()) {
      if (family.name != name) continue;
      for (const auto& metric : family.metric) {
        std::map<std::string, std::string> got;
        for (const auto& label : metric.label) got[label.name] = label.value;
        if (got != labels) continue;
        return family.type == prometheus::MetricType::Counter ? metric.counter.value
                                                              : metric.gauge.value;
      }
    }
    return -1;
  }
  double Reloads(const std::string& result) {
    return Metric("cdcview_tls_reloads_total", {{"port", "fast_reads"}, {"result", result}});
  }

  // Replaces the serving files by those of a new server certificate (a rename, as a Secret
  // volume's swap does).
  void Rotate(long serial) {
    auto pair = pki_.Server("next", serial);
    std::filesystem::rename(pair.cert, server_.tls_cert_file);
    std::filesystem::rename(pair.key, server_.tls_key_file);
  }

  test::TempDir dir_;
  test::TestPki pki_;
  ServerConfig server_;
  prometheus::Registry registry_;
  absl::Time now_ = absl::FromUnixSeconds(1'000'000);
};

TEST_F(TlsServerContextTest, ServesTheCertificateAndSelectsH2) {
  auto context = Create();
  ASSERT_TRUE(context.ok()) << context.status();
  Handshake shake = Connect((*context)->Current().get(), OfferingAlpn({"http/1.1", "h2"}));
  EXPECT_TRUE(shake.ok) << shake.server_error;
  EXPECT_EQ(shake.alpn, "h2");
  EXPECT_EQ(shake.peer_serial, 1001);
  EXPECT_EQ(Reloads("ok"), 0);
  EXPECT_EQ(Reloads("failed"), 0);
}

TEST_F(TlsServerContextTest, RefusesAlpnWithoutH2AndAcceptsNoAlpn) {
  auto context = Create();
  ASSERT_TRUE(context.ok()) << context.status();
  Handshake http1 = Connect((*context)->Current().get(), OfferingAlpn({"http/1.1"}));
  EXPECT_FALSE(http1.ok);
  EXPECT_THAT(http1.server_error, HasSubstr("no application protocol"));
  Handshake none = Connect((*context)->Current().get());
  EXPECT_TRUE(none.ok) << none.server_error;
  EXPECT_EQ(none.alpn, "");
}

TEST_F(TlsServerContextTest, WithoutAlpnListIgnoresTheClientsOffer) {
  auto context = Create(/*alpn=*/{});
  ASSERT_TRUE(context.ok()) << context.status();
  Handshake shake = Connect((*context)->Current().get(), OfferingAlpn({"http/1.1"}));
  EXPECT_TRUE(shake.ok) << shake.server_error;
  EXPECT_EQ(shake.alpn, "");
}

TEST_F(TlsServerContextTest, SpeaksTls13AndTls12Only) {
  auto context = Create();
  ASSERT_TRUE(context.ok()) << context.status();
  SSL_CTX* ctx = (*context)->Current().get();
  Handshake latest = Connect(ctx);
  EXPECT_TRUE(latest.ok) << latest.server_error;
  EXPECT_EQ(latest.version, TLS1_3_VERSION);
  Handshake tls12 = Connect(ctx, UpToVersion(TLS1_2_VERSION));
  EXPECT_TRUE(tls12.ok) << tls12.server_error;
  EXPECT_EQ(tls12.version, TLS1_2_VERSION);
  Handshake tls11 = Connect(ctx, UpToVersion(TLS1_1_VERSION));
  EXPECT_FALSE(tls11.ok);
  EXPECT_THAT(tls11.server_error, HasSubstr("unsupported protocol"));
}

TEST_F(TlsServerContextTest, CreateNamesTheFileThatDoesNotLoad) {
  server_.tls_cert_file = dir_.Sub("missing.crt");
  auto missing = Create();
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(missing.status().message()),
              StartsWith("server.tls_cert_file " + dir_.Sub("missing.crt") +
                         ": not a PEM certificate chain: "));

  server_.tls_cert_file = pki_.Server("a", 1).cert;
  server_.tls_key_file = pki_.Server("b", 2).key;
  auto mismatch = Create();
  ASSERT_FALSE(mismatch.ok());
  EXPECT_THAT(std::string(mismatch.status().message()),
              StartsWith("server.tls_key_file " + server_.tls_key_file +
                         " is not the key of the certificate in server.tls_cert_file " +
                         server_.tls_cert_file + ": "));

  server_.tls_key_file = "";
  auto no_key = Create();
  EXPECT_EQ(no_key.status(), absl::InvalidArgumentError(
                                 "TLS needs both server.tls_cert_file and server.tls_key_file"));
}

TEST_F(TlsServerContextTest, ReloadsAChangedCertificateAtMostOncePerInterval) {
  auto context = Create();
  ASSERT_TRUE(context.ok()) << context.status();
  std::shared_ptr<SSL_CTX> first = (*context)->Current();
  Rotate(2002);
  now_ += absl::Milliseconds(999);
  EXPECT_EQ((*context)->Current(), first) << "looked before the interval passed";
  now_ += absl::Milliseconds(1);
  std::shared_ptr<SSL_CTX> second = (*context)->Current();
  EXPECT_NE(second, first);
  EXPECT_EQ(Connect(second.get()).peer_serial, 2002);
  // A connection made before keeps its context and certificate.
  EXPECT_EQ(Connect(first.get()).peer_serial, 1001);
  EXPECT_EQ(Reloads("ok"), 1);
  EXPECT_EQ(Reloads("failed"), 0);
  // Unchanged files: no rebuild.
  now_ += absl::Seconds(5);
  EXPECT_EQ((*context)->Current(), second);
  EXPECT_EQ(Reloads("ok"), 1);
}

TEST_F(TlsServerContextTest, AFileThatDoesNotLoadKeepsThePreviousContext) {
  auto context = Create();
  ASSERT_TRUE(context.ok()) << context.status();
  std::shared_ptr<SSL_CTX> first = (*context)->Current();

  // Half of the certificate written.
  std::string pem = Read(pki_.Server("half", 3003).cert);
  std::ofstream(server_.tls_cert_file, std::ios::trunc) << pem.substr(0, pem.size() / 2);
  now_ += absl::Seconds(1);
  EXPECT_EQ((*context)->Current(), first);
  EXPECT_EQ(Reloads("failed"), 1);
  // Not retried while the files stay as they are.
  now_ += absl::Seconds(1);
  EXPECT_EQ((*context)->Current(), first);
  EXPECT_EQ(Reloads("failed"), 1);
  EXPECT_EQ(Connect(first.get()).peer_serial, 1001);

  // The whole new certificate, but its key not yet: the key does not match.
  auto next = pki_.Server("next", 3003);
  std::filesystem::rename(next.cert, server_.tls_cert_file);
  now_ += absl::Seconds(1);
  EXPECT_EQ((*context)->Current(), first);
  EXPECT_EQ(Reloads("failed"), 2);

  // Then the key.
  std::filesystem::rename(next.key, server_.tls_key_file);
  now_ += absl::Seconds(1);
  std::shared_ptr<SSL_CTX> second = (*context)->Current();
  EXPECT_NE(second, first);
  EXPECT_EQ(Connect(second.get()).peer_serial, 3003);
  EXPECT_EQ(Reloads("ok"), 1);
  EXPECT_EQ(Reloads("failed"), 2);
}

TEST_F(TlsServerContextTest, ExpiryGaugeIsTheNotAfterInUse) {
  auto context = Create();
  ASSERT_TRUE(context.ok()) << context.status();
  std::shared_ptr<SSL_CTX> ctx = (*context)->Current();
  struct tm tm = {};
  ASSERT_EQ(ASN1_TIME_to_tm(X509_get0_notAfter(SSL_CTX_get0_certificate(ctx.get())), &tm), 1);
  EXPECT_EQ(Metric("cdcview_tls_certificate_expiry_timestamp_seconds", {{"port", "fast_reads"}}),
            static_cast<double>(timegm(&tm)));
}

TEST_F(TlsServerContextTest, ClientCaRequiresAClientCertificateItSigned) {
  server_.tls_client_ca_file = pki_.ca_file();
  auto context = Create();
  ASSERT_TRUE(context.ok()) << context.status();
  SSL_CTX* ctx = (*context)->Current().get();

  Handshake none = Connect(ctx);
  EXPECT_FALSE(none.ok);
  EXPECT_THAT(none.server_error, HasSubstr("peer did not return a certificate"));

  Handshake other = Connect(ctx, WithCertificate(pki_.Client("stranger", /*other_ca=*/true)));
  EXPECT_FALSE(other.ok);
  EXPECT_THAT(other.server_error, HasSubstr("certificate verify failed"));

  Handshake signed_by_ca = Connect(ctx, WithCertificate(pki_.Client("client")));
  EXPECT_TRUE(signed_by_ca.ok) << signed_by_ca.server_error;
}

}  // namespace
}  // namespace cdcview::security
