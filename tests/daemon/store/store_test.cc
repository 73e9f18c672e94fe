#include "daemon/store/store.h"

#include <lmdb.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "daemon/store/meta_keys.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"

namespace cdcview {
namespace {

using test::TempDir;

constexpr uint64_t kMiB = 1 << 20;

std::string Text(const absl::Status& status) { return std::string(status.message()); }

// Tables with the given views; the store only looks at the names.
std::vector<TableSpec> Tables(const std::vector<std::string>& views) {
  TableSpec table;
  table.name = "App";
  table.key.partition = "PK";
  table.key.sort = "SK";
  for (const std::string& name : views) {
    ViewSpec view;
    view.name = name;
    view.table = "App";
    table.views.push_back(view);
  }
  return {table};
}

StorageConfig Storage(const std::string& path, uint64_t map_size = 8 * kMiB,
                      uint64_t max_map_size = 64 * kMiB) {
  StorageConfig config;
  // These tests keep arbitrary bytes where cdcview keeps its encodings, which the verifier
  // would refuse (store_verifier_test covers verification).
  config.verify_at_start = StorageConfig::Verify::kNever;
  config.path = path;
  config.map_size = map_size;
  config.max_map_size = max_map_size;
  return config;
}

// Disk blocks the file holds (st_blocks counts 512-byte units).
uint64_t AllocatedBytes(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

std::unique_ptr<Store> OpenOrDie(const StorageConfig& config, const std::vector<TableSpec>& tables) {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(config, tables);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

absl::Status PutAndCommit(Store& store, MDB_dbi dbi,
                          const std::vector<std::pair<std::string, std::string>>& entries) {
  auto txn = store.BeginWrite();
  if (!txn.ok()) return txn.status();
  for (const auto& [key, value] : entries) {
    if (absl::Status s = (*txn)->Put(dbi, key, value); !s.ok()) return s;
  }
  return (*txn)->Commit();
}

// The value under `key` as a read transaction sees it; "<absent>" if there is none.
std::string ValueOf(const Txn& txn, MDB_dbi dbi, std::string_view key) {
  auto value = txn.Get(dbi, key);
  if (!value.ok()) return "<error: " + value.status().ToString() + ">";
  return *value ? std::string(**value) : "<absent>";
}

std::string ReadValue(const Store& store, MDB_dbi dbi, std::string_view key) {
  auto txn = store.BeginRead();
  if (!txn.ok()) return "<error: " + txn.status().ToString() + ">";
  return ValueOf(**txn, dbi, key);
}

// "k=v" for every entry, walking forward from `from` ("" = first).
std::vector<std::string> ForwardFrom(const Txn& txn, MDB_dbi dbi, std::string_view from) {
  std::vector<std::string> out;
  auto cursor = txn.OpenCursor(dbi);
  for (bool ok = cursor->Seek(from); ok; ok = cursor->Next()) {
    out.push_back(std::string(cursor->key()) + "=" + std::string(cursor->value()));
  }
  return out;
}

// ---- Open, reopen, put/get/delete

TEST(StoreTest, OpenCreatesTheDirectoryAndDataSurvivesAReopen) {
  TempDir dir;
  const StorageConfig config = Storage(dir.Sub("nested/data"));
  {
    std::unique_ptr<Store> store = OpenOrDie(config, Tables({"GSI1"}));
    ASSERT_NE(store, nullptr);
    EXPECT_TRUE(std::filesystem::is_directory(config.path));
    EXPECT_TRUE(store->has_view("GSI1"));
    EXPECT_FALSE(store->has_view("Other"));
    EXPECT_EQ(store->max_key_size(), 511u);
    EXPECT_EQ(store->map_size(), 8 * kMiB);
    ASSERT_TRUE(PutAndCommit(*store, store->items("App"), {{"k1", "v1"}}).ok());
    ASSERT_TRUE(PutAndCommit(*store, store->view("GSI1"), {{"e1", "x"}}).ok());
    EXPECT_TRUE(store->dropped_views().empty());
  }
  std::unique_ptr<Store> store = OpenOrDie(config, Tables({"GSI1"}));
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(ReadValue(*store, store->items("App"), "k1"), "v1");
  EXPECT_EQ(ReadValue(*store, store->view("GSI1"), "e1"), "x");
  EXPECT_EQ(ReadValue(*store, store->meta(), "schema"), "2");
  EXPECT_TRUE(store->dropped_views().empty());
}

// The write map sizes data.mdb to the map (sparse); a store written with it reopens without it
// and the other way round, since the flag only says how this process writes pages.
TEST(StoreTest, WriteMapSizesTheFileToTheMapAndEitherModeReadsTheOther) {
  TempDir dir;
  StorageConfig config = Storage(dir.path(), 8 * kMiB);
  ASSERT_TRUE(config.write_map);  // the default
  EXPECT_EQ(StoreEnvFlags(config), unsigned{MDB_NOTLS | MDB_NOMETASYNC | MDB_WRITEMAP});
  {
    std::unique_ptr<Store> store = OpenOrDie(config, Tables({"GSI1"}));
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(PutAndCommit(*store, store->items("App"), {{"k1", "written with the map"}}).ok());
    EXPECT_EQ(std::filesystem::file_size(dir.path() + "/data.mdb"), 8 * kMiB);
    EXPECT_EQ(AllocatedBytes(dir.path() + "/data.mdb"), 8 * kMiB);  // reserved, not sparse
  }
  config.write_map = false;
  EXPECT_EQ(StoreEnvFlags(config), unsigned{MDB_NOTLS | MDB_NOMETASYNC});
  {
    std::unique_ptr<Store> store = OpenOrDie(config, Tables({"GSI1"}));
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(ReadValue(*store, store->items("App"), "k1"), "written with the map");
    ASSERT_TRUE(PutAndCommit(*store, store->items("App"), {{"k2", "written with pwrite"}}).ok());
  }
  config.write_map = true;
  std::unique_ptr<Store> store = OpenOrDie(config, Tables({"GSI1"}));
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(ReadValue(*store, store->items("App"), "k1"), "written with the map");
  EXPECT_EQ(ReadValue(*store, store->items("App"), "k2"), "written with pwrite");
}

TEST(StoreTest, OpenRefusesAPathThatIsAFile) {
  TempDir dir;
  const std::string file = dir.Sub("file");
  std::ofstream(file) << "not a directory";
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(Storage(file), Tables({}));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Text(store.status()), "cannot create storage directory \"" + file +
                                      "\": Not a directory; check storage.path and its permissions");
}

std::string HeldBy(pid_t pid, const std::string& path) {
  return "another cdcviewd (pid " + std::to_string(pid) + ") holds \"" + path +
         "\"; stop it or give this one another storage.path";
}

// A refused Open touches nothing: had it reached LMDB, it would have dropped GSI1, which its
// tables do not configure.
TEST(StoreTest, ASecondStoreOnTheSamePathIsRefusedUntilTheFirstCloses) {
  TempDir dir;
  const StorageConfig config = Storage(dir.path());
  std::unique_ptr<Store> first = OpenOrDie(config, Tables({"GSI1"}));
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(PutAndCommit(*first, first->view("GSI1"), {{"e1", "x"}}).ok());

  absl::StatusOr<std::unique_ptr<Store>> second = Store::Open(config, Tables({}));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Text(second.status()), HeldBy(getpid(), config.path));
  EXPECT_EQ(ReadValue(*first, first->view("GSI1"), "e1"), "x");

  first.reset();
  std::unique_ptr<Store> reopened = OpenOrDie(config, Tables({"GSI1"}));
  ASSERT_NE(reopened, nullptr);
  EXPECT_TRUE(reopened->dropped_views().empty());
  EXPECT_EQ(ReadValue(*reopened, reopened->view("GSI1"), "e1"), "x");
}

// The lock is the kernel's: a holder killed with SIGKILL leaves nothing that refuses the next.
TEST(StoreTest, AStoreHeldByAnotherProcessIsRefusedNamingItUntilItIsKilled) {
  TempDir dir;
  const StorageConfig config = Storage(dir.path());
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // opens the store, commits, says so, and waits to be killed
    close(ready[0]);
    auto store = Store::Open(config, Tables({}));
    if (!store.ok() || !PutAndCommit(**store, (*store)->items("App"), {{"k1", "v1"}}).ok()) _exit(2);
    if (write(ready[1], "r", 1) != 1) _exit(3);
    for (;;) pause();
  }
  close(ready[1]);
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1) << "the child could not open the store";
  close(ready[0]);

