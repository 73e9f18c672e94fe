#include "daemon/store/change_log.h"

#include "absl/strings/str_cat.h"
#include "index_builders/coding.h"

namespace cdcview {
namespace {

absl::Status Damaged(std::string_view what) {
  return absl::DataLossError(absl::StrCat("change log entry is damaged (", std::string(what), ")"));
}

}  // namespace

std::string ChangeKey(uint64_t sequence) {
  std::string key;
  PutBigEndian64(sequence, &key);
  return key;
}

absl::StatusOr<uint64_t> ChangeSequence(std::string_view key) {
  if (key.size() != 8) return Damaged("bad key");
  return DecodeBigEndian64(key.data());
}

void AppendChange(std::string_view view, ChangeOp op, std::string_view key,
                  std::string_view value, std::string_view source, std::string_view partition,
                  std::string_view position, std::string* block) {
  block->push_back(static_cast<char>(op));
  PutLengthPrefixed(view, block);
  PutLengthPrefixed(key, block);
  PutLengthPrefixed(value, block);
  PutLengthPrefixed(source, block);
  PutLengthPrefixed(partition, block);
  PutLengthPrefixed(position, block);
}

absl::StatusOr<ChangeView> PopChange(std::string_view* block, uint64_t sequence) {
  ChangeView c;
  if (block->empty() || ((*block)[0] != static_cast<char>(ChangeOp::kPut) &&
                         (*block)[0] != static_cast<char>(ChangeOp::kDelete))) {
    return Damaged("bad op byte");
  }
  c.sequence = sequence;
  c.op = static_cast<ChangeOp>((*block)[0]);
  block->remove_prefix(1);
  if (!GetLengthPrefixed(block, &c.view) || !GetLengthPrefixed(block, &c.key) ||
      !GetLengthPrefixed(block, &c.value) || !GetLengthPrefixed(block, &c.source) ||
      !GetLengthPrefixed(block, &c.partition) || !GetLengthPrefixed(block, &c.position)) {
    return Damaged("truncated field");
  }
  return c;
}

absl::StatusOr<std::optional<ChangeLogBounds>> ReadChangeLogBounds(const Txn& txn,
                                                                   MDB_dbi changes) {
  auto cursor = txn.OpenCursor(changes);
  if (!cursor->SeekFirst()) {
    if (!cursor->status().ok()) return cursor->status();
    return std::nullopt;
  }
  ChangeLogBounds b;
  auto oldest = ChangeSequence(cursor->key());
  if (!oldest.ok()) return oldest.status();
  b.oldest = *oldest;
  if (!cursor->SeekLast()) return cursor->status();
  auto first = ChangeSequence(cursor->key());
  if (!first.ok()) return first.status();
  b.newest = *first;
  std::string_view block = cursor->value();
  if (absl::Status s = PopChange(&block, b.newest).status(); !s.ok()) return s;
  while (!block.empty()) {
    if (absl::Status s = PopChange(&block, ++b.newest).status(); !s.ok()) return s;
  }
  return b;
}

// ---- ChangeLogReader

ChangeLogReader::ChangeLogReader(const Txn& txn, MDB_dbi changes)
    : cursor_(txn.OpenCursor(changes)) {}

absl::StatusOr<bool> ChangeLogReader::Seek(uint64_t from) {
  const std::string key = ChangeKey(from);
  bool valid = cursor_->Seek(key);
  if (!valid || cursor_->key() != key) {
    // `from` is inside the block before, if there is one.
    valid = valid ? cursor_->Prev() : cursor_->SeekLast();
    if (!valid) valid = cursor_->SeekFirst();  // `from` is older than the log
  }
  next_sequence_ = 0;  // a new start: no block to follow on from
  absl::StatusOr<bool> ok = EnterBlock(valid);
  while (ok.ok() && *ok && change_.sequence < from) ok = Next();
  return ok;
}

absl::StatusOr<bool> ChangeLogReader::Next() { return Advance(); }

absl::StatusOr<bool> ChangeLogReader::EnterBlock(bool valid) {
  if (!valid) {
    if (!cursor_->status().ok()) return cursor_->status();
    return false;
  }
  auto first = ChangeSequence(cursor_->key());
  if (!first.ok()) return first.status();
  if (next_sequence_ != 0 && *first != next_sequence_) {
    return absl::DataLossError(absl::StrCat("change log is damaged (block ", *first,
                                            " follows the change before ", next_sequence_, ")"));
  }
  next_sequence_ = *first;
  rest_ = cursor_->value();
  if (rest_.empty()) return Damaged("empty block");
  return Advance();
}

absl::StatusOr<bool> ChangeLogReader::Advance() {
  if (rest_.empty()) return EnterBlock(cursor_->Next());
  auto change = PopChange(&rest_, next_sequence_);
  if (!change.ok()) return change.status();
  ++next_sequence_;
  change_ = *change;
  return true;
}

// ---- ChangeLogWriter

absl::Status ChangeLogWriter::Load(const Txn& txn) {
  State s;
  auto bounds = ReadChangeLogBounds(txn, dbi_);
  if (!bounds.ok()) return bounds.status();
  if (*bounds) {
    s.oldest = (*bounds)->oldest;
    s.next = (*bounds)->newest + 1;
  }
  committed_ = pending_ = s;
  block_.clear();
  return absl::OkStatus();
}

absl::Status ChangeLogWriter::Append(WriteTxn* txn, std::string_view view, ChangeOp op,
                                     std::string_view key, std::string_view value,
                                     std::string_view source, std::string_view partition,
                                     std::string_view position) {
  if (block_.empty()) block_first_ = pending_.next;
  const size_t before = block_.size();
  AppendChange(view, op, key, value, source, partition, position, &block_);
  ++pending_.next;
  if (before > 0 && block_.size() > kChangeBlockBytes) {
    // The change does not fit: the block ends before it, and it opens the next one.
    return WriteBlock(txn, before);
  }
  return absl::OkStatus();
}

absl::Status ChangeLogWriter::WriteBlock(WriteTxn* txn, size_t size) {
  if (absl::Status s = txn->Append(dbi_, ChangeKey(block_first_),
                                   std::string_view(block_).substr(0, size));
      !s.ok()) {
    return s;
  }
  block_.erase(0, size);
  // What is left is the one change that did not fit, or nothing.
  block_first_ = pending_.next - (block_.empty() ? 0 : 1);
  return absl::OkStatus();
}

absl::Status ChangeLogWriter::Finish(WriteTxn* txn) {
  if (!block_.empty()) {
    if (absl::Status s = WriteBlock(txn, block_.size()); !s.ok()) return s;
  }
  return Trim(txn);
}

absl::Status ChangeLogWriter::Trim(WriteTxn* txn) {
  // The oldest blocks sit on the leftmost leaf pages, so each delete touches pages the
  // previous one already copied. The oldest block starts at pending_.oldest: seeking there
  // rather than to the first key matters with write-back, where the blocks trimmed since the
  // last flush are deletes that a cursor from the first key would step over one by one.
  while (pending_.next - pending_.oldest > retain_) {
    const uint64_t cut = pending_.next - retain_;  // the first change to keep
    auto cursor = txn->OpenCursor(dbi_);
    if (!cursor->Seek(ChangeKey(pending_.oldest))) return cursor->status();  // OK: nothing written yet
    const std::string oldest_key(cursor->key());
    std::string_view oldest = cursor->value();
    const bool next = cursor->Next();
    if (!cursor->status().ok()) return cursor->status();
    if (next) {
      auto second = ChangeSequence(cursor->key());
      if (!second.ok()) return second.status();
      if (*second <= cut) {  // the whole oldest block goes
        cursor.reset();
        if (absl::Status s = txn->Delete(dbi_, oldest_key); !s.ok()) return s;
        pending_.oldest = *second;
        continue;
      }
    }
    // The oldest block straddles the cut: keep its changes from `cut` on, under `cut`.
    auto first = ChangeSequence(oldest_key);
    if (!first.ok()) return first.status();
    for (uint64_t seq = *first; seq < cut; ++seq) {
      if (absl::Status s = PopChange(&oldest, seq).status(); !s.ok()) return s;
    }
    rewritten_.assign(oldest);  // copied out of the map before it is written
    cursor.reset();
    if (absl::Status s = txn->Delete(dbi_, oldest_key); !s.ok()) return s;
    if (absl::Status s = txn->Put(dbi_, ChangeKey(cut), rewritten_); !s.ok()) return s;
    pending_.oldest = cut;
  }
  return absl::OkStatus();
}

}  // namespace cdcview
