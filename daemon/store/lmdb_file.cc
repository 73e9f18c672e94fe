#include "daemon/store/lmdb_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace cdcview {

using lmdb_layout::kBigData;
using lmdb_layout::kDbBranchPages;
using lmdb_layout::kDbDepth;
using lmdb_layout::kDbEntries;
using lmdb_layout::kDbFlags;
using lmdb_layout::kDbLeafPages;
using lmdb_layout::kDbOverflowPages;
using lmdb_layout::kDbRecordSize;
using lmdb_layout::kDbRoot;
using lmdb_layout::kHeaderFlags;
using lmdb_layout::kHeaderLower;
using lmdb_layout::kHeaderPages;
using lmdb_layout::kHeaderUpper;
using lmdb_layout::kMetaFreeDb;
using lmdb_layout::kMetaLastPage;
using lmdb_layout::kMetaMagic;
using lmdb_layout::kMetaMainDb;
using lmdb_layout::kMetaMapSize;
using lmdb_layout::kMetaTxnId;
using lmdb_layout::kMetaVersion;
using lmdb_layout::kNodeHeaderSize;
using lmdb_layout::kPageHeaderSize;
using lmdb_layout::kDataVersion;
using lmdb_layout::kMagic;

namespace {

// LMDB stores its integers in the machine's order; the store is only read where it was
// written (x86-64 and arm64: little-endian).
template <typename T>
T Load(std::string_view bytes, size_t offset) {
  T v;
  std::memcpy(&v, bytes.data() + offset, sizeof(T));
  return v;
}

}  // namespace

LmdbDbRecord ParseDbRecord(std::string_view b) {
  LmdbDbRecord r;
  r.pad = Load<uint32_t>(b, 0);
  r.flags = Load<uint16_t>(b, kDbFlags);
  r.depth = Load<uint16_t>(b, kDbDepth);
  r.branch_pages = Load<uint64_t>(b, kDbBranchPages);
  r.leaf_pages = Load<uint64_t>(b, kDbLeafPages);
  r.overflow_pages = Load<uint64_t>(b, kDbOverflowPages);
  r.entries = Load<uint64_t>(b, kDbEntries);
  r.root = Load<uint64_t>(b, kDbRoot);
  return r;
}

absl::StatusOr<std::unique_ptr<LmdbFile>> LmdbFile::Open(const std::string& path) {
  std::unique_ptr<LmdbFile> file(new LmdbFile());
  file->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file->fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  struct stat st;
  if (fstat(file->fd_, &st) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot stat ", path, ": ", std::strerror(errno)));
  }
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ < kMetaTxnId + 8) {
    return absl::DataLossError(absl::StrCat(path, " is ", file->size_,
                                            " bytes long, too short for LMDB's meta pages"));
  }
  void* map = mmap(nullptr, file->size_, PROT_READ, MAP_SHARED, file->fd_, 0);
  if (map == MAP_FAILED) {
    return absl::FailedPreconditionError(absl::StrCat("cannot map ", path, ": ", std::strerror(errno)));
  }
  file->map_ = static_cast<const char*>(map);
  // The page size is in meta page 0's free-page record; page 1 starts one page later.
  const uint32_t psize = Load<uint32_t>(std::string_view(file->map_, file->size_), kMetaFreeDb);
  if (psize < 512 || psize > 65536 || (psize & (psize - 1)) != 0 || file->size_ < 2 * size_t{psize}) {
    return absl::DataLossError(absl::StrCat(
        path, ": meta page 0 gives a page size of ", psize,
        " bytes, which LMDB never uses (a power of two from 512 to 65536, two pages at least)"));
  }
  file->page_size_ = psize;
  return file;
}

LmdbFile::~LmdbFile() {
  if (map_ != nullptr) munmap(const_cast<char*>(map_), size_);
  if (fd_ >= 0) ::close(fd_);
}