  absl::StatusOr<std::unique_ptr<Store>> refused = Store::Open(config, Tables({}));
  EXPECT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Text(refused.status()), HeldBy(child, config.path));

  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  std::unique_ptr<Store> store = OpenOrDie(config, Tables({}));
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(ReadValue(*store, store->items("App"), "k1"), "v1");
}

TEST(StoreTest, PutGetDeleteAndAbort) {
  TempDir dir;
  std::unique_ptr<Store> store = OpenOrDie(Storage(dir.path()), Tables({}));
  ASSERT_NE(store, nullptr);
  const MDB_dbi items = store->items("App");
  ASSERT_TRUE(PutAndCommit(*store, items, {{"a", "1"}, {"b", "2"}}).ok());
  {
    auto txn = store->BeginWrite();
    ASSERT_TRUE(txn.ok());
    ASSERT_TRUE((*txn)->Put(items, "a", "one").ok());  // overwrite
    ASSERT_TRUE((*txn)->Delete(items, "b").ok());
    EXPECT_TRUE((*txn)->Delete(items, "never-there").ok());  // absent: not an error
    // A write transaction sees its own writes.
    EXPECT_EQ(ValueOf(**txn, items, "a"), "one");
    EXPECT_EQ(ValueOf(**txn, items, "b"), "<absent>");
    ASSERT_TRUE((*txn)->Commit().ok());
  }
  EXPECT_EQ(ReadValue(*store, items, "a"), "one");
  EXPECT_EQ(ReadValue(*store, items, "b"), "<absent>");
  {
    auto txn = store->BeginWrite();
    ASSERT_TRUE(txn.ok());
    ASSERT_TRUE((*txn)->Put(items, "c", "3").ok());
    (*txn)->Abort();
  }
  {
    auto txn = store->BeginWrite();
    ASSERT_TRUE(txn.ok());
    ASSERT_TRUE((*txn)->Put(items, "d", "4").ok());
  }  // destroyed uncommitted: aborted
  EXPECT_EQ(ReadValue(*store, items, "c"), "<absent>");
  EXPECT_EQ(ReadValue(*store, items, "d"), "<absent>");
  auto txn = store->BeginRead();
  ASSERT_TRUE(txn.ok());
  EXPECT_EQ((*txn)->Entries(items), 1u);
  EXPECT_EQ((*txn)->Bytes(items), 4096u);  // one leaf page
}

