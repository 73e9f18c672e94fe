// Cursor: ordered iteration over one LMDB database, in either direction. Over pending layers
// (write-back) it merges them with LMDB: the newest write of a key wins, a delete hides it.
// Its positioning methods are virtual for LongKeyCursor (long_key_cursor.h), which merges a
// database with its long-key sibling in logical key order.
//
// Errors: a positioning call returns false at the end of the data and on an LMDB error alike;
// status() tells them apart. After an error (a damaged page: DATA_LOSS, see lmdb_status.h)
// the cursor stays invalid, every later move returns false, and the transaction must end
// (LMDB fails every later call in it with MDB_BAD_TXN). Callers that walk a range check
// status() once the walk stops.
//
// Thread-safety: a cursor belongs to the thread using its transaction (Txn::OpenCursor), like
// the transaction itself; it is not safe to use from two threads at once.
// Ownership: valid within its transaction. key() and value() point into LMDB's map or into a
// pending layer: valid until the cursor moves or the transaction ends (or, in a WriteTxn,
// until its next write).
#pragma once

#include <lmdb.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "daemon/store/pending_layer.h"

namespace cdcview {

class Cursor {
 public:
  Cursor(MDB_txn* txn, MDB_dbi dbi);
  // Merges `layers` (newest first) over the LMDB database; `txn` null: over nothing (a layer
  // cleared the database).
  Cursor(MDB_txn* txn, MDB_dbi dbi, std::vector<const PendingLayer::Entries*> layers);
  virtual ~Cursor();
  Cursor(const Cursor&) = delete;
  Cursor& operator=(const Cursor&) = delete;

  // Positioning: each returns whether the cursor now stands on an entry.
  virtual bool SeekFirst();
  virtual bool SeekLast();
  virtual bool Seek(std::string_view key);  // first entry with key >= `key`
  virtual bool Next();
  virtual bool Prev();
  virtual bool valid() const { return valid_; }
  // OK, or the first LMDB error a move (or opening the cursor) met.
  virtual const absl::Status& status() const { return status_; }
  virtual std::string_view key() const;
  virtual std::string_view value() const;

 protected:
  Cursor() = default;  // a subclass that positions cursors of its own

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
  absl::Status status_;
  MDB_val key_{}, value_{};
  bool valid_ = false;
  bool merged_ = false;
  std::vector<Layer> layers_;
  bool lmdb_valid_ = false;  // merged mode: LMDB's own position
  size_t current_ = 0;       // merged mode: the source of key() and value()
  bool forward_ = true;
  std::string turn_key_;  // the merged key, kept while the sources move
};

}  // namespace cdcview
