// Opening a small store from a test's YAML: the set-up the reader and writer fixtures share.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/config/config.h"
#include "daemon/store/store.h"

namespace cdcview::test {

// Table "App" (partition key PK) with one view, `view`: what the store itself looks at.
inline std::vector<TableSpec> OneViewTable(const std::string& view) {
  TableSpec table;
  table.name = "App";
  table.key.partition = "PK";
  ViewSpec spec;
  spec.name = view;
  spec.table = "App";
  table.views.push_back(spec);
  return {table};
}

// Parses `yaml` into `config` with its storage at `dir` and a 16 MiB map (tests grow it by
// MDB_MAP_FULL like the daemon), then opens `store` there.
inline absl::Status OpenTestStore(const char* yaml, const std::string& dir, Config* config,
                                  std::unique_ptr<Store>* store) {
  absl::StatusOr<Config> parsed = ParseConfig(yaml, "test.yaml");
  if (!parsed.ok()) return parsed.status();
  *config = *std::move(parsed);
  config->storage.path = dir;
  config->storage.map_size = 16 << 20;
  absl::StatusOr<std::unique_ptr<Store>> opened = Store::Open(config->storage, config->tables);
  if (!opened.ok()) return opened.status();
  *store = *std::move(opened);
  return absl::OkStatus();
}

}  // namespace cdcview::test