TEST(StoreTest, RemoveAppendAndWritesInAnyOrderThroughTheWriteCursors) {
  TempDir dir;
  std::unique_ptr<Store> store = OpenOrDie(Storage(dir.path()), Tables({"V1"}));
  ASSERT_NE(store, nullptr);
  const MDB_dbi items = store->items("App"), view = store->view("V1");
  ASSERT_TRUE(PutAndCommit(*store, items, {{"a", "1"}, {"b", "2"}, {"c", "3"}}).ok());
  {
    auto txn = store->BeginWrite();
    ASSERT_TRUE(txn.ok());
    WriteTxn& w = **txn;
    // Remove says whether the key was there.
    absl::StatusOr<bool> removed = w.Remove(items, "b");
    ASSERT_TRUE(removed.ok()) << removed.status();
    EXPECT_TRUE(*removed);
    removed = w.Remove(items, "b");
    ASSERT_TRUE(removed.ok()) << removed.status();
    EXPECT_FALSE(*removed);
    // Get then Put of the same key, with another database written in between.
    auto got = w.Get(items, "c");
    ASSERT_TRUE(got.ok() && got->has_value());
    EXPECT_EQ(**got, "3");
    ASSERT_TRUE(w.Put(view, "x", "in the view").ok());
    ASSERT_TRUE(w.Put(items, "c", "three, longer than before").ok());
    // Keys out of order, before and after the cursor's page.
    for (const char* key : {"z", "0", "m", "a"}) ASSERT_TRUE(w.Put(items, key, key).ok());
    // Append takes increasing keys only.
    ASSERT_TRUE(w.Append(view, "y", "1").ok());
    absl::Status out_of_order = w.Append(view, "b", "2");
    EXPECT_EQ(out_of_order.code(), absl::StatusCode::kInternal);
    EXPECT_EQ(Text(out_of_order), std::string("appending to the store: ") + mdb_strerror(MDB_KEYEXIST));
  }  // dropped uncommitted: aborted; the same writes again, committed
  {
    auto txn = store->BeginWrite();
    ASSERT_TRUE(txn.ok());
    ASSERT_TRUE((*txn)->Remove(items, "b").ok());
    auto got = (*txn)->Get(items, "c");
    ASSERT_TRUE(got.ok() && got->has_value());
    ASSERT_TRUE((*txn)->Put(items, "c", "three, longer than before").ok());
    ASSERT_TRUE((*txn)->Put(items, "z", "z").ok());
    ASSERT_TRUE((*txn)->Append(view, "y", "1").ok());
    ASSERT_TRUE((*txn)->Append(view, "yy", "2").ok());
    ASSERT_TRUE((*txn)->Commit().ok());
  }
  EXPECT_EQ(ReadValue(*store, items, "a"), "1");
  EXPECT_EQ(ReadValue(*store, items, "b"), "<absent>");
  EXPECT_EQ(ReadValue(*store, items, "c"), "three, longer than before");
  EXPECT_EQ(ReadValue(*store, items, "z"), "z");
  EXPECT_EQ(ReadValue(*store, view, "yy"), "2");
  // A new transaction has fresh cursors: writing again works.
  ASSERT_TRUE(PutAndCommit(*store, items, {{"d", "4"}}).ok());
  EXPECT_EQ(ReadValue(*store, items, "d"), "4");
}

