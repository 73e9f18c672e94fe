#include "daemon/store/pending_layer.h"

#include <functional>
#include <utility>

namespace cdcview {
namespace {

// The two probes of a key's hash into a filter of `bits` (a power of two) bits.
std::pair<size_t, size_t> BloomProbes(size_t hash, size_t bits) {
  const size_t mask = bits - 1;
  return {hash & mask, ((hash >> 32) | (hash << 32)) * 0x9E3779B97F4A7C15ull >> 7 & mask};
}
size_t KeyHash(std::string_view key) { return std::hash<std::string_view>{}(key); }

}  // namespace

bool PendingLayer::Db::MayHave(size_t hash) const {
  if (bloom.empty()) return true;
  const auto [a, b] = BloomProbes(hash, bloom.size() * 64);
  return (bloom[a / 64] >> (a % 64) & 1) != 0 && (bloom[b / 64] >> (b % 64) & 1) != 0;
}

void PendingLayer::Db::BuildBloom() {
  size_t bits = 64;
  while (bits < entries.size() * 16) bits *= 2;
  bloom.assign(bits / 64, 0);
  for (const auto& [key, entry] : entries) {
    const auto [a, b] = BloomProbes(KeyHash(key), bits);
    bloom[a / 64] |= uint64_t{1} << (a % 64);
    bloom[b / 64] |= uint64_t{1} << (b % 64);
  }
}

std::optional<std::optional<std::string_view>> PendingOverlay::Find(MDB_dbi dbi,
                                                                     std::string_view key) const {
  const size_t hash = KeyHash(key);
  // The layer's answer, or nullopt: ask the next older one.
  auto look = [&](const PendingLayer& layer) -> std::optional<std::optional<std::string_view>> {
    const PendingLayer::Db* db = layer.db(dbi);
    if (db == nullptr) return std::nullopt;
    if (db->MayHave(hash)) {
      if (auto it = db->entries.find(key); it != db->entries.end()) {
        if (it->second.op == PendingLayer::Op::kDelete) return std::optional<std::string_view>();
        return std::optional<std::string_view>(it->second.value);
      }
    }
    if (db->cleared) return std::optional<std::string_view>();  // absent, whatever is older
    return std::nullopt;
  };
  if (own != nullptr) {
    if (auto found = look(*own)) return found;
  }
  if (layers != nullptr) {
    for (size_t i = layers->size(); i > first_layer; --i) {
      if (auto found = look(*(*layers)[i - 1])) return found;
    }
  }
  return std::nullopt;
}

std::vector<const PendingLayer::Entries*> PendingOverlay::CursorLayers(MDB_dbi dbi,
                                                                       bool* lmdb) const {
  std::vector<const PendingLayer::Entries*> entries;
  *lmdb = true;
  auto add = [&](const PendingLayer& layer) {  // false: nothing older shows
    const PendingLayer::Db* db = layer.db(dbi);
    if (db == nullptr) return true;
    if (!db->entries.empty()) entries.push_back(&db->entries);
    *lmdb = !db->cleared;
    return *lmdb;
  };
  bool older = own == nullptr || add(*own);
  if (layers != nullptr) {
    for (size_t i = layers->size(); older && i > first_layer; --i) older = add(*(*layers)[i - 1]);
  }
  return entries;
}

}  // namespace cdcview
