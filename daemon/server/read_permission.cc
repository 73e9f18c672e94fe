#include "daemon/server/read_permission.h"

#include "absl/strings/str_cat.h"

namespace cdcview {

using security::Principal;
using security::TokenStore;

absl::Status PermitEverything(const Principal& who, std::string_view what) {
  if (who.all_views) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "token \"", who.name, "\" may not read ", absl::string_view(what.data(), what.size()),
      ": only a token with views: all may (server.tokens_file)"));
}

absl::Status PermitRead(const Principal& who, const v1::QueryRequest& request) {
  return TokenStore::PermitView(who, request.view());
}
absl::Status PermitRead(const Principal& who, const v1::ScanRequest& request) {
  return TokenStore::PermitView(who, request.view());
}
absl::Status PermitRead(const Principal& who, const v1::GetItemRequest& request) {
  return PermitEverything(who, absl::StrCat("table \"", request.table(), "\"'s items"));
}
absl::Status PermitRead(const Principal&, const v1::ListViewsRequest&) {
  return absl::OkStatus();  // the answer is restricted instead
}
absl::Status PermitRead(const Principal& who, const v1::DescribeViewRequest& request) {
  return TokenStore::PermitView(who, request.view());
}
absl::Status PermitRead(const Principal&, const v1::GetStatusRequest&) {
  return absl::OkStatus();
}
absl::Status PermitRead(const Principal& who, const v1::GetAggregateRequest& request) {
  return TokenStore::PermitView(who, request.aggregate());
}
absl::Status PermitRead(const Principal& who, const v1::ListAggregatesRequest& request) {
  return TokenStore::PermitView(who, request.aggregate());
}
absl::Status PermitRead(const Principal& who, const v1::GetHotKeysRequest& request) {
  if (!request.view().empty()) return TokenStore::PermitView(who, request.view());
  return PermitEverything(who, absl::StrCat("table \"", request.table(), "\"'s hot keys"));
}
absl::Status PermitRead(const Principal& who, const v1::WatchRequest& request) {
  return TokenStore::PermitView(who, request.view());
}

void RestrictAnswer(const Principal& who, v1::ListViewsResponse* answer) {
  if (who.all_views) return;
  auto* views = answer->mutable_views();
  for (int i = views->size() - 1; i >= 0; --i) {
    if (!who.MayRead(views->Get(i).name())) views->DeleteSubrange(i, 1);
  }
}

}  // namespace cdcview
