#include "daemon/server/watch_snapshot.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/server/proto_convert.h"
#include "daemon/server/store_damage.h"
#include "daemon/store/cursor.h"
#include "index_builders/key_codec.h"

namespace cdcview {

WatchSnapshot::WatchSnapshot(std::vector<std::string> prefixes) : prefixes_(std::move(prefixes)) {}

absl::StatusOr<size_t> WatchSnapshot::ReadChunk(const ViewSpec& view, const Txn& txn,
                                                MDB_dbi dbi, size_t budget,
                                                std::vector<v1::WatchEvent>* out) {
  size_t bytes = 0;
  std::unique_ptr<Cursor> cursor = txn.OpenCursor(dbi);
  while (!done() && (bytes == 0 || bytes < budget)) {
    const std::string& prefix = prefixes_[prefix_];
    bool ok = cursor->Seek(started_ ? std::string_view(last_) : std::string_view(prefix));
    if (ok && started_ && cursor->key() == last_) ok = cursor->Next();
    for (; ok && cursor->key().starts_with(prefix); ok = cursor->Next()) {
      v1::WatchEvent& e = out->emplace_back();
      if (absl::Status s = EntryToProto(view, cursor->key(), cursor->value(),
                                        e.mutable_snapshot_entry());
          !s.ok()) {
        return s;
      }
      last_.assign(cursor->key());
      started_ = true;
      bytes += e.ByteSizeLong();
      if (bytes >= budget) return bytes;
    }
    if (!cursor->status().ok()) {
      return StoreDamageError(cursor->status(), absl::StrCat("view ", view.name),
                              started_ ? std::string_view(last_) : std::string_view(prefix),
                              PrefixSuccessor(prefix));
    }
    ++prefix_;
    started_ = false;
    last_.clear();
  }
  return bytes;
}

bool WatchSnapshot::Covers(std::string_view key) const {
  for (size_t i = 0; i < prefix_; ++i) {
    if (key.starts_with(prefixes_[i])) return true;
  }
  return !done() && started_ && key.starts_with(prefixes_[prefix_]) && key <= last_;
}

}  // namespace cdcview
