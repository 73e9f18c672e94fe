#include "daemon/store/lmdb_status.h"

#include <lmdb.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace cdcview {

absl::Status LmdbStatus(int rc, std::string_view what) {
  if (rc == MDB_SUCCESS) return absl::OkStatus();
  std::string msg = absl::StrCat(absl::string_view(what.data(), what.size()), ": ", mdb_strerror(rc));
  switch (rc) {
    case MDB_MAP_FULL:
      return absl::ResourceExhaustedError(msg);
    case MDB_BAD_VALSIZE:
      return absl::InvalidArgumentError(msg);
    case MDB_NOTFOUND:
      return absl::NotFoundError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace cdcview
