#include "daemon/store/store_lock.h"

#include <unistd.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"

namespace cdcview {
namespace {

std::string Contents(const std::string& path) {
  std::ifstream in(path);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string HeldBySelf(const std::string& dir) {
  return absl::StrCat("another cdcviewd (pid ", getpid(), ") holds \"", dir,
                      "\"; stop it or give this one another storage.path");
}

TEST(StoreLockTest, TheHolderWritesItsPidAndASecondAcquireIsRefusedNamingIt) {
  test::TempDir dir;
  // A pid left by an earlier holder is replaced, not appended to.
  std::ofstream(dir.Sub("cdcviewd.lock")) << "99999999999\n";
  std::optional<StoreLock> held;
  {
    auto lock = StoreLock::Acquire(dir.path());
    ASSERT_TRUE(lock.ok()) << lock.status();
    held.emplace(*std::move(lock));
  }
  EXPECT_EQ(Contents(dir.Sub("cdcviewd.lock")), absl::StrCat(getpid(), "\n"));

  // flock locks belong to the open file: a second open of it conflicts in this process too.
  auto second = StoreLock::Acquire(dir.path());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(second.status().message(), HeldBySelf(dir.path()));
  // Closing the refused attempt's descriptor did not drop the holder's lock.
  auto third = StoreLock::Acquire(dir.path());
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().message(), HeldBySelf(dir.path()));

  // Moving the lock keeps it held; destroying it releases it.
  StoreLock moved = *std::move(held);
  held.reset();
  EXPECT_FALSE(StoreLock::Acquire(dir.path()).ok());
  { StoreLock gone = std::move(moved); }
  auto again = StoreLock::Acquire(dir.path());
  EXPECT_TRUE(again.ok()) << again.status();
}

TEST(StoreLockTest, ALockFileThatCannotBeOpenedIsAnErrorNamingIt) {
  test::TempDir dir;
  const std::string missing = dir.Sub("missing");
  auto lock = StoreLock::Acquire(missing);
  ASSERT_FALSE(lock.ok());
  EXPECT_EQ(lock.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(lock.status().message(),
            absl::StrCat("cannot open the lock file \"", missing,
                         "/cdcviewd.lock\": No such file or directory; check storage.path and its "
                         "permissions"));
}

}  // namespace
}  // namespace cdcview
