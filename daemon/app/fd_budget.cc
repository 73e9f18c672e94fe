#include "daemon/app/fd_budget.h"

#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace cdcview {

absl::StatusOr<FdLimit> RaiseFdLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return absl::InternalError(absl::StrCat("cannot read RLIMIT_NOFILE: ", std::strerror(errno)));
  }
  FdLimit out;
  out.soft_at_start = limit.rlim_cur;
  out.hard = limit.rlim_max;
  rlim_t target = limit.rlim_max;
  if (target == RLIM_INFINITY) {
    // The kernel refuses an unlimited RLIMIT_NOFILE; fs.nr_open is the most it allows.
    uint64_t nr_open = 0;
    std::ifstream("/proc/sys/fs/nr_open") >> nr_open;
    target = nr_open > 0 ? nr_open : limit.rlim_cur;
  }
  if (target > limit.rlim_cur) {
    rlimit raised{target, limit.rlim_max};
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit.rlim_cur = target;
  }
  out.soft = limit.rlim_cur;
  return out;
}

absl::StatusOr<uint64_t> CountOpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot list /proc/self/fd: ", std::strerror(errno)));
  }
  uint64_t count = 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count - 1;  // the directory's own descriptor
}

uint64_t ConnectionBudget(uint64_t limit, uint64_t open, uint64_t reserve) {
  return limit > open + reserve ? limit - open - reserve : 0;
}

std::vector<uint32_t> ShareConnectionBudget(uint64_t budget, const std::vector<uint32_t>& wanted) {
  uint64_t sum = 0;
  for (uint32_t w : wanted) sum += w;
  if (sum <= budget) return wanted;
  std::vector<uint32_t> caps;
  for (uint32_t w : wanted) {
    caps.push_back(static_cast<uint32_t>(std::max<uint64_t>(1, budget * w / sum)));
  }
  return caps;
}

}  // namespace cdcview
