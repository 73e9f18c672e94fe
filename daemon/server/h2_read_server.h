// H2ReadServer: cdcview.v1.ViewService's unary reads over gRPC's wire protocol (HTTP/2),
// served by one event-loop thread of ours through nghttp2 instead of the gRPC library.
//
// Why a second server: on a small machine gRPC C++'s threading holds answers back: they wait
// in hand-overs between its threads and leave in bursts, so the point-query tail is far above
// what the handlers take, and no server variant of the library changed that
// (docs/PERFORMANCE.md, "Queries"). This server reads, answers and writes on the thread that
// received the request, so a point query costs one wake-up and no hand-over between threads.
//
// What it serves: every unary method of cdcview.v1.ViewService, as the service descriptor
// lists them (ViewServiceUnaryMethods), to any gRPC client, with the same answers and error
// codes as ViewServer (both call ViewQueries). Not here: the streaming methods (Watch), the
// health service and reflection: those stay on ViewServer's port, and a call for them answers
// UNIMPLEMENTED naming that port's setting.
//
// Which reads run on the loop: a Query, Scan or ListAggregates page of at most
// kInlinePageLimit entries, a GetItem and a GetAggregate. Everything else (large pages, the
// O(views) and O(entries) calls) runs on a few offload threads so it never holds the loop;
// their answers go back to the loop through an eventfd. A read that carries a position to wait
// for (ReadConsistency.min_position or min_kafka_offsets) is first looked at once, without
// waiting (on the loop if it is cheap, else on an offload thread), and answered if its position
// is applied; only a read that must wait goes to the wait threads, where the waits take turns
// in slices.
//
// gRPC specifics handled: the 5-byte message prefix, requests split over DATA frames,
// grpc-timeout (the read's deadline), uncompressed messages only (a compressed one answers
// UNIMPLEMENTED, and every answer says grpc-accept-encoding: identity), requests of at most
// server.fast_reads_max_request_bytes (RESOURCE_EXHAUSTED), trailers-only answers for errors,
// grpc-message percent-encoded. HTTP/2 itself (flow control, PING, SETTINGS, GOAWAY) is
// nghttp2's.
//
// What a client may hold (ServerConfig's server.fast_reads_* fields and max_wait_ms; each
// refusal is counted in ConnectionProbe's metrics, port="fast_reads"):
// - request bytes buffered until a request ends: per call, per connection and across the port;
//   the call that would pass one answers RESOURCE_EXHAUSTED naming the field;
// - reads waiting for a position: per connection (one more answers RESOURCE_EXHAUSTED naming
//   the field), and each for at most its deadline or max_wait_ms. A read whose position is
//   already applied is answered without waiting: it never queues behind the waits;
// - connections: at most fast_reads_max_connections (one more gets a GOAWAY naming the field
//   and is closed); one without an open call for fast_reads_idle_timeout_ms, or whose preface
//   or a call's request has not all arrived after fast_reads_request_timeout_ms, gets a GOAWAY
//   and is closed.
//
// Security (H2ReadSecurity; off by default, then plaintext as above):
// - TLS (server.tls_cert_file): each connection's TLS runs in memory BIOs: the socket's bytes
//   go into OpenSSL and its records out through the same buffers and limits as plaintext
//   frames (kMaxPendingOut counts encrypted bytes). Records are sealed and opened on the loop;
//   each handshake step (key exchange, signature, client-certificate check: a few hundred
//   microseconds of CPU) runs on an offload thread, so a burst of new connections does not
//   hold up the reads of open ones (on the loop only when kMaxOffloaded jobs are already out).
//   ALPN: h2, or none offered; an offer without h2 fails. The handshake must finish within
//   fast_reads_request_timeout_ms like the preface (a client that stalls it is closed,
//   reason="request_timeout"); a handshake that fails (no client certificate with mTLS, a
//   plaintext client, ALPN without h2) closes the connection, reason="tls_handshake". At the
//   connection cap a TLS connection is closed without a handshake (no GOAWAY: it would cost the
//   handshake the cap saves). Each connection takes the TlsServerContext current when it is
//   accepted, so a rotated certificate serves new connections and open ones keep theirs.
// - Tokens (server.tokens_file): every call needs "authorization: Bearer <token>"; without it
//   UNAUTHENTICATED, answered on the headers (no byte of its body is held); a token that may
//   not read what the request names PERMISSION_DENIED before the read runs (read_permission.h,
//   the main port's rules). Both counted in AuthProbe (port="fast_reads").
//
// Thread-safety: Start, port and Shutdown may be called from any thread. `reader`, `probe`,
// `connections` and the security's `auth_probe` must outlive the server.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/config/config.h"
#include "daemon/metrics/connection_probe.h"
#include "daemon/metrics/metrics.h"
#include "daemon/security/auth_probe.h"
#include "daemon/security/tls_context.h"
#include "daemon/security/token_store.h"
#include "daemon/server/view_queries.h"

