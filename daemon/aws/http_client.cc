#include "daemon/aws/http_client.h"

#include <curl/curl.h>

#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace cdcview::aws {
namespace {

struct EasyDeleter {
  void operator()(CURL* curl) const { curl_easy_cleanup(curl); }
};
struct ListDeleter {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};

// One handle per thread: keeps its connection cache between calls (keep-alive).
CURL* ThreadHandle() {
  thread_local std::unique_ptr<CURL, EasyDeleter> handle(curl_easy_init());
  return handle.get();
}

size_t AppendBody(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

// CURLOPT_XFERINFOFUNCTION: non-zero aborts the transfer (CURLE_ABORTED_BY_CALLBACK).
int AbortWhenCancelled(void* cancel, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<const std::atomic<bool>*>(cancel)->load() ? 1 : 0;
}

// The one translation of libcurl's error codes.
absl::Status CurlError(CURLcode code, const std::string& url, const char* detail) {
  std::string message = absl::StrCat("HTTP request to ", url, " failed: ", curl_easy_strerror(code),
                                     detail[0] != '\0' ? absl::StrCat(" (", detail, ")") : "");
  switch (code) {
    case CURLE_OPERATION_TIMEDOUT:
      return absl::DeadlineExceededError(message);
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
      return absl::InvalidArgumentError(message);
    case CURLE_OUT_OF_MEMORY:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::UnavailableError(message);
  }
}

}  // namespace

HttpClient::HttpClient(Options options) : options_(options) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

absl::StatusOr<HttpResponse> HttpClient::Post(const std::string& url, const HeaderList& headers,
                                              const std::string& body) const {
  return Perform(url, headers, &body);
}

absl::StatusOr<HttpResponse> HttpClient::Get(const std::string& url,
                                             const HeaderList& headers) const {
  return Perform(url, headers, nullptr);
}

absl::StatusOr<HttpResponse> HttpClient::Perform(const std::string& url, const HeaderList& headers,
                                                 const std::string* body) const {
  CURL* curl = ThreadHandle();
  if (curl == nullptr) return absl::ResourceExhaustedError("curl_easy_init failed");
  curl_easy_reset(curl);  // options only; the connection cache survives
  std::unique_ptr<curl_slist, ListDeleter> list;
  for (const auto& [name, value] : headers) {
    list.reset(curl_slist_append(list.release(), absl::StrCat(name, ": ", value).c_str()));
  }
  // libcurl would add "Expect: 100-continue" to larger POSTs: one more round trip for nothing.
  list.reset(curl_slist_append(list.release(), "Expect:"));
  HttpResponse response;
  char error[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list.get());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, AppendBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &response.body);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, long(options_.connect_timeout.count()));
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, long(options_.request_timeout.count()));
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
  if (body != nullptr) {
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body->data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body->size()));
  }
  if (options_.cancel != nullptr) {
    if (options_.cancel->load()) {
      return absl::CancelledError(absl::StrCat("request to ", url, " not sent: stopping"));
    }
    curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, AbortWhenCancelled);
    curl_easy_setopt(curl, CURLOPT_XFERINFODATA, options_.cancel);
  }
  CURLcode code = curl_easy_perform(curl);
  if (code == CURLE_ABORTED_BY_CALLBACK) {
    return absl::CancelledError(absl::StrCat("request to ", url, " cancelled: stopping"));
  }
  if (code != CURLE_OK) return CurlError(code, url, error);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  return response;
}

absl::Status SplitUrl(const std::string& url, std::string* host, std::string* path) {
  size_t scheme = url.find("://");
  if (scheme == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("URL \"", url, "\" has no scheme; expected http://host[:port][/path]"));
  }
  size_t start = scheme + 3;
  size_t slash = url.find('/', start);
  *host = url.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
  *path = slash == std::string::npos ? "/" : url.substr(slash);
  if (host->empty()) {
    return absl::InvalidArgumentError(absl::StrCat("URL \"", url, "\" has no host"));
  }
  return absl::OkStatus();
}

}  // namespace cdcview::aws
