// Write-back (storage.flush_interval_ms > 0): buffered transactions publish pending layers,
// reads merge them over LMDB, and the flusher moves them into LMDB.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/store/store.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"
#include "tests/fakes/test_store.h"

namespace cdcview {
namespace {

constexpr uint64_t kMiB = 1 << 20;

std::vector<TableSpec> Tables() { return test::OneViewTable("V"); }

StorageConfig Storage(const std::string& path, uint32_t flush_interval_ms,
                      uint64_t map_size = 8 * kMiB, uint64_t max_map_size = 64 * kMiB) {
  StorageConfig config;
  // These tests keep arbitrary bytes where cdcview keeps its encodings, which the verifier
  // would refuse (store_verifier_test covers verification).
  config.verify_at_start = StorageConfig::Verify::kNever;
  config.path = path;
  config.map_size = map_size;
  config.max_map_size = max_map_size;
  config.flush_interval_ms = flush_interval_ms;
  return config;
}

std::unique_ptr<Store> OpenOrDie(const StorageConfig& config) {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(config, Tables());
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

using Model = std::map<std::string, std::string>;

// Everything a transaction sees in `dbi`, walking forwards, and walking backwards.
Model Forwards(const Txn& txn, MDB_dbi dbi) {
  Model out;
  auto cursor = txn.OpenCursor(dbi);
  for (bool ok = cursor->SeekFirst(); ok; ok = cursor->Next()) out.emplace(cursor->key(), cursor->value());
  return out;
}
std::vector<std::pair<std::string, std::string>> Backwards(const Txn& txn, MDB_dbi dbi) {
  std::vector<std::pair<std::string, std::string>> out;
  auto cursor = txn.OpenCursor(dbi);
  for (bool ok = cursor->SeekLast(); ok; ok = cursor->Prev()) out.emplace_back(cursor->key(), cursor->value());
  return out;
}
std::vector<std::pair<std::string, std::string>> Reversed(const Model& model) {
  return {model.rbegin(), model.rend()};
}

absl::Status Write(Store& store, MDB_dbi dbi, const Model& puts, const std::vector<std::string>& deletes,
                   bool buffered) {
  auto txn = buffered ? store.BeginBuffered() : store.BeginWrite();
  if (!txn.ok()) return txn.status();
  for (const auto& [key, value] : puts) {
    if (absl::Status s = (*txn)->Put(dbi, key, value); !s.ok()) return s;
  }
  for (const std::string& key : deletes) {
    if (absl::Status s = (*txn)->Delete(dbi, key); !s.ok()) return s;
  }
  return (*txn)->Commit();
}

TEST(WriteBackTest, APublishedBatchIsReadAtOnceAndReachesLmdbWhenFlushed) {
  test::TempDir dir;
  const StorageConfig config = Storage(dir.Sub("s"), 60000);  // no timed flush in this test
  auto store = OpenOrDie(config);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->write_back());
  const MDB_dbi v = store->view("V");
  ASSERT_TRUE(Write(*store, v, {{"a", "1"}, {"b", "2"}, {"c", "3"}}, {}, false).ok());

  auto before = store->BeginRead();
  ASSERT_TRUE(before.ok());
  ASSERT_TRUE(Write(*store, v, {{"b", "20"}, {"d", "4"}}, {"a", "zz"}, true).ok());
  EXPECT_EQ(store->pending_layers(), 1u);
  EXPECT_GT(store->pending_bytes(), 0u);

  auto after = store->BeginRead();
  ASSERT_TRUE(after.ok());
  const Model expected{{"b", "20"}, {"c", "3"}, {"d", "4"}};
  EXPECT_EQ(Forwards(**after, v), expected);
  EXPECT_EQ(Backwards(**after, v), Reversed(expected));
  auto a = (*after)->Get(v, "a");
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->has_value());
  auto b = (*after)->Get(v, "b");
  ASSERT_TRUE(b.ok() && b->has_value());
  EXPECT_EQ(**b, "20");
  // A snapshot begun before the publish does not see it.
  EXPECT_EQ(Forwards(**before, v), (Model{{"a", "1"}, {"b", "2"}, {"c", "3"}}));

