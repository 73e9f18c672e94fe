#include "daemon/server/connection_relay.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "daemon/log/log.h"

namespace cdcview {
namespace {

constexpr int kMaxEvents = 64;

bool WouldBlock(int error) { return error == EAGAIN || error == EWOULDBLOCK || error == EINTR; }

}  // namespace

absl::StatusOr<std::unique_ptr<ConnectionRelay>> ConnectionRelay::Start(
    std::string target, std::function<void(uint64_t)> on_closed) {
  std::unique_ptr<ConnectionRelay> relay(new ConnectionRelay(std::move(target), std::move(on_closed)));
  relay->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  relay->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (relay->epoll_fd_ < 0 || relay->wake_fd_ < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot start the TLS relay: ", std::strerror(errno)));
  }
  epoll_event wake{};
  wake.events = EPOLLIN;
  wake.data.ptr = nullptr;
  epoll_ctl(relay->epoll_fd_, EPOLL_CTL_ADD, relay->wake_fd_, &wake);
  relay->scratch_.resize(kMaxPendingBytes);
  ConnectionRelay* self = relay.get();
  relay->thread_ = std::thread([self] { self->Main(); });
  return relay;
}

ConnectionRelay::~ConnectionRelay() {
  Stop();
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

int ConnectionRelay::Add(int client_fd) {
  int backend = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (backend < 0) return errno;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, target_.data(), std::min(target_.size(), sizeof addr.sun_path - 1));
  // A unix socket connects at once or not at all (EAGAIN: gRPC's backlog is full).
  if (connect(backend, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int error = errno;
    close(backend);
    return error;
  }
  auto owned = std::make_unique<Pair>();
  Pair* pair = owned.get();
  pair->fd[0] = client_fd;
  pair->fd[1] = backend;
  for (int side = 0; side < 2; ++side) {
    pair->end[side] = End{pair, side};
    pair->events[side] = EPOLLIN;
  }
  {
    // The relay thread puts the pair in the epoll set (Watch): once one of its descriptors is
    // there, the thread may pump it, so only that thread may touch it from then on.
    absl::MutexLock lock(&mu_);
    pairs_.emplace(pair, std::move(owned));
    arrived_.push_back(pair);
  }
  relayed_.fetch_add(1);
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof one);
  return 0;
}

void ConnectionRelay::Watch() {
  uint64_t count;
  [[maybe_unused]] ssize_t n = read(wake_fd_, &count, sizeof count);
  std::vector<Pair*> arrived;
  {
    absl::MutexLock lock(&mu_);
    arrived.swap(arrived_);
  }
  for (Pair* pair : arrived) {
    for (int side = 0; side < 2; ++side) {
      epoll_event ev{};
      ev.events = pair->events[side];
      ev.data.ptr = &pair->end[side];
      epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, pair->fd[side], &ev);
    }
  }
}

void ConnectionRelay::Stop() {
  if (stopping_.exchange(true)) return;
  if (thread_.joinable()) {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof one);
    thread_.join();
  }
  std::vector<Pair*> left;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [pair, owned] : pairs_) left.push_back(pair);
    arrived_.clear();
  }
  for (Pair* pair : left) Close(pair);
}

void ConnectionRelay::Main() {
  pthread_setname_np(pthread_self(), "cdcview-tls-relay");
  epoll_event events[kMaxEvents];
  std::vector<Pair*> finished;
  while (!stopping_.load()) {
    const int ready = epoll_wait(epoll_fd_, events, kMaxEvents, -1);
    wakeups_.fetch_add(1, std::memory_order_relaxed);
    if (ready < 0) {
      if (errno == EINTR) continue;
      LogError(absl::StrCat("gRPC port: the TLS relay's epoll_wait failed: ", std::strerror(errno)));
      return;
    }
    for (int i = 0; i < ready; ++i) {
      const auto* end = static_cast<const End*>(events[i].data.ptr);
      if (end == nullptr) {  // Add's or Stop's wake
        Watch();
        continue;
      }
      Pair& pair = *end->pair;
      if (pair.dead) continue;
      const bool hung_up = (events[i].events & (EPOLLERR | EPOLLHUP)) != 0;
      // A reset or error on the client ends the pair.
      const bool client_failed = end->side == 0 && hung_up;
      if (end->side == 1 && hung_up) {
        // epoll reports a hang-up whatever the interest, so while the client has not taken what
        // gRPC sent before it (pending[1]), this would wake every wait. Out of the set: what is
        // left in the socket is read as the client takes pending[1] (Pump), and reading shows
        // an error.
        Unwatch(pair);
      }
      if (client_failed || !Pump(pair)) {
        pair.dead = true;
        finished.push_back(&pair);
      }
    }
    for (Pair* pair : finished) Close(pair);
    finished.clear();
  }
}

