// Store: the LMDB environment and its named databases; it begins the transactions (txn.h) that
// read and write them.
//
//   meta          schema version, source positions, view fingerprints and states
//   items/<table> primary key -> StoredItem (last image, its sequence number, tombstone flag)
//   tombstones/<table>  TombstoneIndexKey (time, primary key) -> primary key: the table's
//                 tombstones in time order, for their compaction (see stored_item.h)
//   view/<name>   entry key -> projected item (see index_builders/view_builder.h)
//   long/items/<table>, long/view/<name>: their keys longer than LMDB's limit (long_key.h;
//                 transactions read and write them under the logical key, see txn.h)
//   agg/<name>    group key -> aggregate group state; aggm/<name> its min/max multisets
//                 (see index_builders/aggregate.h)
//   changes       sequence number -> view entry change, for Watch (see change_log.h)
//
// Thread-safety: Store's methods may be called from any thread. One writer thread at a time
// uses WriteTxn (LMDB allows one write transaction); any number of threads use ReadTxn
// concurrently and never block the writer (see txn.h). Growing the map (after MDB_MAP_FULL)
// needs no live transaction in this process, so read transactions hold resize_mu_ shared and
// GrowMap takes it exclusively for the moment of the resize (see map_resize_lock.h).
//
// One process per store: Open takes the store's lock (store_lock.h) before it touches LMDB and
// the Store holds it until it is destroyed, so a second Store on the same path, in this process
// or another, is refused until then.
//
// Verification: with the lock held and before LMDB reads a page, Open verifies the store
// (store_verifier.h) as storage.verify_at_start says: by default after an unclean shutdown
// (no clean-shutdown marker, shutdown_marker.h, which the Store writes when it closes after a
// run without store errors) or when at most StorageConfig::kVerifyCheapBytes are used. A
// damaged store is refused (DATA_LOSS naming what is damaged) instead of crashing a reader.
//
// Ownership: the caller owns the Store and ends every transaction before destroying it.
// string_views returned by Get and Cursor point into LMDB's memory map and are valid only
// until the transaction ends or the next write in it.
//
// Durability: the environment is opened with MDB_NOMETASYNC. A machine crash may lose the last
// committed transactions (their source positions roll back with them, so the source replays
// those events) but never corrupts the file; a process crash loses nothing committed.
//
// Write map (storage.write_map, on by default): with MDB_WRITEMAP a commit writes dirty pages
// in the shared map and msyncs them, instead of copying every page with pwrite, which saves
// the writer much of its LMDB work. A write to a page the file system cannot allocate would
// then be a SIGBUS.
//
// Disk reservation (either mode): the store allocates data.mdb's blocks (fallocate) for the
// whole map before LMDB may hand out its pages: at open, and before each growth. The file
// takes the map's size on disk; a full disk (or a file size limit) fails the growth with
// RESOURCE_EXHAUSTED, as a full map does, and the writer retries; a commit never runs out of
// space (pwrite) or touches a page without disk (write map). Where the file system cannot
// reserve (EOPNOTSUPP) the store logs a warning and goes without: with pwrite, so that a full
// disk fails a commit rather than killing the process.

// Write-back (storage.flush_interval_ms > 0): a batch becomes visible when it is applied in
// memory, before it is in LMDB. BeginBuffered gives a WriteTxn that records its writes in a
// PendingLayer (pending_layer.h) instead of writing LMDB; its Commit publishes the layer.
// Every transaction begun later overlays the published layers on its LMDB snapshot (Get and
// Cursor merge them, newest first), and the Flusher's thread (flusher.h) commits them to LMDB
// in one transaction once the oldest is flush_interval_ms old (its source positions with
// them). A process crash loses the layers not flushed yet, and their positions with them, so
// the sources deliver those events again: views stay exactly-once, but a reader may see the
// views step back until they are replayed. See docs/ARCHITECTURE.md, "Write-back".
#pragma once

#include <lmdb.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/config/config.h"
#include "daemon/store/map_resize_lock.h"
#include "daemon/store/store_lock.h"
#include "daemon/store/txn.h"

