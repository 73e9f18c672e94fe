#include "daemon/server/listen_address.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cdcview {

absl::StatusOr<AddressList> ListenAddresses(const std::string& address,
                                            const char* example_port) {
  size_t colon = address.rfind(':');
  std::string host = colon == std::string::npos ? "" : address.substr(0, colon);
  std::string port = colon == std::string::npos ? "" : address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  uint32_t port_number = 0;
  if (host.empty() || !absl::SimpleAtoi(port, &port_number) || port_number > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("\"", address, "\" is not host:port (e.g. 127.0.0.1:",
                                                   example_port, " or [::1]:", example_port, ")"));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rv = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rv != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", address, ": ", gai_strerror(rv)));
  }
  return AddressList(found);
}

absl::StatusOr<int> ListenSocket(const std::string& address, const char* example_port) {
  absl::StatusOr<AddressList> found = ListenAddresses(address, example_port);
  if (!found.ok()) return found.status();
  std::string why = "no address";
  int fd = -1;
  for (addrinfo* a = found->get(); a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
      why = std::strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot listen on ", address, ": ", why));
  return fd;
}

}  // namespace cdcview
