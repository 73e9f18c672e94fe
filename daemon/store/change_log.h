// The change log: every view entry change the writer commits, in commit order (within a
// commit, in the order its events were applied), in the `changes` database, for Watch streams
// to read and resume from.
//
// Each change has a sequence number (1, 2, ...). Changes are stored in blocks, one LMDB entry
// per run of consecutive changes of one write transaction:
//
//   key    big-endian uint64: the sequence number of the block's first change, so key order
//          is commit order
//   value  the block's changes back to back, each one self-delimiting (see AppendChange): op
//          byte, then view name, entry key, entry value (for a delete: the entry's last
//          value) and the cause (source, partition, position past the event), each
//          varint-length-prefixed
//
// A block stays under the size LMDB keeps inline in a 4 KiB page (kChangeBlockBytes; a single
// larger change is a block of its own, on overflow pages). One put per block instead of one
// per change, appended (MDB_APPEND), keeps the log a small part of the writer's work: fewer
// B-tree entries, each written at the end of the tree. A block has no header: a block of one
// change is that change's bytes alone, so a store whose log holds one change per entry reads
// unchanged.
//
// The writer appends in the same write transaction as the view mutations, so the log and the
// views never disagree, and trims it to the newest `watch.retain_changes` changes in that same
// transaction (a block straddling the cut is rewritten from the cut on). Sequence numbers
// continue after a restart (the newest change is never trimmed).
//
// Threading: ChangeLogWriter belongs to the writer thread. The readers are pure over a
// transaction and may be used from any thread with its own ReadTxn.
// Ownership: ChangeView's string_views point into LMDB's map: valid only inside the
// transaction that read them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "daemon/store/txn.h"

namespace cdcview {

enum class ChangeOp : uint8_t { kPut = 1, kDelete = 2 };

struct ChangeView {
  uint64_t sequence = 0;
  std::string_view view;
  ChangeOp op = ChangeOp::kPut;
  std::string_view key;
  std::string_view value;
  std::string_view source;
  std::string_view partition;
  std::string_view position;
};

// A block's value stays at or under this many bytes unless one change alone is larger.
inline constexpr size_t kChangeBlockBytes = 1900;

std::string ChangeKey(uint64_t sequence);
// DATA_LOSS unless `key` is a change log key.
absl::StatusOr<uint64_t> ChangeSequence(std::string_view key);
// Appends one change to `block`.
void AppendChange(std::string_view view, ChangeOp op, std::string_view key,
                  std::string_view value, std::string_view source, std::string_view partition,
                  std::string_view position, std::string* block);
// Takes the first change off `block` and names it `sequence`; DATA_LOSS if it is damaged.
absl::StatusOr<ChangeView> PopChange(std::string_view* block, uint64_t sequence);

// The oldest and newest sequence numbers in the log as `txn` sees it; nullopt when empty.
struct ChangeLogBounds {
  uint64_t oldest = 0;
  uint64_t newest = 0;
};
// DATA_LOSS if the newest block is damaged.
absl::StatusOr<std::optional<ChangeLogBounds>> ReadChangeLogBounds(const Txn& txn,
                                                                   MDB_dbi changes);

// Reads changes in sequence order:
//   ChangeLogReader r(txn, changes);
//   for (auto ok = r.Seek(from); ok.ok() && *ok; ok = r.Next()) use(r.change());
// (an error is DATA_LOSS for a damaged block).
class ChangeLogReader {
 public:
  ChangeLogReader(const Txn& txn, MDB_dbi changes);
  // Positions on the first change with a sequence number >= `from`; false past the end.
  absl::StatusOr<bool> Seek(uint64_t from);
  absl::StatusOr<bool> Next();
  const ChangeView& change() const { return change_; }

 private:
  // Decodes the next change of the current block, moving to the next block at its end.
  absl::StatusOr<bool> Advance();
  // Starts on the block under the cursor; false (and nothing to read) when it is invalid.
  absl::StatusOr<bool> EnterBlock(bool valid);

  std::unique_ptr<Cursor> cursor_;
  std::string_view rest_;  // the current block's changes after change_
  uint64_t next_sequence_ = 0;
  ChangeView change_;
};

// Appends and trims on the writer thread. Sequence numbers are assigned in Append; the
// caller calls Finish (which writes the last block and trims), then commits or aborts. After
// an abort, Rollback() forgets what was appended since the last Committed(), so a retried
// batch reuses the same numbers.
class ChangeLogWriter {
 public:
  ChangeLogWriter(MDB_dbi changes, uint64_t retain) : dbi_(changes), retain_(retain) {}

  // Reads the bounds from the store (at start-up). DATA_LOSS for a damaged newest block.
  absl::Status Load(const Txn& txn);
  // Errors (here or in Finish): RESOURCE_EXHAUSTED on MDB_MAP_FULL (abort, grow, retry),
  // INTERNAL otherwise.
  absl::Status Append(WriteTxn* txn, std::string_view view, ChangeOp op, std::string_view key,
                      std::string_view value, std::string_view source,
                      std::string_view partition, std::string_view position);
  // Writes the open block, then deletes the oldest changes until at most `retain` are left.
  absl::Status Finish(WriteTxn* txn);
  void Committed() { committed_ = pending_; }
  void Rollback() {
    pending_ = committed_;
    block_.clear();
  }

  uint64_t entries() const { return committed_.next - committed_.oldest; }
  uint64_t pending_entries() const { return pending_.next - pending_.oldest; }
  uint64_t newest() const { return committed_.next - 1; }

 private:
  struct State {
    uint64_t oldest = 1;  // sequence of the oldest change (== next when empty)
    uint64_t next = 1;    // sequence the next Append gets
  };
  // Writes block_'s first `size` bytes, the changes from block_first_ on, as one entry.
  absl::Status WriteBlock(WriteTxn* txn, size_t size);
  absl::Status Trim(WriteTxn* txn);

  MDB_dbi dbi_;
  uint64_t retain_;
  State committed_, pending_;
  std::string block_;          // the open block: changes not yet written
  uint64_t block_first_ = 0;   // sequence of block_'s first change
  std::string rewritten_;      // Trim's copy of a block cut at the front
};

}  // namespace cdcview
