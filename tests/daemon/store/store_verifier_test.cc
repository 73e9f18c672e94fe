#include "daemon/store/store_verifier.h"

#include <fcntl.h>
#include <lmdb.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/store/cursor.h"
#include "daemon/store/lmdb_file.h"
#include "daemon/store/lmdb_status.h"
#include "daemon/store/long_key.h"
#include "daemon/store/shutdown_marker.h"
#include "daemon/store/store.h"
#include "daemon/store/stored_item.h"
#include "gtest/gtest.h"
#include "index_builders/item_codec.h"
#include "tests/fakes/temp_dir.h"

namespace cdcview {
namespace {

namespace L = lmdb_layout;
using test::TempDir;

constexpr int kItems = 600;
constexpr size_t kBigValue = 9000;  // the last item's: an overflow run of 3 pages

std::string Key(int i) { return absl::StrFormat("k%05d", i); }

std::vector<TableSpec> Tables() {
  TableSpec table;
  table.name = "T";
  table.key.partition = "PK";
  ViewSpec view;
  view.name = "V";
  view.table = "T";
  table.views.push_back(view);
  return {table};
}

StorageConfig Storage(const std::string& path, StorageConfig::Verify verify) {
  StorageConfig config;
  config.path = path;
  config.map_size = 8 << 20;
  config.max_map_size = 64 << 20;
  config.verify_at_start = verify;
  return config;
}

std::string StoredValue(int i) {
  Item item;
  item["PK"] = AttributeValue::String(Key(i));
  item["payload"] = AttributeValue::String(std::string(i + 1 == kItems ? kBigValue : 120, 'x'));
  return EncodeStoredItem(false, absl::StrCat(1000 + i), EncodeItem(item));
}

// A store as the daemon leaves it: items/T with kItems items (a branch page over leaves, an
// overflow run for the last), view/V with a few entries, closed cleanly.
void MakeStore(const std::string& path) {
  auto store = Store::Open(Storage(path, StorageConfig::Verify::kAlways), Tables());
  ASSERT_TRUE(store.ok()) << store.status();
  auto txn = (*store)->BeginWrite();
  ASSERT_TRUE(txn.ok()) << txn.status();
  for (int i = 0; i < kItems; ++i) {
    ASSERT_TRUE((*txn)->Put((*store)->items("T"), Key(i), StoredValue(i)).ok());
  }
  for (int i = 0; i < 5; ++i) {
    Item entry;
    entry["PK"] = AttributeValue::String(Key(i));
    ASSERT_TRUE((*txn)->Put((*store)->view("V"), Key(i), EncodeItem(entry)).ok());
  }
  ASSERT_TRUE((*txn)->Commit().ok());
}

// Where things are in a store's data file, read with LmdbFile as the verifier reads it.
class Layout {
 public:
  explicit Layout(const std::string& data) {
    auto file = LmdbFile::Open(data);
    EXPECT_TRUE(file.ok()) << file.status();
    file_ = *std::move(file);
    meta_ = file_->Meta(file_->CurrentMeta());
  }
  uint64_t last_page() const { return meta_.last_page; }
  size_t page_size() const { return file_->page_size(); }
  // The record of named database `name`, from the main database (one leaf page here).
  LmdbDbRecord Record(const std::string& name) const {
    std::string_view page = *file_->Page(meta_.main_db.root);
    for (size_t i = 0; i < LmdbFile::Keys(LmdbFile::Header(page)); ++i) {
      auto node = LmdbFile::Node(page, i, /*leaf=*/true);
      if (node.ok() && node->key == name) return ParseDbRecord(node->data);
    }
    ADD_FAILURE() << "no database " << name;
    return {};
  }
  std::string_view Page(uint64_t pgno) const { return *file_->Page(pgno); }
  LmdbNode Node(uint64_t pgno, size_t index) const {
    const bool leaf = (LmdbFile::Header(Page(pgno)).flags & L::kLeaf) != 0;
    auto node = LmdbFile::Node(Page(pgno), index, leaf);
    EXPECT_TRUE(node.ok()) << node.status();
    return *node;
  }
  size_t NodeOffset(uint64_t pgno, size_t index) const { return *LmdbFile::NodeOffset(Page(pgno), index); }
  size_t Keys(uint64_t pgno) const { return LmdbFile::Keys(LmdbFile::Header(Page(pgno))); }

