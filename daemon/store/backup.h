// Backup: an online, consistent copy of a running store in a new directory, and the rule for
// where one may be written. A store is restored by stopping cdcviewd, putting the backup's
// data.mdb in an empty storage.path and starting it: the sources resume from the positions the
// copy holds and replay what came after (docs/ARCHITECTURE.md, "Backup and restore").
//
// A backup directory holds
//   data.mdb     a compacted LMDB copy made from one read snapshot (Store::CopyTo): items,
//                views, aggregates, the change log and the source positions of one commit
//   backup.json  its manifest, read back from the copy: the positions it holds, each view's
//                and aggregate's definition fingerprint and state, when it was made, the size
//
// Thread-safety: free functions; BackupStore runs beside the store's writer and readers (see
// Store::CopyTo for what it holds). Ownership: nothing kept past a call.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/store/store.h"

namespace cdcview {

inline constexpr char kBackupDataFile[] = "data.mdb";
inline constexpr char kBackupManifestFile[] = "backup.json";
// A requested backup directory longer than this is refused before it is looked at.
inline constexpr size_t kMaxBackupPathBytes = 4096;

struct BackupResult {
  std::string directory;    // where the backup is, absolute
  uint64_t data_bytes = 0;  // data.mdb's size
  std::string manifest;     // backup.json's text
};

// Where a backup asked for as `requested` goes: `requested` is relative to `backup_dir`
// (storage.backup_dir) or absolute, and must name a directory strictly inside it (compared
// after resolving "." and ".." in both, without following links). FAILED_PRECONDITION when
// backup_dir is empty (backups are off); INVALID_ARGUMENT for an empty or over-long request or
// one outside backup_dir.
absl::StatusOr<std::filesystem::path> ResolveBackupTarget(std::string_view backup_dir,
                                                          std::string_view requested);

// Copies `store` to `target`, which must not exist or be an empty directory, in a directory
// that exists. It writes a sibling ".<name>.partial-<pid>" and renames it to `target` once
// data.mdb and backup.json are written and synced (the directories too), so `target` never
// holds part of a backup; a failed backup removes the partial directory. `now` stamps the
// manifest. Errors: FAILED_PRECONDITION for a target that is a file or not empty, or a missing
// parent; INTERNAL naming the file and the system's error for a failed write; the store's for
// a failed copy (Store::CopyTo).
absl::StatusOr<BackupResult> BackupStore(Store& store, const std::filesystem::path& target,
                                         absl::Time now);

}  // namespace cdcview