bool ConnectionRelay::Pump(Pair& pair) {
  for (int from = 0; from < 2; ++from) {
    if (!Flush(pair, from)) return false;
    if (pair.pending[from].empty() && !pair.eof[from] && !Forward(pair, from)) return false;
  }
  // gRPC's side hung up and is out of the set: no event says it has more, so read on while the
  // client takes it all (a hung-up socket never blocks a read).
  while (pair.unwatched && pair.pending[1].empty() && !pair.eof[1]) {
    if (!Forward(pair, 1)) return false;
  }
  // The client's end of stream: half-close toward gRPC once what came before it is written.
  if (pair.eof[0] && pair.pending[0].empty() && !pair.shut[1]) {
    shutdown(pair.fd[1], SHUT_WR);
    pair.shut[1] = true;
  }
  // gRPC closed: done once what it sent before reached the client.
  if (pair.eof[1] && pair.pending[1].empty()) return false;
  UpdateInterest(pair);
  return true;
}

bool ConnectionRelay::Forward(Pair& pair, int from) {
  const ssize_t n = read(pair.fd[from], scratch_.data(), scratch_.size());
  if (n == 0) {
    pair.eof[from] = true;
    return true;
  }
  if (n < 0) {
    if (!WouldBlock(errno)) return false;
    // Nothing left on a side that hung up, and no event would say there is more.
    if (from == 1 && pair.unwatched) pair.eof[1] = true;
    return true;
  }
  const int to = 1 - from;
  ssize_t sent = send(pair.fd[to], scratch_.data(), n, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (sent < 0) {
    if (!WouldBlock(errno)) return false;
    sent = 0;
  }
  if (sent < n) pair.pending[from].assign(scratch_.data() + sent, n - sent);
  return true;
}

bool ConnectionRelay::Flush(Pair& pair, int from) {
  std::string& pending = pair.pending[from];
  if (pending.empty()) return true;
  const ssize_t sent = send(pair.fd[1 - from], pending.data(), pending.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (sent < 0) return WouldBlock(errno);
  pending.erase(0, sent);
  return true;
}

void ConnectionRelay::UpdateInterest(Pair& pair) {
  for (int side = 0; side < 2; ++side) {
    if (pair.fd[side] < 0) continue;
    if (side == 1 && (pair.eof[1] || pair.unwatched)) {
      // gRPC's side is finished: out of the set, or its hang-up would be reported on every wait.
      Unwatch(pair);
      continue;
    }
    uint32_t want = 0;
    if (!pair.eof[side] && pair.pending[side].empty()) want |= EPOLLIN;
    if (!pair.pending[1 - side].empty()) want |= EPOLLOUT;
    if (want == pair.events[side]) continue;
    epoll_event ev{};
    ev.events = want;
    ev.data.ptr = &pair.end[side];
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, pair.fd[side], &ev);
    pair.events[side] = want;
  }
}

void ConnectionRelay::Unwatch(Pair& pair) {
  if (!pair.unwatched) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, pair.fd[1], nullptr);
  pair.unwatched = true;
}

void ConnectionRelay::Close(Pair* pair) {
  for (int fd : pair->fd) {
    if (fd < 0) continue;
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    close(fd);
  }
  {
    absl::MutexLock lock(&mu_);
    pairs_.erase(pair);
  }
  relayed_.fetch_sub(1);
  if (on_closed_) on_closed_(1);
}

}  // namespace cdcview
