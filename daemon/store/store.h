// Store: the LMDB environment and its named databases.
//
//   meta          schema version, source positions, view fingerprints and states
//   items/<table> primary key -> StoredItem (last image, its sequence number, tombstone flag)
//   view/<name>   entry key -> projected item (see index_builders/view_builder.h)
//   agg/<name>    group key -> aggregate group state; aggm/<name> its min/max multisets
//                 (see index_builders/aggregate.h)
//   changes       sequence number -> view entry change, for Watch (see change_log.h)
//
// Threading: one writer thread at a time uses WriteTxn (LMDB allows one write transaction);
// any number of threads use ReadTxn concurrently and never block the writer. Growing the map
// (after MDB_MAP_FULL) needs no live transaction in this process, so read transactions hold a
// shared lock that GrowMap takes exclusively for the moment of the resize.
//
// Ownership: string_views returned by Get and Cursor point into LMDB's memory map and are
// valid only until the transaction ends or the next write in it.
//
// Durability: the environment is opened with MDB_NOMETASYNC. A machine crash may lose the last
// committed transactions (their source positions roll back with them, so the source replays
// those events) but never corrupts the file; a process crash loses nothing committed.
//
// Write map (storage.write_map, on by default): with MDB_WRITEMAP a commit writes dirty pages
// in the shared map and msyncs them, instead of copying every page with pwrite: the writer's
// LMDB work halves. The file is then as long as the map (sparse: only used pages take disk),
// and running out of disk space raises SIGBUS (the process dies; the last commit is intact)
// where pwrite would have failed the commit. docs/ARCHITECTURE.md, "Write map", has figures.
//
// Write-back (storage.flush_interval_ms > 0): a batch becomes visible when it is applied in
// memory, before it is in LMDB. BeginBuffered gives a WriteTxn that records its writes in a
// PendingLayer instead of writing LMDB; its Commit publishes the layer. Every transaction
// begun later overlays the published layers on its LMDB snapshot (Get and Cursor merge them,
// newest first), and a background thread commits them to LMDB in one transaction once the
// oldest is flush_interval_ms old (its source positions with them). A process crash loses the
// layers not flushed yet, and their positions with them, so the sources deliver those events
// again: views stay exactly-once, but a reader may see the views step back until they are
// replayed. See docs/ARCHITECTURE.md, "Write-back".
#pragma once

#include <lmdb.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/config/config.h"

namespace cdcview {

class Store;

// Translates an LMDB return code; `what` says what was being done. MDB_MAP_FULL becomes
// RESOURCE_EXHAUSTED (the caller grows the map and retries), MDB_BAD_VALSIZE INVALID_ARGUMENT.
absl::Status LmdbStatus(int rc, std::string_view what);

// Writes applied in memory and not committed to LMDB yet: one immutable layer per batch (see
// "Write-back" above). A layer holds the last write of each key it touched.
struct PendingLayer {
  enum class Op : uint8_t { kPut, kAppend, kDelete };
  struct Entry {
    Op op;
    std::string value;  // empty for a delete
  };
  using Entries = std::map<std::string, Entry, std::less<>>;
  struct Db {
    bool cleared = false;  // WriteTxn::Clear: what older layers and LMDB hold is gone
    Entries entries;
    // The keys' Bloom filter (16 bits per key, two probes), built when the layer is
    // published: a lookup of a key the layer lacks costs two bit tests, not a tree search.
    // Empty: not built (a layer being written), so every key may be there.
    std::vector<uint64_t> bloom;
    bool MayHave(size_t hash) const;
    void BuildBloom();
  };
  uint64_t sequence = 0;  // 1, 2, ... in the order layers are published, across restarts
  std::chrono::steady_clock::time_point published;
  size_t bytes = 0;     // what the layer holds, roughly: keys, values, map nodes
  // By dbi; a dbi past the end was not touched. A deque: growing it for a higher dbi keeps
  // the entries of the others where a cursor of the layer's own transaction points.
  std::deque<Db> dbs;
  const Db* db(MDB_dbi dbi) const { return dbi < dbs.size() ? &dbs[dbi] : nullptr; }
};
using PendingLayers = std::vector<std::shared_ptr<const PendingLayer>>;

// A cursor over one database; valid within its transaction. Over pending layers it merges
// them with LMDB (the newest write of a key wins, a delete hides it), in either direction.
class Cursor {
 public:
  Cursor(MDB_txn* txn, MDB_dbi dbi);
  // Merges `layers` (newest first) over the LMDB database; `txn` null: over nothing (a layer
  // cleared the database).
  Cursor(MDB_txn* txn, MDB_dbi dbi, std::vector<const PendingLayer::Entries*> layers);
  ~Cursor();
  Cursor(const Cursor&) = delete;
  Cursor& operator=(const Cursor&) = delete;

