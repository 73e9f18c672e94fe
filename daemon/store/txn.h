// Transactions on the store: Txn (Get and cursors), ReadTxn (a snapshot) and WriteTxn (the
// writes), begun by Store::BeginRead, BeginWrite and BeginBuffered.
//
// A transaction reads LMDB through its snapshot and, with write-back on, the pending layers
// that the snapshot does not hold yet (PendingOverlay): what it reads is the store as of its
// begin, whatever flushes meanwhile. A buffered WriteTxn records its writes in a PendingLayer
// of its own instead of writing LMDB, and its Commit publishes that layer.
//
// Thread-safety: a transaction is used by one thread at a time. One WriteTxn at a time (LMDB
// allows one write transaction): the writer thread's; ReadTxns on any number of other threads
// never block it. A ReadTxn and a buffered WriteTxn hold the store's resize lock shared until
// they end (Store::GrowMap takes it exclusively; a thread may hold several). A direct WriteTxn
// with write-back on holds the flusher's flush lock, an absl::Mutex: end it on the thread
// that began it (Abseil's deadlock detection checks which thread releases a lock).
// Ownership: the caller owns the transaction (unique_ptr) and must end it before the Store.
// string_views returned by Get point into LMDB's map or a pending layer: valid only until the
// transaction ends or its next write.
//
// Keys of any length: in a database that has a long-key sibling (the items and view
// databases, long_key.h), Get, the writes and cursors take logical keys longer than LMDB's
// limit and store them in the sibling; OpenCursor then merges both in logical key order
// (long_key_cursor.h). Entries, Bytes and Clear cover both.
#pragma once

#include <lmdb.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/store/cursor.h"
#include "daemon/store/map_resize_lock.h"
#include "daemon/store/pending_layer.h"

namespace cdcview {

class Flusher;
class Store;

// Transaction base: Get and cursors work in both read and write transactions.
class Txn {
 public:
  Txn(const Txn&) = delete;
  Txn& operator=(const Txn&) = delete;
  virtual ~Txn();

  // The value, nullopt when absent; INTERNAL on an LMDB error.
  absl::StatusOr<std::optional<std::string_view>> Get(MDB_dbi dbi, std::string_view key) const;
  // In a buffered WriteTxn the cursor also merges the transaction's own writes: close it
  // before writing to that database again (the trim of the change log does).
  std::unique_ptr<Cursor> OpenCursor(MDB_dbi dbi) const;
  // Entries and bytes (pages * page size) of a database, as seen by this transaction.
  uint64_t Entries(MDB_dbi dbi) const;
  uint64_t Bytes(MDB_dbi dbi) const;
  MDB_txn* raw() const { return txn_; }

 protected:
  friend class Store;
  Txn() = default;

  // The long-key sibling of `dbi`, 0 if it has none.
  MDB_dbi Sibling(MDB_dbi dbi) const {
    return siblings_ != nullptr && dbi < siblings_->size() ? (*siblings_)[dbi] : 0;
  }
  // Get and OpenCursor on the database itself, its sibling aside.
  absl::StatusOr<std::optional<std::string_view>> RawGet(MDB_dbi dbi, std::string_view key) const;
  std::unique_ptr<Cursor> OpenRawCursor(MDB_dbi dbi) const;
  // Whether `dbi` may hold an entry for this transaction (LMDB or a pending layer). Most
  // long-key siblings are empty, and a cursor then reads the database alone.
  bool Shows(MDB_dbi dbi) const;

  MDB_txn* txn_ = nullptr;
  // Write-back: what the transaction reads over its LMDB snapshot.
  PendingOverlay pending_;
  // The store's long-key siblings by database (Store::siblings_), or null.
  const std::vector<MDB_dbi>* siblings_ = nullptr;
};

class ReadTxn : public Txn {
 public:
  ~ReadTxn() override ABSL_NO_THREAD_SAFETY_ANALYSIS;  // releases resize_mu_

 private:
  friend class Store;
  ReadTxn() = default;
  // The store's resize lock, held shared from Store::BeginRead until the transaction ends: a
  // span the thread-safety analysis cannot follow.
  MapResizeLock* resize_mu_ = nullptr;
};

// Writes go through one cursor per database, kept for the transaction: LMDB's cursor search
// starts from the cursor's current leaf page when the key falls within it, so writes in key
// order (the applier sorts each view's mutations) and a Get followed by a Put of the same key
// (the items database) mostly skip the descent from the root.
class WriteTxn : public Txn {
 public:
  ~WriteTxn() override;  // aborts unless committed