  ASSERT_TRUE(store->Flush().ok());
  EXPECT_EQ(store->pending_layers(), 0u);
  EXPECT_EQ(store->pending_bytes(), 0u);
  // The snapshot begun with the layer keeps seeing exactly the same after the flush.
  EXPECT_EQ(Forwards(**after, v), expected);
  before->reset();
  after->reset();
  auto flushed = store->BeginRead();
  ASSERT_TRUE(flushed.ok());
  EXPECT_EQ(Forwards(**flushed, v), expected);
  auto sequence = (*flushed)->Get(store->meta(), "flushed_layer");
  ASSERT_TRUE(sequence.ok() && sequence->has_value());
  EXPECT_EQ(**sequence, "1");
  flushed->reset();

  // A store opened without write-back reads what was flushed, and a later write-back run
  // numbers its layers after the flushed one.
  store.reset();
  auto plain = OpenOrDie(Storage(config.path, 0));
  ASSERT_NE(plain, nullptr);
  auto txn = plain->BeginRead();
  ASSERT_TRUE(txn.ok());
  EXPECT_EQ(Forwards(**txn, v), expected);
  txn->reset();
  plain.reset();
  store = OpenOrDie(config);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(Write(*store, v, {{"e", "5"}}, {}, true).ok());
  auto next = store->BeginRead();
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(Forwards(**next, v), (Model{{"b", "20"}, {"c", "3"}, {"d", "4"}, {"e", "5"}}));
}

TEST(WriteBackTest, TheFlusherWritesLayersOnceTheOldestIsAnIntervalOld) {
  test::TempDir dir;
  auto store = OpenOrDie(Storage(dir.Sub("s"), 20));
  ASSERT_NE(store, nullptr);
  const MDB_dbi v = store->view("V");
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(Write(*store, v, {{absl::StrCat("k", i), "x"}}, {}, true).ok());
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (store->pending_layers() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(store->pending_layers(), 0u);
  auto txn = store->BeginRead();
  ASSERT_TRUE(txn.ok());
  EXPECT_EQ(Forwards(**txn, v).size(), 5u);
  auto sequence = (*txn)->Get(store->meta(), "flushed_layer");
  ASSERT_TRUE(sequence.ok() && sequence->has_value());
  EXPECT_EQ(**sequence, "5");
}

TEST(WriteBackTest, ADirectWriteBeginsWithThePendingLayersAndItsCommitFlushesThem) {
  test::TempDir dir;
  auto store = OpenOrDie(Storage(dir.Sub("s"), 60000));
  ASSERT_NE(store, nullptr);
  const MDB_dbi v = store->view("V");
  ASSERT_TRUE(Write(*store, v, {{"a", "1"}, {"b", "2"}}, {}, true).ok());
  ASSERT_TRUE(Write(*store, v, {{"c", "3"}}, {"a"}, true).ok());
  ASSERT_EQ(store->pending_layers(), 2u);
  {
    // Aborted: the layers stay pending, and readable.
    auto txn = store->BeginWrite();
    ASSERT_TRUE(txn.ok());
    auto c = (*txn)->Get(v, "c");
    ASSERT_TRUE(c.ok() && c->has_value());
    EXPECT_EQ(**c, "3");
    ASSERT_TRUE((*txn)->Put(v, "b", "aborted").ok());
  }
  EXPECT_EQ(store->pending_layers(), 2u);
  {
    auto txn = store->BeginWrite();
    ASSERT_TRUE(txn.ok());
    ASSERT_TRUE((*txn)->Put(v, "b", "20").ok());  // lands after the layers' "2"
    ASSERT_TRUE((*txn)->Commit().ok());
  }
  EXPECT_EQ(store->pending_layers(), 0u);
  EXPECT_EQ(store->pending_bytes(), 0u);
  auto txn = store->BeginRead();
  ASSERT_TRUE(txn.ok());
  EXPECT_EQ(Forwards(**txn, v), (Model{{"b", "20"}, {"c", "3"}}));
  auto sequence = (*txn)->Get(store->meta(), "flushed_layer");
  ASSERT_TRUE(sequence.ok() && sequence->has_value());
  EXPECT_EQ(**sequence, "2");
}

TEST(WriteBackTest, AFlushWaitsForTheDirectWriteThatHoldsTheFlushLock) {
  test::TempDir dir;
  auto store = OpenOrDie(Storage(dir.Sub("s"), 60000));
  ASSERT_NE(store, nullptr);
  const MDB_dbi v = store->view("V");
  ASSERT_TRUE(Write(*store, v, {{"a", "1"}}, {}, true).ok());
  auto direct = store->BeginWrite();
  ASSERT_TRUE(direct.ok());
  ASSERT_TRUE(Write(*store, v, {{"b", "2"}}, {}, true).ok());  // published after it began

  std::atomic<bool> flushed{false};
  absl::Status status;
  std::thread flusher([&] {
    status = store->Flush();
    flushed = true;
  });
  // One LMDB writer of the layers at a time (a slow thread start can only hide a wrong early
  // return, never fail this).
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(flushed);
  EXPECT_EQ(store->pending_layers(), 2u);
  ASSERT_TRUE((*direct)->Commit().ok());  // drops the layer it absorbed, "a"
  flusher.join();
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(store->pending_layers(), 0u);
  EXPECT_EQ(store->pending_bytes(), 0u);
  auto txn = store->BeginRead();
  ASSERT_TRUE(txn.ok());
  EXPECT_EQ(Forwards(**txn, v), (Model{{"a", "1"}, {"b", "2"}}));
  auto sequence = (*txn)->Get(store->meta(), "flushed_layer");
  ASSERT_TRUE(sequence.ok() && sequence->has_value());
  EXPECT_EQ(**sequence, "2");
}

TEST(WriteBackTest, AProcessThatDiesBeforeTheFlushLeavesLmdbAsItWas) {
  test::TempDir dir;
  const StorageConfig config = Storage(dir.Sub("s"), 60000);
  {
    auto store = OpenOrDie(config);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(Write(*store, store->view("V"), {{"kept", "1"}}, {}, false).ok());
  }
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // publishes a layer and dies without flushing it
    auto store = Store::Open(config, Tables());
    if (!store.ok()) _exit(2);
    auto txn = (*store)->BeginBuffered();
    if (!txn.ok() || !(*txn)->Put((*store)->view("V"), "lost", "2").ok() ||
        !(*txn)->Delete((*store)->view("V"), "kept").ok() || !(*txn)->Commit().ok()) {
      _exit(3);
    }
    auto read = (*store)->BeginRead();
    if (!read.ok() || Forwards(**read, (*store)->view("V")) != Model{{"lost", "2"}}) _exit(4);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  auto store = OpenOrDie(config);
  ASSERT_NE(store, nullptr);
  auto txn = store->BeginRead();
  ASSERT_TRUE(txn.ok());
  EXPECT_EQ(Forwards(**txn, store->view("V")), (Model{{"kept", "1"}}));
}

TEST(WriteBackTest, ClearHidesOlderLayersAndLmdbUntilWrittenAgain) {
  test::TempDir dir;
  auto store = OpenOrDie(Storage(dir.Sub("s"), 60000));
  ASSERT_NE(store, nullptr);
  const MDB_dbi v = store->view("V");
  ASSERT_TRUE(Write(*store, v, {{"a", "1"}}, {}, false).ok());
  ASSERT_TRUE(Write(*store, v, {{"b", "2"}}, {}, true).ok());
  {
    auto txn = store->BeginBuffered();
    ASSERT_TRUE(txn.ok());
    ASSERT_TRUE((*txn)->Put(v, "x", "gone too").ok());
    ASSERT_TRUE((*txn)->Clear(v).ok());
    ASSERT_TRUE((*txn)->Put(v, "c", "3").ok());
    auto a = (*txn)->Get(v, "a");
    ASSERT_TRUE(a.ok());
    EXPECT_FALSE(a->has_value());
    ASSERT_TRUE((*txn)->Commit().ok());
  }
  ASSERT_TRUE(Write(*store, v, {{"d", "4"}}, {}, true).ok());
  auto txn = store->BeginRead();
  ASSERT_TRUE(txn.ok());
  EXPECT_EQ(Forwards(**txn, v), (Model{{"c", "3"}, {"d", "4"}}));
  EXPECT_EQ(Backwards(**txn, v), Reversed(Model{{"c", "3"}, {"d", "4"}}));
  txn->reset();
  ASSERT_TRUE(store->Flush().ok());
  auto flushed = store->BeginRead();
  ASSERT_TRUE(flushed.ok());
  EXPECT_EQ(Forwards(**flushed, v), (Model{{"c", "3"}, {"d", "4"}}));
}

// Remove's answer: "removed", "absent", or the error.
std::string Removed(WriteTxn& txn, MDB_dbi dbi, std::string_view key) {
  absl::StatusOr<bool> removed = txn.Remove(dbi, key);
  if (!removed.ok()) return removed.status().ToString();
  return *removed ? "removed" : "absent";
}

TEST(WriteBackTest, RemoveAsksMemoryAndTakesAKeyItLacksToBeInLmdb) {
  test::TempDir dir;
  auto store = OpenOrDie(Storage(dir.Sub("s"), 60000));
  ASSERT_NE(store, nullptr);
  const MDB_dbi v = store->view("V");
  ASSERT_TRUE(
      Write(*store, v, {{"a", "in lmdb"}, {"b", "in lmdb"}, {"c", "in lmdb"}}, {}, false).ok());
  ASSERT_TRUE(Write(*store, v, {{"b", "in a layer"}}, {"c"}, true).ok());
  auto txn = store->BeginBuffered();
  ASSERT_TRUE(txn.ok());
  ASSERT_TRUE((*txn)->Put(v, "d", "own").ok());
  // In LMDB only, in a pending layer, in the transaction's own writes: removed.
  EXPECT_EQ(Removed(**txn, v, "a"), "removed");
  EXPECT_EQ(Removed(**txn, v, "b"), "removed");
  EXPECT_EQ(Removed(**txn, v, "d"), "removed");
  // Deleted in a layer, or by this transaction: absent.
  EXPECT_EQ(Removed(**txn, v, "c"), "absent");
  EXPECT_EQ(Removed(**txn, v, "a"), "absent");
  // Nowhere at all: memory does not have it, so it is taken to be in LMDB (not searched).
  EXPECT_EQ(Removed(**txn, v, "z"), "removed");
  ASSERT_TRUE((*txn)->Commit().ok());
  ASSERT_TRUE(store->Flush().ok());
  auto flushed = store->BeginRead();
  ASSERT_TRUE(flushed.ok());
  EXPECT_EQ(Forwards(**flushed, v), Model{});
  flushed->reset();

  // A cleared database: absent, whatever LMDB holds.
  ASSERT_TRUE(Write(*store, v, {{"e", "in lmdb"}}, {}, false).ok());
  {
    auto clear = store->BeginBuffered();
    ASSERT_TRUE(clear.ok());
    ASSERT_TRUE((*clear)->Clear(v).ok());
    ASSERT_TRUE((*clear)->Commit().ok());
  }
  auto after_clear = store->BeginBuffered();
  ASSERT_TRUE(after_clear.ok());
  EXPECT_EQ(Removed(**after_clear, v, "e"), "absent");
  after_clear->reset();
  ASSERT_TRUE(store->Flush().ok());

  // A direct transaction searches LMDB.
  ASSERT_TRUE(Write(*store, v, {{"e", "in lmdb"}}, {}, false).ok());
  auto direct = store->BeginWrite();
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(Removed(**direct, v, "e"), "removed");
  EXPECT_EQ(Removed(**direct, v, "f"), "absent");
  ASSERT_TRUE((*direct)->Commit().ok());
  auto after = store->BeginRead();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(Forwards(**after, v), Model{});
}

TEST(WriteBackTest, AppendsFlushWhetherOrNotTheyArePastTheLastKey) {
  test::TempDir dir;
  auto store = OpenOrDie(Storage(dir.Sub("s"), 60000));
  ASSERT_NE(store, nullptr);
  const MDB_dbi v = store->view("V");
  ASSERT_TRUE(Write(*store, v, {{"m", "1"}}, {}, false).ok());
  {
    auto txn = store->BeginBuffered();
    ASSERT_TRUE(txn.ok());
    ASSERT_TRUE((*txn)->Append(v, "z", "past").ok());
    ASSERT_TRUE((*txn)->Append(v, "a", "before").ok());  // MDB_APPEND would refuse it
    ASSERT_TRUE((*txn)->Commit().ok());
  }
  ASSERT_TRUE(store->Flush().ok());
  auto txn = store->BeginRead();
  ASSERT_TRUE(txn.ok());
  EXPECT_EQ(Forwards(**txn, v), (Model{{"a", "before"}, {"m", "1"}, {"z", "past"}}));
}

TEST(WriteBackTest, BufferedWritesRefuseWhatLmdbWouldRefuseInItsWords) {
  test::TempDir dir;
  auto store = OpenOrDie(Storage(dir.Sub("s"), 60000));
  ASSERT_NE(store, nullptr);
  auto txn = store->BeginBuffered();
  ASSERT_TRUE(txn.ok());
  // meta has no long-key sibling (long_key.h): its keys are LMDB's.
  absl::Status s = (*txn)->Put(store->meta(), std::string(store->max_key_size() + 1, 'k'), "v");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), std::string("writing the store: ") + mdb_strerror(MDB_BAD_VALSIZE));
  EXPECT_EQ((*txn)->Put(store->view("V"), "", "v").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*txn)->Put(store->meta(), std::string(store->max_key_size(), 'k'), "v").ok());
}

