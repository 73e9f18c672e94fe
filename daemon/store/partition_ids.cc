#include "daemon/store/partition_ids.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/store/meta_keys.h"

namespace cdcview {

absl::Status PartitionIds::Load(const Txn& txn, MDB_dbi meta) {
  absl::flat_hash_map<std::string, uint32_t> by_key;
  std::vector<std::optional<Entry>> by_id;
  auto cursor = txn.OpenCursor(meta);
  for (bool ok = cursor->Seek(kPartitionIdPrefix); ok && cursor->key().starts_with(kPartitionIdPrefix);
       ok = cursor->Next()) {
    const std::string_view key = cursor->key();
    const std::string_view rest = key.substr(kPartitionIdPrefix.size());
    const size_t slash = rest.find('/');  // source names have no '/', partitions may
    uint32_t id = 0;
    const std::string_view value = cursor->value();
    if (slash == std::string_view::npos ||
        !absl::SimpleAtoi(absl::string_view(value.data(), value.size()), &id) || id == 0) {
      return absl::DataLossError(
          absl::StrCat("meta key ", absl::string_view(key.data(), key.size()), " does not hold a partition id"));
    }
    if (by_id.size() < id) by_id.resize(id);
    by_id[id - 1] = Entry{std::string(rest.substr(0, slash)), std::string(rest.substr(slash + 1)), true};
    by_key.emplace(key, id);
  }
  if (!cursor->status().ok()) return cursor->status();
  absl::MutexLock lock(&mu_);
  by_key_ = std::move(by_key);
  by_id_ = std::move(by_id);
  return absl::OkStatus();
}

PartitionIds::Id PartitionIds::Lookup(std::string_view source, std::string_view partition) {
  std::string key = PartitionIdKey(source, partition);
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = by_key_.try_emplace(std::move(key), static_cast<uint32_t>(by_id_.size() + 1));
  if (inserted) by_id_.push_back(Entry{std::string(source), std::string(partition), false});
  return Id{it->second, by_id_[it->second - 1]->saved};
}

absl::Status PartitionIds::Save(WriteTxn* txn, MDB_dbi meta, uint32_t id) const {
  std::string key;
  {
    absl::MutexLock lock(&mu_);
    const Entry& entry = *by_id_[id - 1];
    key = PartitionIdKey(entry.source, entry.partition);
  }
  return txn->Put(meta, key, absl::StrCat(id));
}

void PartitionIds::MarkSaved(uint32_t id) {
  absl::MutexLock lock(&mu_);
  by_id_[id - 1]->saved = true;
}

std::optional<std::pair<std::string, std::string>> PartitionIds::Find(uint32_t id) const {
  absl::MutexLock lock(&mu_);
  if (id == 0 || id > by_id_.size() || !by_id_[id - 1]) return std::nullopt;
  return std::make_pair(by_id_[id - 1]->source, by_id_[id - 1]->partition);
}

}  // namespace cdcview
