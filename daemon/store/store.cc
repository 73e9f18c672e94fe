#include "daemon/store/store.h"

#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/log/log.h"
#include "index_builders/coding.h"

namespace cdcview {
namespace {

constexpr char kSchemaKey[] = "schema";
constexpr char kSchemaVersion[] = "1";
constexpr char kViewDbPrefix[] = "view/";
constexpr size_t kViewDbPrefixLen = sizeof(kViewDbPrefix) - 1;
constexpr char kItemsDbPrefix[] = "items/";
constexpr char kAggregateDbPrefix[] = "agg/";
constexpr char kAggregateExtremesDbPrefix[] = "aggm/";
// meta, one per table, one per view, two per aggregate: config validation does not bound
// these counts, LMDB's cost per slot is small, and hitting the limit is a clear MDB_DBS_FULL.
constexpr MDB_dbi kMaxDbs = 1024;
// meta: the sequence of the last pending layer that LMDB holds (write-back).
constexpr char kFlushedKey[] = "flushed_layer";
// Per entry of a pending layer, besides its key and value: the map node and the strings.
constexpr size_t kEntryOverhead = 96;

MDB_val Val(std::string_view s) {
  return MDB_val{s.size(), const_cast<char*>(s.data())};
}
std::string_view View(const MDB_val& v) {
  return std::string_view(static_cast<const char*>(v.mv_data), v.mv_size);
}

}  // namespace

absl::Status LmdbStatus(int rc, std::string_view what) {
  if (rc == MDB_SUCCESS) return absl::OkStatus();
  std::string msg = absl::StrCat(absl::string_view(what.data(), what.size()), ": ", mdb_strerror(rc));
  switch (rc) {
    case MDB_MAP_FULL:
      return absl::ResourceExhaustedError(msg);
    case MDB_BAD_VALSIZE:
      return absl::InvalidArgumentError(msg);
    case MDB_NOTFOUND:
      return absl::NotFoundError(msg);
    default:
      return absl::InternalError(msg);
  }
}

// ---- Cursor

Cursor::Cursor(MDB_txn* txn, MDB_dbi dbi) {
  int rc = mdb_cursor_open(txn, dbi, &cursor_);
  if (rc != MDB_SUCCESS) {
    // Only fails for an invalid txn/dbi: a programming error.
    LogError(absl::StrCat("mdb_cursor_open failed: ", mdb_strerror(rc)));
    abort();
  }
}
Cursor::Cursor(MDB_txn* txn, MDB_dbi dbi, std::vector<const PendingLayer::Entries*> layers)
    : merged_(true) {
  if (txn != nullptr && mdb_cursor_open(txn, dbi, &cursor_) != MDB_SUCCESS) {
    LogError("mdb_cursor_open failed for a merged cursor");
    abort();
  }
  layers_.reserve(layers.size());
  for (const PendingLayer::Entries* entries : layers) layers_.push_back({entries, entries->end()});
}
Cursor::~Cursor() {
  if (cursor_ != nullptr) mdb_cursor_close(cursor_);
}

bool Cursor::Move(MDB_cursor_op op, std::string_view key) {
  if (op == MDB_SET_RANGE) key_ = Val(key);
  valid_ = mdb_cursor_get(cursor_, &key_, &value_, op) == MDB_SUCCESS;
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

// ---- Pending layers

namespace {
// The two probes of a key's hash into a filter of `bits` (a power of two) bits.
std::pair<size_t, size_t> BloomProbes(size_t hash, size_t bits) {
  const size_t mask = bits - 1;
  return {hash & mask, ((hash >> 32) | (hash << 32)) * 0x9E3779B97F4A7C15ull >> 7 & mask};
}
size_t KeyHash(std::string_view key) { return std::hash<std::string_view>{}(key); }
}  // namespace

bool PendingLayer::Db::MayHave(size_t hash) const {
  if (bloom.empty()) return true;
  const auto [a, b] = BloomProbes(hash, bloom.size() * 64);
  return (bloom[a / 64] >> (a % 64) & 1) != 0 && (bloom[b / 64] >> (b % 64) & 1) != 0;
}

void PendingLayer::Db::BuildBloom() {
  size_t bits = 64;
  while (bits < entries.size() * 16) bits *= 2;
  bloom.assign(bits / 64, 0);
  for (const auto& [key, entry] : entries) {
    const auto [a, b] = BloomProbes(KeyHash(key), bits);
    bloom[a / 64] |= uint64_t{1} << (a % 64);
    bloom[b / 64] |= uint64_t{1} << (b % 64);
  }
}

// ---- Transactions

Txn::~Txn() = default;

std::optional<std::optional<std::string_view>> Txn::FindPending(MDB_dbi dbi,
                                                              std::string_view key) const {
  const size_t hash = KeyHash(key);
  // The layer's answer, or nullopt: ask the next older one.
  auto look = [&](const PendingLayer& layer) -> std::optional<std::optional<std::string_view>> {
    const PendingLayer::Db* db = layer.db(dbi);
    if (db == nullptr) return std::nullopt;
    if (db->MayHave(hash)) {
      if (auto it = db->entries.find(key); it != db->entries.end()) {
        if (it->second.op == PendingLayer::Op::kDelete) return std::optional<std::string_view>();
        return std::optional<std::string_view>(it->second.value);
      }
    }
    if (db->cleared) return std::optional<std::string_view>();  // absent, whatever is older
    return std::nullopt;
  };
  if (own_ != nullptr) {
    if (auto found = look(*own_)) return found;
  }
  if (layers_ != nullptr) {
    for (size_t i = layers_->size(); i > first_layer_; --i) {
      if (auto found = look(*(*layers_)[i - 1])) return found;
    }
  }
  return std::nullopt;
}

absl::StatusOr<std::optional<std::string_view>> Txn::Get(MDB_dbi dbi, std::string_view key) const {
  if (has_pending()) {
    if (auto found = FindPending(dbi, key)) return *found;
  }
  MDB_val k = Val(key), v;
  int rc = mdb_get(txn_, dbi, &k, &v);
  if (rc == MDB_NOTFOUND) return std::nullopt;
  if (rc != MDB_SUCCESS) return LmdbStatus(rc, "reading the store");
  return View(v);
}

std::unique_ptr<Cursor> Txn::OpenCursor(MDB_dbi dbi) const {
  if (!has_pending()) return std::make_unique<Cursor>(txn_, dbi);
  std::vector<const PendingLayer::Entries*> layers;
  bool lmdb = true;
  auto add = [&](const PendingLayer& layer) {  // false: nothing older shows
    const PendingLayer::Db* db = layer.db(dbi);
    if (db == nullptr) return true;
    if (!db->entries.empty()) layers.push_back(&db->entries);
    lmdb = !db->cleared;
    return lmdb;
  };
  bool older = own_ == nullptr || add(*own_);
  if (layers_ != nullptr) {
    for (size_t i = layers_->size(); older && i > first_layer_; --i) older = add(*(*layers_)[i - 1]);
  }
  if (layers.empty() && lmdb) return std::make_unique<Cursor>(txn_, dbi);
  return std::make_unique<Cursor>(lmdb ? txn_ : nullptr, dbi, std::move(layers));
}

uint64_t Txn::Entries(MDB_dbi dbi) const {
  MDB_stat st;
  if (mdb_stat(txn_, dbi, &st) != MDB_SUCCESS) return 0;
  return st.ms_entries;
}

uint64_t Txn::Bytes(MDB_dbi dbi) const {
  MDB_stat st;
  if (mdb_stat(txn_, dbi, &st) != MDB_SUCCESS) return 0;
  return static_cast<uint64_t>(st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages) *
         st.ms_psize;
}

ReadTxn::~ReadTxn() {
  if (txn_ != nullptr) mdb_txn_abort(txn_);
}

WriteTxn::~WriteTxn() { Abort(); }

void WriteTxn::Abort() {
  if (own_layer_ != nullptr || read_lock_.owns_lock()) {
    // A buffered transaction's cursors are on a read snapshot, which LMDB does not close.
    for (MDB_cursor* cursor : cursors_) {
      if (cursor != nullptr) mdb_cursor_close(cursor);
    }
  }
  if (txn_ != nullptr) mdb_txn_abort(txn_);  // closes the write cursors
  txn_ = nullptr;
  cursors_.clear();
  own_layer_.reset();
  own_ = nullptr;
  layers_.reset();
  absorbed_.reset();
  if (read_lock_.owns_lock()) read_lock_.unlock();
  if (flush_lock_.owns_lock()) flush_lock_.unlock();
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
    own_layer_->bytes += key.size() + kEntryOverhead;
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
  if (own_layer_ != nullptr) {
    if (auto found = FindPending(dbi, key)) return *found;  // else the snapshot, below
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
  if (own_layer_ != nullptr) return Record(dbi, key, PendingLayer::Op::kPut, value);
  auto cursor = CursorFor(dbi);
  if (!cursor.ok()) return cursor.status();
  wrote_ = true;
  MDB_val k = Val(key), v = Val(value);
  return LmdbStatus(mdb_cursor_put(*cursor, &k, &v, 0), "writing the store");
}

absl::Status WriteTxn::Append(MDB_dbi dbi, std::string_view key, std::string_view value) {
  if (own_layer_ != nullptr) return Record(dbi, key, PendingLayer::Op::kAppend, value);
  auto cursor = CursorFor(dbi);
  if (!cursor.ok()) return cursor.status();
  wrote_ = true;
  MDB_val k = Val(key), v = Val(value);
  return LmdbStatus(mdb_cursor_put(*cursor, &k, &v, MDB_APPEND), "appending to the store");
}

absl::Status WriteTxn::AppendOrPut(MDB_dbi dbi, std::string_view key, std::string_view value) {
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
  if (own_layer_ != nullptr) return Record(dbi, key, PendingLayer::Op::kDelete, {});
  auto cursor = CursorFor(dbi);
  if (!cursor.ok()) return cursor.status();
  MDB_val k = Val(key), v;
  int rc = mdb_cursor_get(*cursor, &k, &v, MDB_SET);
  if (rc == MDB_SUCCESS) {
    wrote_ = true;
    rc = mdb_cursor_del(*cursor, 0);
  }
  if (rc == MDB_NOTFOUND) return absl::OkStatus();
  return LmdbStatus(rc, "deleting from the store");
}

absl::StatusOr<bool> WriteTxn::Remove(MDB_dbi dbi, std::string_view key) {
  if (own_layer_ != nullptr) {
    const std::optional<std::optional<std::string_view>> pending = FindPending(dbi, key);
    if (pending.has_value() && !pending->has_value()) return false;  // deleted in memory
    if (absl::Status s = Record(dbi, key, PendingLayer::Op::kDelete, {}); !s.ok()) return s;
    return true;
  }
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

absl::Status WriteTxn::Clear(MDB_dbi dbi) {
  if (own_layer_ != nullptr) {
    PendingLayer::Db& db = OwnDb(dbi);
    for (const auto& [key, entry] : db.entries) {
      own_layer_->bytes -= key.size() + entry.value.size() + kEntryOverhead;
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
    store_->Publish(std::move(layer));
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
  if (rc == MDB_SUCCESS && absorbed_ != nullptr) store_->Flushed(*absorbed_, absl::OkStatus());
  Abort();  // releases the flush lock
  return LmdbStatus(rc, "committing to the store");
}

// ---- Stored items and meta keys

std::string EncodeStoredItem(bool tombstone, std::string_view sequence_number,
                             std::string_view image) {
  std::string out;
  out.reserve(2 + sequence_number.size() + image.size());
  out.push_back(tombstone ? 1 : 0);
  PutVarint(sequence_number.size(), &out);
  out.append(sequence_number);
  out.append(image);
  return out;
}

absl::StatusOr<StoredItem> DecodeStoredItem(std::string_view value) {
  if (value.empty() || static_cast<unsigned char>(value[0]) > 1) {
    return absl::DataLossError("stored item has a bad flag byte");
  }
  StoredItem item;
  item.tombstone = value[0] == 1;
  value.remove_prefix(1);
  uint64_t n;
  if (!GetVarint(&value, &n) || n > value.size()) {
    return absl::DataLossError("stored item has a truncated sequence number");
  }
  item.sequence_number.assign(value.data(), n);
  value.remove_prefix(n);
  item.image = value;
  return item;
}

std::string PositionKey(std::string_view source, std::string_view partition) {
  std::string key(kPositionPrefix);
  key.append(source).append("/").append(partition);
  return key;
}

std::string ViewMetaKey(std::string_view view, std::string_view field) {
  std::string key("view/");
  key.append(view).append("/").append(field);
  return key;
}

std::string AggregateMetaKey(std::string_view aggregate, std::string_view field) {
  std::string key(kAggregateDbPrefix);
  key.append(aggregate).append("/").append(field);
  return key;
}

void ForEachPosition(
    const Txn& txn, MDB_dbi meta,
    const std::function<void(std::string_view, std::string_view, std::string_view)>& fn) {
  auto cursor = txn.OpenCursor(meta);
  for (bool ok = cursor->Seek(kPositionPrefix); ok && cursor->key().starts_with(kPositionPrefix);
       ok = cursor->Next()) {
    std::string_view rest = cursor->key().substr(kPositionPrefix.size());
    size_t slash = rest.find('/');  // source names have no '/', partitions may
    if (slash == std::string_view::npos) continue;
    fn(rest.substr(0, slash), rest.substr(slash + 1), cursor->value());
  }
}

// ---- Store

unsigned int StoreEnvFlags(const StorageConfig& config) {
  return MDB_NOTLS | MDB_NOMETASYNC | (config.write_map ? MDB_WRITEMAP : 0u);
}

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const StorageConfig& config,
                                                   const std::vector<TableSpec>& tables) {
  std::error_code ec;
  std::filesystem::create_directories(config.path, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create storage directory \"", config.path, "\": ", ec.message(),
                     "; check storage.path and its permissions"));
  }
  std::unique_ptr<Store> store(new Store());
  store->config_ = config;
  int rc = mdb_env_create(&store->env_);
  if (rc != MDB_SUCCESS) return LmdbStatus(rc, "creating the LMDB environment");
  mdb_env_set_maxdbs(store->env_, kMaxDbs);
  mdb_env_set_maxreaders(store->env_, 1022);
  rc = mdb_env_set_mapsize(store->env_, config.map_size);
  if (rc != MDB_SUCCESS) return LmdbStatus(rc, "setting the LMDB map size");
  // MDB_NOTLS: read transactions are not bound to a thread (gRPC handlers hop threads).
  // MDB_NOMETASYNC: see the header; durable up to the last commits, never corrupt.
  // MDB_WRITEMAP (storage.write_map): see the header.
  rc = mdb_env_open(store->env_, config.path.c_str(), StoreEnvFlags(config), 0644);
  if (rc != MDB_SUCCESS) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot open the LMDB store in \"", config.path, "\": ", mdb_strerror(rc),
        rc == EAGAIN || rc == EBUSY ? "; is another cdcviewd using it?" : "; check storage.path"));
  }
  // LMDB maps at least what the file already uses, whatever map_size says; a map grown by
  // GrowMap in an earlier run starts again from map_size and grows again when needed.
  MDB_envinfo info;
  mdb_env_info(store->env_, &info);
  if (info.me_mapsize > config.map_size) store->config_.map_size = info.me_mapsize;
  store->max_key_size_ = static_cast<size_t>(mdb_env_get_maxkeysize(store->env_));
  if (absl::Status s = store->OpenDatabases(tables); !s.ok()) return s;
  if (store->write_back()) {
    // Layer sequences continue from the last one flushed, so a snapshot's stored sequence
    // never hides a layer of this run.
    auto txn = store->BeginRead();
    if (!txn.ok()) return txn.status();
    auto flushed = (*txn)->Get(store->meta_, kFlushedKey);
    if (!flushed.ok()) return flushed.status();
    uint64_t last = 0;
    if (*flushed && !absl::SimpleAtoi(absl::string_view((*flushed)->data(), (*flushed)->size()), &last)) {
      return absl::DataLossError(absl::StrCat("store \"", config.path, "\": meta key ", kFlushedKey,
                                              " is not a number; start from an empty storage.path"));
    }
    store->next_sequence_ = last + 1;
    store->flusher_ = std::thread([s = store.get()] { s->FlushLoop(); });
  }
  return store;
}

