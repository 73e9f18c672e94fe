// GrpcListener: the main gRPC port's listening sockets and its accept thread, which hands each
// accepted connection to a started grpc::Server (grpc::AddInsecureChannelFromFd), or with TLS
// relays it to gRPC's TLS listener on a private unix socket (RelayTo, connection_relay.h).
//
// Why not gRPC's own listener: gRPC 1.51 has no cap on connections, and when accept fails with
// EMFILE it drops its listener for good (the port stops answering until a restart). Here the
// accept loop caps the connections it hands over (beyond the cap it accepts and closes at once,
// so a client sees a reset rather than a hang), backs off and retries when the process is out of
// descriptors (closing a spare descriptor so the excess connection can be accepted and closed),
// and never closes its listening sockets before Stop.
//
// gRPC owns a connection once handed over and closes it without telling anyone; the accept
// thread notices by checking that each handed-over descriptor still names the same socket
// (device and inode: a closed number reused by another file or connection names another one),
// every kSweepInterval and before refusing a connection at the cap. Relayed connections are
// counted exactly: the relay says when each ends.
//
// Thread-safety: Start and Stop from one thread; SetMaxConnections, max_connections and
// open_connections from any. The accept thread owns the bookkeeping of live connections.
// Owns its sockets and thread; the server and the probe must outlive Stop.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/metrics/connection_probe.h"
#include "daemon/server/connection_relay.h"

namespace grpc {
class Server;
}

namespace cdcview {

class GrpcListener {
 public:
  static constexpr std::chrono::milliseconds kSweepInterval{250};
  // How long accepting rests after the process ran out of descriptors (or memory).
  static constexpr std::chrono::milliseconds kAcceptBackoff{100};
  // cdcview_connections_closed_total's reason for this port: gRPC does not say why it closed
  // a connection (the client left, idle, age, ping strikes).
  static constexpr const char* kClosedReason = "ended";

  // Binds every address `address` ("host:port", "[v6]:port"; port 0 picks one) resolves to.
  // INVALID_ARGUMENT when it is not host:port; UNAVAILABLE naming the address when no address
  // can be bound. `name` begins its log lines; `cap_source` says where the cap comes from.
  static absl::StatusOr<std::unique_ptr<GrpcListener>> Listen(
      const std::string& address, std::string name = "gRPC port",
      std::string cap_source = "server.grpc_max_connections, clamped to the descriptors left");
  ~GrpcListener();
  GrpcListener(const GrpcListener&) = delete;
  GrpcListener& operator=(const GrpcListener&) = delete;

  int port() const { return port_; }
  // Before Start: relay each accepted connection to the unix socket `path` (gRPC's TLS
  // listener) instead of handing it to the server. A connection the relay cannot connect is
  // refused (reason fd_limit when out of descriptors, else unavailable). UNAVAILABLE when the
  // relay cannot start.
  absl::Status RelayTo(const std::string& path);
  // Starts accepting for `server` (already started); `probe` may be null.
  void Start(grpc::Server* server, uint32_t max_connections, ConnectionProbe* probe);
  // Takes effect for the next connection; connections above a lowered cap are not closed.
  void SetMaxConnections(uint32_t max);
  uint32_t max_connections() const { return max_connections_.load(); }
  // Connections handed to gRPC that it had not closed at the last check.
  uint64_t open_connections() const { return open_.load(); }
  // Stops accepting and closes the listening sockets (handed-over connections stay gRPC's;
  // relayed ones stay open until StopRelay). Idempotent.
  void Stop();
  // Closes the relayed connections: after the server has shut down (its grace period needs
  // them). Idempotent; the destructor calls it.
  void StopRelay();

 private:
  struct Socket {
    dev_t dev;
    ino_t ino;
  };
  GrpcListener() = default;
  void AcceptMain();
  // Accepts what `listen_fd` has queued; false when accepting must rest (out of descriptors).
  bool AcceptReady(int listen_fd);
  void Refuse(int fd, const char* reason);
  void Serve(int fd);
  // Forgets the handed-over connections gRPC has closed, counting them closed.
  void Sweep();
  void PublishOpen();
  void RelayedClosed(uint64_t count);

  std::string name_;
  std::string cap_source_;
  std::vector<int> listen_fds_;
  int wake_fd_ = -1;   // eventfd: Stop wakes the accept thread
  int spare_fd_ = -1;  // closed to accept-and-close one connection when out of descriptors
  int port_ = 0;
  grpc::Server* server_ = nullptr;
  ConnectionProbe* probe_ = nullptr;
  std::unique_ptr<ConnectionRelay> relay_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint32_t> max_connections_{0};
  std::atomic<uint64_t> open_{0};
  // Accept thread only.
  std::map<int, Socket> live_;
  std::chrono::steady_clock::time_point last_sweep_;
  bool refusing_ = false;       // at the cap: logged once per episode
  uint64_t refused_in_episode_ = 0;
  bool out_of_fds_ = false;     // accept failing for want of descriptors: logged once per episode
  bool relay_failing_ = false;  // the relay cannot reach gRPC's listener: logged once per episode
};

}  // namespace cdcview
