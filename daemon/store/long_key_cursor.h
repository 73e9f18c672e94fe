// LongKeyCursor: a Cursor over a database that holds long keys (long_key.h): it merges the
// database's own cursor with one over its sibling and yields logical keys in exact byte order,
// with their values, in either direction.
//
// The sibling orders a group of keys that share their first kLongKeyPrefixBytes bytes by
// hash, so the cursor reads the group that holds its position whole and sorts it by logical
// key: a step within a group costs nothing, a step into a group reads all of it. Groups are
// small unless many long keys share a 479-byte prefix (a view partition whose key alone is
// that long: each page of it then reads the whole partition's long keys).
//
// Thread-safety and ownership: as Cursor's. The logical keys of the current group are
// copies held by the cursor; values point into LMDB's map or a pending layer, as Cursor's do.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "daemon/store/cursor.h"

namespace cdcview {

class LongKeyCursor : public Cursor {
 public:
  // `main`: the database's own cursor; `sibling`: its long-key sibling's (both over the same
  // transaction and pending layers).
  LongKeyCursor(std::unique_ptr<Cursor> main, std::unique_ptr<Cursor> sibling);

  bool SeekFirst() override;
  bool SeekLast() override;
  bool Seek(std::string_view key) override;
  bool Next() override;
  bool Prev() override;
  bool valid() const override { return side_ != kNone; }
  // The first error either side met (Cursor::status()).
  const absl::Status& status() const override;
  std::string_view key() const override;
  std::string_view value() const override;

 private:
  enum Side { kMain, kLong, kNone };
  struct Member {
    std::string key;
    std::string_view value;
  };

  // The sibling in logical order: each stands on an entry or makes long_valid_ false.
  void LongFirst();
  void LongLast();
  void LongSeek(std::string_view key);  // first logical key >= `key`
  void LongNext();
  void LongPrev();
  // Reads the group under the sibling cursor's position (or, if it has none, the next one
  // with an entry that decodes), sorted; the sibling cursor ends past it. False if none.
  bool LoadGroupAtCursor();
  std::string_view LongKey() const { return group_[pos_].key; }

  // Stands on the smaller (forward) or larger key of the two sides.
  bool Pick(bool forward);
  // Repositions the side that is not current around `key` before a turn: forward, on its
  // first key > `key`; backward, on its last key < `key`.
  void TurnOther(std::string_view key, bool forward);

  std::unique_ptr<Cursor> main_;
  std::unique_ptr<Cursor> sibling_;
  std::vector<Member> group_;
  std::string group_prefix_;
  size_t pos_ = 0;
  bool long_valid_ = false;
  Side side_ = kNone;
  bool forward_ = true;
  std::string turn_key_;
  absl::Status error_;  // a sibling entry that does not decode (DATA_LOSS); the cursor stops
};

}  // namespace cdcview