namespace cdcview {

class Flusher;

// The mdb_env_open flags the store uses for `config` (benchmarks replay with the same ones).
unsigned int StoreEnvFlags(const StorageConfig& config);

class Store {
 public:
  // Opens (creating if needed) the environment at config.path and every database the tables
  // and views need. Views (and aggregates) stored before but no longer configured are dropped.
  // Errors name the path and say what to do (permissions, disk, a newer schema, another
  // process holding the store: see StoreLock::Acquire); DATA_LOSS for a store the verifier
  // finds damaged, listing the first problems.
  static absl::StatusOr<std::unique_ptr<Store>> Open(const StorageConfig& config,
                                                     const std::vector<TableSpec>& tables);
  ~Store();

  // A write transaction on LMDB itself. With write-back on, it begins with the published
  // layers written into it, and its commit flushes them: what it writes lands after them.
  absl::StatusOr<std::unique_ptr<WriteTxn>> BeginWrite();
  absl::StatusOr<std::unique_ptr<ReadTxn>> BeginRead() const ABSL_NO_THREAD_SAFETY_ANALYSIS;
  // With write-back on (write_back()), a WriteTxn whose Commit publishes its writes as a
  // pending layer; otherwise BeginWrite(). Waits while the layers not flushed yet hold more
  // than kMaxPendingBytes, and fails (UNAVAILABLE, saying why) if flushing them fails
  // meanwhile. One writer thread at a time, as for BeginWrite.
  absl::StatusOr<std::unique_ptr<WriteTxn>> BeginBuffered() ABSL_NO_THREAD_SAFETY_ANALYSIS;
  bool write_back() const { return config_.flush_interval_ms > 0; }
  // Commits every published layer to LMDB now; the flush's error if it fails.
  absl::Status Flush();
  // Why the last flush failed ("" after one succeeded), for the writer's status.
  std::string flush_error() const;
  // Layers published and not in LMDB yet, and their bytes.
  size_t pending_layers() const;
  size_t pending_bytes() const;
  // How long the last flush took, its sync included (0 before the first).
  std::chrono::microseconds last_flush() const;
  // With write-back on, how long mdb_txn_commit took for the last write transaction on LMDB
  // that wrote something and committed (a flush or a direct one): what a direct commit would
  // make its writer wait, its sync first of all. None before the first: a commit that wrote
  // nothing (opening a store) skips the sync and would say nothing about it.
  std::optional<std::chrono::microseconds> last_lmdb_commit() const {
    const int64_t us = last_lmdb_commit_us_.load();
    if (us < 0) return std::nullopt;
    return std::chrono::microseconds(us);
  }
  // Sets what last_lmdb_commit() says until the next such commit (tests).
  void set_last_lmdb_commit(std::chrono::microseconds took) {
    last_lmdb_commit_us_.store(took.count());
  }
  // A flush starts early once the layers hold this much, or once there are this many (each
  // read looks a key up in every layer); BeginBuffered waits beyond kMaxPendingBytes.
  static constexpr size_t kFlushBytes = 32u << 20;
  static constexpr size_t kFlushLayers = 32;
  static constexpr size_t kMaxPendingBytes = 128u << 20;

  // Doubles the map size, up to max_map_size; RESOURCE_EXHAUSTED when already there (the
  // message says to raise storage.max_map_size) or when the file system cannot reserve disk
  // for the larger file (the message names the file and the system's error: no
  // space, file too large). Call with no transaction of this thread open. With write-back it
  // waits for a flush that is running.
  absl::Status GrowMap() ABSL_LOCKS_EXCLUDED(resize_mu_);
  // True from a growth that failed for want of disk until one succeeds.
  bool disk_full() const { return disk_full_.load(); }
  // Whether commits write through the map: storage.write_map, unless the file system cannot
  // reserve disk for the file (see the header comment).
  bool write_map() const { return config_.write_map; }

  // Writes a compacted copy of the store (mdb_env_copyfd2 with MDB_CP_COMPACT, from one read
  // snapshot) to `fd`: with write-back, what is applied is flushed first. The copy holds the
  // snapshot's source positions, so a store restored from it resumes there. A growth of the map
  // waits for the copy to end (the copy's snapshot holds resize_mu_ shared); the writer goes on
  // otherwise. Errors: the flush's, or LMDB's (the system's, for a write to `fd`).
  absl::Status CopyTo(int fd) ABSL_LOCKS_EXCLUDED(resize_mu_);

