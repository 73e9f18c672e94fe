// Cluster merges of GetStatus, ListViews, DescribeView and GetHotKeys: a cluster member's
// answers (by ordinal) into the cluster's answer. Pure functions; thread-safe.
//
// PLACEHOLDER of the fanout branch, with the signatures of helper "merge"'s file, which
// replaces it: each function answers the first member's answer, so ClusterQueries builds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cdcview/v1/view_service.pb.h"

namespace cdcview {

v1::StatusResponse MergeStatus(const std::vector<v1::StatusResponse>& by_member);
void MarkMemberUnreachable(uint32_t ordinal, const std::string& why, v1::StatusResponse* merged);
absl::StatusOr<v1::ViewDescription> MergeViewDescription(
    const std::vector<v1::ViewDescription>& by_member);
absl::StatusOr<v1::ListViewsResponse> MergeListViews(
    const std::vector<v1::ListViewsResponse>& by_member);
absl::StatusOr<v1::HotKeysResponse> MergeHotKeys(
    const std::vector<v1::HotKeysResponse>& by_member, uint32_t limit);

}  // namespace cdcview
