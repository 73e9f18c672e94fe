// MapResizeLock: keeps LMDB's memory map from moving under live transactions. Every read
// snapshot (a ReadTxn, a buffered WriteTxn) holds it shared for its whole life; Store::GrowMap
// takes it exclusively for the moment of the resize (mdb_env_set_mapsize needs no live
// transaction in the process), and map_size() shared while it reads LMDB's meta pages.
//
// Why a std::shared_mutex and not an absl::Mutex: a thread may hold several snapshots at once
// (a second ReadTxn begun while one is open), and absl::Mutex queues a new reader behind a
// waiting writer, so that second shared hold would deadlock against a GrowMap waiting for the
// first (and Abseil's deadlock detector rejects any recursive reader lock). libstdc++'s
// std::shared_mutex is a glibc rwlock that prefers readers: it admits them while a writer
// waits, and a shared hold may end on another thread. This class gives it the capability
// annotations of absl/base/thread_annotations.h, so the thread-safety analysis checks its
// holders as it checks an absl::Mutex's.
//
// Thread-safety: every method from any thread. Ownership: the Store owns it; holders borrow it.
#pragma once

#include <shared_mutex>

#include "absl/base/thread_annotations.h"

namespace cdcview {

class ABSL_LOCKABLE MapResizeLock {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  void ReaderLock() ABSL_SHARED_LOCK_FUNCTION() { mu_.lock_shared(); }
  void ReaderUnlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock_shared(); }

  // Scoped holds, as absl::MutexLock and absl::ReaderMutexLock.
  class ABSL_SCOPED_LOCKABLE Exclusive {
   public:
    explicit Exclusive(MapResizeLock* lock) ABSL_EXCLUSIVE_LOCK_FUNCTION(lock) : lock_(lock) {
      lock_->Lock();
    }
    ~Exclusive() ABSL_UNLOCK_FUNCTION() { lock_->Unlock(); }
    Exclusive(const Exclusive&) = delete;
    Exclusive& operator=(const Exclusive&) = delete;

   private:
    MapResizeLock* const lock_;
  };
  class ABSL_SCOPED_LOCKABLE Shared {
   public:
    explicit Shared(MapResizeLock* lock) ABSL_SHARED_LOCK_FUNCTION(lock) : lock_(lock) {
      lock_->ReaderLock();
    }
    ~Shared() ABSL_UNLOCK_FUNCTION() { lock_->ReaderUnlock(); }
    Shared(const Shared&) = delete;
    Shared& operator=(const Shared&) = delete;

   private:
    MapResizeLock* const lock_;
  };

 private:
  std::shared_mutex mu_;
};

}  // namespace cdcview
