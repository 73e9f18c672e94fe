#include "daemon/store/lmdb_status.h"

#include <lmdb.h>

#include <array>
#include <cerrno>
#include <string>

#include "gtest/gtest.h"

namespace cdcview {
namespace {

TEST(LmdbStatusTest, TranslatesCodes) {
  EXPECT_TRUE(LmdbStatus(MDB_SUCCESS, "x").ok());
  absl::Status full = LmdbStatus(MDB_MAP_FULL, "writing the store");
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(std::string(full.message()),
            "writing the store: MDB_MAP_FULL: Environment mapsize limit reached");
  EXPECT_EQ(LmdbStatus(MDB_BAD_VALSIZE, "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LmdbStatus(MDB_NOTFOUND, "x").code(), absl::StatusCode::kNotFound);
  absl::Status other = LmdbStatus(MDB_KEYEXIST, "appending");
  EXPECT_EQ(other.code(), absl::StatusCode::kInternal);
  EXPECT_FALSE(IsStoreError(other));
}

TEST(LmdbStatusTest, AStoreErrorIsDataLossMarkedAndCountedByKind) {
  const std::array<uint64_t, kStoreErrorKinds> before = StoreErrorCounts();
  absl::Status corrupted = LmdbStatus(MDB_CORRUPTED, "reading");
  EXPECT_EQ(corrupted.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(std::string(corrupted.message()), "reading: MDB_CORRUPTED: Located page was wrong type");
  EXPECT_TRUE(IsStoreError(corrupted));
  EXPECT_TRUE(IsStoreError(LmdbStatus(MDB_PAGE_NOTFOUND, "reading")));
  EXPECT_TRUE(IsStoreError(LmdbStatus(MDB_BAD_TXN, "reading")));
  EXPECT_TRUE(IsStoreError(LmdbStatus(EIO, "reading")));
  // A full disk is retried until space is freed; a decoder's DATA_LOSS is no store error.
  EXPECT_FALSE(IsStoreError(LmdbStatus(ENOSPC, "writing")));
  EXPECT_FALSE(IsStoreError(absl::DataLossError("stored item has a bad flag byte")));
  const std::array<uint64_t, kStoreErrorKinds> after = StoreErrorCounts();
  auto counted = [&](StoreErrorKind kind) {
    return after[static_cast<size_t>(kind)] - before[static_cast<size_t>(kind)];
  };
  EXPECT_EQ(counted(StoreErrorKind::kCorrupted), 1u);
  EXPECT_EQ(counted(StoreErrorKind::kPageNotFound), 1u);
  EXPECT_EQ(counted(StoreErrorKind::kBadTxn), 1u);
  EXPECT_EQ(counted(StoreErrorKind::kIo), 1u);
  EXPECT_EQ(counted(StoreErrorKind::kPanic), 0u);
  EXPECT_EQ(StoreErrorKindName(StoreErrorKind::kPageNotFound), "page_not_found");
}

}  // namespace
}  // namespace cdcview
