// Write-back layers: writes applied in memory and not committed to LMDB yet, one immutable
// PendingLayer per batch (see "Write-back" in store.h), and PendingOverlay, the layers one
// transaction reads over its LMDB snapshot, newest first.
//
// A layer holds the last write of each key it touched, per database, with a Bloom filter of
// those keys so that a lookup of a key the layer lacks costs two bit tests, not a tree search.
//
// Thread-safety: a layer is written by the one buffered WriteTxn that records it, then
// published (Flusher::Publish) and never changed again: published layers are read by any
// number of threads without locks. PendingOverlay is a value owned by one transaction.
// Ownership: PendingLayers shares the published layers (a transaction keeps the ones it reads
// alive while the flusher drops them); string_views returned by PendingOverlay::Find point
// into a layer and are valid while the transaction that holds the overlay lives.
#pragma once

#include <lmdb.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cdcview {

struct PendingLayer {
  enum class Op : uint8_t { kPut, kAppend, kDelete };
  struct Entry {
    Op op;
    std::string value;  // empty for a delete
  };
  using Entries = std::map<std::string, Entry, std::less<>>;
  struct Db {
    bool cleared = false;  // WriteTxn::Clear: what older layers and LMDB hold is gone
    Entries entries;
    // The keys' Bloom filter (16 bits per key, two probes), built when the layer is
    // published. Empty: not built (a layer being written), so every key may be there.
    std::vector<uint64_t> bloom;
    bool MayHave(size_t hash) const;
    void BuildBloom();
  };
  // Per entry, besides its key and value: the map node and the strings (for `bytes`).
  static constexpr size_t kEntryOverhead = 96;

  uint64_t sequence = 0;  // 1, 2, ... in the order layers are published, across restarts
  std::chrono::steady_clock::time_point published;
  size_t bytes = 0;     // what the layer holds, roughly: keys, values, map nodes
  // By dbi; a dbi past the end was not touched. A deque: growing it for a higher dbi keeps
  // the entries of the others where a cursor of the layer's own transaction points.
  std::deque<Db> dbs;
  const Db* db(MDB_dbi dbi) const { return dbi < dbs.size() ? &dbs[dbi] : nullptr; }
};
using PendingLayers = std::vector<std::shared_ptr<const PendingLayer>>;

// The pending layers one transaction reads over its LMDB snapshot: the published layers the
// snapshot does not hold yet, and a buffered WriteTxn's own writes, newest of all.
struct PendingOverlay {
  // The published layers the snapshot lacks are (*layers)[first_layer..], oldest first.
  std::shared_ptr<const PendingLayers> layers;
  size_t first_layer = 0;
  const PendingLayer* own = nullptr;

  bool empty() const {
    return own == nullptr && (layers == nullptr || first_layer >= layers->size());
  }
  // What the layers say of `key`: a value, absent (deleted or cleared), or nothing
  // (nullopt: ask LMDB).
  std::optional<std::optional<std::string_view>> Find(MDB_dbi dbi, std::string_view key) const;
  // The layers' entries of `dbi` that a cursor merges, newest first; *lmdb says whether LMDB
  // shows under them (false: a layer cleared the database).
  std::vector<const PendingLayer::Entries*> CursorLayers(MDB_dbi dbi, bool* lmdb) const;
};

}  // namespace cdcview
