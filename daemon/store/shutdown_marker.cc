#include "daemon/store/shutdown_marker.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace cdcview {
namespace {

std::string MarkerPath(const std::string& directory) {
  return absl::StrCat(directory, "/", kShutdownMarkerName);
}

absl::Status Failed(const char* what, const std::string& path) {
  return absl::InternalError(absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(errno)));
}

absl::Status SyncDirectory(const std::string& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Failed("open", directory);
  const int rc = fsync(fd);
  ::close(fd);
  if (rc != 0) return Failed("sync", directory);
  return absl::OkStatus();
}

}  // namespace

bool ClosedCleanly(const std::string& directory) {
  return access(MarkerPath(directory).c_str(), F_OK) == 0;
}

absl::Status MarkClosedCleanly(const std::string& directory) {
  const std::string path = MarkerPath(directory);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Failed("create", path);
  const std::string text = absl::StrCat("closed cleanly by pid ", getpid(), "\n");
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                       fsync(fd) == 0;
  ::close(fd);
  if (!written) return Failed("write", path);
  return SyncDirectory(directory);
}

absl::Status ClearClosedCleanly(const std::string& directory) {
  const std::string path = MarkerPath(directory);
  if (unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return Failed("remove", path);
  }
  return SyncDirectory(directory);
}

}  // namespace cdcview
