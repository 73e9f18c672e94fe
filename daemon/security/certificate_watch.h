// CertificateWatch: watches a listener's certificate and key files for the metrics and the log,
// for a server that reloads them itself (the main gRPC port: gRPC's FileWatcherCertificateProvider
// re-reads the same files; this class never hands a certificate to anyone).
//
//   cdcview_tls_reloads_total{port,result="ok|failed"}           the files changed and load as a
//       matching certificate and key (ok), or do not (failed: the server keeps the previous pair)
//   cdcview_tls_certificate_expiry_timestamp_seconds{port}        notAfter of the certificate that
//       loaded last, in Unix seconds
//
// Start loads the pair once and fails when it does not load, so that a wrong path or a key of
// another certificate stops the daemon with the file named instead of failing every handshake.
// Then a thread looks at the files (inode, size, mtime) every check interval.
//
// Thread-safety: the thread is the only writer; Stop (and the destructor) join it. Owns it.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace prometheus {
class Counter;
class Gauge;
class Registry;
}  // namespace prometheus

namespace cdcview::security {

class CertificateWatch {
 public:
  // INVALID_ARGUMENT naming server.tls_cert_file or server.tls_key_file when the pair does not
  // load (unreadable, not PEM, the key not the certificate's). `registry` may be null.
  static absl::StatusOr<std::unique_ptr<CertificateWatch>> Start(
      std::string cert_file, std::string key_file, prometheus::Registry* registry,
      const std::string& port, absl::Duration check_interval = absl::Seconds(1));
  ~CertificateWatch();
  void Stop();

  // notAfter of the pair that loaded last (Unix seconds).
  int64_t expiry() const { return expiry_.load(); }

  // OK when `ca_file` (server.tls_client_ca_file) holds at least one PEM certificate; else
  // INVALID_ARGUMENT naming the field and the file.
  static absl::Status CheckClientCa(const std::string& ca_file);
  // Loads `cert_file` and `key_file`; the certificate's notAfter, or the error.
  static absl::StatusOr<int64_t> LoadPair(const std::string& cert_file, const std::string& key_file);

 private:
  struct FileId {
    uint64_t dev = 0, ino = 0;
    int64_t size = 0, mtime_ns = 0;
    bool operator==(const FileId&) const = default;
  };
  using Files = std::array<FileId, 2>;  // the certificate's, the key's
  CertificateWatch(std::string cert_file, std::string key_file, std::string port,
                   absl::Duration interval)
      : cert_file_(std::move(cert_file)), key_file_(std::move(key_file)), port_(std::move(port)),
        interval_(interval) {}
  Files Look() const;
  void Main();
  void Check();

  const std::string cert_file_;
  const std::string key_file_;
  const std::string port_;
  const absl::Duration interval_;
  std::atomic<int64_t> expiry_{0};
  prometheus::Counter* ok_ = nullptr;
  prometheus::Counter* failed_ = nullptr;
  prometheus::Gauge* expiry_gauge_ = nullptr;
  Files files_;  // the thread's: what the files were at the last look
  std::thread thread_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cdcview::security