  // Txn::Get through the database's write cursor (positions it for a following Put).
  absl::StatusOr<std::optional<std::string_view>> Get(MDB_dbi dbi, std::string_view key);

  // RESOURCE_EXHAUSTED on MDB_MAP_FULL (abort, Store::GrowMap, retry), INVALID_ARGUMENT for a
  // key over the size limit (in a database without a long-key sibling), INTERNAL otherwise
  // (and for a long key whose SHA-256 another key's entry has: never overwritten).
  absl::Status Put(MDB_dbi dbi, std::string_view key, std::string_view value);
  // Put for a key greater than every key of `dbi` (MDB_APPEND): no search, and a full page
  // is split by starting a new one, so appended pages stay full. INTERNAL (MDB_KEYEXIST) for
  // a key out of order.
  absl::Status Append(MDB_dbi dbi, std::string_view key, std::string_view value);
  // Append, or Put when `key` is not past the last key.
  absl::Status AppendOrPut(MDB_dbi dbi, std::string_view key, std::string_view value);
  // Deleting an absent key is not an error.
  absl::Status Delete(MDB_dbi dbi, std::string_view key);
  // Delete, saying whether `key` was there: false when absent. A direct transaction finds
  // out in the delete's own search. A buffered one asks its own writes and the pending layers
  // only, never LMDB: a key they do not have is taken to be in LMDB (true). So only for a key
  // the caller knows is stored unless memory says otherwise (the applier: a view entry that
  // the stored item image placed). Errors: as Put's.
  absl::StatusOr<bool> Remove(MDB_dbi dbi, std::string_view key);
  // Removes every entry of `dbi` (the database stays open).
  absl::Status Clear(MDB_dbi dbi);
  absl::Status Commit();
  // Releases the locks the transaction holds.
  void Abort() ABSL_NO_THREAD_SAFETY_ANALYSIS;

 private:
  friend class Flusher;
  friend class Store;
  WriteTxn() = default;
  // The write cursor of `dbi`, opened on first use; LMDB frees it when the transaction ends.
  absl::StatusOr<MDB_cursor*> CursorFor(MDB_dbi dbi);
  // WriteTxn::Get on the database itself.
  absl::StatusOr<std::optional<std::string_view>> RawGet(MDB_dbi dbi, std::string_view key);
  // A long key's sibling entry: its stored key in *stored; whether an entry of another key
  // holds it (a hash collision: an error).
  absl::Status LongKeyFree(MDB_dbi sibling, std::string_view key, std::string* stored,
                           bool* present);
  // Deletes `key` from LMDB itself (a direct transaction): whether it was there.
  absl::StatusOr<bool> DeleteFromLmdb(MDB_dbi dbi, std::string_view key);

  // A buffered transaction (Store::BeginBuffered): writes go to own_layer_, txn_ is an LMDB
  // read snapshot, and Commit publishes the layer.
  absl::Status Record(MDB_dbi dbi, std::string_view key, PendingLayer::Op op,
                      std::string_view value);
  PendingLayer::Db& OwnDb(MDB_dbi dbi);

  std::vector<MDB_cursor*> cursors_;  // by dbi; nullptr until used
  Store* store_ = nullptr;  // buffered, and direct ones with write-back (the commit's cost)
  // Buffered: where Commit publishes the layer. A direct one that absorbed pending layers:
  // where its commit drops them.
  Flusher* flusher_ = nullptr;
  bool wrote_ = false;      // a direct one: whether it wrote to LMDB (its commit then syncs)
  std::unique_ptr<PendingLayer> own_layer_;
  MapResizeLock* read_locked_ = nullptr;  // buffered: the store's resize lock, as a ReadTxn's
  // A direct transaction with write-back on: the flusher's flush lock, and the pending layers
  // it began with (written into it), which its commit drops from the flusher.
  absl::Mutex* flush_locked_ = nullptr;
  std::shared_ptr<const PendingLayers> absorbed_;
};

}  // namespace cdcview
