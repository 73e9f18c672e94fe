// LmdbStatus: the one translation of LMDB return codes into absl::Status for the whole daemon,
// and the count of store errors by kind (cdcview_store_errors_total).
//
// A store error is a code that says the store cannot be read or written as it is (a damaged
// page, a transaction LMDB gave up on after one, an I/O error), not a routine outcome (a key
// not found, a full map, a key too long). It is DATA_LOSS and carries a payload that
// IsStoreError recognises, so the writer can stop on it rather than retry forever.
//
// Thread-safety: pure functions, and counters that are atomic. Ownership: the Status owns its
// message.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "absl/status/status.h"

namespace cdcview {

// Translates an LMDB return code; `what` says what was being done. MDB_MAP_FULL becomes
// RESOURCE_EXHAUSTED (the caller grows the map and retries), MDB_BAD_VALSIZE INVALID_ARGUMENT,
// MDB_NOTFOUND NOT_FOUND; a store error (see StoreErrorKind) DATA_LOSS, counted; anything
// else INTERNAL.
absl::Status LmdbStatus(int rc, std::string_view what);

// The kinds of store error, the label of cdcview_store_errors_total.
enum class StoreErrorKind {
  kCorrupted,     // MDB_CORRUPTED: a page of the wrong type
  kPageNotFound,  // MDB_PAGE_NOTFOUND: a page number past the end of the data
  kBadTxn,        // MDB_BAD_TXN: the transaction failed before (on damage) and must end;
                  // LMDB does not always return that first error, so this may be the only one
  kPanic,         // MDB_PANIC: the environment failed fatally
  kInvalid,       // MDB_INVALID, MDB_VERSION_MISMATCH, MDB_INCOMPATIBLE: not a store we read
  kIo,            // EIO: the file system could not read or write the file
};
inline constexpr size_t kStoreErrorKinds = 6;
std::string_view StoreErrorKindName(StoreErrorKind kind);
// Store errors counted since the process started, by kind (indexed by StoreErrorKind).
std::array<uint64_t, kStoreErrorKinds> StoreErrorCounts();

// Whether `status` is a store error from LmdbStatus (passed on as it is).
bool IsStoreError(const absl::Status& status);

}  // namespace cdcview