 private:
  std::unique_ptr<LmdbFile> file_;
  LmdbMeta meta_;
};

// Overwrites bytes of the file at `page`'s offset `offset`.
void Overwrite(const std::string& data, size_t page_size, uint64_t page, size_t offset,
               const void* bytes, size_t size) {
  const int fd = open(data.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, bytes, size, static_cast<off_t>(page * page_size + offset)),
            static_cast<ssize_t>(size));
  close(fd);
}

template <typename T>
void OverwriteValue(const std::string& data, size_t page_size, uint64_t page, size_t offset, T v) {
  Overwrite(data, page_size, page, offset, &v, sizeof(v));
}

std::vector<std::string> Problems(const VerifyReport& report) {
  std::vector<std::string> out;
  for (const StoreDamage& d : report.damage) out.push_back(d.ToString());
  return out;
}

VerifyReport Verify(const std::string& data) {
  VerifyOptions options;
  options.tables = Tables();
  auto report = VerifyStore(data, options);
  EXPECT_TRUE(report.ok()) << report.status();
  return report.ok() ? *report : VerifyReport{};
}

class StoreVerifierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MakeStore(dir_.path());
    data_ = dir_.Sub("data.mdb");
    layout_ = std::make_unique<Layout>(data_);
    items_ = layout_->Record("items/T");
    ASSERT_EQ(items_.depth, 2);  // a branch page over leaves
    ASSERT_GE(layout_->Keys(items_.root), 4u);
  }
  // The first leaf page under the root.
  uint64_t Leaf(size_t index) const { return layout_->Node(items_.root, index).child; }

  TempDir dir_;
  std::string data_;
  std::unique_ptr<Layout> layout_;
  LmdbDbRecord items_;
};

TEST_F(StoreVerifierTest, AStoreAsWrittenIsClean) {
  VerifyReport report = Verify(data_);
  EXPECT_TRUE(report.clean()) << report.Summary(20);
  EXPECT_GT(report.entries, static_cast<uint64_t>(kItems + 5));
  EXPECT_EQ(report.used_bytes, (layout_->last_page() + 1) * layout_->page_size());
  EXPECT_EQ(items_.entries, static_cast<uint64_t>(kItems));
  EXPECT_EQ(items_.overflow_pages, 3u);
}

TEST_F(StoreVerifierTest, AChildPageNumberPastTheLastPage) {
  const uint64_t lost = Leaf(1);
  const size_t lost_entries = layout_->Keys(lost);
  // A branch node's child page: its low 16 bits, next 16 bits, then the flags field.
  const size_t at = layout_->NodeOffset(items_.root, 1);
  OverwriteValue<uint16_t>(data_, layout_->page_size(), items_.root, at, 999999 & 0xffff);
  OverwriteValue<uint16_t>(data_, layout_->page_size(), items_.root, at + 2, 999999 >> 16);
  VerifyReport report = Verify(data_);
  EXPECT_EQ(Problems(report),
            (std::vector<std::string>{
                absl::StrCat("items/T page ", items_.root,
                             ": entry 1 points to page 999999, past the last used page ",
                             layout_->last_page()),
                absl::StrCat("items/T: the database record counts ", kItems,
                             " entries, the tree holds ", kItems - lost_entries),
                absl::StrCat("items/T: the database record counts ", items_.leaf_pages,
                             " leaf pages, the tree holds ", items_.leaf_pages - 1)}));
  EXPECT_EQ(report.damage_count, 3u);
}

TEST_F(StoreVerifierTest, APageHeadersFlags) {
  const uint64_t leaf = Leaf(2);
  const size_t entries = layout_->Keys(leaf);
  OverwriteValue<uint16_t>(data_, layout_->page_size(), leaf, L::kHeaderFlags, L::kBranch);
  EXPECT_EQ(Problems(Verify(data_)),
            (std::vector<std::string>{
                absl::StrCat("items/T page ", leaf,
                             ": flags 0x1 where a leaf page (0x2) belongs, at level 2 of 2"),
                absl::StrCat("items/T: the database record counts ", kItems,
                             " entries, the tree holds ", kItems - entries),
                absl::StrCat("items/T: the database record counts ", items_.leaf_pages,
                             " leaf pages, the tree holds ", items_.leaf_pages - 1)}));
}