Store::~Store() {
  if (flusher_.joinable()) {
    {
      std::lock_guard lock(pending_mu_);
      stopping_ = true;
    }
    pending_changed_.notify_all();
    flusher_.join();  // flushes what is pending first
  }
  if (env_ != nullptr) mdb_env_close(env_);
}

absl::Status Store::OpenDatabases(const std::vector<TableSpec>& tables) {
  auto txn_or = BeginWrite();
  if (!txn_or.ok()) return txn_or.status();
  WriteTxn& txn = **txn_or;
  auto open = [&](const std::string& name, MDB_dbi* dbi) {
    return LmdbStatus(mdb_dbi_open(txn.raw(), name.c_str(), MDB_CREATE, dbi),
                      absl::StrCat("opening database \"", name, "\""));
  };
  if (absl::Status s = open("meta", &meta_); !s.ok()) return s;
  if (absl::Status s = open("changes", &changes_); !s.ok()) return s;

  auto schema = txn.Get(meta_, kSchemaKey);
  if (!schema.ok()) return schema.status();
  if (!*schema) {
    if (absl::Status s = txn.Put(meta_, kSchemaKey, kSchemaVersion); !s.ok()) return s;
  } else if (**schema != kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "store \"", config_.path, "\" has schema version ", std::string(**schema), ", this cdcviewd reads ",
        kSchemaVersion, "; use a matching cdcviewd or start from an empty storage.path"));
  }

  std::map<std::string, bool> configured;
  for (const TableSpec& table : tables) {
    MDB_dbi dbi;
    if (absl::Status s = open(absl::StrCat(kItemsDbPrefix, table.name), &dbi); !s.ok()) return s;
    items_.emplace(table.name, dbi);
    for (const ViewSpec& view : table.views) {
      if (absl::Status s = open(absl::StrCat(kViewDbPrefix, view.name), &dbi); !s.ok()) return s;
      views_.emplace(view.name, dbi);
      configured[view.name] = true;
    }
    for (const AggregateSpec& aggregate : table.aggregates) {
      MDB_dbi groups, extremes;
      if (absl::Status s = open(absl::StrCat(kAggregateDbPrefix, aggregate.name), &groups); !s.ok()) return s;
      if (absl::Status s = open(absl::StrCat(kAggregateExtremesDbPrefix, aggregate.name), &extremes);
          !s.ok()) {
        return s;
      }
      aggregates_.emplace(aggregate.name, std::make_pair(groups, extremes));
    }
  }

  // The unnamed database lists the named ones: drop views that are no longer configured.
  MDB_dbi main;
  if (absl::Status s = LmdbStatus(mdb_dbi_open(txn.raw(), nullptr, 0, &main), "opening the catalog");
      !s.ok()) {
    return s;
  }
  std::vector<std::string> stale;
  {
    Cursor c(txn.raw(), main);
    for (bool ok = c.SeekFirst(); ok; ok = c.Next()) {
      std::string_view name = c.key();
      if (name.starts_with(kViewDbPrefix) && !configured.count(std::string(name.substr(kViewDbPrefixLen)))) {
        stale.emplace_back(name);
      }
    }
  }
  for (const std::string& name : stale) {
    MDB_dbi dbi;
    if (absl::Status s = open(name, &dbi); !s.ok()) return s;
    if (absl::Status s = LmdbStatus(mdb_drop(txn.raw(), dbi, 1), "dropping " + name); !s.ok()) return s;
    std::string view = name.substr(kViewDbPrefixLen);
    for (std::string_view field : {"fingerprint", "state", "build_cursor"}) {
      if (absl::Status s = txn.Delete(meta_, ViewMetaKey(view, field)); !s.ok()) return s;
    }
    dropped_views_.push_back(view);
  }
  if (absl::Status s = DropStaleAggregates(&txn, main); !s.ok()) return s;
  return txn.Commit();
}

