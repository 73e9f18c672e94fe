// The CPUs this process may use, for sizing thread pools that do CPU work: more such threads
// than CPUs only queue behind each other, a woken one waiting up to a scheduler tick for the
// one running to be preempted.
//
// Free functions; UsableCpus reads /proc/self and the cgroup files, the others are pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cdcview {

// The CPUs in this process's affinity mask, lowered to the CPU quota of its cgroup and of the
// cgroup's ancestors (cgroup v2 cpu.max, or v1 cpu.cfs_quota_us over cpu.cfs_period_us), a
// fraction rounded up: a container limited to 1.5 CPUs gets 2. At least 1. Files that are
// missing or unreadable limit nothing.
uint32_t UsableCpus();

// The lowest CPU quota, in CPUs rounded up, of the cgroups that `proc_self_cgroup` (the text
// of /proc/self/cgroup) names and their ancestors, with the hierarchies mounted under `root`
// (/sys/fs/cgroup): v2 ("0::<path>") at `root`, a v1 hierarchy holding the cpu controller at
// `root`/<its controllers, as listed>. nullopt when none sets a quota or none is readable. The
// walk up to "/" also finds a v1 container's own quota, mounted at its hierarchy's root.
std::optional<uint32_t> QuotaCpusFromCgroups(std::string_view proc_self_cgroup,
                                             const std::string& root);

// A cgroup v2 cpu.max ("max 100000", or "<quota> <period>" in microseconds): the quota in
// CPUs rounded up; nullopt when unlimited or not in that shape.
std::optional<uint32_t> QuotaCpusV2(std::string_view cpu_max);

// A cgroup v1 quota and period (cpu.cfs_quota_us, -1 when unlimited; cpu.cfs_period_us): the
// quota in CPUs rounded up; nullopt when unlimited or not whole numbers.
std::optional<uint32_t> QuotaCpusV1(std::string_view quota_us, std::string_view period_us);

}  // namespace cdcview
