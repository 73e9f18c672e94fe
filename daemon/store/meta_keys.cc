#include "daemon/store/meta_keys.h"

#include <memory>

namespace cdcview {

std::string PositionKey(std::string_view source, std::string_view partition) {
  std::string key(kPositionPrefix);
  key.append(source).append("/").append(partition);
  return key;
}

std::string PartitionIdKey(std::string_view source, std::string_view partition) {
  std::string key(kPartitionIdPrefix);
  key.append(source).append("/").append(partition);
  return key;
}

std::string ViewMetaKey(std::string_view view, std::string_view field) {
  std::string key("view/");
  key.append(view).append("/").append(field);
  return key;
}

std::string AggregateMetaKey(std::string_view aggregate, std::string_view field) {
  std::string key("agg/");
  key.append(aggregate).append("/").append(field);
  return key;
}

std::string TombstonesMetaKey(std::string_view table, std::string_view field) {
  std::string key("tombstones/");
  key.append(table).append("/").append(field);
  return key;
}

absl::Status ForEachPosition(
    const Txn& txn, MDB_dbi meta,
    const std::function<void(std::string_view, std::string_view, std::string_view)>& fn) {
  auto cursor = txn.OpenCursor(meta);
  for (bool ok = cursor->Seek(kPositionPrefix); ok && cursor->key().starts_with(kPositionPrefix);
       ok = cursor->Next()) {
    std::string_view rest = cursor->key().substr(kPositionPrefix.size());
    size_t slash = rest.find('/');  // source names have no '/', partitions may
    if (slash == std::string_view::npos) continue;
    fn(rest.substr(0, slash), rest.substr(slash + 1), cursor->value());
  }
  return cursor->status();
}

}  // namespace cdcview
