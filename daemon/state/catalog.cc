#include "daemon/state/catalog.h"

namespace cdcview {

Catalog::Catalog(const Config& config, size_t max_key_bytes) : config_(config) {
  for (size_t t = 0; t < config.tables.size(); ++t) {
    const TableSpec& table = config.tables[t];
    builders_.push_back(std::make_unique<ViewBuilder>(table));
    first_view_.push_back(views_.size());
    for (size_t v = 0; v < table.views.size(); ++v) {
      const ViewSpec* spec = &builders_.back()->table().views[v];
      views_.push_back(ViewRef{t, v, views_.size(), spec, spec->Fingerprint(table.key)});
    }
  }
  for (size_t t = 0; t < config.tables.size(); ++t) {
    aggregate_builders_.push_back(std::make_unique<AggregateBuilder>(config.tables[t], max_key_bytes));
    first_aggregate_.push_back(aggregates_.size());
    const TableSpec& table = aggregate_builders_.back()->table();
    for (size_t a = 0; a < table.aggregates.size(); ++a) {
      const AggregateSpec* spec = &table.aggregates[a];
      aggregates_.push_back(AggregateRef{t, a, aggregates_.size(), spec, spec->Fingerprint()});
    }
  }
  for (const SourceConfig& s : config.sources) {
    source_table_.push_back(static_cast<size_t>(FindTable(s.table)));
  }
}

const ViewRef* Catalog::FindView(std::string_view name) const {
  for (const ViewRef& v : views_) {
    if (v.spec->name == name) return &v;
  }
  return nullptr;
}

const AggregateRef* Catalog::FindAggregate(std::string_view name) const {
  for (const AggregateRef& a : aggregates_) {
    if (a.spec->name == name) return &a;
  }
  return nullptr;
}

int Catalog::FindTable(std::string_view name) const {
  for (size_t t = 0; t < config_.tables.size(); ++t) {
    if (config_.tables[t].name == name) return static_cast<int>(t);
  }
  return -1;
}

}  // namespace cdcview
