// VerifyStore: the check LMDB does not make. LMDB has no page checksums and trusts every page
// it reads, so a damaged page (a bad disk, a torn copy, a stray write) can crash a reader
// (a child page number past the map, a node offset past its page) or serve wrong answers. The
// verifier reads data.mdb itself (lmdb_file.h: a read-only mapping, bounds checked) and walks,
// from the current meta page, the free-page database, the main database and every named
// database it lists, checking:
//   * the meta pages: magic, version, the last used page within the file, the database
//     records' roots and depths;
//   * each page: its number within the file and at most the last used page, its own page
//     number, its type where the tree expects one (branch above, leaf at the bottom, overflow
//     for big values), its free-space bounds and node offsets, and that no page is reached
//     twice (or is both free and in use);
//   * keys: in order within a page and across pages (each within its parent's separators), of
//     a size LMDB allows;
//   * the records' counts: entries and branch, leaf and overflow pages;
//   * overflow runs: within the file, the right length, each page's header;
//   * cdcview's own values, with the store's decoders: items/<table> (stored item, then item
//     image), view/<name> (item image), changes (blocks of changes), agg/<name> (group
//     states, when the aggregate's measures are known), and the meta keys it knows
//     (schema, view and aggregate states, flushed_layer).
// DUPSORT and the other database flags are not used by the store: a record with them is
// reported as damaged.
//
// Thread-safety: a pure function over a file no process writes meanwhile (the caller holds
// the store's lock, store_lock.h). Ownership: the report owns its strings.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/config/config.h"

namespace cdcview {

// One thing found damaged: where and what.
struct StoreDamage {
  std::string database;  // "meta page", "free pages", "main", "items/orders", ...
  uint64_t page = 0;     // the page number, when the damage is on a page
  bool on_page = false;
  std::string what;
  // "<database> page <n>: <what>", or "<database>: <what>".
  std::string ToString() const;
};

struct VerifyReport {
  std::vector<StoreDamage> damage;  // the first kMaxListed found
  uint64_t damage_count = 0;        // all found
  uint64_t pages = 0;               // pages visited
  uint64_t entries = 0;             // leaf entries visited, in all databases
  uint64_t used_bytes = 0;          // (last used page + 1) * page size
  bool clean() const { return damage_count == 0; }
  // "N problems", then up to `lines` of them, each on a line of its own ("\n  " before it),
  // then "\n  ... and M more" for those not shown.
  std::string Summary(size_t lines) const;
  static constexpr size_t kMaxListed = 100;
};

struct VerifyOptions {
  // The configured tables, for the aggregates' measure counts (their group states cannot be
  // decoded without); aggregates not found here are checked for order and layout only.
  std::vector<TableSpec> tables;
  // Called every few thousand pages with the pages visited and the used pages in all.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

// Verifies the LMDB data file at `data_path` (the store's data.mdb). Errors are for a file
// that cannot be read at all (missing, unreadable); damage, however bad, is in the report.
absl::StatusOr<VerifyReport> VerifyStore(const std::string& data_path, const VerifyOptions& options);

}  // namespace cdcview
