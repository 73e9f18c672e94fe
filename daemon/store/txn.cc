#include "daemon/store/txn.h"

#include <chrono>
#include <string>
#include <utility>

#include "daemon/store/flusher.h"
#include "absl/strings/str_cat.h"
#include "daemon/store/lmdb_status.h"
#include "daemon/store/long_key.h"
#include "daemon/store/long_key_cursor.h"
#include "daemon/store/store.h"
#include "daemon/store/store_internal.h"

namespace cdcview {

using store_internal::Val;
using store_internal::View;

namespace {

// A long key's value, from the sibling entry `raw_get` finds under its stored key.
template <typename RawGet>
absl::StatusOr<std::optional<std::string_view>> GetLong(std::string_view key, RawGet raw_get) {
  auto found = raw_get(LongStoredKey(key));
  if (!found.ok() || !*found) return found;
  std::string_view value;
  if (!LongEntryValue(key, **found, &value)) return std::nullopt;  // another key's hash
  return value;
}

}  // namespace

Txn::~Txn() = default;

absl::StatusOr<std::optional<std::string_view>> Txn::Get(MDB_dbi dbi, std::string_view key) const {
  const MDB_dbi sibling = IsLongKey(key) ? Sibling(dbi) : 0;
  if (sibling == 0) return RawGet(dbi, key);
  return GetLong(key, [&](std::string_view stored) { return RawGet(sibling, stored); });
}

absl::StatusOr<std::optional<std::string_view>> Txn::RawGet(MDB_dbi dbi, std::string_view key) const {
  if (!pending_.empty()) {
    if (auto found = pending_.Find(dbi, key)) return *found;
  }
  MDB_val k = Val(key), v;
  int rc = mdb_get(txn_, dbi, &k, &v);
  if (rc == MDB_NOTFOUND) return std::nullopt;
  if (rc != MDB_SUCCESS) return LmdbStatus(rc, "reading the store");
  return View(v);
}

std::unique_ptr<Cursor> Txn::OpenCursor(MDB_dbi dbi) const {
  const MDB_dbi sibling = Sibling(dbi);
  if (sibling == 0 || !Shows(sibling)) return OpenRawCursor(dbi);
  return std::make_unique<LongKeyCursor>(OpenRawCursor(dbi), OpenRawCursor(sibling));
}

bool Txn::Shows(MDB_dbi dbi) const {
  bool lmdb = true;
  if (!pending_.empty() && !pending_.CursorLayers(dbi, &lmdb).empty()) return true;
  MDB_stat st;
  return lmdb && mdb_stat(txn_, dbi, &st) == MDB_SUCCESS && st.ms_entries > 0;
}

std::unique_ptr<Cursor> Txn::OpenRawCursor(MDB_dbi dbi) const {
  if (pending_.empty()) return std::make_unique<Cursor>(txn_, dbi);
  bool lmdb = true;
  std::vector<const PendingLayer::Entries*> layers = pending_.CursorLayers(dbi, &lmdb);
  if (layers.empty() && lmdb) return std::make_unique<Cursor>(txn_, dbi);
  return std::make_unique<Cursor>(lmdb ? txn_ : nullptr, dbi, std::move(layers));
}

uint64_t Txn::Entries(MDB_dbi dbi) const {
  MDB_stat st;
  const MDB_dbi sibling = Sibling(dbi);
  uint64_t entries = sibling != 0 ? Entries(sibling) : 0;
  if (mdb_stat(txn_, dbi, &st) != MDB_SUCCESS) return entries;
  return entries + st.ms_entries;
}

uint64_t Txn::Bytes(MDB_dbi dbi) const {
  MDB_stat st;
  const MDB_dbi sibling = Sibling(dbi);
  uint64_t bytes = sibling != 0 ? Bytes(sibling) : 0;
  if (mdb_stat(txn_, dbi, &st) != MDB_SUCCESS) return bytes;
  return bytes + static_cast<uint64_t>(st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages) *
                     st.ms_psize;
}

ReadTxn::~ReadTxn() {
  if (txn_ != nullptr) mdb_txn_abort(txn_);
  if (resize_mu_ != nullptr) resize_mu_->ReaderUnlock();
}

WriteTxn::~WriteTxn() { Abort(); }

void WriteTxn::Abort() {
  if (own_layer_ != nullptr || read_locked_ != nullptr) {
    // A buffered transaction's cursors are on a read snapshot, which LMDB does not close.
    for (MDB_cursor* cursor : cursors_) {
      if (cursor != nullptr) mdb_cursor_close(cursor);
    }
  }
  if (txn_ != nullptr) mdb_txn_abort(txn_);  // closes the write cursors
  txn_ = nullptr;
  cursors_.clear();
  own_layer_.reset();
  pending_ = PendingOverlay();
  absorbed_.reset();
  if (read_locked_ != nullptr) {
    read_locked_->ReaderUnlock();
    read_locked_ = nullptr;
  }
  if (flush_locked_ != nullptr) {
    flush_locked_->Unlock();
    flush_locked_ = nullptr;
  }
}

PendingLayer::Db& WriteTxn::OwnDb(MDB_dbi dbi) {
  if (dbi >= own_layer_->dbs.size()) own_layer_->dbs.resize(dbi + 1);
  return own_layer_->dbs[dbi];
}

absl::Status WriteTxn::Record(MDB_dbi dbi, std::string_view key, PendingLayer::Op op,
                              std::string_view value) {
  // What LMDB would refuse when the layer is flushed, refused now, in LMDB's words.
  if (key.empty() || key.size() > store_->max_key_size()) {
    return LmdbStatus(MDB_BAD_VALSIZE, "writing the store");
  }
  PendingLayer::Entries& entries = OwnDb(dbi).entries;
  // A key written again (an aggregate group, per event) is not copied again.
  auto it = entries.lower_bound(key);
  if (it == entries.end() || it->first != key) {
    it = entries.emplace_hint(it, std::string(key), PendingLayer::Entry{});
    own_layer_->bytes += key.size() + PendingLayer::kEntryOverhead;
  } else {
    own_layer_->bytes -= it->second.value.size();
  }
  it->second.op = op;
  it->second.value.assign(value);
  own_layer_->bytes += value.size();
  return absl::OkStatus();
}

absl::StatusOr<MDB_cursor*> WriteTxn::CursorFor(MDB_dbi dbi) {
  if (dbi >= cursors_.size()) cursors_.resize(dbi + 1, nullptr);
  if (cursors_[dbi] == nullptr) {
    if (absl::Status s = LmdbStatus(mdb_cursor_open(txn_, dbi, &cursors_[dbi]), "opening a cursor");
        !s.ok()) {
      cursors_[dbi] = nullptr;
      return s;
    }
  }
  return cursors_[dbi];
}

absl::StatusOr<std::optional<std::string_view>> WriteTxn::Get(MDB_dbi dbi, std::string_view key) {
  const MDB_dbi sibling = IsLongKey(key) ? Sibling(dbi) : 0;
  if (sibling == 0) return RawGet(dbi, key);
  return GetLong(key, [&](std::string_view stored) { return RawGet(sibling, stored); });
}

absl::Status WriteTxn::LongKeyFree(MDB_dbi sibling, std::string_view key, std::string* stored,
                                   bool* present) {
  *stored = LongStoredKey(key);
  *present = false;
  auto found = RawGet(sibling, *stored);
  if (!found.ok()) return found.status();
  if (!*found) return absl::OkStatus();
  std::string_view value;
  if (!LongEntryValue(key, **found, &value)) {
    return absl::InternalError(absl::StrCat("a ", key.size(), "-byte key shares its SHA-256 with "
                                            "another stored key, whose entry is kept"));
  }
  *present = true;
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string_view>> WriteTxn::RawGet(MDB_dbi dbi, std::string_view key) {
  if (own_layer_ != nullptr) {
    if (auto found = pending_.Find(dbi, key)) return *found;  // else the snapshot, below
  }
  auto cursor = CursorFor(dbi);
  if (!cursor.ok()) return cursor.status();
  MDB_val k = Val(key), v;
  int rc = mdb_cursor_get(*cursor, &k, &v, MDB_SET_KEY);
  if (rc == MDB_NOTFOUND) return std::nullopt;
  if (rc != MDB_SUCCESS) return LmdbStatus(rc, "reading the store");
  return View(v);
}

absl::Status WriteTxn::Put(MDB_dbi dbi, std::string_view key, std::string_view value) {
  if (const MDB_dbi sibling = IsLongKey(key) ? Sibling(dbi) : 0; sibling != 0) {
    std::string stored;
    bool present;
    if (absl::Status s = LongKeyFree(sibling, key, &stored, &present); !s.ok()) return s;
    return Put(sibling, stored, LongStoredValue(key, value));
  }
  if (own_layer_ != nullptr) return Record(dbi, key, PendingLayer::Op::kPut, value);
  auto cursor = CursorFor(dbi);
  if (!cursor.ok()) return cursor.status();
  wrote_ = true;
  MDB_val k = Val(key), v = Val(value);
  return LmdbStatus(mdb_cursor_put(*cursor, &k, &v, 0), "writing the store");
}

absl::Status WriteTxn::Append(MDB_dbi dbi, std::string_view key, std::string_view value) {
  if (IsLongKey(key) && Sibling(dbi) != 0) return Put(dbi, key, value);  // the sibling is not in key order
  if (own_layer_ != nullptr) return Record(dbi, key, PendingLayer::Op::kAppend, value);
  auto cursor = CursorFor(dbi);
  if (!cursor.ok()) return cursor.status();
  wrote_ = true;
  MDB_val k = Val(key), v = Val(value);
  return LmdbStatus(mdb_cursor_put(*cursor, &k, &v, MDB_APPEND), "appending to the store");
}

absl::Status WriteTxn::AppendOrPut(MDB_dbi dbi, std::string_view key, std::string_view value) {
  if (IsLongKey(key) && Sibling(dbi) != 0) return Put(dbi, key, value);
  auto cursor = CursorFor(dbi);
  if (!cursor.ok()) return cursor.status();
  wrote_ = true;
  MDB_val k = Val(key), v = Val(value);
  int rc = mdb_cursor_put(*cursor, &k, &v, MDB_APPEND);
  if (rc == MDB_KEYEXIST) {  // not past the last key
    k = Val(key);
    v = Val(value);
    rc = mdb_cursor_put(*cursor, &k, &v, 0);
  }
  return LmdbStatus(rc, "appending to the store");
}

absl::Status WriteTxn::Delete(MDB_dbi dbi, std::string_view key) {
  if (IsLongKey(key) && Sibling(dbi) != 0) return Remove(dbi, key).status();
  if (own_layer_ != nullptr) return Record(dbi, key, PendingLayer::Op::kDelete, {});
  return DeleteFromLmdb(dbi, key).status();
}

absl::StatusOr<bool> WriteTxn::DeleteFromLmdb(MDB_dbi dbi, std::string_view key) {
  auto cursor = CursorFor(dbi);
  if (!cursor.ok()) return cursor.status();
  MDB_val k = Val(key), v;
  int rc = mdb_cursor_get(*cursor, &k, &v, MDB_SET);
  if (rc == MDB_SUCCESS) {
    wrote_ = true;
    rc = mdb_cursor_del(*cursor, 0);
  }
  if (rc == MDB_NOTFOUND) return false;
  if (rc != MDB_SUCCESS) return LmdbStatus(rc, "deleting from the store");
  return true;
}

absl::StatusOr<bool> WriteTxn::Remove(MDB_dbi dbi, std::string_view key) {
  if (const MDB_dbi sibling = IsLongKey(key) ? Sibling(dbi) : 0; sibling != 0) {
    // The entry is looked up, wherever it is: only the key's own entry is deleted.
    std::string stored;
    bool present;
    if (absl::Status s = LongKeyFree(sibling, key, &stored, &present); !s.ok() || !present) {
      if (!s.ok()) return s;
      return false;
    }
    if (absl::Status s = Delete(sibling, stored); !s.ok()) return s;
    return true;
  }
  if (own_layer_ != nullptr) {
    const std::optional<std::optional<std::string_view>> pending = pending_.Find(dbi, key);
    if (pending.has_value() && !pending->has_value()) return false;  // deleted in memory
    if (absl::Status s = Record(dbi, key, PendingLayer::Op::kDelete, {}); !s.ok()) return s;
    return true;
  }
  return DeleteFromLmdb(dbi, key);
}

absl::Status WriteTxn::Clear(MDB_dbi dbi) {
  if (const MDB_dbi sibling = Sibling(dbi); sibling != 0) {
    if (absl::Status s = Clear(sibling); !s.ok()) return s;
  }
  if (own_layer_ != nullptr) {
    PendingLayer::Db& db = OwnDb(dbi);
    for (const auto& [key, entry] : db.entries) {
      own_layer_->bytes -= key.size() + entry.value.size() + PendingLayer::kEntryOverhead;
    }
    db.entries.clear();
    db.cleared = true;
    return absl::OkStatus();
  }
  wrote_ = true;
  return LmdbStatus(mdb_drop(txn_, dbi, 0), "clearing a database");
}

absl::Status WriteTxn::Commit() {
  if (own_layer_ != nullptr) {
    std::unique_ptr<PendingLayer> layer = std::move(own_layer_);
    Abort();  // the snapshot; the layer is out already
    flusher_->Publish(std::move(layer));
    return absl::OkStatus();
  }
  const auto committing = std::chrono::steady_clock::now();
  int rc = mdb_txn_commit(txn_);
  if (store_ != nullptr && wrote_ && rc == MDB_SUCCESS) {
    store_->last_lmdb_commit_us_.store(std::chrono::duration_cast<std::chrono::microseconds>(
                                           std::chrono::steady_clock::now() - committing)
                                           .count());
  }
  txn_ = nullptr;  // committed or aborted by LMDB either way, with the write cursors
  cursors_.clear();
  if (rc == MDB_SUCCESS && absorbed_ != nullptr) flusher_->Flushed(*absorbed_, absl::OkStatus());
  Abort();  // releases the flush lock
  return LmdbStatus(rc, "committing to the store");
}

}  // namespace cdcview
