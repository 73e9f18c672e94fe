// ViewQueries that pass every call on to another: a test derives from it and overrides only
// what it changes (a slow Scan, a corrupt item, a count of calls).
#pragma once

#include <string>

#include "daemon/server/view_queries.h"

namespace cdcview::test {

class ForwardingQueries : public ViewQueries {
 public:
  explicit ForwardingQueries(const ViewQueries& inner) : inner_(inner) {}
  absl::StatusOr<v1::QueryResponse> Query(const v1::QueryRequest& r, Deadline d) const override {
    return inner_.Query(r, d);
  }
  absl::StatusOr<v1::ScanResponse> Scan(const v1::ScanRequest& r, Deadline d) const override {
    return inner_.Scan(r, d);
  }
  absl::StatusOr<v1::GetItemResponse> GetItem(const v1::GetItemRequest& r,
                                              Deadline d) const override {
    return inner_.GetItem(r, d);
  }
  absl::StatusOr<v1::AggregateGroup> GetAggregate(const v1::GetAggregateRequest& r,
                                                  Deadline d) const override {
    return inner_.GetAggregate(r, d);
  }
  absl::StatusOr<v1::ListAggregatesResponse> ListAggregates(const v1::ListAggregatesRequest& r,
                                                            Deadline d) const override {
    return inner_.ListAggregates(r, d);
  }
  absl::StatusOr<v1::ListViewsResponse> ListViews() const override { return inner_.ListViews(); }
  absl::StatusOr<v1::ViewDescription> DescribeView(const std::string& name) const override {
    return inner_.DescribeView(name);
  }
  v1::StatusResponse GetStatus() const override { return inner_.GetStatus(); }
  absl::StatusOr<v1::HotKeysResponse> GetHotKeys(const v1::GetHotKeysRequest& r) const override {
    return inner_.GetHotKeys(r);
  }

 protected:
  const ViewQueries& inner_;
};

}  // namespace cdcview::test
