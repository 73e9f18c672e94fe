// LmdbFile: a read-only view of an LMDB 0.9 data file (data.mdb) as it lies on disk, read
// without LMDB, which trusts its pages (a damaged page number or offset makes it read out of
// bounds). The store verifier (store_verifier.h) walks it; tests use it to find the pages
// they damage.
//
// The layout (LMDB 0.9, 64-bit; liblmdb 0.9.24's mdb.c): pages of page_size bytes, each with
// a 16-byte header (its page number, flags, and either the lower and upper bounds of its free
// space or, for an overflow page, the length of its run). Pages 0 and 1 are the meta pages:
// magic, version, the map size, the free-page and main database records, the last used page
// and the transaction id; the one with the higher id is current. A database record (MDB_db,
// 48 bytes) holds flags, depth, page counts, entries and the root page. A branch or leaf page
// holds 2-byte offsets of its nodes after the header; a node has a 4-byte data size (leaf) or
// child page (branch, with the flags field as its high bits), flags, the key size, the key,
// then the data: inline, a page number of an overflow run (F_BIGDATA), or a database record
// (F_SUBDATA, the main database's entries: one per named database).
//
// Every accessor checks bounds and says what is wrong instead of reading past a page.
// Thread-safety: const methods may be called from any thread. Ownership: string_views point
// into the file's read-only mapping: valid while the LmdbFile lives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace cdcview {

namespace lmdb_layout {
inline constexpr size_t kPageHeaderSize = 16;
inline constexpr size_t kNodeHeaderSize = 8;
inline constexpr size_t kDbRecordSize = 48;
inline constexpr uint32_t kMagic = 0xBEEFC0DE;
inline constexpr uint32_t kDataVersion = 1;
inline constexpr uint64_t kNoPage = ~uint64_t{0};  // P_INVALID: an empty database's root
// Page flags.
inline constexpr uint16_t kBranch = 0x01, kLeaf = 0x02, kOverflow = 0x04, kMeta = 0x08,
                          kDirty = 0x10, kLeaf2 = 0x20, kSubPage = 0x40, kLoose = 0x4000,
                          kKeep = 0x8000;
// Node flags.
inline constexpr uint16_t kBigData = 0x01, kSubData = 0x02, kDupData = 0x04;
// Database flags kept in a record (MDB_REVERSEKEY ... MDB_REVERSEDUP).
inline constexpr uint16_t kIntegerKey = 0x08, kPersistentDbFlags = 0x7e;
// Offsets in a meta page.
inline constexpr size_t kMetaMagic = 16, kMetaVersion = 20, kMetaMapSize = 32, kMetaFreeDb = 40,
                        kMetaMainDb = 88, kMetaLastPage = 136, kMetaTxnId = 144;
// Offsets in a page header and a database record.
inline constexpr size_t kHeaderFlags = 10, kHeaderLower = 12, kHeaderUpper = 14,
                        kHeaderPages = 12;
inline constexpr size_t kDbFlags = 4, kDbDepth = 6, kDbBranchPages = 8, kDbLeafPages = 16,
                        kDbOverflowPages = 24, kDbEntries = 32, kDbRoot = 40;
}  // namespace lmdb_layout

// A database record (MDB_db).
struct LmdbDbRecord {
  uint32_t pad = 0;  // the page size, in the free-page database's record of a meta page
  uint16_t flags = 0;
  uint16_t depth = 0;
  uint64_t branch_pages = 0;
  uint64_t leaf_pages = 0;
  uint64_t overflow_pages = 0;
  uint64_t entries = 0;
  uint64_t root = lmdb_layout::kNoPage;
};
LmdbDbRecord ParseDbRecord(std::string_view bytes);  // kDbRecordSize bytes

struct LmdbMeta {
  uint32_t magic = 0;
  uint32_t version = 0;
  uint64_t map_size = 0;
  LmdbDbRecord free_db;
  LmdbDbRecord main_db;
  uint64_t last_page = 0;
  uint64_t txn_id = 0;
};

struct LmdbPageHeader {
  uint64_t pgno = 0;
  uint16_t flags = 0;
  uint16_t lower = 0;   // branch and leaf pages
  uint16_t upper = 0;
  uint32_t pages = 0;   // overflow pages: the run's length
};

// One node of a branch or leaf page.
struct LmdbNode {
  uint16_t flags = 0;
  std::string_view key;
  uint64_t child = 0;      // branch: the child page
  uint32_t data_size = 0;  // leaf: the data's size (its full size, for F_BIGDATA)
  std::string_view data;   // leaf: inline data (8 bytes: the overflow page, for F_BIGDATA)
};

class LmdbFile {
 public:
  // Maps `path` read-only. Errors: the file cannot be opened or mapped, or is too short for
  // its meta pages, or their page size is not one LMDB uses (DATA_LOSS, saying so).
  static absl::StatusOr<std::unique_ptr<LmdbFile>> Open(const std::string& path);
  ~LmdbFile();
  LmdbFile(const LmdbFile&) = delete;
  LmdbFile& operator=(const LmdbFile&) = delete;

  size_t page_size() const { return page_size_; }
  uint64_t file_pages() const { return size_ / page_size_; }
  uint64_t file_bytes() const { return size_; }
  // Page `pgno`'s bytes; nullopt past the end of the file.
  std::optional<std::string_view> Page(uint64_t pgno) const;
  // The meta page `index` (0 or 1) as it is; whether it is sound is the caller's check.
  LmdbMeta Meta(int index) const;
  // The index of the meta page LMDB would use: the higher transaction id among the ones with
  // the right magic and version; -1 if neither has them.
  int CurrentMeta() const;

  static LmdbPageHeader Header(std::string_view page);
  // Node `index` of a branch (`leaf` false) or leaf page, or why it cannot be read (an
  // offset or size reaching past the page).
  static absl::StatusOr<LmdbNode> Node(std::string_view page, size_t index, bool leaf);
  // Where node `index`'s offset and the node itself lie in the page (for tests that damage
  // them): the byte offset of the node, or nullopt if the offset table does not reach it.
  static std::optional<size_t> NodeOffset(std::string_view page, size_t index);
  static size_t Keys(const LmdbPageHeader& header) {
    return header.lower < lmdb_layout::kPageHeaderSize
               ? 0
               : (header.lower - lmdb_layout::kPageHeaderSize) / 2;
  }

 private:
  LmdbFile() = default;
  int fd_ = -1;
  const char* map_ = nullptr;
  size_t size_ = 0;
  size_t page_size_ = 0;
};

}  // namespace cdcview