  MDB_dbi meta() const { return meta_; }
  MDB_dbi changes() const { return changes_; }
  // NOT_FOUND-free lookups: the names were validated by the config.
  MDB_dbi items(std::string_view table) const;
  MDB_dbi tombstones(std::string_view table) const;
  MDB_dbi view(std::string_view name) const;
  bool has_view(std::string_view name) const;
  // An aggregate's groups (agg/<name>) and min/max multisets (aggm/<name>).
  MDB_dbi aggregate(std::string_view name) const;
  MDB_dbi aggregate_extremes(std::string_view name) const;

  size_t max_key_size() const { return max_key_size_; }
  const std::string& path() const { return config_.path; }
  // Both read LMDB's meta pages, inside the map, so they wait for a GrowMap that is running:
  // call them with no transaction of this thread open.
  uint64_t map_size() const ABSL_LOCKS_EXCLUDED(resize_mu_);
  uint64_t map_used_bytes() const ABSL_LOCKS_EXCLUDED(resize_mu_);  // (last page + 1) * page size
  const std::vector<std::string>& dropped_views() const { return dropped_views_; }
  const std::vector<std::string>& dropped_aggregates() const { return dropped_aggregates_; }

 private:
  friend class Flusher;
  friend class WriteTxn;
  Store() = default;
  // Creates and opens env_ at config_.path with config_'s map size and flags.
  absl::Status OpenEnv();
  // Allocates data.mdb's blocks up to `bytes` (extending it): RESOURCE_EXHAUSTED naming the
  // file and errno (ENOSPC, EFBIG, EDQUOT), UNIMPLEMENTED where the file system cannot.
  absl::Status ReserveFile(uint64_t bytes);
  absl::Status OpenDatabases(const std::vector<TableSpec>& tables);
  absl::StatusOr<std::unique_ptr<WriteTxn>> BeginLmdbWrite();
  // Begins `txn`'s LMDB read snapshot (under resize_mu_, which the transaction holds shared
  // until it ends) and lays over it the published layers it does not hold.
  absl::Status BeginSnapshot(Txn* txn) const ABSL_SHARED_LOCKS_REQUIRED(resize_mu_);
  // GrowMap for a caller that holds the flusher's flush lock (or has no flusher).
  absl::Status GrowMapLocked() ABSL_LOCKS_EXCLUDED(resize_mu_);
  uint64_t MapSizeUnlocked() const ABSL_SHARED_LOCKS_REQUIRED(resize_mu_);
  // Drops agg/ and aggm/ databases (and their meta keys) of aggregates no longer configured.
  absl::Status DropStaleAggregates(WriteTxn* txn, MDB_dbi main);

  std::optional<StoreLock> lock_;  // declared first: released after everything else is closed
  MDB_env* env_ = nullptr;
  StorageConfig config_;
  size_t max_key_size_ = 0;
  MDB_dbi meta_ = 0;
  MDB_dbi changes_ = 0;
  // By database: its long-key sibling (0: none). Fixed once Open returns.
  std::vector<MDB_dbi> siblings_;
  std::map<std::string, MDB_dbi, std::less<>> items_;
  std::map<std::string, MDB_dbi, std::less<>> tombstones_;
  std::map<std::string, MDB_dbi, std::less<>> views_;
  std::vector<std::string> dropped_views_;
  std::map<std::string, std::pair<MDB_dbi, MDB_dbi>, std::less<>> aggregates_;
  std::vector<std::string> dropped_aggregates_;
  // Shared: live read transactions (ReadTxn, a buffered WriteTxn); exclusive: GrowMap.
  mutable MapResizeLock resize_mu_;
  std::unique_ptr<Flusher> flusher_;  // write-back only
  std::atomic<int64_t> last_lmdb_commit_us_{-1};  // -1: none yet
  bool opened_ = false;  // Open succeeded: closing writes the clean-shutdown marker
  std::atomic<bool> disk_full_{false};
  bool reserve_ = true;  // false where the file system cannot reserve disk (EOPNOTSUPP)
};

}  // namespace cdcview
