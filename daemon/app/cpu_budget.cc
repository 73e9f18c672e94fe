#include "daemon/app/cpu_budget.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace cdcview {
namespace {

std::optional<uint32_t> CeilCpus(uint64_t quota_us, uint64_t period_us) {
  if (quota_us == 0 || period_us == 0) return std::nullopt;
  const uint64_t cpus = (quota_us + period_us - 1) / period_us;
  return static_cast<uint32_t>(std::min<uint64_t>(cpus, UINT32_MAX));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// `path` ("/a/b") and each ancestor up to "/": where a quota set on a pod's cgroup applies.
std::vector<std::string> SelfAndAncestors(std::string path) {
  std::vector<std::string> out;
  while (!path.empty() && path.back() == '/') path.pop_back();
  for (;;) {
    out.push_back(path.empty() ? "/" : path);
    const size_t slash = path.rfind('/');
    if (slash == std::string::npos || path.empty()) break;
    path.resize(slash);
  }
  return out;
}

}  // namespace

std::optional<uint32_t> QuotaCpusFromCgroups(std::string_view proc_self_cgroup,
                                             const std::string& root) {
  std::optional<uint32_t> lowest;
  auto lower = [&lowest](std::optional<uint32_t> cpus) {
    if (cpus && (!lowest || *cpus < *lowest)) lowest = cpus;
  };
  std::istringstream lines{std::string(proc_self_cgroup)};
  for (std::string line; std::getline(lines, line);) {
    // "<id>:<controllers>:<path>"; v2 is "0::<path>".
    std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3 || parts[2].empty() || parts[2][0] != '/') continue;
    if (parts[0] == "0" && parts[1].empty()) {
      for (const std::string& dir : SelfAndAncestors(parts[2])) {
        const std::string base = root + (dir == "/" ? "" : dir);
        lower(QuotaCpusV2(ReadFile(base + "/cpu.max")));
      }
      continue;
    }
    std::vector<std::string> controllers = absl::StrSplit(parts[1], ',');
    if (std::find(controllers.begin(), controllers.end(), "cpu") == controllers.end()) continue;
    for (const std::string& dir : SelfAndAncestors(parts[2])) {
      const std::string base = root + "/" + parts[1] + (dir == "/" ? "" : dir);
      lower(QuotaCpusV1(ReadFile(base + "/cpu.cfs_quota_us"),
                        ReadFile(base + "/cpu.cfs_period_us")));
    }
  }
  return lowest;
}

std::optional<uint32_t> QuotaCpusV2(std::string_view cpu_max) {
  std::vector<std::string> fields =
      absl::StrSplit(std::string(cpu_max), absl::ByAnyChar(" \n"), absl::SkipEmpty());
  uint64_t quota = 0, period = 0;
  if (fields.size() != 2 || !absl::SimpleAtoi(fields[0], &quota) ||
      !absl::SimpleAtoi(fields[1], &period)) {
    return std::nullopt;  // "max ..." or not cpu.max's shape
  }
  return CeilCpus(quota, period);
}

std::optional<uint32_t> QuotaCpusV1(std::string_view quota_us, std::string_view period_us) {
  uint64_t quota = 0, period = 0;
  // SimpleAtoi skips surrounding whitespace; "-1" (unlimited) does not parse as unsigned.
  if (!absl::SimpleAtoi(std::string(quota_us), &quota) ||
      !absl::SimpleAtoi(std::string(period_us), &period)) {
    return std::nullopt;
  }
  return CeilCpus(quota, period);
}

uint32_t UsableCpus() {
  uint32_t cpus = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) cpus = static_cast<uint32_t>(CPU_COUNT(&set));
  if (cpus == 0) cpus = static_cast<uint32_t>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  if (std::optional<uint32_t> quota =
          QuotaCpusFromCgroups(ReadFile("/proc/self/cgroup"), "/sys/fs/cgroup")) {
    cpus = std::min(cpus, *quota);
  }
  return std::max(cpus, 1u);
}

}  // namespace cdcview