TEST_F(StoreVerifierTest, SwappedKeys) {
  const uint64_t leaf = Leaf(1);
  const std::string third(layout_->Node(leaf, 3).key), fourth(layout_->Node(leaf, 4).key);
  const uint16_t a = static_cast<uint16_t>(layout_->NodeOffset(leaf, 3));
  const uint16_t b = static_cast<uint16_t>(layout_->NodeOffset(leaf, 4));
  OverwriteValue<uint16_t>(data_, layout_->page_size(), leaf, L::kPageHeaderSize + 2 * 3, b);
  OverwriteValue<uint16_t>(data_, layout_->page_size(), leaf, L::kPageHeaderSize + 2 * 4, a);
  EXPECT_EQ(Problems(Verify(data_)),
            (std::vector<std::string>{
                absl::StrCat("items/T page ", leaf, ": entry 4's key \"", third,
                             "\" is not above entry 3's \"", fourth, "\""),
                absl::StrCat("items/T: the database record counts ", kItems,
                             " entries, the tree holds ", kItems - layout_->Keys(leaf))}));
}

TEST_F(StoreVerifierTest, ABadValueEncoding) {
  const uint64_t leaf = Leaf(0);
  const LmdbNode node = layout_->Node(leaf, 0);
  const size_t value_at = layout_->NodeOffset(leaf, 0) + L::kNodeHeaderSize + node.key.size();
  OverwriteValue<uint8_t>(data_, layout_->page_size(), leaf, value_at, 7);
  VerifyReport report = Verify(data_);
  EXPECT_EQ(Problems(report), (std::vector<std::string>{absl::StrCat(
                                  "items/T page ", leaf, ": entry 0 (key \"", Key(0),
                                  "\"): stored item has a bad flag byte")}));
  EXPECT_EQ(report.Summary(10),
            absl::StrCat("1 problem\n  items/T page ", leaf, ": entry 0 (key \"", Key(0),
                         "\"): stored item has a bad flag byte"));
}

TEST_F(StoreVerifierTest, AnOverflowRunsHeader) {
  const uint64_t last_leaf = layout_->Node(items_.root, layout_->Keys(items_.root) - 1).child;
  const size_t last = layout_->Keys(last_leaf) - 1;
  const LmdbNode node = layout_->Node(last_leaf, last);
  ASSERT_EQ(node.flags, L::kBigData);
  uint64_t run = 0;
  std::memcpy(&run, node.data.data(), sizeof(run));
  OverwriteValue<uint16_t>(data_, layout_->page_size(), run, L::kHeaderFlags, L::kLeaf);
  EXPECT_EQ(Problems(Verify(data_)),
            (std::vector<std::string>{
                absl::StrCat("items/T page ", run, ": page ", last_leaf, " entry ", last,
                             "'s value of ", node.data_size,
                             " bytes needs an overflow run of 3 pages here; the page says page ",
                             run, ", flags 0x2, 3 pages"),
                "items/T: the database record counts 3 overflow pages, the tree holds 0"}));
}

TEST_F(StoreVerifierTest, AMetaPagesMagic) {
  OverwriteValue<uint32_t>(data_, layout_->page_size(), 1, L::kMetaMagic, 0x12345678);
  EXPECT_EQ(Problems(Verify(data_)),
            (std::vector<std::string>{"meta page 1: magic 0x12345678 is not LMDB's 0xbeefc0de"}));
}

