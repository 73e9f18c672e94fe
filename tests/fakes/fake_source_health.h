// A source's health as a test sets it, for PublishedState::RegisterSource: what readers (GetStatus,
// readiness, read consistency) see of a source without running one. Thread-safe.
#pragma once

#include <mutex>
#include <string>
#include <utility>

#include "daemon/state/published_state.h"
#include "daemon/state/source_health.h"

namespace cdcview::test {

class FakeSourceHealth {
 public:
  explicit FakeSourceHealth(SourceState state, std::string kind = "kafka")
      : kind_(std::move(kind)), health_{state, ""} {}
  SourceHealth Health() const {
    std::lock_guard lock(mu_);
    return health_;
  }
  void Set(SourceState state, std::string error = "", double progress = 0) {
    std::lock_guard lock(mu_);
    health_ = {state, std::move(error), progress};
  }
  // Registers this as source `source` of `published`; it must outlive `published`'s readers.
  void Register(size_t source, PublishedState* published) const {
    published->RegisterSource(source, kind_, [this] { return Health(); });
  }

 private:
  const std::string kind_;
  mutable std::mutex mu_;
  SourceHealth health_;
};

}  // namespace cdcview::test
