// The change log: every view entry change the writer commits, in commit order, in the
// `changes` database, for Watch streams to read and resume from.
//
//   key   big-endian uint64 sequence number (1, 2, ...), so key order is commit order
//   value view name, op, entry key, entry value (for a delete: the entry's last value), and the
//         cause: source, partition and the position past the event (see EncodeChange)
//
// The writer appends in the same write transaction as the view mutations, so the log and the
// views never disagree, and trims it to the newest `watch.retain_changes` entries in that same
// transaction. Sequence numbers continue after a restart (the newest entry is never trimmed).
//
// Threading: ChangeLogWriter belongs to the writer thread. The read functions are pure over a
// transaction and may be used from any thread with its own ReadTxn.
// Ownership: ChangeView's string_views point into LMDB's map: valid only inside the
// transaction that read them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "daemon/store/store.h"

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

std::string ChangeKey(uint64_t sequence);
std::string EncodeChange(std::string_view view, ChangeOp op, std::string_view key,
                         std::string_view value, std::string_view source,
                         std::string_view partition, std::string_view position);
// DATA_LOSS if `key` or `value` is not a change log entry.
absl::StatusOr<ChangeView> DecodeChange(std::string_view key, std::string_view value);

// The oldest and newest sequence numbers in the log as `txn` sees it; nullopt when empty.
struct ChangeLogBounds {
  uint64_t oldest = 0;
  uint64_t newest = 0;
};
std::optional<ChangeLogBounds> ReadChangeLogBounds(const Txn& txn, MDB_dbi changes);

// Appends and trims on the writer thread. Sequence numbers are assigned in Append; the
// caller commits or aborts. After an abort, Rollback() forgets what was appended since the
// last Committed(), so a retried batch reuses the same numbers.
class ChangeLogWriter {
 public:
  ChangeLogWriter(MDB_dbi changes, uint64_t retain) : dbi_(changes), retain_(retain) {}

  // Reads the bounds from the store (at start-up).
  void Load(const Txn& txn);
  // Errors: RESOURCE_EXHAUSTED on MDB_MAP_FULL (abort, grow, retry), INTERNAL otherwise.
  absl::Status Append(WriteTxn* txn, std::string_view value);
  // Deletes the oldest entries until at most `retain` are left.
  absl::Status Trim(WriteTxn* txn);
  void Committed() { committed_ = pending_; }
  void Rollback() { pending_ = committed_; }

  uint64_t entries() const { return committed_.next - committed_.oldest; }
  uint64_t pending_entries() const { return pending_.next - pending_.oldest; }
  uint64_t newest() const { return committed_.next - 1; }

 private:
  struct State {
    uint64_t oldest = 1;  // sequence of the oldest entry (== next when empty)
    uint64_t next = 1;    // sequence the next Append gets
  };
  MDB_dbi dbi_;
  uint64_t retain_;
  State committed_, pending_;
};

}  // namespace cdcview
