// StoreLock: one process's exclusive claim on a storage directory, so that no two processes
// open one store. LMDB itself lets several processes share an environment, but this store does
// not: its single writer, its map growth and its write-back layers assume they are alone (a
// second cdcviewd on the same path made the first die of SIGBUS or wedged on MDB_KEYEXIST).
//
// The claim is flock(LOCK_EX | LOCK_NB) on <dir>/cdcviewd.lock, held as long as the StoreLock
// lives. The kernel drops it when its descriptor closes, however the process ends (kill -9
// included), so it never outlives its holder and needs no cleanup; the file stays behind and
// holds the last holder's pid, which a refused process names. The file is never removed: a
// process that removed it could let the next two lock different files of the same name.
//
// flock locks belong to the open file, not to the process: a second Acquire of the same
// directory fails in the same process too (as a second Store on one path must: LMDB forbids
// opening an environment twice in one process). The descriptor is close-on-exec, so a program
// the holder runs does not keep the lock after the holder dies.
//
// Thread-safety: immutable after Acquire. Ownership: owns its descriptor; movable, not copyable.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace cdcview {

class StoreLock {
 public:
  static constexpr char kFileName[] = "cdcviewd.lock";

  // Locks <dir>/cdcviewd.lock (creating it; `dir` must exist) and writes this process's pid
  // into it. FAILED_PRECONDITION if another open file holds the lock ("another cdcviewd (pid N)
  // holds \"<dir>\"; stop it or give this one another storage.path") or the file cannot be
  // opened or locked (the message names the file and says what to check).
  static absl::StatusOr<StoreLock> Acquire(const std::string& dir);

  StoreLock(StoreLock&& other) noexcept;
  StoreLock& operator=(StoreLock&& other) noexcept;
  StoreLock(const StoreLock&) = delete;
  StoreLock& operator=(const StoreLock&) = delete;
  ~StoreLock();  // releases the lock

 private:
  explicit StoreLock(int fd) : fd_(fd) {}

  int fd_ = -1;  // -1 once moved from
};

}  // namespace cdcview