// A key over LMDB's limit lives in the database's long/ sibling (long_key.h): the verifier
// reads its entries as the store does, the key's rest and then the stored item, and a rest
// that does not match the key's hash is named.
TEST(StoreVerifierLongKeyTest, ASiblingsEntriesAreDecodedAndTheirDamageNamed) {
  TempDir dir;
  const std::string key(600, 'L');
  {
    auto store = Store::Open(Storage(dir.path(), StorageConfig::Verify::kAlways), Tables());
    ASSERT_TRUE(store.ok()) << store.status();
    auto txn = (*store)->BeginWrite();
    ASSERT_TRUE(txn.ok()) << txn.status();
    ASSERT_TRUE((*txn)->Put((*store)->items("T"), key, StoredValue(1)).ok());
    ASSERT_TRUE((*txn)->Commit().ok());
  }
  const std::string data = dir.Sub("data.mdb");
  EXPECT_TRUE(Verify(data).clean()) << Verify(data).Summary(10);

  Layout layout(data);
  const LmdbDbRecord sibling = layout.Record("long/items/T");
  ASSERT_EQ(sibling.entries, 1u);
  const LmdbNode node = layout.Node(sibling.root, 0);
  const std::string stored_key(node.key);
  std::string damaged(node.data);
  damaged[1] ^= 0x20;  // a byte of the key's rest: another key, not the one the hash names
  Overwrite(data, layout.page_size(), sibling.root,
            layout.NodeOffset(sibling.root, 0) + L::kNodeHeaderSize + node.key.size(),
            damaged.data(), damaged.size());
  EXPECT_EQ(Problems(Verify(data)),
            (std::vector<std::string>{absl::StrCat(
                "long/items/T page ", sibling.root, ": entry 0 (key \"", std::string(48, 'L'),
                "... (511 bytes)\"): the rest of the key in the value does not hash to the "
                "stored key")}));
  damaged[0] = '\xff';  // the rest's length: a varint that never ends
  Overwrite(data, layout.page_size(), sibling.root,
            layout.NodeOffset(sibling.root, 0) + L::kNodeHeaderSize + node.key.size(),
            damaged.data(), damaged.size());
  absl::StatusOr<LongEntry> decoded = DecodeLongEntry(stored_key, damaged);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(Problems(Verify(data)),
            (std::vector<std::string>{absl::StrCat("long/items/T page ", sibling.root,
                                                   ": entry 0 (key \"", std::string(48, 'L'),
                                                   "... (511 bytes)\"): ",
                                                   decoded.status().message())}));

  // Unverified, a read that meets the entry stops with DATA_LOSS instead of skipping it.
  auto store = Store::Open(Storage(dir.path(), StorageConfig::Verify::kNever), Tables());
  ASSERT_TRUE(store.ok()) << store.status();
  auto txn = (*store)->BeginRead();
  ASSERT_TRUE(txn.ok()) << txn.status();
  std::unique_ptr<Cursor> cursor = (*txn)->OpenCursor((*store)->items("T"));
  EXPECT_FALSE(cursor->SeekFirst());
  EXPECT_EQ(cursor->status(), absl::DataLossError(absl::StrCat("a long-key entry is damaged: ",
                                                               decoded.status().message())));
}

TEST_F(StoreVerifierTest, OpenRefusesADamagedStoreNamingTheDamageUnlessToldNotToVerify) {
  const uint64_t leaf = Leaf(0);
  const size_t value_at = layout_->NodeOffset(leaf, 0) + L::kNodeHeaderSize + Key(0).size();
  OverwriteValue<uint8_t>(data_, layout_->page_size(), leaf, value_at, 7);
  for (StorageConfig::Verify verify : {StorageConfig::Verify::kAuto, StorageConfig::Verify::kAlways}) {
    auto store = Store::Open(Storage(dir_.path(), verify), Tables());
    ASSERT_FALSE(store.ok());
    EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(store.status().message(),
              absl::StrCat("store \"", dir_.path(), "\" is damaged (verified at start: ",
                           verify == StorageConfig::Verify::kAuto ? "it is small"
                                                                 : "storage.verify_at_start is always",
                           "): 1 problem\n  items/T page ", leaf, ": entry 0 (key \"", Key(0),
                           "\"): stored item has a bad flag byte\nrestore it from a backup, or move "
                           "it away so that the sources replay into a new store; cdcviewd "
                           "--verify-store lists every problem"));
  }
  // Refused, the store was not opened: its clean-shutdown marker is still there.
  EXPECT_TRUE(ClosedCleanly(dir_.path()));
  auto store = Store::Open(Storage(dir_.path(), StorageConfig::Verify::kNever), Tables());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_FALSE(ClosedCleanly(dir_.path()));  // removed while the store is open
}

