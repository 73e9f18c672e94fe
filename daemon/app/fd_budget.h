// The open-files budget: raising the soft RLIMIT_NOFILE at start, and how many descriptors the
// listening ports' connections may hold so that the store, the sources (files, dead-letter
// files, Kafka and DynamoDB sockets) and /metrics never run out.
//
// Free functions over plain values, safe from any thread; RaiseFdLimit changes the process's
// limit and is meant for start-up.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace cdcview {

struct FdLimit {
  uint64_t soft_at_start = 0;
  uint64_t soft = 0;  // in force now: the hard limit unless raising it failed
  uint64_t hard = 0;
};

// Raises the soft limit to the hard one (an unlimited hard limit: to the kernel's
// fs.nr_open). Never lowers it. Errors only when the limits cannot be read.
absl::StatusOr<FdLimit> RaiseFdLimit();

// Descriptors open in this process now (entries of /proc/self/fd, less the one that counts).
absl::StatusOr<uint64_t> CountOpenFds();

// Descriptors connections may hold: `limit` less those `open` and the `reserve`; 0 if none.
uint64_t ConnectionBudget(uint64_t limit, uint64_t open, uint64_t reserve);

// Caps for several ports that together fit in `budget`: each what it `wanted` when their sum
// fits, else its share in proportion to what it wanted (at least 1 each).
std::vector<uint32_t> ShareConnectionBudget(uint64_t budget, const std::vector<uint32_t>& wanted);

}  // namespace cdcview