TEST(StoreTest, KeyOverTheLimitIsInvalidArgumentWhereTheDatabaseHasNoLongKeys) {
  TempDir dir;
  std::unique_ptr<Store> store = OpenOrDie(Storage(dir.path()), Tables({}));
  ASSERT_NE(store, nullptr);
  auto txn = store->BeginWrite();
  ASSERT_TRUE(txn.ok());
  EXPECT_TRUE((*txn)->Put(store->meta(), std::string(511, 'k'), "v").ok());
  absl::Status s = (*txn)->Put(store->meta(), std::string(512, 'k'), "v");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Text(s), std::string("writing the store: ") + mdb_strerror(MDB_BAD_VALSIZE));
}

TEST(StoreTest, ClearEmptiesOneDatabaseOnly) {
  TempDir dir;
  std::unique_ptr<Store> store = OpenOrDie(Storage(dir.path()), Tables({"V1", "V2"}));
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(PutAndCommit(*store, store->view("V1"), {{"a", "1"}, {"b", "2"}}).ok());
  ASSERT_TRUE(PutAndCommit(*store, store->view("V2"), {{"c", "3"}}).ok());
  {
    auto txn = store->BeginWrite();
    ASSERT_TRUE(txn.ok());
    ASSERT_TRUE((*txn)->Clear(store->view("V1")).ok());
    ASSERT_TRUE((*txn)->Commit().ok());
  }
  auto txn = store->BeginRead();
  ASSERT_TRUE(txn.ok());
  EXPECT_EQ((*txn)->Entries(store->view("V1")), 0u);
  EXPECT_EQ((*txn)->Entries(store->view("V2")), 1u);
  // Still usable after the clear.
  txn->reset();
  ASSERT_TRUE(PutAndCommit(*store, store->view("V1"), {{"z", "9"}}).ok());
  EXPECT_EQ(ReadValue(*store, store->view("V1"), "z"), "9");
}

// ---- Cursors

class CursorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenOrDie(Storage(dir_.path()), Tables({}));
    ASSERT_NE(store_, nullptr);
    ASSERT_TRUE(PutAndCommit(*store_, store_->items("App"),
                             {{"b", "2"}, {"d", "4"}, {"f", "6"}, {std::string("d\0x", 3), "5"}})
                    .ok());
    auto txn = store_->BeginRead();
    ASSERT_TRUE(txn.ok());
    txn_ = *std::move(txn);
  }

  TempDir dir_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<ReadTxn> txn_;
};

