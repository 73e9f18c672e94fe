// Keys longer than LMDB's limit in the items and view databases (long_key.h): Get, the writes
// and cursors take them under their logical key, in exact byte order among short ones, with
// and without write-back.
#include "daemon/store/long_key.h"

#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/store/store.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"

namespace cdcview {
namespace {

using Model = std::map<std::string, std::string>;

std::vector<TableSpec> Tables(bool with_view = true) {
  TableSpec table;
  table.name = "App";
  table.key.partition = "PK";
  if (with_view) {
    ViewSpec view;
    view.name = "V";
    view.table = "App";
    table.views.push_back(view);
  }
  return {table};
}

StorageConfig Storage(const std::string& path, uint32_t flush_interval_ms) {
  StorageConfig config;
  config.path = path;
  config.map_size = 16 << 20;
  config.max_map_size = 256 << 20;
  config.flush_interval_ms = flush_interval_ms;
  // Arbitrary bytes stand where cdcview keeps its encodings, which the verifier would refuse
  // (store_verifier_test covers verification).
  config.verify_at_start = StorageConfig::Verify::kNever;
  return config;
}

std::unique_ptr<Store> OpenOrDie(const StorageConfig& config, bool with_view = true) {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(config, Tables(with_view));
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

std::string Get(const Txn& txn, MDB_dbi dbi, std::string_view key) {
  auto value = txn.Get(dbi, key);
  if (!value.ok()) return absl::StrCat("<", value.status().ToString(), ">");
  return *value ? std::string(**value) : "<absent>";
}

Model Forwards(const Txn& txn, MDB_dbi dbi) {
  Model out;
  auto cursor = txn.OpenCursor(dbi);
  std::string last;
  for (bool ok = cursor->SeekFirst(); ok; ok = cursor->Next()) {
    EXPECT_TRUE(out.empty() || last < cursor->key()) << "out of order after " << last.size() << " bytes";
    last.assign(cursor->key());
    out.emplace(cursor->key(), cursor->value());
  }
  return out;
}

std::vector<std::string> BackwardKeys(const Txn& txn, MDB_dbi dbi) {
  std::vector<std::string> out;
  auto cursor = txn.OpenCursor(dbi);
  for (bool ok = cursor->SeekLast(); ok; ok = cursor->Prev()) out.emplace_back(cursor->key());
  return out;
}

std::vector<std::string> Keys(const Model& model, bool reversed) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : model) keys.push_back(key);
  if (reversed) std::reverse(keys.begin(), keys.end());
  return keys;
}

// Short names for failure messages: a key's length and its last 8 bytes.
std::string Name(std::string_view key) {
  return absl::StrCat(key.size(), ":", std::string(key.substr(key.size() > 8 ? key.size() - 8 : 0)));
}

// Keys that fit, keys over the limit, keys at LMDB's limit and the prefix's length, all
// sharing 600-byte prefixes and differing only at the end.
std::vector<std::string> KeyPool() {
  std::vector<std::string> pool;
  const std::string shared_a(600, 'a');
  std::string shared_b(600, 'a');
  shared_b[599] = 'b';  // the same first 599 bytes as shared_a
  for (const std::string& prefix : {shared_a, shared_b}) {
    for (size_t length : {kLongKeyPrefixBytes, kLongKeyPrefixBytes + 1, size_t{510}, size_t{511},
                          size_t{512}, size_t{599}, size_t{600}}) {
      pool.push_back(prefix.substr(0, length));
    }
    for (const std::string& tail : {std::string(), std::string(1, '\0'), std::string("\0\xff", 2),
                                    std::string("\x01"), std::string("0"), std::string("1"),
                                    std::string("10"), std::string("2"), std::string("\xff"),
                                    std::string("\xff\xff")}) {
      pool.push_back(prefix + tail);
      pool.push_back(prefix + tail + std::string(2000, 'z'));
    }
  }
  // At DynamoDB's limits: a 2,048-byte partition key and a 1,024-byte sort key, and a view
  // entry holding two such keys.
  pool.push_back(std::string(2048 + 1024 + 4, 'k'));
  pool.push_back(std::string(2 * (2048 + 1024 + 4), 'k'));
  pool.push_back("a");
  pool.push_back("b");
  pool.push_back(std::string(480, 'b') + "x");
  return pool;
}

class LongKeyTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(LongKeyTest, ReadsAndWritesMatchAnOrderedMap) {
  test::TempDir dir;
  auto store = OpenOrDie(Storage(dir.Sub("s"), GetParam()));
  ASSERT_NE(store, nullptr);
  const MDB_dbi dbi = store->view("V");
  const std::vector<std::string> pool = KeyPool();
  std::mt19937 rng(19);
  Model model;
  for (int round = 0; round < 40; ++round) {
    {
      auto txn = store->BeginBuffered();
      ASSERT_TRUE(txn.ok()) << txn.status();
      for (int op = 0; op < 12; ++op) {
        const std::string& key = pool[rng() % pool.size()];
        if (rng() % 3 == 0) {
          auto removed = (*txn)->Remove(dbi, key);
          ASSERT_TRUE(removed.ok()) << removed.status();
          const bool was = model.erase(key) == 1;
          // A buffered Remove of a key that fits asks memory only (txn.h); a long one looks.
          if (GetParam() == 0 || IsLongKey(key)) {
            EXPECT_EQ(*removed, was) << Name(key);
          }
        } else {
          const std::string value = absl::StrCat("r", round, "o", op);
          ASSERT_TRUE((*txn)->Put(dbi, key, value).ok()) << Name(key);
          model[key] = value;
        }
        // The transaction reads its own writes.
        EXPECT_EQ(Get(**txn, dbi, key), model.count(key) ? model[key] : "<absent>") << Name(key);
      }
      ASSERT_TRUE((*txn)->Commit().ok());
    }
    const bool flushed = GetParam() == 0 || round % 10 == 9;
    if (flushed) {
      ASSERT_TRUE(store->Flush().ok());
    }
    auto txn = store->BeginRead();
    ASSERT_TRUE(txn.ok());
    ASSERT_EQ(Forwards(**txn, dbi), model) << "round " << round;
    ASSERT_EQ(BackwardKeys(**txn, dbi), Keys(model, true)) << "round " << round;
    if (flushed) {
      EXPECT_EQ((*txn)->Entries(dbi), model.size());  // LMDB's count: pending layers aside
    }
    for (const std::string& key : pool) {
      EXPECT_EQ(Get(**txn, dbi, key), model.count(key) ? model[key] : "<absent>") << Name(key);
    }
    // Seek to every pool key and a few cuts of them, then turn: Prev, Next, Next, Prev.
    auto cursor = (*txn)->OpenCursor(dbi);
    for (const std::string& key : pool) {
      for (const std::string& target : {key, key.substr(0, key.size() - 1), key + '\0'}) {
        auto it = model.lower_bound(target);
        bool ok = cursor->Seek(target);
        ASSERT_EQ(ok, it != model.end()) << Name(target);
        if (ok) {
          ASSERT_EQ(Name(cursor->key()), Name(it->first));
        }
        std::vector<std::string> walked, expected;
        for (bool forward : {false, true, true, false}) {
          if (!cursor->valid()) break;
          ok = forward ? cursor->Next() : cursor->Prev();
          if (forward) {
            if (it != model.end()) ++it;
          } else {
            it = it == model.begin() ? model.end() : std::prev(it);
          }
          walked.push_back(ok ? Name(cursor->key()) : "end");
          expected.push_back(it != model.end() ? Name(it->first) : "end");
          if (it == model.end()) break;
        }
        ASSERT_EQ(walked, expected) << "from " << Name(target);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DirectAndWriteBack, LongKeyTest, ::testing::Values(0u, 60000u),
                         [](const auto& info) { return info.param == 0 ? "direct" : "write_back"; });

TEST(LongKeyStoreTest, KeysAtDynamoDbLimitsSurviveAReopen) {
  test::TempDir dir;
  const std::string partition(2048 + 2, 'p');  // tag, 2,048 bytes, terminator
  const std::string item_key = partition + std::string(1024 + 2, 's');
  const std::string entry_key = item_key + item_key;
  {
    auto store = OpenOrDie(Storage(dir.Sub("s"), 0));
    ASSERT_NE(store, nullptr);
    auto txn = store->BeginWrite();
    ASSERT_TRUE(txn.ok());
    ASSERT_TRUE((*txn)->Put(store->items("App"), item_key, "item").ok());
    ASSERT_TRUE((*txn)->Put(store->view("V"), entry_key, "entry").ok());
    ASSERT_TRUE((*txn)->Put(store->view("V"), "short", "s").ok());
    ASSERT_TRUE((*txn)->Commit().ok());
  }
  auto store = OpenOrDie(Storage(dir.Sub("s"), 0));
  ASSERT_NE(store, nullptr);
  auto txn = store->BeginRead();
  ASSERT_TRUE(txn.ok());
  EXPECT_EQ(Get(**txn, store->items("App"), item_key), "item");
  EXPECT_EQ(Get(**txn, store->items("App"), item_key + "x"), "<absent>");
  EXPECT_EQ(Get(**txn, store->items("App"), item_key.substr(0, item_key.size() - 1)), "<absent>");
  EXPECT_EQ(Forwards(**txn, store->view("V")), (Model{{entry_key, "entry"}, {"short", "s"}}));
  EXPECT_EQ((*txn)->Entries(store->view("V")), 2u);
}

TEST(LongKeyStoreTest, ClearAndADroppedViewTakeTheLongKeysWithThem) {
  test::TempDir dir;
  const std::string long_key(700, 'l');
  {
    auto store = OpenOrDie(Storage(dir.Sub("s"), 0));
    ASSERT_NE(store, nullptr);
    auto txn = store->BeginWrite();
    ASSERT_TRUE(txn.ok());
    ASSERT_TRUE((*txn)->Put(store->view("V"), long_key, "1").ok());
    ASSERT_TRUE((*txn)->Put(store->items("App"), long_key, "2").ok());
    ASSERT_TRUE((*txn)->Clear(store->items("App")).ok());
    EXPECT_EQ(Get(**txn, store->items("App"), long_key), "<absent>");
    EXPECT_EQ((*txn)->Entries(store->items("App")), 0u);
    ASSERT_TRUE((*txn)->Commit().ok());
  }
  {
    auto store = OpenOrDie(Storage(dir.Sub("s"), 0), /*with_view=*/false);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->dropped_views(), std::vector<std::string>{"V"});
  }
  auto store = OpenOrDie(Storage(dir.Sub("s"), 0));
  ASSERT_NE(store, nullptr);
  auto txn = store->BeginRead();
  ASSERT_TRUE(txn.ok());
  EXPECT_EQ(Get(**txn, store->view("V"), long_key), "<absent>");
  EXPECT_EQ(Forwards(**txn, store->view("V")), Model{});
}

TEST(LongKeyFormatTest, StoredKeyIsThePrefixAndTheHashAndTheValueKeepsTheRest) {
  const std::string key = std::string(kLongKeyPrefixBytes, 'p') + "rest of the key";
  const std::string stored = LongStoredKey(key);
  ASSERT_EQ(stored.size(), 511u);
  EXPECT_EQ(stored.substr(0, kLongKeyPrefixBytes), key.substr(0, kLongKeyPrefixBytes));
  EXPECT_NE(stored, LongStoredKey(key + "!"));
  const std::string stored_value = LongStoredValue(key, "value");  // the entries point into it
  auto entry = DecodeLongEntry(stored, stored_value);
  ASSERT_TRUE(entry.ok());
  EXPECT_EQ(entry->key, key);
  EXPECT_EQ(entry->value, "value");
  std::string_view value;
  EXPECT_TRUE(LongEntryValue(key, stored_value, &value));
  EXPECT_EQ(value, "value");
  // Another key under the same stored key (a hash collision) is not this key's entry.
  EXPECT_FALSE(LongEntryValue(key, LongStoredValue(key + "!", "value"), &value));
  EXPECT_EQ(DecodeLongEntry(stored.substr(1), "x").status().message(),
            "a long-key entry (510-byte key) is damaged");
}

}  // namespace
}  // namespace cdcview
