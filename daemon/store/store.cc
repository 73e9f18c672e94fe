#include "daemon/store/store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/log/log.h"
#include "daemon/store/flusher.h"
#include "daemon/store/lmdb_file.h"
#include "daemon/store/lmdb_status.h"
#include "daemon/store/long_key.h"
#include "daemon/store/meta_keys.h"
#include "daemon/store/shutdown_marker.h"
#include "daemon/store/store_internal.h"
#include "daemon/store/store_verifier.h"

namespace cdcview {
namespace {

constexpr char kSchemaKey[] = "schema";
// 2: stored items may carry a partition id (stored_item.h). A version 1 store is upgraded in
// place: its items read as having none (StoredItem::kNoPartition).
constexpr char kSchemaVersion[] = "2";
constexpr char kSchemaVersionWithoutPartitions[] = "1";
constexpr char kViewDbPrefix[] = "view/";
constexpr size_t kViewDbPrefixLen = sizeof(kViewDbPrefix) - 1;
constexpr char kItemsDbPrefix[] = "items/";
constexpr char kTombstonesDbPrefix[] = "tombstones/";
constexpr char kAggregateDbPrefix[] = "agg/";
constexpr char kAggregateExtremesDbPrefix[] = "aggm/";
// meta, two per table, one per view, two per aggregate: config validation does not bound
// these counts, LMDB's cost per slot is small, and hitting the limit is a clear MDB_DBS_FULL.
constexpr MDB_dbi kMaxDbs = 1024;
// Problems a refused start lists (cdcviewd --verify-store lists them all).
constexpr size_t kDamageLinesAtStart = 10;

// The data file's used bytes per its current meta page, or nullopt if it cannot tell (no
// file, or meta pages that do not read: a verify will say why).
std::optional<uint64_t> UsedBytes(const std::string& data_path) {
  absl::StatusOr<std::unique_ptr<LmdbFile>> file = LmdbFile::Open(data_path);
  if (!file.ok()) return std::nullopt;
  const int meta = (*file)->CurrentMeta();
  if (meta < 0) return std::nullopt;
  return ((*file)->Meta(meta).last_page + 1) * (*file)->page_size();
}

// storage.verify_at_start: refuses a damaged store before LMDB reads a page of it.
absl::Status VerifyAtOpen(const StorageConfig& config, const std::vector<TableSpec>& tables) {
  const std::string data = absl::StrCat(config.path, "/data.mdb");
  if (config.verify_at_start == StorageConfig::Verify::kNever || access(data.c_str(), F_OK) != 0) {
    return absl::OkStatus();
  }
  std::string why = "storage.verify_at_start is always";
  if (config.verify_at_start == StorageConfig::Verify::kAuto) {
    const std::optional<uint64_t> used = UsedBytes(data);
    if (!ClosedCleanly(config.path)) {
      why = "the last run did not close the store cleanly";
    } else if (!used.has_value() || *used <= StorageConfig::kVerifyCheapBytes) {
      why = "it is small";
    } else {
      LogInfo(absl::StrCat("not verifying the store (", *used >> 20,
                           " MiB used, closed cleanly; storage.verify_at_start: always verifies "
                           "every start)"));
      return absl::OkStatus();
    }
  }
  LogInfo(absl::StrCat("verifying the store in ", config.path, " (", why, ")"));
  const auto started = std::chrono::steady_clock::now();
  auto last_log = started;
  VerifyOptions options;
  options.tables = tables;
  options.progress = [&](uint64_t done, uint64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_log < std::chrono::seconds(10)) return;
    last_log = now;
    LogInfo(absl::StrCat("verifying the store: ", done, " of ", total, " pages"));
  };
  absl::StatusOr<VerifyReport> report = VerifyStore(data, options);
  if (!report.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("cannot verify the store in \"", config.path,
                                                      "\": ", report.status().message()));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!report->clean()) {
    return absl::DataLossError(absl::StrCat(
        "store \"", config.path, "\" is damaged (verified at start: ", why, "): ",
        report->Summary(kDamageLinesAtStart),
        "\nrestore it from a backup, or move it away so that the sources replay into a new "
        "store; cdcviewd --verify-store lists every problem"));
  }
  LogInfo(absl::StrFormat("verified the store: %d pages, %d entries, %.2f s", report->pages,
                          report->entries, seconds));
  return absl::OkStatus();
}

}  // namespace

