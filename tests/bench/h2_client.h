// A lean open-loop gRPC client for latency figures: unary calls over one HTTP/2 connection,
// driven by nghttp2 from one thread, no gRPC library on the client side.
//
// Why: on a two-core machine the client shares the cores with the server, and a gRPC client
// library's own threads (C++ 1.51: a sender, a receiver and gRPC's pollers; Go: its runtime)
// cost tens of microseconds of CPU per call and wake several threads per call. Their
// scheduling delays land in the figures as the server's tail. This client sends and receives
// on one thread that sleeps in ppoll until the next send is due, so its own share is small and
// the latency it measures is mostly the server's.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace cdcview::bench {

struct H2Call {
  double latency_us = 0;    // from the scheduled send time to the end of the answer's trailers
  int http_status = 0;      // the answer's :status
  int grpc_status = -1;     // the trailers' grpc-status; -1 when the call never finished
  std::string grpc_message; // the trailers' grpc-message, if any
  std::string response;     // the response message, without gRPC's 5-byte frame prefix
};

struct H2OpenLoopResult {
  std::vector<H2Call> calls;  // in send order; calls not sent are left out
  // Sends this client's own loop reached only 3 x `seconds` after the start (a client starved
  // of CPU). Sends never wait for answers, so a slow server shows in the latencies instead.
  uint64_t not_sent = 0;
  double seconds = 0;  // first scheduled send to the last answer
};

// What a request carries besides gRPC's defaults (for protocol tests), and how the loop waits.
struct H2Options {
  std::string content_type = "application/grpc";
  std::vector<std::pair<std::string, std::string>> headers;  // added as they are
  bool framed = false;  // the requests are whole bodies, sent without adding gRPC's prefix
  // The loop polls the socket without sleeping: a load generator on a core of its own then
  // sends on time and reads an answer as it arrives, instead of waiting for its vCPU to wake.
  bool spin = false;
};

// Sends requests[k % requests.size()] (serialized protobuf messages) to `path` (e.g.
// "/cdcview.v1.ViewService/Query") on 127.0.0.1:`port` at `qps` for `seconds`, each at its
// scheduled time; latency runs from that time, so a late send counts against the figures.
// Errors: INVALID_ARGUMENT without requests; UNAVAILABLE when it cannot connect or the server
// closes the connection with calls unanswered; INTERNAL for an HTTP/2 or socket failure
// (a request the session refused to send among them); DEADLINE_EXCEEDED when answers are
// still missing 10 s after the last send. Each message names what failed.
absl::StatusOr<H2OpenLoopResult> RunH2OpenLoop(int port, const std::string& path,
                                               const std::vector<std::string>& requests,
                                               double qps, double seconds,
                                               const H2Options& options = {});

}  // namespace cdcview::bench