absl::Status Store::DropStaleAggregates(WriteTxn* txn, MDB_dbi main) {
  std::vector<std::string> stale;
  {
    Cursor c(txn->raw(), main);
    for (bool ok = c.SeekFirst(); ok; ok = c.Next()) {
      std::string_view name = c.key();
      for (std::string_view prefix : {kAggregateDbPrefix, kAggregateExtremesDbPrefix}) {
        if (name.starts_with(prefix) && !aggregates_.count(name.substr(prefix.size()))) {
          stale.emplace_back(name);
        }
      }
    }
  }
  for (const std::string& name : stale) {
    MDB_dbi dbi;
    if (absl::Status s = LmdbStatus(mdb_dbi_open(txn->raw(), name.c_str(), 0, &dbi), "opening " + name);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = LmdbStatus(mdb_drop(txn->raw(), dbi, 1), "dropping " + name); !s.ok()) return s;
    if (!name.starts_with(kAggregateDbPrefix)) continue;  // aggm/<name> goes with agg/<name>
    std::string aggregate = name.substr(sizeof(kAggregateDbPrefix) - 1);
    for (std::string_view field : {"fingerprint", "state", "build_cursor"}) {
      if (absl::Status s = txn->Delete(meta_, AggregateMetaKey(aggregate, field)); !s.ok()) return s;
    }
    dropped_aggregates_.push_back(aggregate);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WriteTxn>> Store::BeginWrite() {
  if (!write_back()) return BeginLmdbWrite();
  // Until this transaction ends no flush runs, and it begins with the pending layers.
  std::unique_lock flushing(flush_mu_);
  std::shared_ptr<const PendingLayers> layers;
  {
    std::lock_guard lock(pending_mu_);
    layers = pending_;
  }
  for (;;) {
    auto txn = BeginLmdbWrite();
    if (!txn.ok() || layers->empty()) {
      if (txn.ok()) (*txn)->flush_lock_ = std::move(flushing);
      return txn;
    }
    absl::Status s = WriteLayers(*layers, txn->get());
    if (s.ok()) {
      (*txn)->absorbed_ = std::move(layers);
      (*txn)->flush_lock_ = std::move(flushing);
      return txn;
    }
    if (!absl::IsResourceExhausted(s)) return s;
    (*txn)->Abort();
    if (absl::Status grown = GrowMapLocked(); !grown.ok()) return grown;
    LogInfo(absl::StrCat("LMDB map grown to ", map_size(), " bytes"));
  }
}

absl::StatusOr<std::unique_ptr<WriteTxn>> Store::BeginLmdbWrite() {
  std::unique_ptr<WriteTxn> txn(new WriteTxn());
  int rc = mdb_txn_begin(env_, nullptr, 0, &txn->txn_);
  if (rc == MDB_MAP_RESIZED) {
    // Another process grew the map; adopt its size.
    mdb_env_set_mapsize(env_, 0);
    rc = mdb_txn_begin(env_, nullptr, 0, &txn->txn_);
  }
  if (rc != MDB_SUCCESS) return LmdbStatus(rc, "beginning a write transaction");
  if (write_back()) txn->store_ = this;  // its commit's cost: last_lmdb_commit()
  return txn;
}

absl::Status Store::BeginSnapshot(Txn* txn) const {
  // The layers first, then the snapshot: a layer flushed in between is in both, and the
  // stored sequence below skips it. The other order could pair a snapshot with layers older
  // than it, which would hide its newer values.
  std::shared_ptr<const PendingLayers> published;
  if (write_back()) {
    std::lock_guard lock(pending_mu_);
    published = pending_;
  }
  int rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn->txn_);
  if (rc != MDB_SUCCESS) return LmdbStatus(rc, "beginning a read transaction");
  if (published != nullptr && !published->empty()) {
    MDB_val k = Val(kFlushedKey), v;
    uint64_t flushed = 0;
    if (mdb_get(txn->txn_, meta_, &k, &v) == MDB_SUCCESS) {
      std::string_view text = View(v);
      if (!absl::SimpleAtoi(absl::string_view(text.data(), text.size()), &flushed)) flushed = 0;
    }
    size_t i = 0;
    while (i < published->size() && (*published)[i]->sequence <= flushed) ++i;
    if (i < published->size()) {
      txn->layers_ = std::move(published);
      txn->first_layer_ = i;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ReadTxn>> Store::BeginRead() const {
  std::unique_ptr<ReadTxn> txn(new ReadTxn(std::shared_lock(resize_mu_)));
  if (absl::Status s = BeginSnapshot(txn.get()); !s.ok()) return s;
  return txn;
}

absl::StatusOr<std::unique_ptr<WriteTxn>> Store::BeginBuffered() {
  if (!write_back()) return BeginWrite();
  {
    std::unique_lock lock(pending_mu_);
    while (pending_bytes_ > kMaxPendingBytes) {
      if (!flush_error_.empty()) {  // the writer retries with back-off, saying why
        return absl::UnavailableError(absl::StrCat(
            "applied batches cannot be flushed to LMDB (", pending_bytes_,
            " bytes wait in memory): ", flush_error_));
      }
      if (stopping_) return absl::CancelledError("the store is closing");
      const uint64_t flushes = flushes_;
      pending_changed_.wait_for(lock, std::chrono::seconds(1),
                                [&] { return flushes_ != flushes || stopping_; });
    }
  }
  std::unique_ptr<WriteTxn> txn(new WriteTxn());
  txn->read_lock_ = std::shared_lock(resize_mu_);
  if (absl::Status s = BeginSnapshot(txn.get()); !s.ok()) return s;
  txn->store_ = this;
  txn->own_layer_ = std::make_unique<PendingLayer>();
  txn->own_ = txn->own_layer_.get();
  return txn;
}

void Store::Publish(std::unique_ptr<PendingLayer> layer) {
  for (PendingLayer::Db& db : layer->dbs) {
    if (!db.entries.empty()) db.BuildBloom();
  }
  {
    std::lock_guard lock(pending_mu_);
    layer->sequence = next_sequence_++;
    layer->published = std::chrono::steady_clock::now();
    pending_bytes_ += layer->bytes;
    auto next = std::make_shared<PendingLayers>(*pending_);
    next->push_back(std::move(layer));
    pending_ = std::move(next);
  }
  pending_changed_.notify_all();
}

absl::Status Store::Flush() {
  if (!write_back()) return absl::OkStatus();
  if (absl::Status s = FlushNow(); !s.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot flush applied batches to LMDB: ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status Store::FlushNow() {
  std::lock_guard flushing(flush_mu_);
  const auto started = std::chrono::steady_clock::now();
  std::shared_ptr<const PendingLayers> layers;
  {
    std::lock_guard lock(pending_mu_);
    layers = pending_;
  }
  if (layers->empty()) return absl::OkStatus();  // a direct write took them
  absl::Status s;
  for (;;) {
    auto txn = BeginLmdbWrite();
    if (!txn.ok()) {
      s = txn.status();
      break;
    }
    s = WriteLayers(*layers, txn->get());
    if (s.ok()) s = (*txn)->Commit();
    if (!absl::IsResourceExhausted(s)) break;
    (*txn)->Abort();
    s = GrowMapLocked();
    if (!s.ok()) break;
    LogInfo(absl::StrCat("LMDB map grown to ", map_size(), " bytes"));
  }
  if (s.ok()) {
    last_flush_us_.store(std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::steady_clock::now() - started)
                             .count());
  }
  Flushed(*layers, s);
  return s;
}

void Store::Flushed(const PendingLayers& layers, const absl::Status& s) {
  {
    std::lock_guard lock(pending_mu_);
    ++flushes_;
    if (s.ok()) {
      // Layers are only published at the back and only flushed from the front, one flush
      // (or direct write) at a time: `layers` is the front of pending_.
      size_t bytes = 0;
      for (const auto& layer : layers) bytes += layer->bytes;
      pending_bytes_ -= bytes;
      pending_ = std::make_shared<PendingLayers>(pending_->begin() + layers.size(), pending_->end());
      flush_error_.clear();
    } else {
      flush_error_ = std::string(s.message());
    }
  }
  pending_changed_.notify_all();
}

std::string Store::flush_error() const {
  std::lock_guard lock(pending_mu_);
  return flush_error_;
}

size_t Store::pending_layers() const {
  std::lock_guard lock(pending_mu_);
  return pending_->size();
}

size_t Store::pending_bytes() const {
  std::lock_guard lock(pending_mu_);
  return pending_bytes_;
}

void Store::FlushLoop() {
  pthread_setname_np(pthread_self(), "cdcview-flush");  // for top -H, perf and the benches
  const auto interval = std::chrono::milliseconds(config_.flush_interval_ms);
  auto backoff = std::chrono::milliseconds(250);
  for (;;) {
    size_t layers = 0;
    {
      std::unique_lock lock(pending_mu_);
      for (;;) {
        if (pending_->empty()) {
          if (stopping_) return;
          pending_changed_.wait(lock);
          continue;
        }
        if (stopping_ || pending_bytes_ >= kFlushBytes || pending_->size() >= kFlushLayers) break;
        const auto due = pending_->front()->published + interval;
        if (std::chrono::steady_clock::now() >= due) break;
        pending_changed_.wait_until(lock, due);
      }
      layers = pending_->size();
    }
    absl::Status s = FlushNow();
    if (s.ok()) {
      backoff = std::chrono::milliseconds(250);
      continue;
    }
    std::unique_lock lock(pending_mu_);
    if (stopping_) {
      LogError(absl::StrCat("cannot flush the last ", layers,
                            " applied batches to LMDB at shutdown: ", s.message(),
                            "; their sources deliver those events again at the next start"));
      return;
    }
    LogError(absl::StrCat("cannot flush ", layers, " applied batches to LMDB, retrying in ",
                          backoff.count(), "ms: ", s.message()));
    pending_changed_.wait_for(lock, backoff, [&] { return stopping_; });
    backoff = std::min(backoff * 2, std::chrono::milliseconds(30000));
  }
}

absl::Status Store::WriteLayers(const PendingLayers& layers, WriteTxn* txn) {
  size_t dbs = 0;
  for (const auto& layer : layers) dbs = std::max(dbs, layer->dbs.size());
  // Per database, the last write of each key across the layers, in key order: a k-way merge
  // of the layers' sorted entries, without copying a key.
  struct Head {
    PendingLayer::Entries::const_iterator it, end;
    size_t layer;  // the newer layer's entry wins a key
  };
  // A heap's top is its greatest element: the smallest key, of the newest layer among equals.
  auto after = [](const Head& a, const Head& b) {
    const int c = a.it->first.compare(b.it->first);
    return c != 0 ? c > 0 : a.layer < b.layer;
  };
  std::vector<Head> heads;
  // Moves the head just popped (at the back) to its next entry, or drops it at its end.
  auto step = [&] {
    if (++heads.back().it != heads.back().end) {
      std::push_heap(heads.begin(), heads.end(), after);
    } else {
      heads.pop_back();
    }
  };
  for (size_t dbi = 0; dbi < dbs; ++dbi) {
    const MDB_dbi d = static_cast<MDB_dbi>(dbi);
    // A cleared database: what the older layers and LMDB hold is gone.
    size_t first = 0;
    for (size_t i = 0; i < layers.size(); ++i) {
      const PendingLayer::Db* db = layers[i]->db(d);
      if (db != nullptr && db->cleared) first = i + 1;
    }
    if (first > 0) {
      if (absl::Status s = txn->Clear(d); !s.ok()) return s;
    }
    heads.clear();
    for (size_t i = first > 0 ? first - 1 : 0; i < layers.size(); ++i) {
      const PendingLayer::Db* db = layers[i]->db(d);
      if (db != nullptr && !db->entries.empty()) {
        heads.push_back(Head{db->entries.begin(), db->entries.end(), i});
      }
    }
    std::make_heap(heads.begin(), heads.end(), after);
    while (!heads.empty()) {
      std::pop_heap(heads.begin(), heads.end(), after);
      const std::string& key = heads.back().it->first;
      const PendingLayer::Entry& entry = heads.back().it->second;
      absl::Status s;
      switch (entry.op) {
        case PendingLayer::Op::kPut:
          s = txn->Put(d, key, entry.value);
          break;
        case PendingLayer::Op::kAppend:
          s = txn->AppendOrPut(d, key, entry.value);
          break;
        case PendingLayer::Op::kDelete:
          s = txn->Delete(d, key);
          break;
      }
      if (!s.ok()) return s;
      // Every layer standing on this key moves past it (older writes of the key are dropped).
      const std::string_view written = key;  // the node stays when its iterator moves
      step();
      while (!heads.empty() && heads.front().it->first == written) {
        std::pop_heap(heads.begin(), heads.end(), after);
        step();
      }
    }
  }
  return txn->Put(meta_, kFlushedKey, std::to_string(layers.back()->sequence));
}

absl::Status Store::GrowMap() {
  // With write-back the flusher may have a write transaction open: not while the map moves.
  std::unique_lock<std::mutex> flushing;
  if (write_back()) flushing = std::unique_lock(flush_mu_);
  return GrowMapLocked();
}

absl::Status Store::GrowMapLocked() {
  std::unique_lock lock(resize_mu_);
  uint64_t current = MapSizeUnlocked();
  if (current >= config_.max_map_size) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the LMDB map is full at storage.max_map_size (", current,
        " bytes); raise storage.max_map_size or free disk space"));
  }
  uint64_t next = std::min<uint64_t>(current * 2, config_.max_map_size);
  int rc = mdb_env_set_mapsize(env_, next);
  if (rc != MDB_SUCCESS) return LmdbStatus(rc, "growing the LMDB map");
  config_.map_size = next;
  return absl::OkStatus();
}

MDB_dbi Store::items(std::string_view table) const { return items_.find(table)->second; }
MDB_dbi Store::view(std::string_view name) const { return views_.find(name)->second; }
bool Store::has_view(std::string_view name) const { return views_.count(name) > 0; }
MDB_dbi Store::aggregate(std::string_view name) const { return aggregates_.find(name)->second.first; }
MDB_dbi Store::aggregate_extremes(std::string_view name) const {
  return aggregates_.find(name)->second.second;
}

uint64_t Store::MapSizeUnlocked() const {
  MDB_envinfo info;
  mdb_env_info(env_, &info);
  return info.me_mapsize;
}

uint64_t Store::map_size() const {
  std::shared_lock lock(resize_mu_);  // mdb_env_info reads the meta pages, inside the map
  return MapSizeUnlocked();
}

uint64_t Store::map_used_bytes() const {
  std::shared_lock lock(resize_mu_);
  MDB_envinfo info;
  mdb_env_info(env_, &info);
  MDB_stat st;
  mdb_env_stat(env_, &st);
  return static_cast<uint64_t>(info.me_last_pgno + 1) * st.ms_psize;
}

}  // namespace cdcview
