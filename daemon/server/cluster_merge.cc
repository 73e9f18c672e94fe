#include "daemon/server/cluster_merge.h"

namespace cdcview {
namespace {

template <typename T>
T First(const std::vector<T>& by_member) {
  return by_member.empty() ? T() : by_member.front();
}

}  // namespace

v1::StatusResponse MergeStatus(const std::vector<v1::StatusResponse>& by_member) {
  return First(by_member);
}
void MarkMemberUnreachable(uint32_t, const std::string&, v1::StatusResponse*) {}
absl::StatusOr<v1::ViewDescription> MergeViewDescription(
    const std::vector<v1::ViewDescription>& by_member) {
  return First(by_member);
}
absl::StatusOr<v1::ListViewsResponse> MergeListViews(
    const std::vector<v1::ListViewsResponse>& by_member) {
  return First(by_member);
}
absl::StatusOr<v1::HotKeysResponse> MergeHotKeys(
    const std::vector<v1::HotKeysResponse>& by_member, uint32_t) {
  return First(by_member);
}

}  // namespace cdcview