  // Positioning: each returns whether the cursor now stands on an entry.
  bool SeekFirst();
  bool SeekLast();
  bool Seek(std::string_view key);  // first entry with key >= `key`
  bool Next();
  bool Prev();
  bool valid() const { return valid_; }
  std::string_view key() const;
  std::string_view value() const;

 private:
  bool Move(MDB_cursor_op op, std::string_view key = {});
  // Merged mode. Sources 0..layers_.size()-1 are the layers, newest first; the next one is
  // LMDB when cursor_ is set. Forward, every source stands on its first key >= the merged
  // key; backward, on its last key <= it.
  struct Layer {
    const PendingLayer::Entries* entries;
    PendingLayer::Entries::const_iterator it;
    bool valid = false;
  };
  size_t Sources() const { return layers_.size() + (cursor_ != nullptr ? 1 : 0); }
  bool SourceValid(size_t i) const;
  std::string_view SourceKey(size_t i) const;
  void SourceSeek(size_t i, std::string_view key);
  void SourceFirst(size_t i);
  void SourceLast(size_t i);
  void SourceStep(size_t i, bool forward);
  // Stands on the smallest (forward) or largest key of the sources, taking the newest
  // source's entry there and stepping over deleted keys.
  bool Settle(bool forward);
  // Moves every source standing on `key` one step.
  void StepPast(std::string_view key, bool forward);

  MDB_cursor* cursor_ = nullptr;
  MDB_val key_{}, value_{};
  bool valid_ = false;
  bool merged_ = false;
  std::vector<Layer> layers_;
  bool lmdb_valid_ = false;  // merged mode: LMDB's own position
  size_t current_ = 0;       // merged mode: the source of key() and value()
  bool forward_ = true;
  std::string turn_key_;  // the merged key, kept while the sources move
};

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
  // What the pending layers say of `key`: a value, absent (deleted or cleared), or nothing
  // (nullopt: ask LMDB).
  std::optional<std::optional<std::string_view>> FindPending(MDB_dbi dbi,
                                                             std::string_view key) const;
  bool has_pending() const {
    return own_ != nullptr || (layers_ != nullptr && first_layer_ < layers_->size());
  }

  MDB_txn* txn_ = nullptr;
  // Write-back: the published layers that the LMDB snapshot does not hold yet are
  // (*layers_)[first_layer_..], oldest first; a buffered WriteTxn's own writes, newest of all.
  std::shared_ptr<const PendingLayers> layers_;
  size_t first_layer_ = 0;
  PendingLayer* own_ = nullptr;
};

class ReadTxn : public Txn {
 public:
  ~ReadTxn() override;

 private:
  friend class Store;
  explicit ReadTxn(std::shared_lock<std::shared_mutex> lock) : lock_(std::move(lock)) {}
  std::shared_lock<std::shared_mutex> lock_;
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
  // key over the size limit, INTERNAL otherwise.
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
  void Abort();

 private:
  friend class Store;
  WriteTxn() = default;
  // The write cursor of `dbi`, opened on first use; LMDB frees it when the transaction ends.
  absl::StatusOr<MDB_cursor*> CursorFor(MDB_dbi dbi);

