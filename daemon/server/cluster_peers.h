// ClusterPeers: a cluster member's gRPC channels to every other member (peers[ordinal]), and
// how a remote part of a merged read is made: the local-only marker, the deadline, the peer
// credentials, the error a member that does not answer turns into, and the fan-out metrics.
//
// Channels are created at construction and connect lazily; a member that is down is retried
// with a reconnect back-off of 100 ms growing to at most 1 s, so reads through it work again
// within about a second of its return.
//
// Peer security, decided by the server's own settings:
// - TLS (server.tls_cert_file): peers speak TLS, trusting server.tls_client_ca_file if set
//   (else the system roots), and present this member's own certificate and key (read at
//   start), which a peer requiring client certificates checks against the same CA. Each
//   member's certificate must name its peer address's host.
// - Tokens (server.tokens_file): each peer call carries the bearer token in the environment
//   variable CDCVIEW_CLUSTER_TOKEN (kClusterTokenEnv), a token of the shared tokens file that
//   may read every view (the application refuses to start a cluster with tokens without it).
//
// Thread-safe: every method may be called from any thread; the stubs are gRPC's (thread-safe).
// Owns the channels and stubs; `registry` (may be null: no metrics) must outlive it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "cdcview/v1/view_service.grpc.pb.h"
#include "daemon/config/config.h"

namespace prometheus {
class Registry;
class Counter;
class Gauge;
class Histogram;
template <typename T>
class Family;
}  // namespace prometheus

namespace cdcview {

// gRPC request metadata marking a call a member answers from its own store only ("1").
inline constexpr char kLocalOnlyMetadata[] = "x-cdcview-local-only";
// The bearer token members send each other when server.tokens_file is set.
inline constexpr char kClusterTokenEnv[] = "CDCVIEW_CLUSTER_TOKEN";

class ClusterPeers {
 public:
  ClusterPeers(const ClusterConfig& cluster, const ServerConfig& server,
               prometheus::Registry* registry);
  ~ClusterPeers();

  uint32_t members() const { return members_; }
  uint32_t ordinal() const { return ordinal_; }
  const std::string& address(uint32_t ordinal) const { return addresses_[ordinal]; }
  // nullptr for this member.
  v1::ViewService::Stub* stub(uint32_t ordinal) const { return stubs_[ordinal].get(); }

  // Why the peer credentials could not be made (a TLS file that does not read), OK otherwise;
  // peer calls fail UNAVAILABLE with the handshake's error while it is not OK.
  const absl::Status& credentials_status() const { return credentials_status_; }

  // Sets the marker, the deadline (none for max(): a stream that runs until cancelled) and the
  // peer token on a call's context.
  void Prepare(grpc::ClientContext* ctx, std::chrono::steady_clock::time_point deadline) const;
  // The UNAVAILABLE status "cluster member N (ADDRESS) did not answer: <message>; every member
  // is needed for a whole answer: retry when it is back" for member `ordinal` failing with `s`
  // when it did not answer (UNAVAILABLE, or DEADLINE_EXCEEDED of the call itself), or `s`
  // itself when it is the peer's own answer (any other code, and a consistency wait's
  // DEADLINE_EXCEEDED, which says ViewQueries::kNotAppliedInTime).
  absl::Status PeerError(uint32_t ordinal, const grpc::Status& s) const;
  // The "did not answer" status above, for any message.
  absl::Status NotAnswered(uint32_t ordinal, const std::string& why) const;
  // Records one remote call's latency (cdcview_cluster_fanout_seconds{peer}) and, when it
  // failed, its code (cdcview_cluster_fanout_errors_total{peer,code}).
  void Observe(uint32_t ordinal, double seconds, const grpc::Status& s) const;

  // This member is shutting down: calls to peers in flight are cancelled within kStopPoll
  // unless answered first, and no new one starts; each answers Stopped(ordinal), so a read
  // waiting for a peer's position does not hold the drain. Any thread.
  void Stop() { stopping_.store(true); }
  bool stopping() const { return stopping_.load(); }
  // The UNAVAILABLE status of a call to member `ordinal` cancelled by Stop.
  absl::Status Stopped(uint32_t ordinal) const;
  // How often a fan-out waiting for its peers looks at stopping().
  static constexpr std::chrono::milliseconds kStopPoll{100};

 private:
  uint32_t members_;
  uint32_t ordinal_;
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<v1::ViewService::Stub>> stubs_;
  std::string token_;  // "" without tokens
  absl::Status credentials_status_;
  prometheus::Family<prometheus::Counter>* errors_ = nullptr;
  std::vector<prometheus::Histogram*> seconds_;  // by ordinal; null for this member
  std::atomic<bool> stopping_{false};
};

}  // namespace cdcview
