// ReadPermission: what a bearer token (server.tokens_file) may read of cdcview.v1.ViewService,
// decided per request, the same on both read ports:
// - a view (Query, Scan, DescribeView, Watch, GetHotKeys by view) or an aggregate
//   (GetAggregate, ListAggregates) by its name: a token's `views` list names either;
// - a table's items (GetItem) or hot keys (GetHotKeys by table) only with `views: all`, as they
//   span every view of the table;
// - ListViews lists the views the token may read; GetStatus (sources and positions, no item)
//   is open to every valid token.
// Refusals are PERMISSION_DENIED with TokenStore::PermitView's message, or for what spans every
// view: token "<name>" may not read <what>: only a token with views: all may (server.tokens_file)
//
// Stateless functions; safe from any thread.
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "cdcview/v1/view_service.pb.h"
#include "daemon/security/token_store.h"

namespace cdcview {

// OK when `who` has views: all; else PERMISSION_DENIED naming `what` ("table \"T\"'s items").
absl::Status PermitEverything(const security::Principal& who, std::string_view what);

// OK, or PERMISSION_DENIED for what `request` names (see above).
absl::Status PermitRead(const security::Principal& who, const v1::QueryRequest& request);
absl::Status PermitRead(const security::Principal& who, const v1::ScanRequest& request);
absl::Status PermitRead(const security::Principal& who, const v1::GetItemRequest& request);
absl::Status PermitRead(const security::Principal& who, const v1::ListViewsRequest& request);
absl::Status PermitRead(const security::Principal& who, const v1::DescribeViewRequest& request);
absl::Status PermitRead(const security::Principal& who, const v1::GetStatusRequest& request);
absl::Status PermitRead(const security::Principal& who, const v1::GetAggregateRequest& request);
absl::Status PermitRead(const security::Principal& who,
                        const v1::ListAggregatesRequest& request);
absl::Status PermitRead(const security::Principal& who, const v1::GetHotKeysRequest& request);
absl::Status PermitRead(const security::Principal& who, const v1::WatchRequest& request);

// Removes from an answer what `who` may not read: ListViews' views; other answers are left.
void RestrictAnswer(const security::Principal& who, v1::ListViewsResponse* answer);
template <typename Answer>
void RestrictAnswer(const security::Principal&, Answer*) {}

}  // namespace cdcview
