#include "daemon/app/verify_command.h"

#include <unistd.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/store/store_lock.h"
#include "daemon/store/store_verifier.h"

namespace cdcview {

int VerifyStoreCommand(const Config& config, std::ostream& out, std::ostream& progress) {
  const std::string& path = config.storage.path;
  const std::string data = absl::StrCat(path, "/data.mdb");
  if (access(data.c_str(), F_OK) != 0) {
    out << "cdcviewd: no store to verify: \"" << data << "\" does not exist; check storage.path\n";
    return 2;
  }
  absl::StatusOr<StoreLock> lock = StoreLock::Acquire(path);
  if (!lock.ok()) {
    out << "cdcviewd: cannot verify the store: " << lock.status().message()
        << " (verify a stopped store, or a copy of it)\n";
    return 2;
  }
  const auto started = std::chrono::steady_clock::now();
  auto last = started;
  VerifyOptions options;
  options.tables = config.tables;
  options.progress = [&](uint64_t done, uint64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last < std::chrono::seconds(1)) return;
    last = now;
    progress << absl::StrFormat("verifying %s: %d of %d pages (%.0f%%)\n", path, done, total,
                                total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0);
    progress.flush();
  };
  absl::StatusOr<VerifyReport> report = VerifyStore(data, options);
  if (!report.ok()) {
    out << "cdcviewd: cannot verify the store: " << report.status().message() << "\n";
    return 2;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!report->clean()) {
    out << "store \"" << path << "\" is damaged: " << report->Summary(VerifyReport::kMaxListed)
        << "\n";
    return 1;
  }
  out << absl::StrFormat("store \"%s\" is clean: %d pages (%.1f MiB used), %d entries, verified in %.2f s\n",
                         path, report->pages, static_cast<double>(report->used_bytes) / (1 << 20),
                         report->entries, seconds);
  return 0;
}

}  // namespace cdcview
