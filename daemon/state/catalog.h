// Catalog: the configured tables and views, indexed for the writer and the query server.
//
// Built once from the Config; immutable afterwards and safe to share between threads.
// Views have a global index (tables in config order, views in order) used by metrics,
// ViewStates and BatchStats.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/config/config.h"
#include "index_builders/aggregate.h"
#include "index_builders/view_builder.h"

namespace cdcview {

struct ViewRef {
  size_t table = 0;     // index into Config::tables
  size_t in_table = 0;  // index into TableSpec::views (and IndexMutation::view)
  size_t global = 0;
  const ViewSpec* spec = nullptr;
  std::string fingerprint;  // ViewSpec::Fingerprint, computed once
};

struct AggregateRef {
  size_t table = 0;     // index into Config::tables
  size_t in_table = 0;  // index into TableSpec::aggregates (and AggregateDelta::aggregate)
  size_t global = 0;    // tables in config order, aggregates in order
  const AggregateSpec* spec = nullptr;
  std::string fingerprint;  // AggregateSpec::Fingerprint, computed once
};

class Catalog {
 public:
  // `max_key_bytes`: the store's key size limit for aggregate group keys (views and items
  // take keys of any length: long_key.h).
  Catalog(const Config& config, size_t max_key_bytes);

  const Config& config() const { return config_; }
  const std::vector<ViewRef>& views() const { return views_; }
  const ViewRef* FindView(std::string_view name) const;
  // Index of the table named `name`, or -1.
  int FindTable(std::string_view name) const;
  const ViewBuilder& builder(size_t table) const { return *builders_[table]; }
  // Global index of view `in_table` of `table`.
  size_t GlobalView(size_t table, size_t in_table) const { return first_view_[table] + in_table; }
  size_t TableOfSource(size_t source) const { return source_table_[source]; }

  const std::vector<AggregateRef>& aggregates() const { return aggregates_; }
  const AggregateRef* FindAggregate(std::string_view name) const;
  const AggregateBuilder& aggregate_builder(size_t table) const { return *aggregate_builders_[table]; }
  size_t GlobalAggregate(size_t table, size_t in_table) const {
    return first_aggregate_[table] + in_table;
  }

 private:
  const Config& config_;
  std::vector<std::unique_ptr<ViewBuilder>> builders_;
  std::vector<ViewRef> views_;
  std::vector<size_t> first_view_;
  std::vector<size_t> source_table_;
  std::vector<std::unique_ptr<AggregateBuilder>> aggregate_builders_;
  std::vector<AggregateRef> aggregates_;
  std::vector<size_t> first_aggregate_;
};

}  // namespace cdcview