TEST_F(CursorTest, SeekFindsTheFirstKeyAtOrAfter) {
  const MDB_dbi items = store_->items("App");
  const std::string d0x("d\0x", 3);
  EXPECT_EQ(ForwardFrom(*txn_, items, ""),
            (std::vector<std::string>{"b=2", "d=4", d0x + "=5", "f=6"}));
  EXPECT_EQ(ForwardFrom(*txn_, items, "a"),
            (std::vector<std::string>{"b=2", "d=4", d0x + "=5", "f=6"}));
  EXPECT_EQ(ForwardFrom(*txn_, items, "d"), (std::vector<std::string>{"d=4", d0x + "=5", "f=6"}));
  EXPECT_EQ(ForwardFrom(*txn_, items, std::string("d\0", 2)),
            (std::vector<std::string>{d0x + "=5", "f=6"}));
  EXPECT_EQ(ForwardFrom(*txn_, items, "e"), (std::vector<std::string>{"f=6"}));
  EXPECT_EQ(ForwardFrom(*txn_, items, "f"), (std::vector<std::string>{"f=6"}));
  EXPECT_EQ(ForwardFrom(*txn_, items, "g"), (std::vector<std::string>{}));
}

TEST_F(CursorTest, WalksBothWaysAndStopsAtTheEnds) {
  auto cursor = txn_->OpenCursor(store_->items("App"));
  EXPECT_FALSE(cursor->valid());
  ASSERT_TRUE(cursor->SeekLast());
  EXPECT_EQ(cursor->key(), "f");
  ASSERT_TRUE(cursor->Prev());
  EXPECT_EQ(cursor->key(), std::string_view("d\0x", 3));
  ASSERT_TRUE(cursor->Prev());
  EXPECT_EQ(cursor->key(), "d");
  EXPECT_EQ(cursor->value(), "4");
  ASSERT_TRUE(cursor->Prev());
  EXPECT_EQ(cursor->key(), "b");
  EXPECT_FALSE(cursor->Prev());
  EXPECT_FALSE(cursor->valid());
  ASSERT_TRUE(cursor->SeekFirst());
  EXPECT_EQ(cursor->key(), "b");
  EXPECT_FALSE(cursor->Seek("zz"));
  EXPECT_FALSE(cursor->valid());
  // After a failed seek, SeekLast still works (used for backward walks with no upper bound).
  ASSERT_TRUE(cursor->SeekLast());
  EXPECT_EQ(cursor->key(), "f");
  EXPECT_FALSE(cursor->Next());
}

TEST(StoreCursorTest, EmptyDatabaseHasNoEntries) {
  TempDir dir;
  std::unique_ptr<Store> store = OpenOrDie(Storage(dir.path()), Tables({"V"}));
  ASSERT_NE(store, nullptr);
  auto txn = store->BeginRead();
  ASSERT_TRUE(txn.ok());
  auto cursor = (*txn)->OpenCursor(store->view("V"));
  EXPECT_FALSE(cursor->SeekFirst());
  EXPECT_FALSE(cursor->SeekLast());
  EXPECT_FALSE(cursor->Seek(""));
  EXPECT_FALSE(cursor->Seek("a"));
  EXPECT_EQ((*txn)->Entries(store->view("V")), 0u);
  EXPECT_EQ((*txn)->Bytes(store->view("V")), 0u);
}

TEST(StoreTest, PositionsPersistUnderTheirKeys) {
  TempDir dir;
  {
    std::unique_ptr<Store> store = OpenOrDie(Storage(dir.path()), Tables({}));
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(PutAndCommit(*store, store->meta(),
                             {{PositionKey("s1", ""), "line 4"}, {PositionKey("s2", "p/1"), "7"}})
                    .ok());
  }
  std::unique_ptr<Store> store = OpenOrDie(Storage(dir.path()), Tables({}));
  ASSERT_NE(store, nullptr);
  auto txn = store->BeginRead();
  ASSERT_TRUE(txn.ok());
  EXPECT_EQ(ForwardFrom(**txn, store->meta(), kPositionPrefix),
            (std::vector<std::string>{"pos/s1/=line 4", "pos/s2/p/1=7", "schema=2"}));
}

