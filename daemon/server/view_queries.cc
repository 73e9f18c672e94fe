#include "daemon/server/view_queries.h"

#include "absl/strings/str_cat.h"

namespace cdcview {

std::string ViewQueries::CappedWaitNote(std::chrono::milliseconds cap) {
  return absl::StrCat(" (the request had none; the server waits at most ",
                      cap.count() % 1000 == 0 ? absl::StrCat(cap.count() / 1000, " s")
                                              : absl::StrCat(cap.count(), " ms"),
                      ", server.max_wait_ms)");
}

}  // namespace cdcview
