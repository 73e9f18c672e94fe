#include "daemon/store/cursor.h"

#include <iterator>
#include <utility>

#include "daemon/store/lmdb_status.h"
#include "daemon/store/store_internal.h"

namespace cdcview {

using store_internal::Val;
using store_internal::View;

Cursor::Cursor(MDB_txn* txn, MDB_dbi dbi) {
  // Fails with MDB_BAD_TXN once a read of the transaction met a damaged page: an error the
  // caller reports, like a failing move.
  status_ = LmdbStatus(mdb_cursor_open(txn, dbi, &cursor_), "opening a cursor");
  if (!status_.ok()) cursor_ = nullptr;
}
Cursor::Cursor(MDB_txn* txn, MDB_dbi dbi, std::vector<const PendingLayer::Entries*> layers)
    : merged_(true) {
  if (txn != nullptr) {
    status_ = LmdbStatus(mdb_cursor_open(txn, dbi, &cursor_), "opening a cursor");
    if (!status_.ok()) {
      cursor_ = nullptr;
      return;  // no layers either: every move finds nothing
    }
  }
  layers_.reserve(layers.size());
  for (const PendingLayer::Entries* entries : layers) layers_.push_back({entries, entries->end()});
}
Cursor::~Cursor() {
  if (cursor_ != nullptr) mdb_cursor_close(cursor_);
}

bool Cursor::Move(MDB_cursor_op op, std::string_view key) {
  if (!status_.ok()) return valid_ = false;
  if (op == MDB_SET_RANGE) key_ = Val(key);
  const int rc = mdb_cursor_get(cursor_, &key_, &value_, op);
  if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND) status_ = LmdbStatus(rc, "reading the store");
  valid_ = rc == MDB_SUCCESS;
  return valid_;
}

bool Cursor::SourceValid(size_t i) const {
  return i < layers_.size() ? layers_[i].valid : lmdb_valid_;
}

std::string_view Cursor::SourceKey(size_t i) const {
  return i < layers_.size() ? std::string_view(layers_[i].it->first) : View(key_);
}

void Cursor::SourceSeek(size_t i, std::string_view key) {
  if (i < layers_.size()) {
    Layer& l = layers_[i];
    l.it = l.entries->lower_bound(key);
    l.valid = l.it != l.entries->end();
  } else if (key.empty()) {
    lmdb_valid_ = Move(MDB_FIRST);  // LMDB refuses an empty key
  } else {
    lmdb_valid_ = Move(MDB_SET_RANGE, key);
  }
}

void Cursor::SourceFirst(size_t i) {
  if (i < layers_.size()) {
    Layer& l = layers_[i];
    l.it = l.entries->begin();
    l.valid = l.it != l.entries->end();
  } else {
    lmdb_valid_ = Move(MDB_FIRST);
  }
}

void Cursor::SourceLast(size_t i) {
  if (i < layers_.size()) {
    Layer& l = layers_[i];
    l.valid = !l.entries->empty();
    if (l.valid) l.it = std::prev(l.entries->end());
  } else {
    lmdb_valid_ = Move(MDB_LAST);
  }
}

void Cursor::SourceStep(size_t i, bool forward) {
  if (i < layers_.size()) {
    Layer& l = layers_[i];
    if (forward) {
      l.valid = ++l.it != l.entries->end();
    } else if (l.it == l.entries->begin()) {
      l.valid = false;
    } else {
      --l.it;
    }
  } else {
    lmdb_valid_ = Move(forward ? MDB_NEXT : MDB_PREV);
  }
}

void Cursor::StepPast(std::string_view key, bool forward) {
  for (size_t i = 0; i < Sources(); ++i) {
    if (SourceValid(i) && SourceKey(i) == key) SourceStep(i, forward);
  }
}

bool Cursor::Settle(bool forward) {
  forward_ = forward;
  if (!status_.ok()) return valid_ = false;  // LMDB's part is unknown: no merged entry is right
  for (;;) {
    size_t best = Sources();
    for (size_t i = 0; i < Sources(); ++i) {
      if (!SourceValid(i)) continue;
      // Strictly better only: on a tie the newer source (the lower index) keeps it.
      if (best == Sources() || (forward ? SourceKey(i) < SourceKey(best) : SourceKey(i) > SourceKey(best))) {
        best = i;
      }
    }
    if (best == Sources()) return valid_ = false;
    if (best == layers_.size() || layers_[best].it->second.op != PendingLayer::Op::kDelete) {
      current_ = best;
      return valid_ = true;
    }
    turn_key_.assign(SourceKey(best));  // deleted: step every source past it
    StepPast(turn_key_, forward);
  }
}

bool Cursor::SeekFirst() {
  if (!merged_) return Move(MDB_FIRST);
  for (size_t i = 0; i < Sources(); ++i) SourceFirst(i);
  return Settle(true);
}

bool Cursor::SeekLast() {
  if (!merged_) return Move(MDB_LAST);
  for (size_t i = 0; i < Sources(); ++i) SourceLast(i);
  return Settle(false);
}

bool Cursor::Seek(std::string_view key) {
  if (!merged_) {
    // LMDB refuses an empty key; every key is >= "".
    return key.empty() ? SeekFirst() : Move(MDB_SET_RANGE, key);
  }
  for (size_t i = 0; i < Sources(); ++i) SourceSeek(i, key);
  return Settle(true);
}

bool Cursor::Next() {
  if (!merged_) return Move(MDB_NEXT);
  if (!valid_) return false;
  turn_key_.assign(key());
  if (!forward_) {  // every source to its first key >= the merged one
    for (size_t i = 0; i < Sources(); ++i) SourceSeek(i, turn_key_);
  }
  StepPast(turn_key_, true);
  return Settle(true);
}

bool Cursor::Prev() {
  if (!merged_) return Move(MDB_PREV);
  if (!valid_) return false;
  turn_key_.assign(key());
  if (forward_) {  // every source to its last key <= the merged one
    for (size_t i = 0; i < Sources(); ++i) {
      SourceSeek(i, turn_key_);
      if (!SourceValid(i)) {
        SourceLast(i);
      } else if (SourceKey(i) != turn_key_) {
        SourceStep(i, false);
      }
    }
  }
  StepPast(turn_key_, false);
  return Settle(false);
}

std::string_view Cursor::key() const {
  if (merged_ && current_ < layers_.size()) return layers_[current_].it->first;
  return View(key_);
}

std::string_view Cursor::value() const {
  if (merged_ && current_ < layers_.size()) return layers_[current_].it->second.value;
  return View(value_);
}

}  // namespace cdcview
