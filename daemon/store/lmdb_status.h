// LmdbStatus: the one translation of LMDB return codes into absl::Status for the whole daemon.
//
// Thread-safety: a pure function. Ownership: the Status owns its message.
#pragma once

#include <string_view>

#include "absl/status/status.h"

namespace cdcview {

// Translates an LMDB return code; `what` says what was being done. MDB_MAP_FULL becomes
// RESOURCE_EXHAUSTED (the caller grows the map and retries), MDB_BAD_VALSIZE INVALID_ARGUMENT.
absl::Status LmdbStatus(int rc, std::string_view what);

}  // namespace cdcview
