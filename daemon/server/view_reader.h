// ViewReader: answers view queries from LMDB read transactions. The gRPC service is a thin
// adapter over it, so the query semantics are testable without a network.
//
// Thread-safe: every call opens its own read transaction; many may run at once and none
// blocks the writer.
//
// Ranges: a view's entries for one partition key are the keys that begin with enc(pk); a sort
// condition narrows that to [lower, upper) over enc(pk)·enc(sk) (see key_codec.h), so every
// condition is one cursor walk in either direction. Page tokens carry the last key returned
// and the view's fingerprint, and resume strictly after (or before) it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cdcview/v1/view_service.pb.h"
#include "daemon/apply/applier.h"
#include "daemon/apply/catalog.h"
#include "daemon/sources/change_source.h"
#include "daemon/store/store.h"

namespace cdcview {

class ViewReader {
 public:
  // `sources[i]` is source i (for GetStatus); may be empty in tests.
  ViewReader(const Catalog& catalog, const Store& store, const Applier& applier,
             std::vector<const ChangeSource*> sources, uint32_t max_page_size = 1000);

  // NOT_FOUND: unknown view. INVALID_ARGUMENT: missing or wrongly typed key or condition
  // value, BETWEEN bounds out of order, begins_with on a number, a malformed or foreign page
  // token. UNAVAILABLE: the view is being rebuilt.
  absl::StatusOr<v1::QueryResponse> Query(const v1::QueryRequest& request) const;
  absl::StatusOr<v1::ScanResponse> Scan(const v1::ScanRequest& request) const;
  // NOT_FOUND: unknown table. INVALID_ARGUMENT: key attributes missing or of the wrong type.
  absl::StatusOr<v1::GetItemResponse> GetItem(const v1::GetItemRequest& request) const;
  absl::StatusOr<v1::ViewDescription> DescribeView(const std::string& name) const;
  // INTERNAL if the store cannot be read.
  absl::StatusOr<v1::ListViewsResponse> ListViews() const;
  v1::StatusResponse GetStatus() const;
  // The view, READY: NOT_FOUND naming the views for an unknown name, UNAVAILABLE with the
  // progress while it is rebuilt. Every RPC on a view (Query, Scan, Watch) starts here.
  absl::StatusOr<const ViewRef*> ReadyView(const std::string& name) const;

 private:
  v1::ViewDescription Describe(const ViewRef& view, const Txn& txn) const;

  const Catalog& catalog_;
  const Store& store_;
  const Applier& applier_;
  std::vector<const ChangeSource*> sources_;
  uint32_t max_page_size_;
};

// Page tokens (exposed for tests): opaque bytes binding a resume key to a view definition.
std::string EncodePageToken(std::string_view fingerprint, bool backward, std::string_view last_key);
// INVALID_ARGUMENT with an actionable message for a token that is malformed or was issued for
// another view definition or direction.
absl::StatusOr<std::string> DecodePageToken(std::string_view token, std::string_view fingerprint,
                                            bool backward);

}  // namespace cdcview
