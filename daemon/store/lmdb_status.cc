#include "daemon/store/lmdb_status.h"

#include <lmdb.h>

#include <atomic>
#include <cerrno>
#include <optional>
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace cdcview {
namespace {

constexpr char kStoreErrorPayload[] = "cdcview.store_error";

std::array<std::atomic<uint64_t>, kStoreErrorKinds> store_errors{};

// The store error `rc` is, if it is one. Routine outcomes (NOTFOUND, MAP_FULL, KEYEXIST, a
// bad value size, MAP_RESIZED, full reader or database tables) are not.
std::optional<StoreErrorKind> KindOf(int rc) {
  switch (rc) {
    case MDB_CORRUPTED: return StoreErrorKind::kCorrupted;
    case MDB_PAGE_NOTFOUND: return StoreErrorKind::kPageNotFound;
    case MDB_BAD_TXN: return StoreErrorKind::kBadTxn;
    case MDB_PANIC: return StoreErrorKind::kPanic;
    case MDB_INVALID:
    case MDB_VERSION_MISMATCH:
    case MDB_INCOMPATIBLE: return StoreErrorKind::kInvalid;
    // A full disk (ENOSPC) is not: the writer retries it until space is freed.
    case EIO: return StoreErrorKind::kIo;
    default: return std::nullopt;
  }
}

}  // namespace

std::string_view StoreErrorKindName(StoreErrorKind kind) {
  switch (kind) {
    case StoreErrorKind::kCorrupted: return "corrupted";
    case StoreErrorKind::kPageNotFound: return "page_not_found";
    case StoreErrorKind::kBadTxn: return "bad_txn";
    case StoreErrorKind::kPanic: return "panic";
    case StoreErrorKind::kInvalid: return "invalid";
    case StoreErrorKind::kIo: return "io";
  }
  return "io";
}

std::array<uint64_t, kStoreErrorKinds> StoreErrorCounts() {
  std::array<uint64_t, kStoreErrorKinds> counts{};
  for (size_t i = 0; i < kStoreErrorKinds; ++i) counts[i] = store_errors[i].load();
  return counts;
}

absl::Status LmdbStatus(int rc, std::string_view what) {
  if (rc == MDB_SUCCESS) return absl::OkStatus();
  std::string msg = absl::StrCat(absl::string_view(what.data(), what.size()), ": ", mdb_strerror(rc));
  // LMDB fails a transaction for good on a damaged page, and some calls (opening a cursor on
  // a database first read in the transaction) meet the page without returning its error.
  if (rc == MDB_BAD_TXN) msg.append(" (an earlier read in it met a damaged page)");
  if (std::optional<StoreErrorKind> kind = KindOf(rc)) {
    store_errors[static_cast<size_t>(*kind)].fetch_add(1);
    absl::Status s = absl::DataLossError(msg);
    s.SetPayload(kStoreErrorPayload, absl::Cord(std::string(StoreErrorKindName(*kind))));
    return s;
  }
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

bool IsStoreError(const absl::Status& status) {
  return status.GetPayload(kStoreErrorPayload).has_value();
}

}  // namespace cdcview
