#include "daemon/store/store.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "daemon/log/log.h"
#include "index_builders/item_codec.h"

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
Cursor::~Cursor() { mdb_cursor_close(cursor_); }

bool Cursor::Move(MDB_cursor_op op, std::string_view key) {
  if (op == MDB_SET_RANGE) key_ = Val(key);
  valid_ = mdb_cursor_get(cursor_, &key_, &value_, op) == MDB_SUCCESS;
  return valid_;
}
bool Cursor::SeekFirst() { return Move(MDB_FIRST); }
bool Cursor::SeekLast() { return Move(MDB_LAST); }
bool Cursor::Seek(std::string_view key) {
  // LMDB refuses an empty key; every key is >= "".
  return key.empty() ? SeekFirst() : Move(MDB_SET_RANGE, key);
}
bool Cursor::Next() { return Move(MDB_NEXT); }
bool Cursor::Prev() { return Move(MDB_PREV); }
std::string_view Cursor::key() const { return View(key_); }
std::string_view Cursor::value() const { return View(value_); }

// ---- Transactions

Txn::~Txn() = default;

absl::StatusOr<std::optional<std::string_view>> Txn::Get(MDB_dbi dbi, std::string_view key) const {
  MDB_val k = Val(key), v;
  int rc = mdb_get(txn_, dbi, &k, &v);
  if (rc == MDB_NOTFOUND) return std::nullopt;
  if (rc != MDB_SUCCESS) return LmdbStatus(rc, "reading the store");
  return View(v);
}

std::unique_ptr<Cursor> Txn::OpenCursor(MDB_dbi dbi) const {
  return std::make_unique<Cursor>(txn_, dbi);
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
  if (txn_ != nullptr) mdb_txn_abort(txn_);  // closes the write cursors
  txn_ = nullptr;
  cursors_.clear();
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
  auto cursor = CursorFor(dbi);
  if (!cursor.ok()) return cursor.status();
  MDB_val k = Val(key), v;
  int rc = mdb_cursor_get(*cursor, &k, &v, MDB_SET_KEY);
  if (rc == MDB_NOTFOUND) return std::nullopt;
  if (rc != MDB_SUCCESS) return LmdbStatus(rc, "reading the store");
  return View(v);
}

absl::Status WriteTxn::Put(MDB_dbi dbi, std::string_view key, std::string_view value) {
  auto cursor = CursorFor(dbi);
  if (!cursor.ok()) return cursor.status();
  MDB_val k = Val(key), v = Val(value);
  return LmdbStatus(mdb_cursor_put(*cursor, &k, &v, 0), "writing the store");
}

absl::Status WriteTxn::Append(MDB_dbi dbi, std::string_view key, std::string_view value) {
  auto cursor = CursorFor(dbi);
  if (!cursor.ok()) return cursor.status();
  MDB_val k = Val(key), v = Val(value);
  return LmdbStatus(mdb_cursor_put(*cursor, &k, &v, MDB_APPEND), "appending to the store");
}

absl::Status WriteTxn::Delete(MDB_dbi dbi, std::string_view key) {
  auto cursor = CursorFor(dbi);
  if (!cursor.ok()) return cursor.status();
  MDB_val k = Val(key), v;
  int rc = mdb_cursor_get(*cursor, &k, &v, MDB_SET);
  if (rc == MDB_SUCCESS) rc = mdb_cursor_del(*cursor, 0);
  if (rc == MDB_NOTFOUND) return absl::OkStatus();
  return LmdbStatus(rc, "deleting from the store");
}

absl::StatusOr<bool> WriteTxn::Take(MDB_dbi dbi, std::string_view key, std::string* value) {
  auto cursor = CursorFor(dbi);
  if (!cursor.ok()) return cursor.status();
  MDB_val k = Val(key), v;
  int rc = mdb_cursor_get(*cursor, &k, &v, MDB_SET_KEY);
  if (rc == MDB_SUCCESS) {
    value->assign(static_cast<const char*>(v.mv_data), v.mv_size);  // before the page changes
    rc = mdb_cursor_del(*cursor, 0);
  }
  if (rc == MDB_NOTFOUND) return false;
  if (rc != MDB_SUCCESS) return LmdbStatus(rc, "deleting from the store");
  return true;
}

absl::Status WriteTxn::Clear(MDB_dbi dbi) {
  return LmdbStatus(mdb_drop(txn_, dbi, 0), "clearing a database");
}

absl::Status WriteTxn::Commit() {
  int rc = mdb_txn_commit(txn_);
  txn_ = nullptr;  // committed or aborted by LMDB either way, with the write cursors
  cursors_.clear();
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
  return store;
}

Store::~Store() {
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
  std::unique_ptr<WriteTxn> txn(new WriteTxn());
  int rc = mdb_txn_begin(env_, nullptr, 0, &txn->txn_);
  if (rc == MDB_MAP_RESIZED) {
    // Another process grew the map; adopt its size.
    mdb_env_set_mapsize(env_, 0);
    rc = mdb_txn_begin(env_, nullptr, 0, &txn->txn_);
  }
  if (rc != MDB_SUCCESS) return LmdbStatus(rc, "beginning a write transaction");
  return txn;
}

absl::StatusOr<std::unique_ptr<ReadTxn>> Store::BeginRead() const {
  std::unique_ptr<ReadTxn> txn(new ReadTxn(std::shared_lock(resize_mu_)));
  int rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn->txn_);
  if (rc != MDB_SUCCESS) return LmdbStatus(rc, "beginning a read transaction");
  return txn;
}

absl::Status Store::GrowMap() {
  std::unique_lock lock(resize_mu_);
  uint64_t current = map_size();
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

uint64_t Store::map_size() const {
  MDB_envinfo info;
  mdb_env_info(env_, &info);
  return info.me_mapsize;
}

uint64_t Store::map_used_bytes() const {
  MDB_envinfo info;
  mdb_env_info(env_, &info);
  MDB_stat st;
  mdb_env_stat(env_, &st);
  return static_cast<uint64_t>(info.me_last_pgno + 1) * st.ms_psize;
}

}  // namespace cdcview