TEST(WriteBackTest, AFlushThatCannotWriteKeepsTheLayersAndSaysWhy) {
  test::TempDir dir;
  // A map that cannot grow: the flush of 4 MiB of values fails, the layers stay readable.
  auto store = OpenOrDie(Storage(dir.Sub("s"), 60000, 2 * kMiB, 2 * kMiB));
  ASSERT_NE(store, nullptr);
  const MDB_dbi v = store->view("V");
  Model big;
  for (int i = 0; i < 64; ++i) big[absl::StrCat("k", 100 + i)] = std::string(64 * 1024, 'x');
  ASSERT_TRUE(Write(*store, v, big, {}, true).ok());
  absl::Status s = store->Flush();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  const std::string why = absl::StrCat("the LMDB map is full at storage.max_map_size (", 2 * kMiB,
                                       " bytes); raise storage.max_map_size or free disk space");
  EXPECT_EQ(s.message(), "cannot flush applied batches to LMDB: " + why);
  EXPECT_EQ(store->flush_error(), why);
  EXPECT_EQ(store->pending_layers(), 1u);
  auto txn = store->BeginRead();
  ASSERT_TRUE(txn.ok());
  EXPECT_EQ(Forwards(**txn, v).size(), 64u);
  // A direct write begins with the layers written into it, so it fails the same way.
  txn->reset();
  auto direct = store->BeginWrite();
  EXPECT_EQ(direct.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(direct.status().message(), why);
}

// The merged cursor and Get against a model: a base in LMDB, published layers of puts and
// deletes, and a buffered transaction's own writes on top, walked in random orders.
TEST(WriteBackTest, MergedReadsMatchAModelInEveryDirection) {
  for (uint32_t seed = 1; seed <= 48; ++seed) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    test::TempDir dir;
    auto store = OpenOrDie(Storage(dir.Sub("s"), 60000));
    ASSERT_NE(store, nullptr);
    const MDB_dbi v = store->view("V");
    std::mt19937 rng(seed);
    auto key = [&] { return absl::StrCat("k", rng() % 60); };
    Model model;
    auto batch = [&](bool buffered, WriteTxn* txn) {
      // Now and then the batch clears the database first: older layers and LMDB are gone.
      const bool clear = rng() % 8 == 0;
      if (clear) model.clear();
      Model puts;
      std::vector<std::string> deletes;
      const int n = 1 + static_cast<int>(rng() % 20);
      for (int i = 0; i < n; ++i) {
        std::string k = key();
        if (rng() % 3 == 0) {
          deletes.push_back(k);
          puts.erase(k);
        } else {
          puts[k] = absl::StrCat("v", rng() % 1000);
        }
      }
      for (const std::string& k : deletes) model.erase(k);
      for (const auto& [k, value] : puts) model[k] = value;
      if (txn != nullptr) {
        if (clear) {
          ASSERT_TRUE(txn->Clear(v).ok());
        }
        for (const std::string& k : deletes) ASSERT_TRUE(txn->Delete(v, k).ok());
        for (const auto& [k, value] : puts) ASSERT_TRUE(txn->Put(v, k, value).ok());
      } else {
        // Deletes first in the model, so in the transaction too: a key both deleted and put
        // ends as put.
        auto t = buffered ? store->BeginBuffered() : store->BeginWrite();
        ASSERT_TRUE(t.ok());
        if (clear) {
          ASSERT_TRUE((*t)->Clear(v).ok());
        }
        for (const std::string& k : deletes) ASSERT_TRUE((*t)->Delete(v, k).ok());
        for (const auto& [k, value] : puts) ASSERT_TRUE((*t)->Put(v, k, value).ok());
        ASSERT_TRUE((*t)->Commit().ok());
      }
    };
    batch(false, nullptr);
    batch(false, nullptr);
    const int layers = 1 + static_cast<int>(seed % 6);
    for (int i = 0; i < layers; ++i) batch(true, nullptr);
    auto own = store->BeginBuffered();
    ASSERT_TRUE(own.ok());
    if (seed % 2 == 0) batch(true, own->get());

    {
      const Txn* txn = own->get();
      EXPECT_EQ(Forwards(*txn, v), model);
      EXPECT_EQ(Backwards(*txn, v), Reversed(model));
      for (int i = 0; i < 60; ++i) {
        const std::string k = absl::StrCat("k", i);
        auto got = txn->Get(v, k);
        ASSERT_TRUE(got.ok());
        auto it = model.find(k);
        EXPECT_EQ(got->has_value(), it != model.end()) << k;
        if (got->has_value() && it != model.end()) {
          EXPECT_EQ(**got, it->second) << k;
        }
      }
      // A random walk: seeks, steps both ways, turning often.
      auto cursor = txn->OpenCursor(v);
      Model::const_iterator at = model.end();
      bool valid = false;
      for (int step = 0; step < 400; ++step) {
        const uint32_t op = rng() % 5;
        if (op == 0) {
          const std::string k = absl::StrCat("k", rng() % 70);
          valid = cursor->Seek(k);
          at = model.lower_bound(k);
        } else if (op == 1) {
          valid = cursor->SeekFirst();
          at = model.begin();
        } else if (op == 2) {
          valid = cursor->SeekLast();
          at = model.empty() ? model.end() : std::prev(model.end());
        } else if (!valid) {
          continue;  // stepping off an end is not repositioning
        } else if (op == 3) {
          valid = cursor->Next();
          ++at;
        } else {
          valid = cursor->Prev();
          at = at == model.begin() ? model.end() : std::prev(at);
        }
        ASSERT_EQ(valid, at != model.end()) << "step " << step << " op " << op;
        if (valid) {
          ASSERT_EQ(cursor->key(), at->first) << "step " << step << " op " << op;
          ASSERT_EQ(cursor->value(), at->second) << "step " << step << " op " << op;
        }
      }
    }
    ASSERT_TRUE((*own)->Commit().ok());
    ASSERT_TRUE(store->Flush().ok());
    auto flushed = store->BeginRead();
    ASSERT_TRUE(flushed.ok());
    EXPECT_EQ(Forwards(**flushed, v), model);
  }
}

}  // namespace
}  // namespace cdcview
