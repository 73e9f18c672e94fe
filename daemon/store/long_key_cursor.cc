#include "daemon/store/long_key_cursor.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/store/long_key.h"
#include "index_builders/key_codec.h"

namespace cdcview {

LongKeyCursor::LongKeyCursor(std::unique_ptr<Cursor> main, std::unique_ptr<Cursor> sibling)
    : main_(std::move(main)), sibling_(std::move(sibling)) {}

bool LongKeyCursor::LoadGroupAtCursor() {
  group_.clear();
  while (group_.empty() && sibling_->valid()) {
    group_prefix_.assign(sibling_->key().substr(0, kLongKeyPrefixBytes));
    for (; sibling_->valid() && sibling_->key().starts_with(group_prefix_); sibling_->Next()) {
      auto entry = DecodeLongEntry(sibling_->key(), sibling_->value());
      if (!entry.ok()) {
        error_ = absl::DataLossError(
            absl::StrCat("a long-key entry is damaged: ", entry.status().message()));
        group_.clear();
        return long_valid_ = false;
      }
      group_.push_back(Member{std::move(entry->key), entry->value});
    }
  }
  std::sort(group_.begin(), group_.end(),
            [](const Member& a, const Member& b) { return a.key < b.key; });
  pos_ = 0;
  return long_valid_ = !group_.empty();
}

void LongKeyCursor::LongFirst() {
  sibling_->SeekFirst();
  LoadGroupAtCursor();
}

void LongKeyCursor::LongLast() {
  if (!sibling_->SeekLast()) {
    long_valid_ = false;
    return;
  }
  // The last group: from its first entry.
  sibling_->Seek(sibling_->key().substr(0, kLongKeyPrefixBytes));
  if (LoadGroupAtCursor()) pos_ = group_.size() - 1;
}

void LongKeyCursor::LongSeek(std::string_view key) {
  // Sibling keys below key's prefix hold logical keys below `key`, those above it keys above
  // it; only the group with `key`'s prefix needs its logical keys compared.
  sibling_->Seek(key.substr(0, kLongKeyPrefixBytes));
  if (!LoadGroupAtCursor()) return;
  auto it = std::lower_bound(group_.begin(), group_.end(), key,
                             [](const Member& m, std::string_view k) { return m.key < k; });
  if (it != group_.end()) {
    pos_ = static_cast<size_t>(it - group_.begin());
    return;
  }
  LoadGroupAtCursor();  // the sibling cursor stands on the next group
}

void LongKeyCursor::LongNext() {
  if (pos_ + 1 < group_.size()) {
    ++pos_;
    return;
  }
  const std::string next = PrefixSuccessor(group_prefix_);
  if (next.empty()) {
    long_valid_ = false;
    return;
  }
  sibling_->Seek(next);
  LoadGroupAtCursor();
}

void LongKeyCursor::LongPrev() {
  if (pos_ > 0) {
    --pos_;
    return;
  }
  // The previous group ends right before this one's first entry.
  const bool here = sibling_->Seek(group_prefix_);
  const bool before = here ? sibling_->Prev() : sibling_->SeekLast();
  if (!before) {
    long_valid_ = false;
    return;
  }
  sibling_->Seek(sibling_->key().substr(0, kLongKeyPrefixBytes));
  if (LoadGroupAtCursor()) pos_ = group_.size() - 1;
}

bool LongKeyCursor::Pick(bool forward) {
  forward_ = forward;
  const bool main = main_->valid();
  if (!status().ok() || (!main && !long_valid_)) {
    side_ = kNone;
  } else if (!long_valid_) {
    side_ = kMain;
  } else if (!main) {
    side_ = kLong;
  } else {
    // A logical key is in one side only (its length decides), so the keys never tie.
    const bool main_first = main_->key() < LongKey();
    side_ = main_first == forward ? kMain : kLong;
  }
  return valid();
}

void LongKeyCursor::TurnOther(std::string_view key, bool forward) {
  if (side_ == kLong) {
    if (forward) {
      main_->Seek(key);
      if (main_->valid() && main_->key() == key) main_->Next();
    } else if (main_->Seek(key)) {
      main_->Prev();
    } else {
      main_->SeekLast();
    }
    return;
  }
  LongSeek(key);
  if (forward) {
    if (long_valid_ && LongKey() == key) LongNext();
  } else if (long_valid_) {
    LongPrev();
  } else {
    LongLast();
  }
}

bool LongKeyCursor::SeekFirst() {
  main_->SeekFirst();
  LongFirst();
  return Pick(true);
}

bool LongKeyCursor::SeekLast() {
  main_->SeekLast();
  LongLast();
  return Pick(false);
}

bool LongKeyCursor::Seek(std::string_view key) {
  main_->Seek(key);
  LongSeek(key);
  return Pick(true);
}

bool LongKeyCursor::Next() {
  if (!valid()) return false;
  if (!forward_) {
    turn_key_.assign(key());
    TurnOther(turn_key_, true);
  }
  if (side_ == kMain) {
    main_->Next();
  } else {
    LongNext();
  }
  return Pick(true);
}

bool LongKeyCursor::Prev() {
  if (!valid()) return false;
  if (forward_) {
    turn_key_.assign(key());
    TurnOther(turn_key_, false);
  }
  if (side_ == kMain) {
    main_->Prev();
  } else {
    LongPrev();
  }
  return Pick(false);
}

const absl::Status& LongKeyCursor::status() const {
  if (!error_.ok()) return error_;
  if (!main_->status().ok()) return main_->status();
  return sibling_->status();
}

std::string_view LongKeyCursor::key() const {
  return side_ == kLong ? std::string_view(group_[pos_].key) : main_->key();
}

std::string_view LongKeyCursor::value() const {
  return side_ == kLong ? group_[pos_].value : main_->value();
}

}  // namespace cdcview
