// The store, catalog, published state, writer (Applier) and reader of a test config: the set-up the reader tests
// (view_reader, sharded views, read consistency, the fast read port) share.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "daemon/apply/applier.h"
#include "daemon/config/config.h"
#include "daemon/log/log.h"
#include "daemon/server/view_reader.h"
#include "daemon/state/catalog.h"
#include "daemon/state/published_state.h"
#include "daemon/store/store.h"
#include "gtest/gtest.h"
#include "tests/fakes/fake_dead_letter_sink.h"
#include "tests/fakes/fake_source_health.h"
#include "tests/fakes/temp_dir.h"
#include "tests/fakes/test_store.h"

namespace cdcview::test {

class ReaderFixture : public ::testing::Test {
 protected:
  // Opens a store for `yaml` (OpenTestStore) and its catalog, writer and reader, and loads the
  // view states: views are BUILDING until applier_->RebuildViews(). Every source dead-letters
  // into sink_. `now_ms` is the writer's clock; `sources[i]` is source i's health (what
  // GetStatus reports; none registered when empty). Call with ASSERT_NO_FATAL_FAILURE.
  void OpenReader(const char* yaml, std::function<int64_t()> now_ms = [] { return int64_t{0}; },
                  std::vector<const FakeSourceHealth*> sources = {}) {
    SetLogLevel(LogLevel::kWarning);
    ASSERT_EQ(OpenTestStore(yaml, dir_.Sub("store"), &config_, &store_), absl::OkStatus());
    catalog_ = std::make_unique<Catalog>(config_, store_->max_key_size());
    published_ = std::make_unique<PublishedState>(*catalog_, std::move(now_ms));
    for (size_t i = 0; i < sources.size(); ++i) sources[i]->Register(i, published_.get());
    applier_ = std::make_unique<Applier>(
        *catalog_, store_.get(), nullptr,
        std::vector<DeadLetterSink*>(config_.sources.size(), &sink_), published_.get());
    reader_ = std::make_unique<ViewReader>(*catalog_, *store_, *published_);
    ASSERT_TRUE(applier_->Recover().ok());
  }

  TempDir dir_;
  Config config_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Catalog> catalog_;
  FakeDeadLetterSink sink_;
  std::unique_ptr<PublishedState> published_;
  std::unique_ptr<Applier> applier_;
  std::unique_ptr<ViewReader> reader_;
};

}  // namespace cdcview::test
