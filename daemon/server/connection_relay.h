// ConnectionRelay: copies bytes both ways between accepted client connections and connections
// it opens to a unix socket, on one epoll thread.
//
// Why: the main port serves TLS with gRPC's own TLS (certificate reload, AuthMetadataProcessor),
// but gRPC 1.51 takes a secure connection only from a listener of its own, never from a
// descriptor, and its listener has no connection cap and stops for good on EMFILE. So
// GrpcListener keeps the public port (cap, EMFILE handling) and gives each accepted connection
// to this relay, which connects it to gRPC's TLS listener on a unix socket in a directory only
// this process's user can enter. The relay sees only TLS records; it never decrypts.
//
// Costs: three descriptors per connection (the client's, ours to the unix socket, gRPC's end of
// it), one copy each way through a 64 KiB scratch buffer, and one more thread wake per read.
// Each direction holds at most kMaxPendingBytes the far side has not taken; while it does, the
// relay stops reading that side (TCP flow control reaches the sender).
//
// Closing: end of stream from the client is passed on as a half-close (shutdown(SHUT_WR)) to
// gRPC, which then closes; end of stream from gRPC (it never half-closes HTTP/2) closes the
// pair once the bytes before it reached the client. An error on either side closes both.
//
// Thread-safety: Add from any thread (the accept thread); Stop once, from the owner. `on_closed`
// runs on the relay thread. A pair's state is the relay thread's alone: Add hands a new pair
// over through the wake eventfd, and the relay thread puts it in the epoll set. Owns the sockets it was given and the thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace cdcview {

class ConnectionRelay {
 public:
  static constexpr size_t kMaxPendingBytes = 64 * 1024;

  // Relays to the unix socket at `target`. `on_closed(n)` is told of n relayed connections
  // ended. UNAVAILABLE when epoll or the thread cannot be set up.
  static absl::StatusOr<std::unique_ptr<ConnectionRelay>> Start(
      std::string target, std::function<void(uint64_t)> on_closed);
  ~ConnectionRelay();
  ConnectionRelay(const ConnectionRelay&) = delete;
  ConnectionRelay& operator=(const ConnectionRelay&) = delete;

  // Takes `client_fd` (non-blocking) and connects it to the target. On failure (no descriptor,
  // the target refuses) closes nothing, leaves `client_fd` to the caller, and returns the errno.
  int Add(int client_fd);
  // Closes every relayed connection and stops the thread. Idempotent.
  void Stop();
  uint64_t relayed() const { return relayed_.load(); }  // connections open now
  // Times the relay thread woke from epoll_wait: tests check that an idle relay sleeps.
  uint64_t wakeups() const { return wakeups_.load(std::memory_order_relaxed); }

 private:
  struct Pair;
  struct End {
    Pair* pair;
    int side;  // 0: the client, 1: gRPC
  };
  struct Pair {
    int fd[2] = {-1, -1};
    End end[2];
    // pending[i]: read from side i, not yet written to side 1 - i.
    std::string pending[2];
    bool eof[2] = {false, false};  // end of stream read from side i
    bool shut[2] = {false, false}; // shutdown(SHUT_WR) done on side i
    uint32_t events[2] = {0, 0};   // epoll interest registered for side i
    bool unwatched = false;        // gRPC's side out of the epoll set (finished or hung up)
    bool dead = false;
  };

  ConnectionRelay(std::string target, std::function<void(uint64_t)> on_closed)
      : target_(std::move(target)), on_closed_(std::move(on_closed)) {}
  void Main();
  // Puts the pairs Add made since the last call in the epoll set (relay thread).
  void Watch();
  // Moves what can move for `pair` after an event on it; false when the pair is finished.
  bool Pump(Pair& pair);
  // Reads side `from` once and writes to the other; false on an error.
  bool Forward(Pair& pair, int from);
  bool Flush(Pair& pair, int from);
  void UpdateInterest(Pair& pair);
  // Takes gRPC's side out of the epoll set (once).
  void Unwatch(Pair& pair);
  void Close(Pair* pair);

  const std::string target_;
  const std::function<void(uint64_t)> on_closed_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> relayed_{0};
  std::atomic<uint64_t> wakeups_{0};
  absl::Mutex mu_;
  std::map<Pair*, std::unique_ptr<Pair>> pairs_ ABSL_GUARDED_BY(mu_);
  // Made by Add, not yet in the epoll set: Add fills a pair, the relay thread watches it.
  std::vector<Pair*> arrived_ ABSL_GUARDED_BY(mu_);
  std::vector<char> scratch_;  // relay thread only
};

}  // namespace cdcview
