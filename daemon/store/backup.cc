#include "daemon/store/backup.h"

#include <fcntl.h>
#include <lmdb.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/decode/json_escape.h"
#include "daemon/store/lmdb_status.h"
#include "daemon/store/meta_keys.h"
#include "daemon/store/store_internal.h"

namespace cdcview {
namespace {

namespace fs = std::filesystem;
using store_internal::Val;
using store_internal::View;

absl::Status SystemError(std::string_view what, const fs::path& path, int error) {
  return absl::InternalError(
      absl::StrCat(std::string(what), " \"", path.string(), "\": ", std::strerror(error)));
}

// fsync of a file or directory by path.
absl::Status SyncPath(const fs::path& path, int flags) {
  const int fd = open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return SystemError("cannot open", path, errno);
  const int rc = fsync(fd);
  const int error = errno;
  close(fd);
  if (rc != 0) return SystemError("cannot sync", path, error);
  return absl::OkStatus();
}

absl::Status WriteFile(const fs::path& path, std::string_view text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return SystemError("cannot create", path, errno);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      close(fd);
      return SystemError("cannot write", path, error);
    }
    done += static_cast<size_t>(n);
  }
  const int rc = fsync(fd);
  const int error = errno;
  close(fd);
  if (rc != 0) return SystemError("cannot sync", path, error);
  return absl::OkStatus();
}

struct Definition {
  std::string name, fingerprint, state;
};

// The manifest of the copy in `dir`, read from the copy itself so that it says what the
// backup holds, whatever the store did meanwhile.
absl::StatusOr<std::string> ReadManifest(const fs::path& dir, std::string_view store_path,
                                         uint64_t data_bytes, absl::Time now) {
  MDB_env* env = nullptr;
  int rc = mdb_env_create(&env);
  if (rc != MDB_SUCCESS) return LmdbStatus(rc, "reading the backup");
  mdb_env_set_maxdbs(env, 4);
  std::vector<std::pair<std::string, std::string>> meta;
  rc = mdb_env_open(env, dir.c_str(), MDB_RDONLY | MDB_NOLOCK, 0644);
  MDB_txn* txn = nullptr;
  if (rc == MDB_SUCCESS) rc = mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn);
  MDB_dbi dbi = 0;
  if (rc == MDB_SUCCESS) rc = mdb_dbi_open(txn, "meta", 0, &dbi);
  MDB_cursor* cursor = nullptr;
  if (rc == MDB_SUCCESS) rc = mdb_cursor_open(txn, dbi, &cursor);
  if (rc == MDB_SUCCESS) {
    MDB_val k, v;
    for (int got = mdb_cursor_get(cursor, &k, &v, MDB_FIRST); got == MDB_SUCCESS;
         got = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)) {
      meta.emplace_back(View(k), View(v));
    }
    mdb_cursor_close(cursor);
  }
  if (txn != nullptr) mdb_txn_abort(txn);
  mdb_env_close(env);
  if (rc != MDB_SUCCESS) return LmdbStatus(rc, absl::StrCat("reading the backup in \"", dir.string(), "\""));

  std::string positions, views, aggregates;
  std::vector<Definition> view_defs, aggregate_defs;
  auto definition = [](std::vector<Definition>* defs, std::string_view rest, std::string_view value) {
    const size_t slash = rest.rfind('/');
    if (slash == std::string_view::npos) return;
    std::string_view name = rest.substr(0, slash), field = rest.substr(slash + 1);
    if (defs->empty() || defs->back().name != name) defs->push_back({std::string(name), "", ""});
    if (field == "fingerprint") defs->back().fingerprint = std::string(value);
    if (field == "state") defs->back().state = std::string(value);
  };
  for (const auto& [key, value] : meta) {
    std::string_view k = key;
    if (k.starts_with(kPositionPrefix)) {
      std::string_view rest = k.substr(kPositionPrefix.size());
      const size_t slash = rest.find('/');  // source names have no '/', partitions may
      if (slash == std::string_view::npos) continue;
      absl::StrAppend(&positions, positions.empty() ? "" : ",", "\n    {\"source\": ");
      AppendJsonString(rest.substr(0, slash), &positions);
      positions += ", \"partition\": ";
      AppendJsonString(rest.substr(slash + 1), &positions);
      positions += ", \"position\": ";
      AppendJsonString(value, &positions);
      positions += "}";
    } else if (k.starts_with("view/")) {
      definition(&view_defs, k.substr(5), value);
    } else if (k.starts_with("agg/")) {
      definition(&aggregate_defs, k.substr(4), value);
    }
  }
  auto list = [](const std::vector<Definition>& defs) {
    std::string out;
    for (const Definition& d : defs) {
      absl::StrAppend(&out, out.empty() ? "" : ",", "\n    {\"name\": ");
      AppendJsonString(d.name, &out);
      out += ", \"fingerprint\": ";
      AppendJsonString(d.fingerprint, &out);
      out += ", \"state\": ";
      AppendJsonString(d.state, &out);
      out += "}";
    }
    return out.empty() ? std::string("[]") : absl::StrCat("[", out, "\n  ]");
  };
  std::string manifest = "{\n  \"format\": 1,\n  \"created\": ";
  AppendJsonString(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", now, absl::UTCTimeZone()), &manifest);
  manifest += ",\n  \"store\": ";
  AppendJsonString(store_path, &manifest);
  absl::StrAppend(&manifest, ",\n  \"data_bytes\": ", data_bytes, ",\n  \"positions\": ",
                  positions.empty() ? "[]" : absl::StrCat("[", positions, "\n  ]"),
                  ",\n  \"views\": ", list(view_defs), ",\n  \"aggregates\": ", list(aggregate_defs),
                  "\n}\n");
  return manifest;
}

}  // namespace

