#include "daemon/store/store_verifier.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/store/change_log.h"
#include "daemon/store/lmdb_file.h"
#include "daemon/store/long_key.h"
#include "daemon/store/meta_keys.h"
#include "daemon/store/stored_item.h"
#include "index_builders/aggregate.h"
#include "index_builders/coding.h"
#include "index_builders/item_codec.h"

namespace cdcview {

namespace L = lmdb_layout;

std::string StoreDamage::ToString() const {
  if (on_page) return absl::StrCat(database, " page ", page, ": ", what);
  return absl::StrCat(database, ": ", what);
}

std::string VerifyReport::Summary(size_t lines) const {
  std::string out = absl::StrCat(damage_count, damage_count == 1 ? " problem" : " problems");
  for (size_t i = 0; i < damage.size() && i < lines; ++i) absl::StrAppend(&out, "\n  ", damage[i].ToString());
  if (damage_count > std::min(lines, damage.size())) {
    absl::StrAppend(&out, "\n  ... and ", damage_count - std::min(lines, damage.size()), " more");
  }
  return out;
}

namespace {

// LMDB refuses longer keys (mdb_env_get_maxkeysize with the default build).
constexpr size_t kMaxKeySize = 511;
// The deepest tree a map of 64 TiB in 512-byte pages can hold is far shallower.
constexpr size_t kMaxDepth = 64;
constexpr uint64_t kProgressPages = 4096;

// A key as text for a message: printable bytes as they are, others escaped, bounded.
std::string KeyForMessage(std::string_view key) {
  constexpr size_t kShown = 48;
  std::string text = absl::CHexEscape(absl::string_view(key.data(), std::min(key.size(), kShown)));
  if (key.size() > kShown) absl::StrAppend(&text, "... (", key.size(), " bytes)");
  return absl::StrCat("\"", text, "\"");
}

uint64_t IntegerKey(std::string_view key) {
  uint64_t v = 0;
  std::memcpy(&v, key.data(), std::min(key.size(), sizeof(v)));
  return v;
}

class Verifier {
 public:
  Verifier(const LmdbFile& file, const VerifyOptions& options, VerifyReport* report)
      : file_(file), options_(options), report_(report) {
    for (const TableSpec& table : options.tables) {
      for (const AggregateSpec& aggregate : table.aggregates) {
        measures_[aggregate.name] = aggregate.measures.size();
      }
    }
  }

  void Run();

 private:
  enum class Values { kNone, kFree, kMain, kMeta, kItems, kView, kChanges, kGroups, kExtremes };
  struct Db {
    std::string name;
    LmdbDbRecord record;
    Values values = Values::kNone;
    size_t measures = 0;  // kGroups: 0 when unknown
    bool integer_keys = false;
    bool long_keys = false;  // a long-key sibling (long_key.h): each value holds its key's rest
    uint16_t owner = 0;  // in owner_
  };
  struct Counts {
    uint64_t branch = 0, leaf = 0, overflow = 0, entries = 0;
  };
  // The separators a page's keys must lie within: [lower, upper), nullopt: no bound.
  struct Range {
    std::optional<std::string_view> lower, upper;
  };

  void Damage(const std::string& database, std::optional<uint64_t> page, std::string what) {
    ++report_->damage_count;
    if (report_->damage.size() < VerifyReport::kMaxListed) {
      report_->damage.push_back({database, page.value_or(0), page.has_value(), std::move(what)});
    }
  }
  bool CheckMeta(int index);
  void CheckRecord(const Db& db);
  // Marks `pgno` used by `db`, reached from `from` ("entry 3") on page `parent` (nullopt: from
  // the database record); false, reported on `parent`, if it cannot be.
  bool Claim(const Db& db, uint64_t pgno, std::optional<uint64_t> parent, const std::string& from);
  void WalkDb(Db db);
  void WalkPage(const Db& db, uint64_t pgno, size_t level, Range range,
                std::optional<uint64_t> parent, const std::string& from, Counts* counts);
  void CheckLeafNode(const Db& db, uint64_t pgno, size_t index, const LmdbNode& node,
                     Counts* counts);
  void CheckValue(const Db& db, uint64_t pgno, size_t index, std::string_view key,
                  std::string_view value);
  void CheckFreePages();
  bool Less(const Db& db, std::string_view a, std::string_view b) const {
    if (db.integer_keys) return IntegerKey(a) < IntegerKey(b);
    return a < b;  // LMDB's default order: bytes unsigned, then the shorter first
  }
  std::string OwnerName(uint16_t owner) const {
    if (owner == kFreeListed) return "the free-page list";
    if (owner == kMetaOwner) return "the meta pages";
    const size_t db = owner - kFirstDb;
    return db < names_.size() ? names_[db] : "?";
  }
  void Progress() {
    if (options_.progress && report_->pages % kProgressPages == 0) {
      options_.progress(report_->pages, last_page_ + 1);
    }
  }

