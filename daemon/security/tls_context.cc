#include "daemon/security/tls_context.h"

#include <openssl/bn.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <sys/stat.h>

#include <ctime>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/log/log.h"

namespace cdcview::security {
namespace {

// TLS 1.2's suites: forward secrecy and AEAD only, the ones HTTP/2 allows. TLS 1.3's suites
// are all AEAD and keep OpenSSL's default list.
constexpr char kTls12Ciphers[] =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";
// Sessions a client resumes are bound to this context id; OpenSSL refuses to resume a session
// of a verified client without one.
constexpr unsigned char kSessionIdContext[] = "cdcview";

// OpenSSL's error queue of this thread as one line, emptied.
std::string OpenSslErrors() {
  std::vector<std::string> errors;
  while (unsigned long code = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(code, text, sizeof(text));
    errors.emplace_back(text);
  }
  return errors.empty() ? "no OpenSSL error given" : absl::StrJoin(errors, "; ");
}

// The ALPN list in wire format (length-prefixed names), owned by the SSL_CTX it serves through
// ex_data so that it lives exactly as long as the context, which may outlive its
// TlsServerContext while a connection holds it.
void FreeAlpn(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) {
  delete static_cast<std::string*>(ptr);
}
int AlpnIndex() {
  static const int index =
      SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, &FreeAlpn);
  return index;
}

int SelectAlpn(SSL*, const unsigned char** out, unsigned char* out_length,
               const unsigned char* offered, unsigned int offered_length, void* ours) {
  const auto* wire = static_cast<const std::string*>(ours);
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, out_length,
                            reinterpret_cast<const unsigned char*>(wire->data()),
                            static_cast<unsigned int>(wire->size()), offered,
                            offered_length) != OPENSSL_NPN_NEGOTIATED) {
    // Offered ALPN, none of it ours: no_application_protocol (RFC 7301 section 3.2).
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

std::string SerialHex(X509* cert) {
  BIGNUM* serial = ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), nullptr);
  if (serial == nullptr) return "?";
  char* hex = BN_bn2hex(serial);
  std::string result = hex != nullptr ? hex : "?";
  OPENSSL_free(hex);
  BN_free(serial);
  return result;
}

// notAfter as seconds since the epoch, or -1 when it does not convert.
int64_t NotAfter(X509* cert) {
  struct tm tm = {};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(cert), &tm) != 1) return -1;
  return static_cast<int64_t>(timegm(&tm));
}

}  // namespace

TlsServerContext::TlsServerContext(const ServerConfig& server, Options options,
                                   prometheus::Registry& registry)
    : cert_file_(server.tls_cert_file),
      key_file_(server.tls_key_file),
      client_ca_file_(server.tls_client_ca_file),
      options_(std::move(options)) {
  // The fast port and /metrics register the same families: the registry hands the second the
  // family the first made.
  auto& reloads = prometheus::BuildCounter()
                      .Name("cdcview_tls_reloads_total")
                      .Help("Rebuilds of a port's TLS context after its certificate, key or "
                            "client CA file changed: ok, or failed (the previous one kept).")
                      .Register(registry);
  reloads_ok_ = &reloads.Add({{"port", options_.port}, {"result", "ok"}});
  reloads_failed_ = &reloads.Add({{"port", options_.port}, {"result", "failed"}});
  expiry_ = &prometheus::BuildGauge()
                 .Name("cdcview_tls_certificate_expiry_timestamp_seconds")
                 .Help("notAfter of the certificate a port serves, seconds since the epoch.")
                 .Register(registry)
                 .Add({{"port", options_.port}});
}

TlsServerContext::~TlsServerContext() = default;

absl::StatusOr<std::shared_ptr<TlsServerContext>> TlsServerContext::Create(
    const ServerConfig& server, Options options, prometheus::Registry& registry) {
  if (server.tls_cert_file.empty() || server.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs both server.tls_cert_file and server.tls_key_file");
  }
  std::shared_ptr<TlsServerContext> context(
      new TlsServerContext(server, std::move(options), registry));
  absl::MutexLock lock(&context->mu_);
  context->last_check_ = context->options_.now();
  Stamps stamps = context->Stat();
  absl::StatusOr<std::shared_ptr<SSL_CTX>> built = context->Build();
  if (!built.ok()) return built.status();
  context->loaded_ = std::move(stamps);
  context->Use(*std::move(built));
  return context;
}

TlsServerContext::Stamps TlsServerContext::Stat() const {
  Stamps stamps;
  for (const std::string* path : {&cert_file_, &key_file_, &client_ca_file_}) {
    FileStamp stamp;
    struct stat st;
    // stat follows symbolic links: a Secret volume swaps its ..data link, and the files the
    // links reach then have new inodes.
    if (!path->empty() && stat(path->c_str(), &st) == 0) {
      stamp.exists = true;
      stamp.device = st.st_dev;
      stamp.inode = st.st_ino;
      stamp.size = st.st_size;
      stamp.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
    }
    stamps.push_back(stamp);
  }
  return stamps;
}