using store_internal::kFlushedKey;
using store_internal::Val;
using store_internal::View;

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
  auto lock = StoreLock::Acquire(config.path);
  if (!lock.ok()) return lock.status();
  store->lock_ = std::move(*lock);
  if (absl::Status s = VerifyAtOpen(config, tables); !s.ok()) return s;
  // From here until a clean close, a crash leaves no marker.
  if (absl::Status s = ClearClosedCleanly(config.path); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(s.message(), "; check storage.path and its permissions"));
  }
  store->config_ = config;
  if (store->write_back()) {
    store->flusher_ =
        std::make_unique<Flusher>(store.get(), std::chrono::milliseconds(config.flush_interval_ms));
  }
  if (absl::Status s = store->OpenEnv(); !s.ok()) return s;
  {
    MDB_envinfo info;
    mdb_env_info(store->env_, &info);
    absl::Status reserved = store->ReserveFile(info.me_mapsize);
    if (absl::IsUnimplemented(reserved)) {
      store->reserve_ = false;
      if (store->config_.write_map) {
        // Without a reservation a full disk would be a SIGBUS on a fresh page of the map:
        // pwrite instead, whose commit fails with an error.
        LogWarning(absl::StrCat("storage.write_map is off for \"", config.path, "\": ",
                                reserved.message(), "; a full disk would be a SIGBUS with it"));
        mdb_env_close(store->env_);
        store->env_ = nullptr;
        store->config_.write_map = false;
        if (absl::Status s = store->OpenEnv(); !s.ok()) return s;
      } else {
        LogWarning(absl::StrCat(reserved.message(), "; a full disk fails commits instead"));
      }
    } else if (!reserved.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot open the LMDB store in \"", config.path, "\": ", reserved.message(),
          "; free disk space or lower storage.map_size"));
    }
  }
  // LMDB maps at least what the file already uses, whatever map_size says; a map grown by
  // GrowMap in an earlier run starts again from map_size and grows again when needed.
  MDB_envinfo info;
  mdb_env_info(store->env_, &info);
  if (info.me_mapsize > config.map_size) store->config_.map_size = info.me_mapsize;
  store->max_key_size_ = static_cast<size_t>(mdb_env_get_maxkeysize(store->env_));
  if (store->max_key_size_ < kLongKeyStoredBytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this LMDB takes keys up to ", store->max_key_size_, " bytes; cdcviewd needs ",
        kLongKeyStoredBytes, " (LMDB's default)"));
  }
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
    store->flusher_->Start(last + 1);
  }
  store->opened_ = true;
  return store;
}

absl::Status Store::OpenEnv() {
  int rc = mdb_env_create(&env_);
  if (rc != MDB_SUCCESS) return LmdbStatus(rc, "creating the LMDB environment");
  mdb_env_set_maxdbs(env_, kMaxDbs);
  mdb_env_set_maxreaders(env_, 1022);
  rc = mdb_env_set_mapsize(env_, config_.map_size);
  if (rc != MDB_SUCCESS) return LmdbStatus(rc, "setting the LMDB map size");
  // MDB_NOTLS: read transactions are not bound to a thread (gRPC handlers hop threads).
  // MDB_NOMETASYNC: see the header; durable up to the last commits, never corrupt.
  // MDB_WRITEMAP (storage.write_map): see the header.
  rc = mdb_env_open(env_, config_.path.c_str(), StoreEnvFlags(config_), 0644);
  if (rc == EFBIG) {
    // With MDB_WRITEMAP, LMDB sets the file's length to the map's at open.
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot open the LMDB store in \"", config_.path, "\": storage.map_size (",
        config_.map_size, " bytes) is larger than its file system allows for one file; lower "
        "storage.map_size (the map grows up to storage.max_map_size as needed)"));
  }
  if (rc != MDB_SUCCESS) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot open the LMDB store in \"", config_.path, "\": ", mdb_strerror(rc),
        rc == EAGAIN || rc == EBUSY ? "; is another cdcviewd using it?" : "; check storage.path"));
  }
  return absl::OkStatus();
}

absl::Status Store::ReserveFile(uint64_t bytes) {
  int fd = -1;
  if (int rc = mdb_env_get_fd(env_, &fd); rc != MDB_SUCCESS) return LmdbStatus(rc, "reserving disk");
  int rc;
  do {
    rc = fallocate(fd, 0, 0, static_cast<off_t>(bytes));
  } while (rc != 0 && errno == EINTR);
  if (rc == 0) return absl::OkStatus();
  const int error = errno;
  const std::string what = absl::StrCat("cannot reserve ", bytes, " bytes of disk for \"",
                                        config_.path, "/data.mdb\": ", std::strerror(error));
  if (error == EOPNOTSUPP) return absl::UnimplementedError(what);
  return absl::ResourceExhaustedError(what);
}