  // A buffered transaction (Store::BeginBuffered): writes go to own_layer_, txn_ is an LMDB
  // read snapshot, and Commit publishes the layer.
  absl::Status Record(MDB_dbi dbi, std::string_view key, PendingLayer::Op op,
                      std::string_view value);
  PendingLayer::Db& OwnDb(MDB_dbi dbi);

  std::vector<MDB_cursor*> cursors_;  // by dbi; nullptr until used
  Store* store_ = nullptr;  // buffered, and direct ones with write-back (the commit's cost)
  bool wrote_ = false;      // a direct one: whether it wrote to LMDB (its commit then syncs)
  std::unique_ptr<PendingLayer> own_layer_;
  std::shared_lock<std::shared_mutex> read_lock_;  // buffered: as a ReadTxn's
  // A direct transaction with write-back on: the store's flush lock, and the pending layers
  // it began with (written into it), which its commit drops from the store.
  std::unique_lock<std::mutex> flush_lock_;
  std::shared_ptr<const PendingLayers> absorbed_;
};

// What the items database keeps per primary key.
struct StoredItem {
  bool tombstone = false;       // the item was removed; kept for its sequence number
  std::string sequence_number;  // of the change that produced this state; may be empty
  std::string_view image;       // EncodeItem bytes (empty for a tombstone); points into the value
};
std::string EncodeStoredItem(bool tombstone, std::string_view sequence_number,
                             std::string_view image);
// DATA_LOSS if the value is not a StoredItem.
absl::StatusOr<StoredItem> DecodeStoredItem(std::string_view value);

// Keys of the meta database.
std::string PositionKey(std::string_view source, std::string_view partition);
inline constexpr std::string_view kPositionPrefix = "pos/";
std::string ViewMetaKey(std::string_view view, std::string_view field);
// agg/<name>/<field>: an aggregate's fingerprint, state and build cursor, as for views.
std::string AggregateMetaKey(std::string_view aggregate, std::string_view field);

// Calls fn(source, partition, position) for every stored source position, in key order.
// The views point into LMDB's map: valid only during the call.
void ForEachPosition(
    const Txn& txn, MDB_dbi meta,
    const std::function<void(std::string_view, std::string_view, std::string_view)>& fn);

// The mdb_env_open flags the store uses for `config` (benchmarks replay with the same ones).
unsigned int StoreEnvFlags(const StorageConfig& config);

class Store {
 public:
  // Opens (creating if needed) the environment at config.path and every database the tables
  // and views need. Views (and aggregates) stored before but no longer configured are dropped. Errors name the
  // path and say what to do (permissions, disk, a newer schema).
  static absl::StatusOr<std::unique_ptr<Store>> Open(const StorageConfig& config,
                                                     const std::vector<TableSpec>& tables);
  ~Store();

  // A write transaction on LMDB itself. With write-back on, it begins with the published
  // layers written into it, and its commit flushes them: what it writes lands after them.
  absl::StatusOr<std::unique_ptr<WriteTxn>> BeginWrite();
  absl::StatusOr<std::unique_ptr<ReadTxn>> BeginRead() const;
  // With write-back on (write_back()), a WriteTxn whose Commit publishes its writes as a
  // pending layer; otherwise BeginWrite(). Waits while the layers not flushed yet hold more
  // than kMaxPendingBytes, and fails (UNAVAILABLE, saying why) if flushing them fails
  // meanwhile. One writer thread at a time, as for BeginWrite.
  absl::StatusOr<std::unique_ptr<WriteTxn>> BeginBuffered();
  bool write_back() const { return config_.flush_interval_ms > 0; }
  // Commits every published layer to LMDB now; the flush's error if it fails.
  absl::Status Flush();
  // Why the last flush failed ("" after one succeeded), for the writer's status.
  std::string flush_error() const;
  // Layers published and not in LMDB yet, and their bytes.
  size_t pending_layers() const;
  size_t pending_bytes() const;
  // How long the last flush took, its sync included (0 before the first).
  std::chrono::microseconds last_flush() const {
    return std::chrono::microseconds(last_flush_us_.load());
  }
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
  // message says to raise storage.max_map_size). Call with no transaction of this thread open.
  // With write-back it waits for a flush that is running.
  absl::Status GrowMap();

