#include "daemon/server/view_queries.h"

#include "absl/strings/str_cat.h"

namespace cdcview {

std::string ViewQueries::CappedWaitNote() {
  return absl::StrCat(" (the request had none; the server waits at most ",
                      kMaxWaitWithoutDeadline.count(), " s)");
}

}  // namespace cdcview
