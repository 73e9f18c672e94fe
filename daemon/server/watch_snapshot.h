// WatchSnapshot: a Watch stream's snapshot, read a chunk at a time in key order, each chunk in a
// read transaction of its own, so that a stream holds neither the whole view in memory nor a
// transaction while its client reads (one would pin old pages and hold off a map resize).
//
// Chunks read at different log positions do not make one consistent snapshot by themselves:
// an entry changed after its chunk was read would be missed. The caller makes it exact by
// sending, before the next chunk, every change logged since the previous chunk whose key a
// chunk already read covers (Covers); changes to keys not covered yet are in the chunks still
// to be read. So the entries and changes sent before snapshot_done end exactly at the state of
// the last chunk's position.
//
// Not thread-safe: one per stream, used by its handler thread. Owns copies of what it needs.
#pragma once

#include <lmdb.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "cdcview/v1/view_service.pb.h"
#include "daemon/store/txn.h"
#include "index_builders/view_spec.h"

namespace cdcview {

class WatchSnapshot {
 public:
  // `prefixes`: the encoded keys whose entries make the snapshot, each a whole key component
  // and none a prefix of another ("" for the whole view).
  explicit WatchSnapshot(std::vector<std::string> prefixes);

  // Reads the next entries of `view` (database `dbi` in `txn`) after those read so far, as
  // snapshot_entry events appended to `out`, until their serialized sizes reach `budget`
  // bytes (at least one entry) or the entries end. Returns the bytes appended.
  absl::StatusOr<size_t> ReadChunk(const ViewSpec& view, const Txn& txn, MDB_dbi dbi,
                                   size_t budget, std::vector<v1::WatchEvent>* out);

  // Every entry read.
  bool done() const { return prefix_ == prefixes_.size(); }

  // Whether `key` (an entry key of one of the prefixes) lies in a key range already read: a
  // change to it logged after that read is not in the entries returned.
  bool Covers(std::string_view key) const;

 private:
  std::vector<std::string> prefixes_;
  size_t prefix_ = 0;     // the prefix being read; prefixes_.size() when done
  bool started_ = false;  // whether last_ holds a key read under prefixes_[prefix_]
  std::string last_;      // the last key read under prefixes_[prefix_]
};

}  // namespace cdcview
