// HttpClient: HTTP(S) requests over libcurl, the one place libcurl errors become Statuses.
//
// Each thread that calls Post/Get uses its own curl easy handle (thread_local, created on
// first use and kept), so connections are kept alive and reused per thread without locks.
// An HttpClient itself holds only its timeouts: share one between threads freely.
// libcurl's global state is initialised once, on the first HttpClient constructed.
#pragma once

#include <atomic>
#include <chrono>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/aws/sigv4.h"

namespace cdcview::aws {

struct HttpResponse {
  long status = 0;  // HTTP status code
  std::string body;
};

class HttpClient {
 public:
  struct Options {
    std::chrono::milliseconds connect_timeout{5000};
    std::chrono::milliseconds request_timeout{30000};  // whole request, including the body
    // When set, a request in flight ends with CANCELLED within about a second of it turning
    // true (libcurl's progress callback runs at least once a second), so a stopping source
    // does not wait out request_timeout. Must outlive the client.
    const std::atomic<bool>* cancel = nullptr;
  };
  HttpClient() : HttpClient(Options{}) {}
  explicit HttpClient(Options options);

  // Any HTTP status is a response (the caller interprets 4xx/5xx). Errors only when no
  // response arrived: UNAVAILABLE for a refused or failed connection, a DNS failure or a
  // reset; DEADLINE_EXCEEDED for a timeout; INVALID_ARGUMENT for a malformed URL; CANCELLED
  // once Options::cancel is true. Messages
  // name the URL and libcurl's explanation.
  absl::StatusOr<HttpResponse> Post(const std::string& url, const HeaderList& headers,
                                    const std::string& body) const;
  absl::StatusOr<HttpResponse> Get(const std::string& url, const HeaderList& headers) const;

 private:
  absl::StatusOr<HttpResponse> Perform(const std::string& url, const HeaderList& headers,
                                       const std::string* body) const;
  Options options_;
};

// "https://host:443/path" -> host ("host:443" as given) and path ("/path", "/" when empty).
// INVALID_ARGUMENT for a URL without a scheme.
absl::Status SplitUrl(const std::string& url, std::string* host, std::string* path);

}  // namespace cdcview::aws
