// ReadPermission: what a cdcview.v1.ViewService request names, for a bearer token's rights.
//
// A token's `views` list (server.tokens_file) holds the names requests name: a view (Query,
// Scan, DescribeView, Watch, GetHotKeys by view), a table (GetItem, GetHotKeys by table) or an
// aggregate (GetAggregate, ListAggregates). ListViews and GetStatus name none (they describe
// views and sources, no item): every valid token may call them. A token with `views: all`
// reads everything.
//
// Stateless functions; safe from any thread.
#pragma once

#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "daemon/security/token_store.h"

namespace cdcview {

// The name `request` reads under: its view, else its table, else its aggregate (the first of
// those fields the type has that is set; "" when it has some and none is set); nullopt when the
// type has none of them. Points into `request`.
template <typename Request>
std::optional<std::string_view> ReadTarget(const Request& request) {
  constexpr bool kHasView = requires { request.view(); };
  constexpr bool kHasTable = requires { request.table(); };
  constexpr bool kHasAggregate = requires { request.aggregate(); };
  if constexpr (kHasView) {
    if (!request.view().empty()) return std::string_view(request.view());
  }
  if constexpr (kHasTable) {
    if (!request.table().empty()) return std::string_view(request.table());
  }
  if constexpr (kHasAggregate) {
    return std::string_view(request.aggregate());
  }
  if constexpr (kHasView || kHasTable) return std::string_view();
  return std::nullopt;
}

// OK, or TokenStore::PermitView's PERMISSION_DENIED for the name `request` reads under.
template <typename Request>
absl::Status PermitRead(const security::Principal& who, const Request& request) {
  std::optional<std::string_view> target = ReadTarget(request);
  if (!target.has_value()) return absl::OkStatus();
  return security::TokenStore::PermitView(who, *target);
}

}  // namespace cdcview