TEST_F(StoreVerifierTest, AReadThatMeetsADamagedPageIsAnErrorNotAnAbort) {
  const size_t at = layout_->NodeOffset(items_.root, 1);
  OverwriteValue<uint16_t>(data_, layout_->page_size(), items_.root, at, 0xffff);
  OverwriteValue<uint16_t>(data_, layout_->page_size(), items_.root, at + 2, 0x00ff);
  auto store = Store::Open(Storage(dir_.path(), StorageConfig::Verify::kNever), Tables());
  ASSERT_TRUE(store.ok()) << store.status();
  const std::array<uint64_t, kStoreErrorKinds> before = StoreErrorCounts();
  auto txn = (*store)->BeginRead();
  ASSERT_TRUE(txn.ok());
  auto cursor = (*txn)->OpenCursor((*store)->items("T"));
  size_t read = 0;
  for (bool ok = cursor->SeekFirst(); ok; ok = cursor->Next()) ++read;
  EXPECT_EQ(read, layout_->Keys(Leaf(0)));  // up to the damaged child
  EXPECT_EQ(cursor->status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(cursor->status().message(),
            "reading the store: MDB_PAGE_NOTFOUND: Requested page not found");
  EXPECT_TRUE(IsStoreError(cursor->status()));
  // LMDB fails the rest of the transaction: a cursor opened after says so, and stays empty.
  auto after = (*txn)->OpenCursor((*store)->meta());
  EXPECT_FALSE(after->SeekFirst());
  EXPECT_EQ(after->status().message(),
            "opening a cursor: MDB_BAD_TXN: Transaction must abort, has a child, or is invalid (an "
            "earlier read in it met a damaged page)");
  const std::array<uint64_t, kStoreErrorKinds> now = StoreErrorCounts();
  EXPECT_EQ(now[static_cast<size_t>(StoreErrorKind::kPageNotFound)] -
                before[static_cast<size_t>(StoreErrorKind::kPageNotFound)],
            1u);
  EXPECT_EQ(now[static_cast<size_t>(StoreErrorKind::kBadTxn)] -
                before[static_cast<size_t>(StoreErrorKind::kBadTxn)],
            1u);
}

// Every entry of every database, read through LMDB itself.
std::map<std::string, std::map<std::string, std::string>> Dump(const std::string& dir) {
  std::map<std::string, std::map<std::string, std::string>> out;
  MDB_env* env = nullptr;
  mdb_env_create(&env);
  mdb_env_set_maxdbs(env, 16);
  EXPECT_EQ(mdb_env_open(env, dir.c_str(), MDB_RDONLY | MDB_NOLOCK, 0644), MDB_SUCCESS);
  MDB_txn* txn = nullptr;
  EXPECT_EQ(mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn), MDB_SUCCESS);
  auto read = [&](const char* name, std::map<std::string, std::string>* into) {
    MDB_dbi dbi;
    if (mdb_dbi_open(txn, name, 0, &dbi) != MDB_SUCCESS) return false;
    MDB_cursor* c = nullptr;
    if (mdb_cursor_open(txn, dbi, &c) != MDB_SUCCESS) return false;
    MDB_val k, v;
    int rc;
    for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == MDB_SUCCESS;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
      into->emplace(std::string(static_cast<char*>(k.mv_data), k.mv_size),
                    std::string(static_cast<char*>(v.mv_data), v.mv_size));
    }
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND;
  };
  std::map<std::string, std::string> main;
  if (read(nullptr, &main)) {
    for (const auto& [name, record] : main) {
      if (!read(name.c_str(), &out[name])) out[name]["<error>"] = "";
    }
  } else {
    out["<main>"]["<error>"] = "";
  }
  mdb_txn_abort(txn);
  mdb_env_close(env);
  return out;
}

using Dumped = std::map<std::string, std::map<std::string, std::string>>;

