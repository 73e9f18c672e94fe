// ListenAddresses: what a listening port's "host:port" setting resolves to, for the sockets
// each port binds itself (GrpcListener, H2ReadServer, the DynamoDB endpoint); ListenSocket: the
// first of them bound and listening.
//
// A plain function; the result owns its addrinfo list.
#pragma once

#include <netdb.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace cdcview {

struct AddrinfoFree {
  void operator()(addrinfo* list) const { freeaddrinfo(list); }
};
using AddressList = std::unique_ptr<addrinfo, AddrinfoFree>;

// "host:port" or "[v6]:port" (port 0: any free one) -> its passive stream addresses.
// INVALID_ARGUMENT when it is not host:port (the message shows `example_port` in the forms it
// expects); UNAVAILABLE naming the address when the host cannot be resolved.
absl::StatusOr<AddressList> ListenAddresses(const std::string& address,
                                            const char* example_port);

// "host:port" or "[v6]:port" -> a bound, listening, non-blocking, close-on-exec socket on the
// first address that takes it (SO_REUSEADDR). ListenAddresses' errors, or UNAVAILABLE "cannot
// listen on <address>: <why>".
absl::StatusOr<int> ListenSocket(const std::string& address, const char* example_port);

}  // namespace cdcview
