#include "daemon/store/lmdb_status.h"

#include <lmdb.h>

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
  absl::Status other = LmdbStatus(MDB_CORRUPTED, "reading");
  EXPECT_EQ(other.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(std::string(other.message()), "reading: MDB_CORRUPTED: Located page was wrong type");
}

}  // namespace
}  // namespace cdcview