absl::StatusOr<std::shared_ptr<SSL_CTX>> TlsServerContext::Build() const {
  ERR_clear_error();
  std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(TLS_server_method()), SSL_CTX_free);
  if (ctx == nullptr) {
    return absl::InternalError(absl::StrCat("SSL_CTX_new: ", OpenSslErrors()));
  }
  SSL_CTX* raw = ctx.get();
  SSL_CTX_set_min_proto_version(raw, TLS1_2_VERSION);
  SSL_CTX_set_options(raw, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
                               SSL_OP_CIPHER_SERVER_PREFERENCE);
  SSL_CTX_set_default_passwd_cb(raw, &RefusePassphrase);
  SSL_CTX_set_session_id_context(raw, kSessionIdContext, sizeof(kSessionIdContext) - 1);
  if (SSL_CTX_set_cipher_list(raw, kTls12Ciphers) != 1) {
    return absl::InternalError(absl::StrCat("TLS 1.2 cipher list: ", OpenSslErrors()));
  }
  if (SSL_CTX_use_certificate_chain_file(raw, cert_file_.c_str()) != 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "server.tls_cert_file ", cert_file_, ": not a PEM certificate chain: ", OpenSslErrors()));
  }
  // Parsed apart from SSL_CTX_use_PrivateKey, which also matches it against the certificate,
  // to tell a file that is not a key from a key of another certificate.
  std::unique_ptr<BIO, decltype(&BIO_free)> key_bio(BIO_new_file(key_file_.c_str(), "r"),
                                                    BIO_free);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      key_bio == nullptr
          ? nullptr
          : PEM_read_bio_PrivateKey(key_bio.get(), nullptr, &RefusePassphrase, nullptr),
      EVP_PKEY_free);
  if (key == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "server.tls_key_file ", key_file_, ": not an unencrypted PEM private key: ",
        OpenSslErrors()));
  }
  if (SSL_CTX_use_PrivateKey(raw, key.get()) != 1 || SSL_CTX_check_private_key(raw) != 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("server.tls_key_file ", key_file_,
                     " is not the key of the certificate in server.tls_cert_file ", cert_file_,
                     ": ", OpenSslErrors()));
  }
  if (!client_ca_file_.empty()) {
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(client_ca_file_.c_str());
    if (names == nullptr ||
        SSL_CTX_load_verify_locations(raw, client_ca_file_.c_str(), nullptr) != 1) {
      sk_X509_NAME_pop_free(names, X509_NAME_free);
      return absl::FailedPreconditionError(
          absl::StrCat("server.tls_client_ca_file ", client_ca_file_,
                       ": not a PEM CA certificate: ", OpenSslErrors()));
    }
    SSL_CTX_set_client_CA_list(raw, names);
    SSL_CTX_set_verify(raw, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  if (!options_.alpn.empty()) {
    auto* wire = new std::string();
    for (const std::string& protocol : options_.alpn) {
      wire->push_back(static_cast<char>(protocol.size()));
      wire->append(protocol);
    }
    SSL_CTX_set_ex_data(raw, AlpnIndex(), wire);
    SSL_CTX_set_alpn_select_cb(raw, &SelectAlpn, wire);
  }
  return ctx;
}

void TlsServerContext::Use(std::shared_ptr<SSL_CTX> ctx) {
  X509* leaf = SSL_CTX_get0_certificate(ctx.get());
  int64_t not_after = NotAfter(leaf);
  expiry_->Set(static_cast<double>(not_after));
  LogInfo(absl::StrCat(options_.port, " TLS: serving the certificate of ", cert_file_,
                       " (serial ", SerialHex(leaf), ", notAfter ",
                       absl::FormatTime(absl::FromUnixSeconds(not_after), absl::UTCTimeZone()),
                       ")", client_ca_file_.empty()
                                ? ""
                                : absl::StrCat(", client certificates of ", client_ca_file_)));
  current_ = std::move(ctx);
}

std::shared_ptr<SSL_CTX> TlsServerContext::Current() {
  absl::MutexLock lock(&mu_);
  absl::Time now = options_.now();
  if (now - last_check_ < options_.check_interval) return current_;
  last_check_ = now;
  Stamps stamps = Stat();
  if (stamps == loaded_ || stamps == failed_) return current_;
  absl::StatusOr<std::shared_ptr<SSL_CTX>> built = Build();
  if (!built.ok()) {
    failed_ = std::move(stamps);
    reloads_failed_->Increment();
    LogWarning(absl::StrCat(options_.port,
                            " TLS: the changed files do not load, the previous certificate "
                            "stays in use until they change again: ",
                            built.status().message()));
    return current_;
  }
  loaded_ = std::move(stamps);
  failed_.clear();
  reloads_ok_->Increment();
  Use(*std::move(built));
  return current_;
}

int RefusePassphrase(char*, int, int, void*) { return 0; }

}  // namespace cdcview::security