Store::~Store() {
  flusher_.reset();  // flushes what is pending first
  if (env_ != nullptr) mdb_env_close(env_);
  if (!opened_) return;
  // A run that met a store error leaves no marker: the next start verifies the store.
  const std::array<uint64_t, kStoreErrorKinds> errors = StoreErrorCounts();
  if (std::any_of(errors.begin(), errors.end(), [](uint64_t n) { return n > 0; })) return;
  if (absl::Status s = MarkClosedCleanly(config_.path); !s.ok()) {
    LogWarning(absl::StrCat(s.message(), "; the next start verifies the store"));
  }
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
  if (*schema && **schema == kSchemaVersionWithoutPartitions) {
    LogInfo(absl::StrCat("store \"", config_.path, "\": schema version ",
                         kSchemaVersionWithoutPartitions, " upgraded to ", kSchemaVersion,
                         ": items record the source partition that wrote them from now on (a "
                         "cdcviewd older than this one no longer opens the store)"));
  } else if (*schema && **schema != kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "store \"", config_.path, "\" has schema version ", std::string(**schema), ", this cdcviewd reads ",
        kSchemaVersionWithoutPartitions, " and ", kSchemaVersion,
        "; use a matching cdcviewd or start from an empty storage.path"));
  }
  if (!*schema || **schema != kSchemaVersion) {
    if (absl::Status s = txn.Put(meta_, kSchemaKey, kSchemaVersion); !s.ok()) return s;
  }

  // A database of logical keys and its long-key sibling (long_key.h).
  auto open_keyed = [&](const std::string& name, MDB_dbi* dbi) {
    MDB_dbi sibling;
    if (absl::Status s = open(name, dbi); !s.ok()) return s;
    if (absl::Status s = open(kLongKeyDbPrefix + name, &sibling); !s.ok()) return s;
    if (*dbi >= siblings_.size()) siblings_.resize(*dbi + 1, 0);
    siblings_[*dbi] = sibling;
    return absl::OkStatus();
  };
  std::map<std::string, bool> configured;
  for (const TableSpec& table : tables) {
    MDB_dbi dbi;
    if (absl::Status s = open_keyed(absl::StrCat(kItemsDbPrefix, table.name), &dbi); !s.ok()) return s;
    items_.emplace(table.name, dbi);
    if (absl::Status s = open(absl::StrCat(kTombstonesDbPrefix, table.name), &dbi); !s.ok()) return s;
    tombstones_.emplace(table.name, dbi);
    for (const ViewSpec& view : table.views) {
      if (absl::Status s = open_keyed(absl::StrCat(kViewDbPrefix, view.name), &dbi); !s.ok()) return s;
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
    if (!c.status().ok()) return c.status();
  }
  for (const std::string& name : stale) {
    MDB_dbi dbi;
    if (absl::Status s = open(name, &dbi); !s.ok()) return s;
    if (absl::Status s = LmdbStatus(mdb_drop(txn.raw(), dbi, 1), "dropping " + name); !s.ok()) return s;
    const std::string sibling = kLongKeyDbPrefix + name;
    if (mdb_dbi_open(txn.raw(), sibling.c_str(), 0, &dbi) == MDB_SUCCESS) {
      if (absl::Status s = LmdbStatus(mdb_drop(txn.raw(), dbi, 1), "dropping " + sibling); !s.ok()) return s;
    }
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
    if (!c.status().ok()) return c.status();
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
  return flusher_->BeginWrite();
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
  txn->siblings_ = &siblings_;
  if (write_back()) txn->store_ = this;  // its commit's cost: last_lmdb_commit()
  return txn;
}

absl::Status Store::BeginSnapshot(Txn* txn) const {
  // The layers first, then the snapshot: a layer flushed in between is in both, and the
  // stored sequence below skips it. The other order could pair a snapshot with layers older
  // than it, which would hide its newer values.
  std::shared_ptr<const PendingLayers> published;
  if (write_back()) published = flusher_->Published();
  int rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn->txn_);
  if (rc != MDB_SUCCESS) return LmdbStatus(rc, "beginning a read transaction");
  txn->siblings_ = &siblings_;
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
      txn->pending_.layers = std::move(published);
      txn->pending_.first_layer = i;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ReadTxn>> Store::BeginRead() const {
  std::unique_ptr<ReadTxn> txn(new ReadTxn());
  resize_mu_.ReaderLock();  // the transaction releases it when it ends
  txn->resize_mu_ = &resize_mu_;
  if (absl::Status s = BeginSnapshot(txn.get()); !s.ok()) return s;
  return txn;
}

absl::StatusOr<std::unique_ptr<WriteTxn>> Store::BeginBuffered() {
  if (!write_back()) return BeginWrite();
  if (absl::Status s = flusher_->WaitForRoom(); !s.ok()) return s;
  std::unique_ptr<WriteTxn> txn(new WriteTxn());
  resize_mu_.ReaderLock();  // as a ReadTxn's: the transaction releases it when it ends
  txn->read_locked_ = &resize_mu_;
  if (absl::Status s = BeginSnapshot(txn.get()); !s.ok()) return s;
  txn->store_ = this;
  txn->flusher_ = flusher_.get();
  txn->own_layer_ = std::make_unique<PendingLayer>();
  txn->pending_.own = txn->own_layer_.get();
  return txn;
}

absl::Status Store::Flush() {
  if (!write_back()) return absl::OkStatus();
  if (absl::Status s = flusher_->FlushNow(); !s.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot flush applied batches to LMDB: ", s.message()));
  }
  return absl::OkStatus();
}

std::string Store::flush_error() const {
  return write_back() ? flusher_->flush_error() : std::string();
}

size_t Store::pending_layers() const { return write_back() ? flusher_->pending_layers() : 0; }

size_t Store::pending_bytes() const { return write_back() ? flusher_->pending_bytes() : 0; }

std::chrono::microseconds Store::last_flush() const {
  return write_back() ? flusher_->last_flush() : std::chrono::microseconds(0);
}

absl::Status Store::GrowMap() {
  // With write-back the flusher may have a write transaction open: not while the map moves.
  if (write_back()) return flusher_->GrowMap();
  return GrowMapLocked();
}

absl::Status Store::GrowMapLocked() {
  MapResizeLock::Exclusive lock(&resize_mu_);
  uint64_t current = MapSizeUnlocked();
  if (current >= config_.max_map_size) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the LMDB map is full at storage.max_map_size (", current,
        " bytes); raise storage.max_map_size or free disk space"));
  }
  uint64_t next = std::min<uint64_t>(current * 2, config_.max_map_size);
  if (reserve_) {
    if (absl::Status s = ReserveFile(next); !s.ok()) {
      int fd = -1;
      // Whatever the failed call allocated past the map goes back: the file is the map's size.
      if (mdb_env_get_fd(env_, &fd) == MDB_SUCCESS && ftruncate(fd, static_cast<off_t>(current)) != 0) {
        LogWarning(absl::StrCat("cannot trim \"", config_.path, "/data.mdb\" back to ", current,
                                " bytes: ", std::strerror(errno)));
      }
      disk_full_.store(true);
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot grow the LMDB map to ", next, " bytes: ", s.message(),
          "; free disk space (or raise the file size limit) for storage.path, the writer retries"));
    }
  }
  int rc = mdb_env_set_mapsize(env_, next);
  if (rc != MDB_SUCCESS) return LmdbStatus(rc, "growing the LMDB map");
  config_.map_size = next;
  disk_full_.store(false);
  return absl::OkStatus();
}

absl::Status Store::CopyTo(int fd) {
  if (absl::Status s = Flush(); !s.ok()) return s;
  MapResizeLock::Shared lock(&resize_mu_);  // the copy's read snapshot is inside the map
  return LmdbStatus(mdb_env_copyfd2(env_, fd, MDB_CP_COMPACT), "copying the store");
}

MDB_dbi Store::items(std::string_view table) const { return items_.find(table)->second; }
MDB_dbi Store::tombstones(std::string_view table) const {
  return tombstones_.find(table)->second;
}
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
  MapResizeLock::Shared lock(&resize_mu_);  // mdb_env_info reads the meta pages, inside the map
  return MapSizeUnlocked();
}

uint64_t Store::map_used_bytes() const {
  MapResizeLock::Shared lock(&resize_mu_);
  MDB_envinfo info;
  mdb_env_info(env_, &info);
  MDB_stat st;
  mdb_env_stat(env_, &st);
  return static_cast<uint64_t>(info.me_last_pgno + 1) * st.ms_psize;
}

}  // namespace cdcview
