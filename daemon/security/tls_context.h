// TlsServerContext: the OpenSSL server context of one of our own TLS listeners (the fast read
// port, HTTPS /metrics), built from server.tls_cert_file, tls_key_file and, when set,
// tls_client_ca_file, and rebuilt when one of those files changes (Kubernetes swaps a mounted
// Secret's files; cert-manager renews them).
//
// Every context it builds: TLS 1.2 or 1.3 (1.3 preferred by OpenSSL's negotiation), TLS 1.2
// only with ECDHE and AEAD ciphers (RFC 9113 section 9.2.2 forbids HTTP/2 over the others), no
// renegotiation, no compression; the certificate chain (leaf first) and the private key, which
// must match; with a client CA, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT against that
// CA, so a client without a certificate the CA signed fails the handshake.
//
// ALPN: a client that offers ALPN without any of `alpn`'s protocols fails the handshake with
// the no_application_protocol alert (as gRPC servers do); a client that offers no ALPN at all
// is accepted (a client that speaks HTTP/2 with prior knowledge over TLS).
//
// Reload: Current() looks at the files' inode, size and modification time at most once per
// check interval (a second); when one changed it builds a new context. A build that fails (a
// half-written file, a key that does not match the certificate) keeps the previous context,
// logs a warning and counts cdcview_tls_reloads_total{port,result="failed"}; the same files
// are not retried until they change again. Connections already open keep the context they
// started with. cdcview_tls_certificate_expiry_timestamp_seconds{port} is the notAfter of the
// leaf in use.
//
// Thread-safe: Current() may run on any thread;
// the check and the rebuild take a mutex, the SSL_CTX handed out is shared and immutable.
// Ownership: Current()'s SSL_CTX lives as long as any holder of its shared_ptr (each
// connection's SSL holds its own reference besides).
#pragma once

#include <openssl/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/config/config.h"

namespace prometheus {
class Registry;
class Counter;
class Gauge;
}  // namespace prometheus

namespace cdcview::security {

// An OpenSSL pem_password_cb that supplies no passphrase: an encrypted key file fails to load
// instead of OpenSSL's default callback prompting on the terminal.
int RefusePassphrase(char* buffer, int size, int rwflag, void* user);

class TlsServerContext {
 public:
  struct Options {
    // The port label of the metrics: "fast_reads", "metrics".
    std::string port;
    // Protocols the server selects from the client's ALPN list, in preference order ("h2");
    // empty: no ALPN callback (the client's offer is ignored).
    std::vector<std::string> alpn;
    // How often Current() looks at the files at most.
    absl::Duration check_interval = absl::Seconds(1);
    // The clock of that check; tests inject one.
    std::function<absl::Time()> now = absl::Now;
  };

  // Builds the first context from server.tls_cert_file, tls_key_file and tls_client_ca_file.
  // INVALID_ARGUMENT when tls_cert_file or tls_key_file is empty; FAILED_PRECONDITION naming
  // the file and OpenSSL's reason when a file cannot be read or parsed, or the key does not
  // match the certificate. The metrics are registered on `registry`, which must outlive this.
  static absl::StatusOr<std::shared_ptr<TlsServerContext>> Create(const ServerConfig& server,
                                                                  Options options,
                                                                  prometheus::Registry& registry);
  ~TlsServerContext();
  TlsServerContext(const TlsServerContext&) = delete;
  TlsServerContext& operator=(const TlsServerContext&) = delete;

  // The SSL_CTX for a new connection (never null). Reloads the files first when the check
  // interval has passed and one of them changed; see the header comment.
  std::shared_ptr<SSL_CTX> Current();

 private:
  // What identifies a version of one file: a replaced file has a new inode, a rewritten one a
  // new size or modification time.
  struct FileStamp {
    bool exists = false;
    uint64_t device = 0;
    uint64_t inode = 0;
    int64_t size = 0;
    int64_t mtime_ns = 0;
    bool operator==(const FileStamp&) const = default;
  };
  using Stamps = std::vector<FileStamp>;

  TlsServerContext(const ServerConfig& server, Options options, prometheus::Registry& registry);
  Stamps Stat() const;
  absl::StatusOr<std::shared_ptr<SSL_CTX>> Build() const;
  void Use(std::shared_ptr<SSL_CTX> ctx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string cert_file_;
  const std::string key_file_;
  const std::string client_ca_file_;
  const Options options_;
  prometheus::Counter* reloads_ok_;
  prometheus::Counter* reloads_failed_;
  prometheus::Gauge* expiry_;

  absl::Mutex mu_;
  std::shared_ptr<SSL_CTX> current_ ABSL_GUARDED_BY(mu_);
  absl::Time last_check_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // The files' stamps when current_ was built, and those of the last build that failed.
  Stamps loaded_ ABSL_GUARDED_BY(mu_);
  Stamps failed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cdcview::security
