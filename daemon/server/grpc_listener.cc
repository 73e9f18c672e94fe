#include "daemon/server/grpc_listener.h"

#include <fcntl.h>
#include <grpcpp/server.h>
#include <grpcpp/server_posix.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "daemon/log/log.h"
#include "daemon/server/listen_address.h"

namespace cdcview {
namespace {

int PortOf(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return 0;
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return 0;
}

void SetPort(sockaddr* addr, int port) {
  if (addr->sa_family == AF_INET) reinterpret_cast<sockaddr_in*>(addr)->sin_port = htons(port);
  if (addr->sa_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(addr)->sin6_port = htons(port);
}

int OpenSpare() { return open("/dev/null", O_RDONLY | O_CLOEXEC); }

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcListener>> GrpcListener::Listen(const std::string& address,
                                                                   std::string name,
                                                                   std::string cap_source) {
  absl::StatusOr<AddressList> found = ListenAddresses(address, "50051");
  if (!found.ok()) return found.status();
  std::unique_ptr<GrpcListener> listener(new GrpcListener());
  listener->name_ = std::move(name);
  listener->cap_source_ = std::move(cap_source);
  // Like gRPC's own listener, a name such as "localhost" is served on each of its addresses
  // (127.0.0.1 and ::1), all on one port: the first bound picks it when the port is 0.
  const bool several = found->get()->ai_next != nullptr;
  std::string why = "no address";
  for (addrinfo* a = found->get(); a != nullptr; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    // With several addresses, "::" must not also take the IPv4 port another socket binds.
    if (several && a->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (listener->port_ != 0) SetPort(a->ai_addr, listener->port_);
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
      why = std::strerror(errno);
      close(fd);
      continue;
    }
    if (listener->port_ == 0) listener->port_ = PortOf(fd);
    listener->listen_fds_.push_back(fd);
  }
  if (listener->listen_fds_.empty()) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address, ": ", why));
  }
  listener->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  listener->spare_fd_ = OpenSpare();
  if (listener->wake_fd_ < 0 || listener->spare_fd_ < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, ": ", std::strerror(errno)));
  }
  return listener;
}

GrpcListener::~GrpcListener() {
  Stop();
  StopRelay();
  if (wake_fd_ >= 0) close(wake_fd_);
  if (spare_fd_ >= 0) close(spare_fd_);
}

absl::Status GrpcListener::RelayTo(const std::string& path) {
  auto relay = ConnectionRelay::Start(path, [this](uint64_t count) { RelayedClosed(count); });
  if (!relay.ok()) return relay.status();
  relay_ = std::move(*relay);
  return absl::OkStatus();
}

void GrpcListener::RelayedClosed(uint64_t count) {
  open_.fetch_sub(count);
  if (probe_ != nullptr) probe_->Closed(kClosedReason, count);
  PublishOpen();
}

void GrpcListener::StopRelay() {
  if (relay_ != nullptr) relay_->Stop();
}

void GrpcListener::Start(grpc::Server* server, uint32_t max_connections, ConnectionProbe* probe) {
  server_ = server;
  probe_ = probe;
  SetMaxConnections(max_connections);
  PublishOpen();
  last_sweep_ = std::chrono::steady_clock::now();
  thread_ = std::thread([this] { AcceptMain(); });
}

void GrpcListener::SetMaxConnections(uint32_t max) {
  max_connections_ = max;
  if (probe_ != nullptr) probe_->SetMax(max);
}

void GrpcListener::Stop() {
  if (stopping_.exchange(true)) return;
  if (thread_.joinable()) {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof one);
    thread_.join();
  }
  for (int fd : listen_fds_) close(fd);
  listen_fds_.clear();
}

void GrpcListener::AcceptMain() {
  std::vector<pollfd> polled;
  for (int fd : listen_fds_) polled.push_back(pollfd{fd, POLLIN, 0});
  polled.push_back(pollfd{wake_fd_, POLLIN, 0});
  const size_t listeners = listen_fds_.size();
  bool resting = false;
  while (!stopping_.load()) {
    // While resting only Stop is watched: the listeners stay readable until accepted from.
    const int timeout_ms = static_cast<int>(resting ? kAcceptBackoff.count() : kSweepInterval.count());
    pollfd* first = resting ? &polled[listeners] : polled.data();
    const nfds_t count = resting ? 1 : static_cast<nfds_t>(polled.size());
    int ready = poll(first, count, timeout_ms);
    if (stopping_.load()) break;
    if (std::chrono::steady_clock::now() - last_sweep_ >= kSweepInterval) Sweep();
    if (ready < 0 && errno != EINTR) {
      LogError(absl::StrCat(name_, ": poll failed: ", std::strerror(errno)));
      resting = true;
      continue;
    }
    if (resting) {
      resting = false;  // try accepting again
      continue;
    }
    for (size_t i = 0; i < listeners && !resting; ++i) {
      if ((polled[i].revents & POLLIN) != 0) resting = !AcceptReady(polled[i].fd);
    }
  }
}

