// The clean-shutdown marker: a file, <storage.path>/cdcviewd.clean, that Store writes when it
// closes the store after a run that met no store error, and removes when it opens the store.
// So its absence at open means the last run ended in a crash (a kill -9, a power cut), in a
// store error, or has never run: the cases where verifying the store first is worth its cost
// (storage.verify_at_start: auto). Both changes are synced, with the directory, so a machine
// crash cannot bring back a marker removed before the run wrote anything.
//
// Thread-safety: functions on the file system; call them with the store's lock held.
// Ownership: none.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace cdcview {

inline constexpr char kShutdownMarkerName[] = "cdcviewd.clean";

// Whether the marker is in `directory`.
bool ClosedCleanly(const std::string& directory);
// Writes the marker (with this process's pid, for a reader of the directory).
absl::Status MarkClosedCleanly(const std::string& directory);
// Removes the marker; OK if there was none.
absl::Status ClearClosedCleanly(const std::string& directory);

}  // namespace cdcview
