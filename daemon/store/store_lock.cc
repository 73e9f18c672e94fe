#include "daemon/store/store_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string_view>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace cdcview {
namespace {

// The pid the holder wrote ("<digits>\n"), or "" while it has not written it yet: the holder
// truncates the file and then writes its pid, just after it takes the lock.
std::string WrittenPid(int fd) {
  char buf[32];
  const ssize_t n = pread(fd, buf, sizeof(buf), 0);
  if (n < 2 || buf[n - 1] != '\n') return "";
  const std::string_view digits(buf, static_cast<size_t>(n - 1));
  if (!std::all_of(digits.begin(), digits.end(), absl::ascii_isdigit)) return "";
  return std::string(digits);
}

// The holder's pid, waiting briefly for a holder that has just taken the lock to write it.
std::string HolderPid(int fd) {
  for (int attempt = 0; attempt < 20; ++attempt) {
    if (std::string pid = WrittenPid(fd); !pid.empty()) return pid;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return "unknown";
}

}  // namespace

absl::StatusOr<StoreLock> StoreLock::Acquire(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kFileName);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot open the lock file \"", path, "\": ",
                                                      std::strerror(errno),
                                                      "; check storage.path and its permissions"));
  }
  StoreLock lock(fd);
  int rc;
  do {
    rc = flock(fd, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    if (errno == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat("another cdcviewd (pid ", HolderPid(fd),
                                                        ") holds \"", dir,
                                                        "\"; stop it or give this one another storage.path"));
    }
    return absl::FailedPreconditionError(absl::StrCat("cannot lock \"", path, "\": ",
                                                      std::strerror(errno),
                                                      "; check storage.path's file system"));
  }
  const std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) != 0 ||
      pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    return absl::FailedPreconditionError(absl::StrCat("cannot write the lock file \"", path, "\": ",
                                                      std::strerror(errno),
                                                      "; check storage.path's disk"));
  }
  return lock;
}

StoreLock::StoreLock(StoreLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

StoreLock& StoreLock::operator=(StoreLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

StoreLock::~StoreLock() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace cdcview
