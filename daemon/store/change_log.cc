#include "daemon/store/change_log.h"

#include "index_builders/item_codec.h"

namespace cdcview {
namespace {

void PutField(std::string_view field, std::string* out) {
  PutVarint(field.size(), out);
  out->append(field);
}

bool GetField(std::string_view* in, std::string_view* field) {
  uint64_t n;
  if (!GetVarint(in, &n) || n > in->size()) return false;
  *field = in->substr(0, n);
  in->remove_prefix(n);
  return true;
}

uint64_t SequenceOf(std::string_view key) {
  uint64_t s = 0;
  for (unsigned char c : key) s = (s << 8) | c;
  return s;
}

}  // namespace

std::string ChangeKey(uint64_t sequence) {
  std::string key(8, '\0');
  for (int i = 7; i >= 0; --i, sequence >>= 8) key[i] = static_cast<char>(sequence & 0xFF);
  return key;
}

std::string EncodeChange(std::string_view view, ChangeOp op, std::string_view key,
                         std::string_view value, std::string_view source,
                         std::string_view partition, std::string_view position) {
  std::string out;
  out.reserve(8 + view.size() + key.size() + value.size() + source.size() + partition.size() +
              position.size());
  out.push_back(static_cast<char>(op));
  PutField(view, &out);
  PutField(key, &out);
  PutField(value, &out);
  PutField(source, &out);
  PutField(partition, &out);
  PutField(position, &out);
  return out;
}

absl::StatusOr<ChangeView> DecodeChange(std::string_view key, std::string_view value) {
  ChangeView c;
  if (key.size() != 8 || value.empty() ||
      (value[0] != static_cast<char>(ChangeOp::kPut) &&
       value[0] != static_cast<char>(ChangeOp::kDelete))) {
    return absl::DataLossError("change log entry is damaged (bad key or op byte)");
  }
  c.sequence = SequenceOf(key);
  c.op = static_cast<ChangeOp>(value[0]);
  value.remove_prefix(1);
  if (!GetField(&value, &c.view) || !GetField(&value, &c.key) || !GetField(&value, &c.value) ||
      !GetField(&value, &c.source) || !GetField(&value, &c.partition) ||
      !GetField(&value, &c.position) || !value.empty()) {
    return absl::DataLossError("change log entry is damaged (truncated field)");
  }
  return c;
}

std::optional<ChangeLogBounds> ReadChangeLogBounds(const Txn& txn, MDB_dbi changes) {
  auto cursor = txn.OpenCursor(changes);
  if (!cursor->SeekFirst()) return std::nullopt;
  ChangeLogBounds b;
  b.oldest = SequenceOf(cursor->key());
  cursor->SeekLast();
  b.newest = SequenceOf(cursor->key());
  return b;
}

void ChangeLogWriter::Load(const Txn& txn) {
  State s;
  if (auto b = ReadChangeLogBounds(txn, dbi_)) {
    s.oldest = b->oldest;
    s.next = b->newest + 1;
  }
  committed_ = pending_ = s;
}

absl::Status ChangeLogWriter::Append(WriteTxn* txn, std::string_view value) {
  if (absl::Status s = txn->Put(dbi_, ChangeKey(pending_.next), value); !s.ok()) return s;
  ++pending_.next;
  return absl::OkStatus();
}

absl::Status ChangeLogWriter::Trim(WriteTxn* txn) {
  // The oldest keys sit on the leftmost leaf pages, so each delete touches pages the previous
  // one already copied: trimming costs about as much as the appends it follows.
  while (pending_.next - pending_.oldest > retain_) {
    if (absl::Status s = txn->Delete(dbi_, ChangeKey(pending_.oldest)); !s.ok()) return s;
    ++pending_.oldest;
  }
  return absl::OkStatus();
}

}  // namespace cdcview