// ---- Views leaving the config, schema versions

TEST(StoreTest, ViewsNoLongerConfiguredAreDroppedWithTheirMeta) {
  TempDir dir;
  const StorageConfig config = Storage(dir.path());
  {
    std::unique_ptr<Store> store = OpenOrDie(config, Tables({"Keep", "Gone", "Gone2"}));
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(PutAndCommit(*store, store->view("Keep"), {{"k", "1"}}).ok());
    ASSERT_TRUE(PutAndCommit(*store, store->view("Gone"), {{"g", "1"}}).ok());
    ASSERT_TRUE(PutAndCommit(*store, store->meta(),
                             {{ViewMetaKey("Gone", "fingerprint"), "f"},
                              {ViewMetaKey("Gone", "state"), "READY"},
                              {ViewMetaKey("Gone", "build_cursor"), "c"},
                              {ViewMetaKey("Keep", "fingerprint"), "fk"},
                              {ViewMetaKey("Keep", "state"), "READY"}})
                    .ok());
  }
  {
    std::unique_ptr<Store> store = OpenOrDie(config, Tables({"Keep"}));
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->dropped_views(), (std::vector<std::string>{"Gone", "Gone2"}));
    EXPECT_FALSE(store->has_view("Gone"));
    EXPECT_EQ(ReadValue(*store, store->view("Keep"), "k"), "1");
    auto txn = store->BeginRead();
    ASSERT_TRUE(txn.ok());
    EXPECT_EQ(ForwardFrom(**txn, store->meta(), ""),
              (std::vector<std::string>{"schema=2", "view/Keep/fingerprint=fk",
                                        "view/Keep/state=READY"}));
  }
  // Configured again later: it comes back empty (the applier rebuilds it).
  std::unique_ptr<Store> store = OpenOrDie(config, Tables({"Keep", "Gone"}));
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->dropped_views().empty());
  auto txn = store->BeginRead();
  ASSERT_TRUE(txn.ok());
  EXPECT_EQ((*txn)->Entries(store->view("Gone")), 0u);
  EXPECT_EQ((*txn)->Entries(store->view("Keep")), 1u);
}

TEST(StoreTest, SchemaVersionMismatchIsRefusedWithAnExplanation) {
  TempDir dir;
  const StorageConfig config = Storage(dir.path());
  {
    std::unique_ptr<Store> store = OpenOrDie(config, Tables({}));
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(PutAndCommit(*store, store->meta(), {{"schema", "3"}}).ok());
  }
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(config, Tables({}));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Text(store.status()),
            "store \"" + dir.path() +
                "\" has schema version 3, this cdcviewd reads 1 and 2; use a matching cdcviewd or "
                "start from an empty storage.path");
}

// Version 1 predates the items' partition ids (stored_item.h): such a store opens, keeps what
// it holds, and is version 2 from then on.
TEST(StoreTest, SchemaVersionOneIsUpgradedInPlace) {
  TempDir dir;
  const StorageConfig config = Storage(dir.path());
  {
    std::unique_ptr<Store> store = OpenOrDie(config, Tables({}));
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(PutAndCommit(*store, store->meta(), {{"schema", "1"}}).ok());
    ASSERT_TRUE(PutAndCommit(*store, store->items("App"), {{"k1", "v1"}}).ok());
  }
  std::unique_ptr<Store> store = OpenOrDie(config, Tables({}));
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(ReadValue(*store, store->meta(), "schema"), "2");
  EXPECT_EQ(ReadValue(*store, store->items("App"), "k1"), "v1");
}

// With the write map, LMDB sets the file's length to map_size at open: a map_size beyond the
// largest file allowed (here by RLIMIT_FSIZE, as a file system's own limit would) names the
// field to change, not storage.path.
TEST(StoreTest, MapSizeBeyondTheLargestFileNamesMapSize) {
  TempDir dir;
  struct rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  struct rlimit small = saved;
  small.rlim_cur = 4 * kMiB;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  void (*saved_handler)(int) = signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of the signal
  StorageConfig config = Storage(dir.path(), 8 * kMiB);
  config.write_map = true;
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(config, Tables({}));
  signal(SIGXFSZ, saved_handler);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &saved), 0);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Text(store.status()),
            "cannot open the LMDB store in \"" + dir.path() +
                "\": storage.map_size (8388608 bytes) is larger than its file system allows for "
                "one file; lower storage.map_size (the map grows up to storage.max_map_size as "
                "needed)");
}