// Where `got` first differs from `want`, "" if nowhere: short enough for a failure message.
std::string FirstDifference(const Dumped& got, const Dumped& want) {
  for (const auto& [db, entries] : want) {
    auto it = got.find(db);
    if (it == got.end()) return absl::StrCat("database ", db, " is missing");
    for (const auto& [key, value] : entries) {
      auto e = it->second.find(key);
      if (e == it->second.end()) return absl::StrCat(db, ": key ", absl::CHexEscape(key), " is missing");
      if (e->second != value) return absl::StrCat(db, ": key ", absl::CHexEscape(key), " has another value");
    }
    if (it->second.size() != entries.size()) {
      return absl::StrCat(db, ": ", it->second.size(), " entries, not ", entries.size());
    }
  }
  if (got.size() != want.size()) return absl::StrCat(got.size(), " databases, not ", want.size());
  return "";
}

// Random damage to one page's structure (its header, its node offsets, a node's header or a
// branch's child), never to the bytes of a key or value, which no check without checksums can
// tell from other bytes: the verifier never crashes, and a store it calls clean reads back
// through LMDB exactly as before.
TEST_F(StoreVerifierTest, RandomSinglePageDamageIsFoundOrHarmless) {
  const std::string pristine_dir = dir_.Sub("pristine");
  std::filesystem::create_directories(pristine_dir);
  std::filesystem::copy_file(data_, pristine_dir + "/data.mdb");
  const auto want = Dump(pristine_dir);
  ASSERT_EQ(want.at("items/T").size(), static_cast<size_t>(kItems));
  std::string bytes;
  {
    std::ifstream in(data_, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    bytes = s.str();
  }
  const size_t psize = layout_->page_size();
  const std::string work = dir_.Sub("work");
  std::filesystem::create_directories(work);
  uint64_t overflow = 0;  // the big value's run
  {
    const uint64_t last_leaf = layout_->Node(items_.root, layout_->Keys(items_.root) - 1).child;
    const LmdbNode node = layout_->Node(last_leaf, layout_->Keys(last_leaf) - 1);
    std::memcpy(&overflow, node.data.data(), sizeof(overflow));
  }
  std::mt19937_64 random(20261202);
  int found = 0, harmless = 0;
  for (int round = 0; round < 400; ++round) {
    std::string damaged = bytes;
    const uint64_t page = 2 + random() % (layout_->last_page() - 1);
    const uint64_t kind = random() % 4;
    // An overflow run holds value bytes after its first page's header.
    if (page >= overflow && page < overflow + 3 && !(page == overflow && kind == 0)) continue;
    char* p = damaged.data() + page * psize;
    uint16_t lower = 0;
    std::memcpy(&lower, p + L::kHeaderLower, 2);
    const size_t nodes = lower >= L::kPageHeaderSize && lower < psize ? (lower - L::kPageHeaderSize) / 2 : 0;
    switch (kind) {
      case 0:  // a header byte
        p[random() % L::kPageHeaderSize] ^= static_cast<char>(1 + random() % 255);
        break;
      case 1:  // a node offset
        if (nodes > 0) {
          const uint16_t v = static_cast<uint16_t>(random() % psize);
          std::memcpy(p + L::kPageHeaderSize + 2 * (random() % nodes), &v, 2);
        }
        break;
      case 2:  // a byte of a node's header: its size, flags, or a branch's child page
        if (nodes > 0) {
          uint16_t at = 0;
          std::memcpy(&at, p + L::kPageHeaderSize + 2 * (random() % nodes), 2);
          if (at + L::kNodeHeaderSize <= psize) {
            p[at + random() % L::kNodeHeaderSize] ^= static_cast<char>(1 + random() % 255);
          }
        }
        break;
      case 3:  // the whole page zeroed
        std::memset(p, 0, psize);
        break;
    }
    {
      std::ofstream out(work + "/data.mdb", std::ios::binary | std::ios::trunc);
      out.write(damaged.data(), static_cast<std::streamsize>(damaged.size()));
    }
    VerifyReport report = Verify(work + "/data.mdb");
    if (!report.clean()) {
      ++found;
      continue;
    }
    ++harmless;
    EXPECT_EQ(FirstDifference(Dump(work), want), "")
        << "round " << round << ": page " << page
        << " damaged, the verifier found nothing, and LMDB reads something else";
  }
  // Both outcomes happen: damage to pages in use is found, to free pages it is harmless.
  EXPECT_GT(found, 100);
  EXPECT_GT(harmless, 0);
}

}  // namespace
}  // namespace cdcview
