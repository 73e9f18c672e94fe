#include "daemon/security/certificate_watch.h"

#include <openssl/asn1.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <cstdio>
#include <ctime>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include "absl/strings/str_cat.h"
#include "daemon/log/log.h"
#include "daemon/security/tls_context.h"

namespace cdcview::security {
namespace {

std::string OpenSslError() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "no PEM data";
  char text[256];
  ERR_error_string_n(code, text, sizeof text);
  return text;
}

struct FileCloser {
  void operator()(FILE* f) const { fclose(f); }
};

}  // namespace

absl::Status CertificateWatch::CheckClientCa(const std::string& ca_file) {
  std::unique_ptr<FILE, FileCloser> in(fopen(ca_file.c_str(), "r"));
  if (in == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("server.tls_client_ca_file ", ca_file, ": cannot read it"));
  }
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      PEM_read_X509(in.get(), nullptr, nullptr, nullptr), &X509_free);
  if (cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("server.tls_client_ca_file ", ca_file,
                                                   ": not a PEM certificate (", OpenSslError(), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CertificateWatch::LoadPair(const std::string& cert_file,
                                                   const std::string& key_file) {
  const auto fail = [](const std::string& field, const std::string& path, const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(field, " ", path, ": ", why));
  };
  std::unique_ptr<FILE, FileCloser> cert_in(fopen(cert_file.c_str(), "r"));
  if (cert_in == nullptr) return fail("server.tls_cert_file", cert_file, "cannot read it");
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      PEM_read_X509(cert_in.get(), nullptr, nullptr, nullptr), &X509_free);
  if (cert == nullptr) {
    return fail("server.tls_cert_file", cert_file,
                absl::StrCat("not a PEM certificate (", OpenSslError(), ")"));
  }
  std::unique_ptr<FILE, FileCloser> key_in(fopen(key_file.c_str(), "r"));
  if (key_in == nullptr) return fail("server.tls_key_file", key_file, "cannot read it");
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      PEM_read_PrivateKey(key_in.get(), nullptr, &RefusePassphrase, nullptr), &EVP_PKEY_free);
  if (key == nullptr) {
    return fail("server.tls_key_file", key_file,
                absl::StrCat("not an unencrypted PEM private key (", OpenSslError(), ")"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return fail("server.tls_key_file", key_file,
                absl::StrCat("not the key of the certificate in ", cert_file));
  }
  struct tm not_after {};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(cert.get()), &not_after) != 1) {
    return fail("server.tls_cert_file", cert_file, "unreadable notAfter");
  }
  return static_cast<int64_t>(timegm(&not_after));
}

absl::StatusOr<std::unique_ptr<CertificateWatch>> CertificateWatch::Start(
    std::string cert_file, std::string key_file, prometheus::Registry* registry,
    const std::string& port, absl::Duration check_interval) {
  std::unique_ptr<CertificateWatch> watch(
      new CertificateWatch(std::move(cert_file), std::move(key_file), port, check_interval));
  const Files before = watch->Look();
  absl::StatusOr<int64_t> expiry = LoadPair(watch->cert_file_, watch->key_file_);
  if (!expiry.ok()) return expiry.status();
  watch->expiry_ = *expiry;
  watch->files_ = before;
  if (registry != nullptr) {
    auto& reloads = prometheus::BuildCounter()
                        .Name("cdcview_tls_reloads_total")
                        .Help("Times a port's TLS files changed and loaded (ok) or did not "
                              "(failed: the previous certificate stays in use).")
                        .Register(*registry);
    watch->ok_ = &reloads.Add({{"port", port}, {"result", "ok"}});
    watch->failed_ = &reloads.Add({{"port", port}, {"result", "failed"}});
    watch->expiry_gauge_ = &prometheus::BuildGauge()
                                .Name("cdcview_tls_certificate_expiry_timestamp_seconds")
                                .Help("notAfter of the certificate a port serves, Unix seconds.")
                                .Register(*registry)
                                .Add({{"port", port}});
    watch->expiry_gauge_->Set(static_cast<double>(*expiry));
  }
  CertificateWatch* self = watch.get();
  watch->thread_ = std::thread([self] { self->Main(); });
  return watch;
}

CertificateWatch::~CertificateWatch() { Stop(); }

void CertificateWatch::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

CertificateWatch::Files CertificateWatch::Look() const {
  Files out;
  for (int i = 0; i < 2; ++i) {
    struct stat st {};
    if (stat((i == 0 ? cert_file_ : key_file_).c_str(), &st) != 0) continue;  // stays zero
    out[i] = FileId{st.st_dev, st.st_ino, st.st_size,
                    int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec};
  }
  return out;
}

void CertificateWatch::Main() {
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stopping_), interval_)) {
    mu_.Unlock();
    Check();
    mu_.Lock();
  }
}

void CertificateWatch::Check() {
  const Files now = Look();
  if (now == files_) return;
  files_ = now;
  absl::StatusOr<int64_t> expiry = LoadPair(cert_file_, key_file_);
  if (!expiry.ok()) {
    LogWarning(absl::StrCat(port_, " port: the TLS files changed but do not load; the previous "
                            "certificate stays in use: ", expiry.status().message()));
    if (failed_ != nullptr) failed_->Increment();
    return;
  }
  expiry_ = *expiry;
  LogInfo(absl::StrCat(port_, " port: TLS certificate ", cert_file_, " reloaded"));
  if (ok_ != nullptr) ok_->Increment();
  if (expiry_gauge_ != nullptr) expiry_gauge_->Set(static_cast<double>(*expiry));
}

}  // namespace cdcview::security
