// HttpServer: the DynamoDB endpoint (server.dynamodb): the DynamoDB JSON 1.0 protocol over
// HTTP/1.1 with keep-alive, on Boost.Beast and Asio, handing each request to DynamoDbApi.
//
// Why Beast: a parser whose header and body limits are set per request, per-connection timers,
// asynchronous I/O on a fixed number of threads, and Asio's OpenSSL streams for TLS. No
// hand-written HTTP parsing.
//
// Requests: POST / with X-Amz-Target and Content-Type application/x-amz-json-1.0 or 1.1 (or
// none). GET / answers "healthy: cdcview" (200, text/plain, no token needed), as DynamoDB
// answers "healthy: dynamodb.<region>.amazonaws.com": what load balancers probe; it says the
// process serves, not that the views are caught up (that is the gRPC health service's). Any
// other path 404, any other method 405, both in DynamoDB's error shape. Every answer carries
// Content-Type application/x-amz-json-1.0, x-amzn-RequestId, x-amz-crc32 (the CRC32 of the body,
// which botocore checks) and, when the read reported one, x-cdcview-applied-position.
//
// Threads: `dynamodb_threads` I/O threads read requests, answer the short ones (Options::
// runs_short, RunsShort by default: a GetItem, a Query with a small Limit) on the spot, bounded
// by ApiRequest::inline_bytes = kShortPageBytes and inline_shards = kShortMergeShards (one
// that needs more, answering run_long, runs again on a page thread, counted by
// DynamoDbApiProbe::Moved) and write answers. A long
// one (a Scan or Query page of up to 1 MB, a BatchGetItem) runs on a page thread: as many as
// I/O threads, made when first needed, at a lower priority (kPageNice steps of nice), so that
// on a shared CPU a short request's I/O thread gets most of it while a page is built; long
// requests queue for them, at most dynamodb_max_pages queued or running, one more answers
// ThrottlingException naming the field. When a page thread takes a request whose client has
// closed its side meanwhile, the request is not built (refusal reason "client_gone"); one
// that queued longer than dynamodb_request_timeout_ms answers ThrottlingException saying so
// ("page_timeout"). A page thread also computes its answer's CRC32. A request with a
// consistency header (x-cdcview-min-position, x-cdcview-min-kafka-offsets,
// x-cdcview-max-staleness-seconds; MayWait) runs on a wait thread: threads are made as needed
// up to dynamodb_max_waits, one per such request while it runs, so a wait never holds up a
// request behind it; one more answers ThrottlingException naming the field (SDKs retry it
// with back-off). A long one runs on a page-wait thread
// instead (made as needed, at most dynamodb_max_pages, at the page threads' priority) and holds
// a place of both dynamodb_max_waits and dynamodb_max_pages while it runs. Pages are built
// with a build place, as many as page threads and shared by both kinds: a page thread holds
// one for its request, a page-wait thread while it hashes a long body for its signature and
// while it builds after its wait (ApiRequest::before_build), which it does not for a client
// that closed its side meanwhile ("client_gone"); a request that waits for a place is counted
// (DynamoDbApiProbe::BuildWaited). With `offload_all`
// (a cluster member, whose reads ask the other members over the network) every request runs on
// the wait threads, the long ones on the page-wait threads.
//
// Limits (ServerConfig's dynamodb_* fields; every refusal counted, see Options):
// - a request head at most kMaxHeaderBytes (431), a body at most dynamodb_max_request_bytes
//   (413), both a ValidationException naming the limit, then the connection is closed (after
//   reading what the client still sends for up to kLingerTime, so that it sees the answer);
// - a request's head and body must arrive within dynamodb_request_timeout_ms of its first byte,
//   an answer be written within it, a TLS handshake finish within it: else the connection is
//   closed (a client that does not read its answers holds one answer and no thread);
// - a keep-alive connection without a request for dynamodb_idle_timeout_ms is closed;
// - at most dynamodb_max_connections (lowered to the descriptor budget by SetMaxConnections):
//   one more is accepted and closed at once (plaintext: after a best-effort 503
//   ThrottlingException naming the field). Out of descriptors (EMFILE), a spare descriptor is
//   given up to accept and close the connection, so the listener never spins or hangs;
// - at most dynamodb_max_waits requests with a consistency header, dynamodb_max_pages long
//   requests (those with a consistency header among them): one more answers
//   ThrottlingException naming the field (refusal reasons "max_waits", "max_pages");
// - a long request waits for a page thread at most dynamodb_request_timeout_ms from its read.
// One answer per connection is held at a time: pipelined requests are read after it is sent.
//
// Security: with `tls`, HTTPS only, each connection with the TlsServerContext current at accept
// (a rotated certificate serves new connections; open ones keep theirs; client certificates
// as its context requires). With `tokens`, every POST must carry an AWS SigV4 signature by a
// token (sigv4_verify.h), whose principal the API checks views against; without, signatures
// are not checked (as DynamoDB Local does). A body longer than kMaxShortBody is hashed for its
// signature on the thread that runs the request, not on an I/O thread.
//
// Shutdown: stops accepting, closes idle connections, lets requests in flight be answered
// (with Connection: close) for up to the grace period, then drops the requests that have not
// started and closes the rest.
//
// Thread-safety: Start, port, SetMaxConnections and Shutdown from any thread; the handler is
// called from many threads at once. The probes and the token store must outlive the server.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/config/config.h"
#include "daemon/dynamodb/api.h"
#include "daemon/metrics/connection_probe.h"
#include "daemon/metrics/dynamodb_api_probe.h"
#include "daemon/security/auth_probe.h"
#include "daemon/security/tls_context.h"
#include "daemon/security/token_store.h"

namespace cdcview::dynamodb {

class HttpServer {
 public:
  // What answers a request: DynamoDbApi::Handle in the daemon, a fake in tests.
  using Handler = std::function<ApiResponse(const ApiRequest&)>;

  struct Options {
    std::shared_ptr<security::TlsServerContext> tls;  // null: plaintext
    std::shared_ptr<security::TokenStore> tokens;     // null: signatures not checked
    ConnectionProbe* connections = nullptr;           // port="dynamodb"; may be null
    security::AuthProbe* auth_probe = nullptr;        // may be null
    DynamoDbApiProbe* probe = nullptr;                // may be null
    bool offload_all = false;  // every request on the wait threads (a cluster member)
    // Which requests the I/O threads answer on the spot; the others run on the page threads.
    // Null: every request on the spot.
    std::function<bool(const ApiRequest&)> runs_short = RunsShort;
    std::function<absl::Time()> now = absl::Now;  // the SigV4 clock; tests set it
  };

  static constexpr size_t kMaxHeaderBytes = 16 * 1024;
  static constexpr std::chrono::seconds kLingerTime{2};

  // Listens on limits.dynamodb (host:port; port 0 picks one) with limits.dynamodb_threads I/O
  // threads, which the caller has resolved from 0. INVALID_ARGUMENT for 0 threads or an address
  // that does not parse, UNAVAILABLE naming it when it cannot listen.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const ServerConfig& limits,
                                                           Handler handler, Options options);
  ~HttpServer();  // Shutdown(0)

  int port() const;
  // Lowers (or restores) the connection cap; connections open stay.
  void SetMaxConnections(uint32_t max);
  void Shutdown(int grace_ms);

  class Impl;  // the listener, its threads and connections (http_server.cc)

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cdcview::dynamodb
