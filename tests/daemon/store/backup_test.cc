#include "daemon/store/backup.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/store/meta_keys.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"
#include "tests/fakes/test_store.h"

namespace cdcview {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

std::string Text(const absl::Status& status) { return std::string(status.message()); }

std::vector<TableSpec> Tables() { return test::OneViewTable("GSI1"); }

StorageConfig Storage(const std::string& path) {
  StorageConfig config;
  config.path = path;
  config.map_size = 8 << 20;
  // Arbitrary bytes stand where cdcview keeps its encodings, which the verifier would refuse
  // (store_verifier_test covers verification).
  config.verify_at_start = StorageConfig::Verify::kNever;
  return config;
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(ResolveBackupTargetTest, OnlyDirectoriesInsideTheBackupDir) {
  EXPECT_EQ(*ResolveBackupTarget("/b", "x"), fs::path("/b/x"));
  EXPECT_EQ(*ResolveBackupTarget("/b/", "x/y/"), fs::path("/b/x/y"));
  EXPECT_EQ(*ResolveBackupTarget("/b", "/b/x/../z"), fs::path("/b/z"));
  for (const char* outside : {"..", "../b2/x", "/b2", "/", ".", "x/../..", "/b/."}) {
    absl::StatusOr<fs::path> got = ResolveBackupTarget("/b", outside);
    ASSERT_FALSE(got.ok()) << outside;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Text(got.status()), std::string("the backup's directory \"") + outside +
                                      "\" is not inside storage.backup_dir (\"/b\")");
  }
  EXPECT_EQ(Text(ResolveBackupTarget("/b", "").status()), "give the backup's directory");
  EXPECT_EQ(Text(ResolveBackupTarget("/b", std::string(4097, 'x')).status()),
            "the backup's directory has 4097 bytes, at most 4096");
  absl::Status off = ResolveBackupTarget("", "x").status();
  EXPECT_EQ(off.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Text(off), "backups are off: set storage.backup_dir to the directory backups are "
                       "written under");
}

// The backup holds what the store committed, opens as a store, and its manifest says what
// positions and definitions it holds.
TEST(BackupStoreTest, CopiesTheStoreWithAManifestReadFromTheCopy) {
  TempDir dir;
  const std::string path = dir.Sub("store");
  {
    std::unique_ptr<Store> store = *Store::Open(Storage(path), Tables());
    auto txn = store->BeginWrite();
    ASSERT_TRUE(txn.ok());
    ASSERT_TRUE((*txn)->Put(store->items("App"), "k1", "v1").ok());
    ASSERT_TRUE((*txn)->Put(store->meta(), PositionKey("src", "p/0"), "120:7").ok());
    ASSERT_TRUE((*txn)->Put(store->meta(), ViewMetaKey("GSI1", "fingerprint"), "00ff").ok());
    ASSERT_TRUE((*txn)->Put(store->meta(), ViewMetaKey("GSI1", "state"), "READY").ok());
    ASSERT_TRUE((*txn)->Commit().ok());

    const fs::path target = fs::path(dir.path()) / "backups" / "b1";
    fs::create_directories(target.parent_path());
    absl::StatusOr<BackupResult> result =
        BackupStore(*store, target, absl::FromUnixSeconds(1764640800));
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->directory, target.string());
    EXPECT_EQ(result->data_bytes, fs::file_size(target / "data.mdb"));
    EXPECT_EQ(result->manifest,
              "{\n"
              "  \"format\": 1,\n"
              "  \"created\": \"2025-12-02T02:00:00.000Z\",\n"
              "  \"store\": \"" + path + "\",\n"
              "  \"data_bytes\": " + std::to_string(result->data_bytes) + ",\n"
              "  \"positions\": [\n"
              "    {\"source\": \"src\", \"partition\": \"p/0\", \"position\": \"120:7\"}\n"
              "  ],\n"
              "  \"views\": [\n"
              "    {\"name\": \"GSI1\", \"fingerprint\": \"00ff\", \"state\": \"READY\"}\n"
              "  ],\n"
              "  \"aggregates\": []\n"
              "}\n");
    EXPECT_EQ(ReadFile(target / "backup.json"), result->manifest);
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(target.parent_path())) {
      names.push_back(entry.path().filename().string());
    }
    EXPECT_EQ(names, std::vector<std::string>{"b1"});  // no partial directory left

    // A target that is not empty is refused and left alone.
    absl::Status again = BackupStore(*store, target, absl::Now()).status();
    EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(Text(again), "backup directory \"" + target.string() +
                               "\" is not empty; give a new or empty one");
    absl::Status no_parent = BackupStore(*store, fs::path(dir.path()) / "nope" / "b", absl::Now()).status();
    EXPECT_EQ(Text(no_parent), "cannot back up to \"" + dir.path() + "/nope/b\": \"" + dir.path() +
                                   "/nope\" is not a directory; create it first");
  }
  // Restore: the copy as a store of its own.
  const std::string restored = dir.Sub("restored");
  fs::create_directories(restored);
  fs::copy_file(fs::path(dir.path()) / "backups" / "b1" / "data.mdb", fs::path(restored) / "data.mdb");
  std::unique_ptr<Store> store = *Store::Open(Storage(restored), Tables());
  auto txn = store->BeginRead();
  ASSERT_TRUE(txn.ok());
  auto value = (*txn)->Get(store->items("App"), "k1");
  ASSERT_TRUE(value.ok() && *value);
  EXPECT_EQ(**value, "v1");
  std::vector<std::string> positions;
  ASSERT_TRUE(ForEachPosition(**txn, store->meta(), [&](std::string_view source, std::string_view partition,
                                            std::string_view position) {
    positions.push_back(std::string(source) + " " + std::string(partition) + " " +
                        std::string(position));
  }).ok());
  EXPECT_EQ(positions, std::vector<std::string>{"src p/0 120:7"});
}

// With write-back, what is applied but not flushed yet is flushed into the backup.
TEST(BackupStoreTest, WriteBackIsFlushedFirst) {
  TempDir dir;
  StorageConfig config = Storage(dir.Sub("store"));
  config.flush_interval_ms = 60000;
  std::unique_ptr<Store> store = *Store::Open(config, Tables());
  auto txn = store->BeginBuffered();
  ASSERT_TRUE(txn.ok());
  ASSERT_TRUE((*txn)->Put(store->meta(), PositionKey("src", ""), "9:2").ok());
  ASSERT_TRUE((*txn)->Commit().ok());
  ASSERT_EQ(store->pending_layers(), 1u);
  absl::StatusOr<BackupResult> result = BackupStore(*store, fs::path(dir.path()) / "b", absl::Now());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(store->pending_layers(), 0u);
  EXPECT_NE(result->manifest.find("{\"source\": \"src\", \"partition\": \"\", \"position\": \"9:2\"}"),
            std::string::npos)
      << result->manifest;
}

}  // namespace
}  // namespace cdcview