absl::StatusOr<fs::path> ResolveBackupTarget(std::string_view backup_dir, std::string_view requested) {
  if (backup_dir.empty()) {
    return absl::FailedPreconditionError(
        "backups are off: set storage.backup_dir to the directory backups are written under");
  }
  if (requested.empty()) return absl::InvalidArgumentError("give the backup's directory");
  if (requested.size() > kMaxBackupPathBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the backup's directory has ", requested.size(),
                                                   " bytes, at most ", kMaxBackupPathBytes));
  }
  std::error_code ec;
  const fs::path root = fs::absolute(fs::path(backup_dir), ec).lexically_normal();
  if (ec) return absl::InternalError(absl::StrCat("storage.backup_dir: ", ec.message()));
  fs::path target = (root / fs::path(requested)).lexically_normal();  // an absolute one replaces root
  if (!target.has_filename()) target = target.parent_path();  // a trailing '/'
  const fs::path inside = target.lexically_relative(root);
  if (inside.empty() || inside == "." || *inside.begin() == "..") {
    return absl::InvalidArgumentError(absl::StrCat("the backup's directory \"", std::string(requested),
                                                   "\" is not inside storage.backup_dir (\"",
                                                   root.string(), "\")"));
  }
  return target;
}

absl::StatusOr<BackupResult> BackupStore(Store& store, const fs::path& target, absl::Time now) {
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(target, ec);
  if (fs::exists(status)) {
    if (!fs::is_directory(status) || !fs::is_empty(target, ec) || ec) {
      return absl::FailedPreconditionError(absl::StrCat(
          "backup directory \"", target.string(), "\" is not empty; give a new or empty one"));
    }
  }
  const fs::path parent = target.parent_path();
  if (!fs::is_directory(parent, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot back up to \"", target.string(), "\": \"", parent.string(),
                     "\" is not a directory; create it first"));
  }
  const fs::path partial =
      parent / absl::StrCat(".", target.filename().string(), ".partial-", getpid());
  fs::remove_all(partial, ec);  // what a backup that died left behind
  if (mkdir(partial.c_str(), 0755) != 0) return SystemError("cannot create", partial, errno);

  BackupResult result;
  absl::Status s = [&]() -> absl::Status {
    const fs::path data = partial / kBackupDataFile;
    const int fd = open(data.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return SystemError("cannot create", data, errno);
    absl::Status copied = store.CopyTo(fd);
    if (copied.ok() && fsync(fd) != 0) copied = SystemError("cannot sync", data, errno);
    struct stat st;
    if (copied.ok() && fstat(fd, &st) != 0) copied = SystemError("cannot stat", data, errno);
    close(fd);
    if (!copied.ok()) return copied;
    result.data_bytes = static_cast<uint64_t>(st.st_size);
    absl::StatusOr<std::string> manifest = ReadManifest(partial, store.path(), result.data_bytes, now);
    if (!manifest.ok()) return manifest.status();
    result.manifest = *std::move(manifest);
    if (absl::Status w = WriteFile(partial / kBackupManifestFile, result.manifest); !w.ok()) return w;
    if (absl::Status d = SyncPath(partial, O_RDONLY | O_DIRECTORY); !d.ok()) return d;
    // rename(2) replaces an empty directory, and nothing else: a target made meanwhile fails.
    if (rename(partial.c_str(), target.c_str()) != 0) {
      return errno == ENOTEMPTY || errno == EEXIST || errno == ENOTDIR
                 ? absl::FailedPreconditionError(absl::StrCat("backup directory \"", target.string(),
                                                              "\" is not empty; give a new or empty one"))
                 : SystemError("cannot rename the backup to", target, errno);
    }
    return SyncPath(parent, O_RDONLY | O_DIRECTORY);
  }();
  if (!s.ok()) {
    fs::remove_all(partial, ec);
    return s;
  }
  result.directory = target.string();
  return result;
}

}  // namespace cdcview