// ---- Map growth

// Fills `dbi` with 1 KiB values, 16 per transaction, until the map is full; returns how many
// entries were committed.
int FillUntilFull(Store& store, MDB_dbi dbi, absl::Status* full) {
  static int next_key = 100000;
  const std::string value(1024, 'v');
  for (int committed = 0; committed < 1000000; committed += 16) {
    std::vector<std::pair<std::string, std::string>> chunk;
    for (int i = 0; i < 16; ++i) chunk.emplace_back("key" + std::to_string(next_key++), value);
    if (absl::Status s = PutAndCommit(store, dbi, chunk); !s.ok()) {
      *full = s;
      return committed;
    }
  }
  return -1;  // the map never filled: the assertions report it
}

TEST(StoreTest, GrowMapDoublesUpToTheMaximumThenIsExhausted) {
  TempDir dir;
  std::unique_ptr<Store> store = OpenOrDie(Storage(dir.path(), 1 * kMiB, 3 * kMiB), Tables({}));
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->map_size(), 1 * kMiB);

  absl::Status full;
  const int first = FillUntilFull(*store, store->items("App"), &full);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_EQ(Text(full), "writing the store: MDB_MAP_FULL: Environment mapsize limit reached");
  EXPECT_LE(store->map_used_bytes(), store->map_size());

  ASSERT_TRUE(store->GrowMap().ok());
  EXPECT_EQ(store->map_size(), 2 * kMiB);
  const int second = FillUntilFull(*store, store->items("App"), &full);
  EXPECT_GT(second, 0);  // room again after growing
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;

  ASSERT_TRUE(store->GrowMap().ok());
  EXPECT_EQ(store->map_size(), 3 * kMiB);  // capped at max_map_size, not 4 MiB
  absl::Status at_max = store->GrowMap();
  EXPECT_EQ(at_max.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Text(at_max),
            "the LMDB map is full at storage.max_map_size (3145728 bytes); raise "
            "storage.max_map_size or free disk space");
  EXPECT_EQ(store->map_size(), 3 * kMiB);

  // Everything committed before the growths is still there.
  auto txn = store->BeginRead();
  ASSERT_TRUE(txn.ok());
  EXPECT_EQ((*txn)->Entries(store->items("App")), static_cast<uint64_t>(first + second));
}

TEST(StoreTest, GrowMapAtTheMaximumFromTheStart) {
  TempDir dir;
  std::unique_ptr<Store> store = OpenOrDie(Storage(dir.path(), 1 * kMiB, 1 * kMiB), Tables({}));
  ASSERT_NE(store, nullptr);
  absl::Status s = store->GrowMap();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Text(s),
            "the LMDB map is full at storage.max_map_size (1048576 bytes); raise "
            "storage.max_map_size or free disk space");
}