namespace cdcview {

// What guards the fast read port; every member may be null (that guard off).
struct H2ReadSecurity {
  std::shared_ptr<security::TlsServerContext> tls;  // null: plaintext
  std::shared_ptr<security::TokenStore> tokens;     // null: no token asked for
  security::AuthProbe* auth_probe = nullptr;        // counts refusals when tokens are on
};

class H2ReadServer {
 public:
  // Pages up to this size run on the event loop; larger ones would hold up the point queries
  // behind them.
  static constexpr uint32_t kInlinePageLimit = 100;
  // Reads handed to the offload threads that are not answered yet, across connections; one
  // more answers RESOURCE_EXHAUSTED.
  static constexpr size_t kMaxOffloaded = 1024;

  // Listens on `address` (host:port, IPv4 or [IPv6]; port 0 picks one). INVALID_ARGUMENT for an
  // address that does not parse, UNAVAILABLE naming the address when it cannot listen.
  // `grpc_setting` names the main gRPC server's setting (e.g. "server.grpc") in the answer to
  // a call this server does not serve. `limits`: its max_wait_ms and fast_reads_* fields are
  // the port's limits. `probe` and `connections` may be null (no metrics). `local_only`: a
  // cluster member's own reader (cluster_peers.h), answering the calls whose HTTP/2 request
  // carries the header x-cdcview-local-only: 1; `reader` then asks the other members, so its
  // calls all run off the loop (on kFanOutThreads threads). Null: `reader` answers every call.
  static absl::StatusOr<std::unique_ptr<H2ReadServer>> Start(
      const std::string& address, const ViewQueries& reader, QueryProbe* probe,
      std::string grpc_setting, const ServerConfig& limits = ServerConfig{},
      ConnectionProbe* connections = nullptr, H2ReadSecurity security = {},
      const ViewQueries* local_only = nullptr);
  ~H2ReadServer();  // Shutdown(0)

  int port() const;
  // Lowers (or restores) the connection cap, e.g. to what the open-files limit leaves;
  // connections already open stay. Thread-safe.
  void SetMaxConnections(uint32_t max);
  // Stops accepting connections, tells every client (GOAWAY) and waits up to `grace_ms` for the
  // calls already received, then closes the connections and waits for the offload threads.
  void Shutdown(int grace_ms);

 private:
  class Loop;
  explicit H2ReadServer(std::unique_ptr<Loop> loop);
  std::unique_ptr<Loop> loop_;
};

// gRPC's grpc-timeout header ("<1 to 8 digits><H|M|S|m|u|n>"), capped at kLongestGrpcTimeout
// (so that now + timeout cannot overflow); nullopt if malformed. Exposed for tests.
inline constexpr std::chrono::hours kLongestGrpcTimeout{24 * 365};
std::optional<std::chrono::steady_clock::duration> ParseGrpcTimeout(std::string_view text);

// The names of cdcview.v1.ViewService's unary methods ("Query", "Scan", ...) in the proto's
// order, from its descriptor: what this port serves, and what QueryProbe times on both ports.
std::vector<std::string> ViewServiceUnaryMethods();

}  // namespace cdcview