std::optional<std::string_view> LmdbFile::Page(uint64_t pgno) const {
  if (pgno >= file_pages()) return std::nullopt;
  return std::string_view(map_ + pgno * page_size_, page_size_);
}

LmdbMeta LmdbFile::Meta(int index) const {
  std::string_view page = *Page(index);
  LmdbMeta m;
  m.magic = Load<uint32_t>(page, kMetaMagic);
  m.version = Load<uint32_t>(page, kMetaVersion);
  m.map_size = Load<uint64_t>(page, kMetaMapSize);
  m.free_db = ParseDbRecord(page.substr(kMetaFreeDb, kDbRecordSize));
  m.main_db = ParseDbRecord(page.substr(kMetaMainDb, kDbRecordSize));
  m.last_page = Load<uint64_t>(page, kMetaLastPage);
  m.txn_id = Load<uint64_t>(page, kMetaTxnId);
  return m;
}

int LmdbFile::CurrentMeta() const {
  int best = -1;
  uint64_t best_txn = 0;
  for (int i = 0; i < 2; ++i) {
    const LmdbMeta m = Meta(i);
    if (m.magic != kMagic || m.version != kDataVersion) continue;
    if (best < 0 || m.txn_id > best_txn) {
      best = i;
      best_txn = m.txn_id;
    }
  }
  return best;
}

LmdbPageHeader LmdbFile::Header(std::string_view page) {
  LmdbPageHeader h;
  h.pgno = Load<uint64_t>(page, 0);
  h.flags = Load<uint16_t>(page, kHeaderFlags);
  h.lower = Load<uint16_t>(page, kHeaderLower);
  h.upper = Load<uint16_t>(page, kHeaderUpper);
  h.pages = Load<uint32_t>(page, kHeaderPages);
  return h;
}

std::optional<size_t> LmdbFile::NodeOffset(std::string_view page, size_t index) {
  const size_t slot = kPageHeaderSize + 2 * index;
  if (slot + 2 > page.size()) return std::nullopt;
  return Load<uint16_t>(page, slot);
}

absl::StatusOr<LmdbNode> LmdbFile::Node(std::string_view page, size_t index, bool leaf) {
  const std::optional<size_t> at = NodeOffset(page, index);
  if (!at.has_value()) return absl::DataLossError(absl::StrCat("node ", index, " is past the page"));
  const LmdbPageHeader h = Header(page);
  if (*at < h.upper || *at + kNodeHeaderSize > page.size()) {
    return absl::DataLossError(absl::StrCat("node ", index, " lies at offset ", *at,
                                            ", outside the page's node area [", h.upper, ", ",
                                            page.size(), ")"));
  }
  const uint16_t lo = Load<uint16_t>(page, *at);
  const uint16_t hi = Load<uint16_t>(page, *at + 2);
  const uint16_t flags = Load<uint16_t>(page, *at + 4);
  const uint16_t ksize = Load<uint16_t>(page, *at + 6);
  LmdbNode node;
  size_t end = *at + kNodeHeaderSize + ksize;
  if (end > page.size()) {
    return absl::DataLossError(absl::StrCat("node ", index, "'s key of ", ksize,
                                            " bytes reaches past the page"));
  }
  node.key = page.substr(*at + kNodeHeaderSize, ksize);
  if (!leaf) {
    node.child = uint64_t{lo} | (uint64_t{hi} << 16) | (uint64_t{flags} << 32);
    return node;
  }
  node.flags = flags;
  node.data_size = uint32_t{lo} | (uint32_t{hi} << 16);
  const size_t inline_size = (flags & kBigData) != 0 ? 8 : node.data_size;
  if (end + inline_size > page.size()) {
    return absl::DataLossError(absl::StrCat("node ", index, "'s data of ", inline_size,
                                            " bytes reaches past the page"));
  }
  node.data = page.substr(end, inline_size);
  return node;
}

}  // namespace cdcview
