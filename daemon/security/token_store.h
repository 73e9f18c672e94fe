// TokenStore: the bearer tokens of server.tokens_file, and who each one is.
//
// The file is YAML (a mounted Secret):
//   tokens:
//     - name: orders-api          # [A-Za-z0-9_.-]+; in logs and metrics, never the token itself
//       token: "at least 16 characters"
//       views: all                # or a list of view names: [by_customer, votes_by_day]
//       metrics: false            # may scrape /metrics (default false)
// Authorization is deliberately simple: a token reads every view or a listed set, and may or may
// not scrape /metrics; there are no roles, groups or per-key rules.
//
// The file is checked for a change (inode, size, mtime, ctime: a Kubernetes Secret update swaps
// a symlink) at most once per check interval, on the next Authenticate. A changed file that does
// not load keeps the previous tokens; the failure is logged and counted in
// cdcview_auth_tokens_reloads_total{result="failed"} (result="ok" for each good reload).
//
// A presented bearer token is hashed (SHA-256) and compared with every entry's digest by
// CRYPTO_memcmp, without an early exit, so the time taken says nothing about which bytes or
// which entry matched. The tokens themselves are kept too, for FindByName: the DynamoDB
// endpoint verifies AWS SigV4 signatures, whose HMAC key is the secret itself (access key id =
// the entry's name, secret key = its token). No message, log line or metric ever carries one.
//
// Thread-safe: Authenticate may be called from any number of threads; a reload swaps an
// immutable table under a mutex. Shared (std::shared_ptr) by every port that checks tokens.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace prometheus {
class Counter;
class Registry;
}  // namespace prometheus

namespace cdcview::security {

// The exact texts clients see (gRPC status messages on every port).
inline constexpr char kNoTokenMessage[] =
    "no bearer token: send the header \"authorization: Bearer <token>\" (cdcview --token-file "
    "FILE)";
inline constexpr char kBadTokenMessage[] =
    "the bearer token is not one of server.tokens_file's tokens";
inline constexpr size_t kMinTokenLength = 16;

// Who presented a token: the entry's name and rights.
struct Principal {
  std::string name;
  bool all_views = false;
  std::vector<std::string> views;  // sorted
  bool metrics = false;
  bool MayRead(std::string_view view) const;
};

class TokenStore {
 public:
  // The most a tokens file may hold (larger: INVALID_ARGUMENT, nothing read past it).
  static constexpr size_t kMaxFileBytes = 1 << 20;

  // Loads `path`. INVALID_ARGUMENT naming the file and the entry when it does not parse, an
  // entry lacks a field, a name is not [A-Za-z0-9_.-]+ or repeats, a token is shorter than
  // kMinTokenLength or repeats; NOT_FOUND when it cannot be read. `registry` (may be null)
  // receives cdcview_auth_tokens_reloads_total.
  static absl::StatusOr<std::shared_ptr<TokenStore>> Open(
      std::string path, prometheus::Registry* registry = nullptr,
      absl::Duration check_interval = absl::Seconds(1));

  // The value of an `authorization` header ("" when absent) -> who, or UNAUTHENTICATED with
  // kNoTokenMessage (no header, or not the Bearer scheme) or kBadTokenMessage.
  absl::StatusOr<Principal> Authenticate(std::string_view authorization_header);

  // OK, or PERMISSION_DENIED: token "<name>" may not read view "<view>": add the view to its
  // views in server.tokens_file
  static absl::Status PermitView(const Principal& who, std::string_view view);
  // OK, or PERMISSION_DENIED: token "<name>" may not scrape /metrics: set metrics: true on it in
  // server.tokens_file
  static absl::Status PermitMetrics(const Principal& who);

  // The entry named `name` (an AWS access key id on the DynamoDB endpoint): its token, the
  // secret a SigV4 signature is computed with, and who it is; nullopt when no entry has that
  // name. Reloads the file first like Authenticate. Names are not secret: the lookup is a plain
  // comparison.
  struct NamedToken {
    std::string token;
    Principal principal;
  };
  std::optional<NamedToken> FindByName(std::string_view name);

  const std::string& path() const { return path_; }
  size_t size();  // tokens in the table in use

 private:
  struct Entry {
    std::array<unsigned char, 32> digest;
    std::string token;  // for FindByName; never logged
    Principal principal;
  };
  struct FileId {
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    int64_t mtime_ns = 0;
    int64_t ctime_ns = 0;
    bool operator==(const FileId&) const = default;
  };
  using Table = std::vector<Entry>;

  TokenStore(std::string path, absl::Duration check_interval);
  // Parses the file; the error names the file and the entry.
  static absl::StatusOr<Table> Load(const std::string& path);
  static absl::StatusOr<FileId> Identify(const std::string& path);
  void MaybeReload();
  std::shared_ptr<const Table> Current();

  const std::string path_;
  const int64_t check_interval_ns_;
  std::atomic<int64_t> next_check_ns_{0};
  prometheus::Counter* reloads_ok_ = nullptr;
  prometheus::Counter* reloads_failed_ = nullptr;

  absl::Mutex reload_mu_;  // one thread checks the file at a time
  FileId file_ ABSL_GUARDED_BY(reload_mu_);
  FileId failed_file_ ABSL_GUARDED_BY(reload_mu_);  // not retried until it changes again

  absl::Mutex table_mu_;
  std::shared_ptr<const Table> table_ ABSL_GUARDED_BY(table_mu_);
};

}  // namespace cdcview::security