  static constexpr uint16_t kMetaOwner = 1, kFreeListed = 2, kFirstDb = 3;

  const LmdbFile& file_;
  const VerifyOptions& options_;
  VerifyReport* report_;
  std::map<std::string, size_t> measures_;
  uint64_t last_page_ = 0;
  std::vector<uint16_t> owner_;     // by page: 0 unclaimed
  std::vector<std::string> names_;  // by owner - kFirstDb
  std::vector<std::pair<uint64_t, uint64_t>> free_pages_;  // (page, the free list's page)
  std::vector<std::pair<std::string, LmdbDbRecord>> named_;  // from the main database
};

bool Verifier::CheckMeta(int index) {
  const std::string where = "meta";
  std::string_view page = *file_.Page(index);
  const LmdbPageHeader h = LmdbFile::Header(page);
  const LmdbMeta m = file_.Meta(index);
  bool ok = true;
  if (h.pgno != static_cast<uint64_t>(index)) {
    Damage(where, index, absl::StrCat("the page says it is page ", h.pgno));
    ok = false;
  }
  if ((h.flags & L::kMeta) == 0) {
    Damage(where, index, absl::StrFormat("flags 0x%x lack P_META", h.flags));
    ok = false;
  }
  if (m.magic != L::kMagic) {
    Damage(where, index, absl::StrFormat("magic 0x%08x is not LMDB's 0x%08x", m.magic, L::kMagic));
    ok = false;
  }
  if (m.version != L::kDataVersion) {
    Damage(where, index, absl::StrCat("data version ", m.version, " is not LMDB 0.9's ", L::kDataVersion));
    ok = false;
  }
  return ok;
}

bool Verifier::Claim(const Db& db, uint64_t pgno, std::optional<uint64_t> parent,
                     const std::string& from) {
  if (pgno > last_page_) {
    Damage(db.name, parent,
           absl::StrCat(from, " points to page ", pgno, ", past the last used page ", last_page_));
    return false;
  }
  if (pgno >= file_.file_pages()) {
    Damage(db.name, parent,
           absl::StrCat(from, " points to page ", pgno, ", past the end of the file (",
                        file_.file_pages(), " pages)"));
    return false;
  }
  if (owner_[pgno] != 0) {
    Damage(db.name, parent,
           absl::StrCat(from, " points to page ", pgno, ", which ", OwnerName(owner_[pgno]),
                        " already uses"));
    return false;
  }
  owner_[pgno] = db.owner;
  ++report_->pages;
  Progress();
  return true;
}

void Verifier::CheckRecord(const Db& db) {
  const LmdbDbRecord& r = db.record;
  if (r.root == L::kNoPage) {
    if (r.depth != 0 || r.entries != 0 || r.branch_pages + r.leaf_pages + r.overflow_pages != 0) {
      Damage(db.name, std::nullopt,
             absl::StrCat("the database record has no root page but depth ", r.depth, " and ",
                          r.entries, " entries"));
    }
    return;
  }
  if (r.depth == 0 || r.depth > kMaxDepth) {
    Damage(db.name, std::nullopt, absl::StrCat("the database record's depth is ", r.depth));
  }
}

void Verifier::WalkDb(Db db) {
  db.owner = static_cast<uint16_t>(kFirstDb + names_.size());
  names_.push_back(db.name);
  CheckRecord(db);
  const LmdbDbRecord& r = db.record;
  if (r.root == L::kNoPage || r.depth == 0 || r.depth > kMaxDepth) return;
  Counts counts;
  WalkPage(db, r.root, 0, Range{}, std::nullopt, "the database record", &counts);
  auto compare = [&](const char* what, uint64_t recorded, uint64_t found) {
    if (recorded != found) {
      Damage(db.name, std::nullopt,
             absl::StrCat("the database record counts ", recorded, " ", what, ", the tree holds ", found));
    }
  };
  compare("entries", r.entries, counts.entries);
  compare("branch pages", r.branch_pages, counts.branch);
  compare("leaf pages", r.leaf_pages, counts.leaf);
  compare("overflow pages", r.overflow_pages, counts.overflow);
}

void Verifier::WalkPage(const Db& db, uint64_t pgno, size_t level, Range range,
                        std::optional<uint64_t> parent, const std::string& from, Counts* counts) {
  if (!Claim(db, pgno, parent, from)) return;
  const std::string_view page = *file_.Page(pgno);
  const LmdbPageHeader h = LmdbFile::Header(page);
  if (h.pgno != pgno) {
    Damage(db.name, pgno, absl::StrCat("the page says it is page ", h.pgno));
    return;
  }
  const bool bottom = level + 1 == db.record.depth;
  const uint16_t type = h.flags & ~(L::kDirty | L::kKeep);
  const uint16_t want = bottom ? L::kLeaf : L::kBranch;
  if (type != want) {
    Damage(db.name, pgno,
           absl::StrFormat("flags 0x%x where a %s page (0x%x) belongs, at level %d of %d", h.flags,
                           bottom ? "leaf" : "branch", want, level + 1, db.record.depth));
    return;
  }
  if (h.lower < L::kPageHeaderSize || h.lower > h.upper || h.upper > page.size() ||
      (h.lower - L::kPageHeaderSize) % 2 != 0) {
    Damage(db.name, pgno, absl::StrCat("free-space bounds lower ", h.lower, ", upper ", h.upper,
                                       " do not fit a page of ", page.size(), " bytes"));
    return;
  }
  const size_t keys = LmdbFile::Keys(h);
  if (keys < (bottom ? 1u : 2u)) {
    Damage(db.name, pgno, absl::StrCat(bottom ? "a leaf" : "a branch", " page with ", keys,
                                       keys == 1 ? " entry" : " entries"));
    return;
  }
  ++(bottom ? counts->leaf : counts->branch);
  std::vector<LmdbNode> nodes;
  nodes.reserve(keys);
  for (size_t i = 0; i < keys; ++i) {
    absl::StatusOr<LmdbNode> node = LmdbFile::Node(page, i, bottom);
    if (!node.ok()) {
      Damage(db.name, pgno, std::string(node.status().message()));
      return;
    }
    // A branch page's first key is not stored: its child holds everything below the second.
    const bool keyed = bottom || i > 0;
    if (keyed && (node->key.empty() || node->key.size() > kMaxKeySize)) {
      Damage(db.name, pgno, absl::StrCat("entry ", i, " has a key of ", node->key.size(),
                                         " bytes (LMDB allows 1 to ", kMaxKeySize, ")"));
      return;
    }
    if (keyed && db.integer_keys && node->key.size() != sizeof(uint64_t)) {
      Damage(db.name, pgno, absl::StrCat("entry ", i, " has an integer key of ", node->key.size(),
                                         " bytes"));
      return;
    }
    if (keyed) {
      if (!nodes.empty() && (bottom || i > 1) && !Less(db, nodes.back().key, node->key)) {
        Damage(db.name, pgno, absl::StrCat("entry ", i, "'s key ", KeyForMessage(node->key),
                                           " is not above entry ", i - 1, "'s ",
                                           KeyForMessage(nodes.back().key)));
        return;
      }
      if ((range.lower && Less(db, node->key, *range.lower)) ||
          (range.upper && !Less(db, node->key, *range.upper))) {
        Damage(db.name, pgno, absl::StrCat("entry ", i, "'s key ", KeyForMessage(node->key),
                                           " lies outside the range its parent page gives it"));
        return;
      }
    }
    nodes.push_back(*node);
  }
  if (bottom) {
    for (size_t i = 0; i < nodes.size(); ++i) CheckLeafNode(db, pgno, i, nodes[i], counts);
    return;
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    Range child;
    child.lower = i == 0 ? range.lower : std::optional<std::string_view>(nodes[i].key);
    child.upper = i + 1 < nodes.size() ? std::optional<std::string_view>(nodes[i + 1].key) : range.upper;
    WalkPage(db, nodes[i].child, level + 1, child, pgno, absl::StrCat("entry ", i), counts);
  }
}

void Verifier::CheckLeafNode(const Db& db, uint64_t pgno, size_t index, const LmdbNode& node,
                             Counts* counts) {
  ++counts->entries;
  ++report_->entries;
  const uint16_t want = db.values == Values::kMain ? L::kSubData : 0;
  if ((node.flags & ~L::kBigData) != want) {
    Damage(db.name, pgno, absl::StrFormat("entry %d (key %s) has node flags 0x%x", index,
                                          KeyForMessage(node.key), node.flags));
    return;
  }
  std::string_view value = node.data;
  if ((node.flags & L::kBigData) != 0) {
    uint64_t first = 0;
    std::memcpy(&first, node.data.data(), sizeof(first));
    const std::string from = absl::StrCat("entry ", index);
    if (!Claim(db, first, pgno, from)) return;
    const std::string_view start = *file_.Page(first);
    const LmdbPageHeader h = LmdbFile::Header(start);
    const uint64_t needed = (L::kPageHeaderSize - 1 + uint64_t{node.data_size}) / file_.page_size() + 1;
    if (h.pgno != first || (h.flags & ~(L::kDirty | L::kKeep)) != L::kOverflow || h.pages < needed) {
      Damage(db.name, first,
             absl::StrFormat("page %d %s's value of %d bytes needs an overflow run of %d pages "
                             "here; the page says page %d, flags 0x%x, %d pages",
                             pgno, from, node.data_size, needed, h.pgno, h.flags, h.pages));
      return;
    }
    counts->overflow += h.pages;
    for (uint64_t p = first + 1; p < first + h.pages; ++p) {
      if (!Claim(db, p, pgno, absl::StrCat(from, "'s overflow run"))) return;
    }
    value = std::string_view(start.data() + L::kPageHeaderSize, node.data_size);
  }
  CheckValue(db, pgno, index, node.key, value);
}

void Verifier::CheckValue(const Db& db, uint64_t pgno, size_t index, std::string_view key,
                          std::string_view value) {
  auto bad = [&](absl::string_view why) {
    Damage(db.name, pgno, absl::StrCat("entry ", index, " (key ", KeyForMessage(key), "): ", why));
  };
  if (db.long_keys) {
    absl::StatusOr<LongEntry> entry = DecodeLongEntry(key, value);
    if (!entry.ok()) return bad(entry.status().message());
    if (LongStoredKey(entry->key) != key) {
      return bad("the rest of the key in the value does not hash to the stored key");
    }
    value = entry->value;
  }
  switch (db.values) {
    case Values::kNone:
      return;
    case Values::kMain: {
      if (value.size() != L::kDbRecordSize) {
        return bad(absl::StrCat("a database record of ", value.size(), " bytes"));
      }
      named_.emplace_back(std::string(key), ParseDbRecord(value));
      return;
    }
    case Values::kFree: {
      uint64_t n = 0;
      if (value.size() >= sizeof(n)) std::memcpy(&n, value.data(), sizeof(n));
      if (value.size() < sizeof(n) || value.size() != (n + 1) * sizeof(n)) {
        return bad(absl::StrCat("a free-page list of ", value.size(), " bytes claiming ", n, " pages"));
      }
      for (uint64_t i = 1; i <= n; ++i) {
        uint64_t free_page = 0;
        std::memcpy(&free_page, value.data() + i * sizeof(free_page), sizeof(free_page));
        free_pages_.emplace_back(free_page, pgno);
      }
      return;
    }
    case Values::kMeta: {
      auto digits = [](std::string_view v) {
        return !v.empty() && std::all_of(v.begin(), v.end(), [](char c) { return absl::ascii_isdigit(c); });
      };
      if (key == "schema" && !digits(value)) return bad("the schema version is not a number");
      if (key == "flushed_layer" && !digits(value)) return bad("flushed_layer is not a number");
      if ((key.starts_with("view/") || key.starts_with("agg/")) && key.ends_with("/state") &&
          value != kStateReady && value != kStateBuilding) {
        return bad(absl::StrCat("a state that is neither ", std::string(kStateReady), " nor ",
                                std::string(kStateBuilding)));
      }
      return;
    }
    case Values::kItems: {
      absl::StatusOr<StoredItem> stored = DecodeStoredItem(value);
      if (!stored.ok()) return bad(stored.status().message());
      if (!stored->tombstone) {
        if (absl::Status s = DecodeItem(stored->image).status(); !s.ok()) {
          return bad(absl::StrCat("the item image: ", s.message()));
        }
      }
      return;
    }
    case Values::kView: {
      if (absl::Status s = DecodeItem(value).status(); !s.ok()) {
        return bad(absl::StrCat("the entry's item: ", s.message()));
      }
      return;
    }
    case Values::kChanges: {
      absl::StatusOr<uint64_t> sequence = ChangeSequence(key);
      if (!sequence.ok()) return bad(sequence.status().message());
      std::string_view block = value;
      if (block.empty()) return bad("an empty change block");
      for (uint64_t s = *sequence; !block.empty(); ++s) {
        if (absl::Status popped = PopChange(&block, s).status(); !popped.ok()) {
          return bad(popped.message());
        }
      }
      return;
    }
    case Values::kGroups: {
      if (db.measures == 0) return;
      if (absl::Status s = DecodeAggregateState(value, db.measures).status(); !s.ok()) {
        return bad(s.message());
      }
      return;
    }
    case Values::kExtremes: {
      uint64_t count = 0;
      std::string_view rest = value;
      if (!GetVarint(&rest, &count) || !rest.empty() || count == 0) {
        return bad("a min/max value count that is not one positive varint");
      }
      return;
    }
  }
}

void Verifier::CheckFreePages() {
  for (const auto& [page, listed_on] : free_pages_) {
    if (page < 2 || page > last_page_) {
      Damage("free pages", listed_on,
             absl::StrCat("lists page ", page, " as free, outside pages 2 to ", last_page_));
    } else if (owner_[page] != 0) {
      Damage("free pages", listed_on,
             absl::StrCat("lists page ", page, " as free, and ", OwnerName(owner_[page]),
                          owner_[page] == kFreeListed ? " lists it too" : " uses it"));
    } else {
      owner_[page] = kFreeListed;
    }
  }
}

void Verifier::Run() {
  const bool meta0 = CheckMeta(0), meta1 = CheckMeta(1);
  const int current = file_.CurrentMeta();
  if (!meta0 || !meta1 || current < 0) return;  // LMDB refuses the file, with MDB_INVALID
  const LmdbMeta m = file_.Meta(current);
  last_page_ = m.last_page;
  report_->used_bytes = (m.last_page + 1) * file_.page_size();
  if (m.last_page + 1 > file_.file_pages() || m.last_page < 1) {
    Damage("meta", current,
           absl::StrCat("the last used page ", m.last_page, " is not within the file's ",
                        file_.file_pages(), " pages"));
    return;
  }
  owner_.assign(m.last_page + 1, 0);
  owner_[0] = owner_[1] = kMetaOwner;
  report_->pages = 2;

  Db free_db{"free pages", m.free_db, Values::kFree, 0, /*integer_keys=*/true};
  if ((m.free_db.flags & L::kPersistentDbFlags) != L::kIntegerKey) {
    Damage(free_db.name, std::nullopt, absl::StrFormat("database flags 0x%x, not MDB_INTEGERKEY", m.free_db.flags));
  } else {
    WalkDb(free_db);
  }
  Db main{"main", m.main_db, Values::kMain};
  if ((m.main_db.flags & L::kPersistentDbFlags) != 0) {
    Damage(main.name, std::nullopt, absl::StrFormat("database flags 0x%x, which the store never sets", m.main_db.flags));
    return;
  }
  WalkDb(main);
  for (auto& [name, record] : named_) {
    Db db{name, record};
    std::string_view kind = name;
    if (kind.starts_with("long/")) {
      kind.remove_prefix(5);
      db.long_keys = true;
    }
    if (name == "meta") {
      db.values = Values::kMeta;
    } else if (name == "changes") {
      db.values = Values::kChanges;
    } else if (kind.starts_with("items/")) {
      db.values = Values::kItems;
    } else if (kind.starts_with("view/")) {
      db.values = Values::kView;
    } else if (name.starts_with("aggm/")) {
      db.values = Values::kExtremes;
    } else if (name.starts_with("agg/")) {
      db.values = Values::kGroups;
      auto it = measures_.find(name.substr(4));
      if (it != measures_.end()) db.measures = it->second;
    }
    if ((record.flags & L::kPersistentDbFlags) != 0) {
      // DUPSORT and the key orders other than the default: the store opens none of them.
      Damage(name, std::nullopt, absl::StrFormat("database flags 0x%x, which the store never sets", record.flags));
      continue;
    }
    WalkDb(std::move(db));
  }
  CheckFreePages();
  if (options_.progress) options_.progress(report_->pages, last_page_ + 1);
}

}  // namespace

absl::StatusOr<VerifyReport> VerifyStore(const std::string& data_path, const VerifyOptions& options) {
  VerifyReport report;
  absl::StatusOr<std::unique_ptr<LmdbFile>> file = LmdbFile::Open(data_path);
  if (!file.ok()) {
    if (!absl::IsDataLoss(file.status())) return file.status();
    report.damage_count = 1;
    report.damage.push_back({"meta", 0, true, std::string(file.status().message())});
    return report;
  }
  Verifier(**file, options, &report).Run();
  return report;
}

}  // namespace cdcview