// A growth reserves the larger file's disk first, in either write mode: where the file system
// refuses (here RLIMIT_FSIZE, as a full disk would with ENOSPC) the growth fails like a full
// map, the file and the map stay as they were, and a later growth succeeds once there is room.
TEST(StoreTest, GrowthTheFileSystemCannotHoldFailsUntilThereIsRoom) {
  for (bool write_map : {true, false}) {
    SCOPED_TRACE(write_map ? "write map" : "pwrite");
    TempDir dir;
    StorageConfig config = Storage(dir.path(), 1 * kMiB, 8 * kMiB);
    config.write_map = write_map;
    std::unique_ptr<Store> store = OpenOrDie(config, Tables({}));
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->write_map(), write_map);
    EXPECT_EQ(AllocatedBytes(dir.path() + "/data.mdb"), 1 * kMiB);
    absl::Status full;
    const int first = FillUntilFull(*store, store->items("App"), &full);
    ASSERT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;

    struct rlimit saved;
    ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
    struct rlimit small = saved;
    small.rlim_cur = 1536 * 1024;
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
    void (*saved_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    absl::Status grown = store->GrowMap();
    const bool disk_full = store->disk_full();
    signal(SIGXFSZ, saved_handler);
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &saved), 0);
    EXPECT_EQ(grown.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(Text(grown), "cannot grow the LMDB map to 2097152 bytes: cannot reserve 2097152 "
                           "bytes of disk for \"" + dir.path() + "/data.mdb\": File too large; "
                           "free disk space (or raise the file size limit) for storage.path, the "
                           "writer retries");
    EXPECT_TRUE(disk_full);
    EXPECT_EQ(store->map_size(), 1 * kMiB);
    EXPECT_EQ(std::filesystem::file_size(dir.path() + "/data.mdb"), 1 * kMiB);

    ASSERT_TRUE(store->GrowMap().ok());  // room again
    EXPECT_FALSE(store->disk_full());
    EXPECT_EQ(store->map_size(), 2 * kMiB);
    EXPECT_EQ(AllocatedBytes(dir.path() + "/data.mdb"), 2 * kMiB);
    const int second = FillUntilFull(*store, store->items("App"), &full);
    EXPECT_GT(second, 0);
    auto txn = store->BeginRead();
    ASSERT_TRUE(txn.ok());
    EXPECT_EQ((*txn)->Entries(store->items("App")), static_cast<uint64_t>(first + second));
  }
}

// ---- Readers and the writer

TEST(StoreTest, GrowMapWaitsUntilNoReadTransactionIsOpen) {
  TempDir dir;
  std::unique_ptr<Store> store = OpenOrDie(Storage(dir.path(), 8 * kMiB, 64 * kMiB), Tables({}));
  ASSERT_NE(store, nullptr);
  auto reader = store->BeginRead();
  ASSERT_TRUE(reader.ok());

  std::atomic<bool> grown{false};
  absl::Status status;
  std::thread grower([&] {
    status = store->GrowMap();
    grown = true;
  });
  // The map cannot move under the open snapshot: GrowMap waits for it (a slow thread start
  // can only hide a wrong early return, never fail this).
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(grown);
  reader->reset();
  grower.join();
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(store->map_size(), 16 * kMiB);
}

TEST(StoreTest, ReadTransactionKeepsItsSnapshotWhileAWriterCommits) {
  TempDir dir;
  std::unique_ptr<Store> store = OpenOrDie(Storage(dir.path()), Tables({}));
  ASSERT_NE(store, nullptr);
  const MDB_dbi items = store->items("App");
  ASSERT_TRUE(PutAndCommit(*store, items, {{"a", "old"}, {"b", "old"}}).ok());

  auto reader = store->BeginRead();
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ(ValueOf(**reader, items, "a"), "old");

  // The writer runs on its own thread while the read transaction stays open: it must not
  // block on the reader.
  absl::Status written;
  std::thread writer([&] {
    auto txn = store->BeginWrite();
    if (!txn.ok()) {
      written = txn.status();
      return;
    }
    for (absl::Status s : {(*txn)->Put(items, "a", "new"), (*txn)->Delete(items, "b"),
                           (*txn)->Put(items, "c", "new")}) {
      if (!s.ok()) {
        written = s;
        return;
      }
    }
    written = (*txn)->Commit();
  });
  writer.join();
  ASSERT_TRUE(written.ok()) << written;

  // The old reader still sees the snapshot it began with ...
  EXPECT_EQ(ValueOf(**reader, items, "a"), "old");
  EXPECT_EQ(ValueOf(**reader, items, "b"), "old");
  EXPECT_EQ(ValueOf(**reader, items, "c"), "<absent>");
  EXPECT_EQ(ForwardFrom(**reader, items, ""), (std::vector<std::string>{"a=old", "b=old"}));
  EXPECT_EQ((*reader)->Entries(items), 2u);
  // ... and a new one sees the commit.
  auto fresh = store->BeginRead();
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(ForwardFrom(**fresh, items, ""), (std::vector<std::string>{"a=new", "c=new"}));
}

}  // namespace
}  // namespace cdcview
