// What the store's own files share and nothing outside daemon/store/ includes: the conversions
// between LMDB's MDB_val and string_view, and the meta key that ties LMDB to the write-back
// layers.
//
// Thread-safety: pure functions and constants.
// Ownership: a converted value borrows the bytes it was made from (an MDB_val that LMDB filled
// points into the map: valid only inside its transaction).
#pragma once

#include <lmdb.h>

#include <string_view>

namespace cdcview {
namespace store_internal {

inline MDB_val Val(std::string_view s) {
  return MDB_val{s.size(), const_cast<char*>(s.data())};
}
inline std::string_view View(const MDB_val& v) {
  return std::string_view(static_cast<const char*>(v.mv_data), v.mv_size);
}

// meta: the sequence of the last pending layer that LMDB holds (write-back).
inline constexpr char kFlushedKey[] = "flushed_layer";

}  // namespace store_internal
}  // namespace cdcview