  MDB_dbi meta() const { return meta_; }
  MDB_dbi changes() const { return changes_; }
  // NOT_FOUND-free lookups: the names were validated by the config.
  MDB_dbi items(std::string_view table) const;
  MDB_dbi view(std::string_view name) const;
  bool has_view(std::string_view name) const;
  // An aggregate's groups (agg/<name>) and min/max multisets (aggm/<name>).
  MDB_dbi aggregate(std::string_view name) const;
  MDB_dbi aggregate_extremes(std::string_view name) const;

  size_t max_key_size() const { return max_key_size_; }
  // Both read LMDB's meta pages, inside the map, so they wait for a GrowMap that is running:
  // call them with no transaction of this thread open.
  uint64_t map_size() const;
  uint64_t map_used_bytes() const;  // (last page + 1) * page size
  const std::vector<std::string>& dropped_views() const { return dropped_views_; }
  const std::vector<std::string>& dropped_aggregates() const { return dropped_aggregates_; }

 private:
  friend class WriteTxn;
  Store() = default;
  absl::Status OpenDatabases(const std::vector<TableSpec>& tables);
  absl::StatusOr<std::unique_ptr<WriteTxn>> BeginLmdbWrite();
  // Begins `txn`'s LMDB read snapshot (under resize_mu_, held by the caller's lock) and lays
  // over it the published layers it does not hold.
  absl::Status BeginSnapshot(Txn* txn) const;
  // GrowMap for a caller that holds flush_mu_ (or has no flusher).
  absl::Status GrowMapLocked();
  uint64_t MapSizeUnlocked() const;  // with resize_mu_ held
  void Publish(std::unique_ptr<PendingLayer> layer);
  void FlushLoop();
  // Writes `layers` (oldest first) into `txn`: per database the last write of each key, in
  // key order, and the last layer's sequence under meta/flushed_layer.
  absl::Status WriteLayers(const PendingLayers& layers, WriteTxn* txn);
  // Commits every published layer to LMDB in one transaction, growing the map as needed.
  absl::Status FlushNow();
  // After a flush of `layers` (the front of the published ones): drops them, or keeps the
  // error for flush_error().
  void Flushed(const PendingLayers& layers, const absl::Status& s);
  // Drops agg/ and aggm/ databases (and their meta keys) of aggregates no longer configured.
  absl::Status DropStaleAggregates(WriteTxn* txn, MDB_dbi main);

  MDB_env* env_ = nullptr;
  StorageConfig config_;
  size_t max_key_size_ = 0;
  MDB_dbi meta_ = 0;
  MDB_dbi changes_ = 0;
  std::map<std::string, MDB_dbi, std::less<>> items_;
  std::map<std::string, MDB_dbi, std::less<>> views_;
  std::vector<std::string> dropped_views_;
  std::map<std::string, std::pair<MDB_dbi, MDB_dbi>, std::less<>> aggregates_;
  std::vector<std::string> dropped_aggregates_;
  mutable std::shared_mutex resize_mu_;  // shared: live read txns; exclusive: GrowMap

  // Write-back; everything below is guarded by pending_mu_ (but the thread).
  mutable std::mutex pending_mu_;
  mutable std::condition_variable pending_changed_;
  std::shared_ptr<const PendingLayers> pending_ = std::make_shared<PendingLayers>();
  size_t pending_bytes_ = 0;
  uint64_t next_sequence_ = 1;
  bool stopping_ = false;
  uint64_t flushes_ = 0;  // flushes that ended (well or not)
  std::string flush_error_;
  std::thread flusher_;
  // Held by a flush, and by a direct WriteTxn from BeginWrite to its end: one at a time, so
  // layers leave pending_ in order. Taken before pending_mu_.
  std::mutex flush_mu_;
  std::atomic<int64_t> last_flush_us_{0};
  std::atomic<int64_t> last_lmdb_commit_us_{-1};  // -1: none yet
};

}  // namespace cdcview