bool GrpcListener::AcceptReady(int listen_fd) {
  // A bounded batch, so that one busy listener cannot starve the sweep or the others.
  for (int batch = 0; batch < 64; ++batch) {
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      if (out_of_fds_) {
        out_of_fds_ = false;
        LogInfo(absl::StrCat(name_, ": accepting connections again"));
      }
      if (open_.load() >= max_connections_.load()) {
        // The cap may only look reached: gRPC may have closed some since the last sweep.
        if (std::chrono::steady_clock::now() - last_sweep_ >= std::chrono::milliseconds(20)) Sweep();
        if (open_.load() >= max_connections_.load()) {
          Refuse(fd, "max_connections");
          continue;
        }
      }
      Serve(fd);
      continue;
    }
    const int error = errno;
    if (error == EAGAIN || error == EWOULDBLOCK) return true;
    if (error == EINTR || error == ECONNABORTED || error == EPROTO) continue;
    if (!out_of_fds_) {
      out_of_fds_ = true;
      LogWarning(absl::StrCat(
          name_, ": cannot accept connections: ", std::strerror(error),
          "; refusing new ones until descriptors are free (raise the open-files limit, "
          "lower server.grpc_max_connections or the fast read port's cap)"));
    }
    if ((error == EMFILE || error == ENFILE) && spare_fd_ >= 0) {
      // Accept the connection that could not be taken and close it, so its client learns at
      // once instead of waiting in the backlog.
      close(spare_fd_);
      int excess = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (excess >= 0) Refuse(excess, "fd_limit");
      spare_fd_ = OpenSpare();
    }
    return false;
  }
  return true;
}

void GrpcListener::Refuse(int fd, const char* reason) {
  // Counted before the client can see the close.
  if (probe_ != nullptr) probe_->Refused(reason);
  close(fd);
  if (std::strcmp(reason, "max_connections") == 0) {
    if (!refusing_) {
      refusing_ = true;
      refused_in_episode_ = 0;
      LogWarning(absl::StrCat(name_, ": ", open_.load(), " connections open, the cap (", cap_source_,
                              "): refusing new ones"));
    }
    ++refused_in_episode_;
  }
}

void GrpcListener::Serve(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    close(fd);
    return;
  }
  if (auto it = live_.find(fd); it != live_.end()) {
    // gRPC closed the connection this number named since the last sweep.
    live_.erase(it);
    open_.fetch_sub(1);
    if (probe_ != nullptr) probe_->Closed(kClosedReason);
  }
  if (refusing_) {
    refusing_ = false;
    LogInfo(absl::StrCat(name_, ": below its connection cap again; refused ", refused_in_episode_,
                         " connections meanwhile"));
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (relay_ != nullptr) {
    // Counted open first: the relay may end the connection (and count it closed) at once.
    open_.fetch_add(1);
    if (const int error = relay_->Add(fd); error != 0) {
      open_.fetch_sub(1);
      const bool no_fds = error == EMFILE || error == ENFILE;
      if (!no_fds && !relay_failing_) {
        relay_failing_ = true;
        LogError(absl::StrCat(name_, ": cannot relay a connection to gRPC's TLS listener: ",
                              std::strerror(error), "; refusing connections until it can"));
      }
      Refuse(fd, no_fds ? "fd_limit" : "unavailable");
      return;
    }
    if (relay_failing_) {
      relay_failing_ = false;
      LogInfo(absl::StrCat(name_, ": relaying connections to gRPC's TLS listener again"));
    }
    if (probe_ != nullptr) probe_->Opened();
    PublishOpen();
    return;
  }
  live_[fd] = Socket{st.st_dev, st.st_ino};
  open_.fetch_add(1);
  if (probe_ != nullptr) probe_->Opened();
  PublishOpen();
  grpc::AddInsecureChannelFromFd(server_, fd);
}

void GrpcListener::Sweep() {
  last_sweep_ = std::chrono::steady_clock::now();
  uint64_t closed = 0;
  for (auto it = live_.begin(); it != live_.end();) {
    struct stat st {};
    if (fstat(it->first, &st) != 0 || st.st_dev != it->second.dev || st.st_ino != it->second.ino) {
      it = live_.erase(it);
      ++closed;
    } else {
      ++it;
    }
  }
  if (closed == 0) return;
  open_.fetch_sub(closed);
  if (probe_ != nullptr) probe_->Closed(kClosedReason, closed);
  PublishOpen();
}

void GrpcListener::PublishOpen() {
  if (probe_ != nullptr) probe_->SetOpen(open_.load());
}

}  // namespace cdcview
