// Test helpers: build Items and the SourceRecords a source would hand the writer, and
// describe values, items and encoded keys as text so that tests compare whole entries with
// one exact EXPECT_EQ (a failure then shows every key component and attribute).
//
// Header-only, pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_join.h"
#include "daemon/sources/change_source.h"
#include "index_builders/attribute_value.h"
#include "index_builders/change_event.h"
#include "index_builders/item_codec.h"
#include "index_builders/key_codec.h"
#include "index_builders/view_spec.h"

namespace cdcview::test {

inline AttributeValue S(std::string s) { return AttributeValue::String(std::move(s)); }
inline AttributeValue B(std::string bytes) { return AttributeValue::Binary(std::move(bytes)); }
// A test that writes an invalid number literal is broken: abort loudly.
inline AttributeValue N(std::string_view text) {
  absl::StatusOr<AttributeValue> value = AttributeValue::Number(text);
  if (!value.ok()) {
    std::fprintf(stderr, "test helper N(\"%.*s\"): %s\n", static_cast<int>(text.size()),
                 text.data(), value.status().ToString().c_str());
    std::abort();
  }
  return *std::move(value);
}

// Where a record comes from and what it carries besides its images:
//   At("17").Seq("100").Partition("shard-0").Locator("line 3")
struct At {
  explicit At(std::string next) : next_position(std::move(next)) {}
  At Seq(std::string s) const { return With(&At::sequence_number, std::move(s)); }
  At Source(uint32_t s) const { return With(&At::source, s); }
  At Partition(std::string p) const { return With(&At::partition, std::move(p)); }
  At Locator(std::string l) const { return With(&At::locator, std::move(l)); }
  At Created(int64_t ms) const { return With(&At::creation_time_ms, ms); }
  At Received(int64_t ms) const { return With(&At::received_ms, ms); }

  std::string next_position;    // stored as the partition's position once applied
  std::string sequence_number;  // "" when the source has none
  uint32_t source = 0;
  std::string partition;
  std::string locator = "line 1";
  int64_t creation_time_ms = 0;
  int64_t received_ms = 0;  // 0: stamped by RecordQueue if queued, else unknown

 private:
  template <typename T, typename V>
  At With(T At::*field, V value) const {
    At copy = *this;
    copy.*field = std::move(value);
    return copy;
  }
};

// The table key attributes of `image` (those present).
inline Item KeysOf(const TableKeySpec& key, const Item& image) {
  Item keys;
  if (auto it = image.find(key.partition); it != image.end()) keys.emplace(*it);
  if (key.sort.has_value()) {
    if (auto it = image.find(*key.sort); it != image.end()) keys.emplace(*it);
  }
  return keys;
}

inline SourceRecord RecordAt(const At& at) {
  SourceRecord record;
  record.source = at.source;
  record.partition = at.partition;
  record.next_position = at.next_position;
  record.locator = at.locator;
  record.raw = "raw " + at.locator;
  record.received_ms = at.received_ms;
  return record;
}

inline SourceRecord EventRecord(ChangeEvent::Kind kind, Item keys, std::optional<Item> new_image,
                                std::optional<Item> old_image, const At& at) {
  SourceRecord record = RecordAt(at);
  ChangeEvent event;
  event.kind = kind;
  event.keys = std::move(keys);
  event.new_image = std::move(new_image);
  event.old_image = std::move(old_image);
  event.sequence_number = at.sequence_number;
  event.creation_time_ms = at.creation_time_ms;
  record.event = std::move(event);
  return record;
}

inline SourceRecord Insert(const TableKeySpec& key, const Item& image, const At& at) {
  return EventRecord(ChangeEvent::Kind::kInsert, KeysOf(key, image), image, std::nullopt, at);
}
// NEW_IMAGE stream view type: no old image; pass one for NEW_AND_OLD_IMAGES.
inline SourceRecord Modify(const TableKeySpec& key, const Item& image, const At& at,
                           std::optional<Item> old_image = std::nullopt) {
  return EventRecord(ChangeEvent::Kind::kModify, KeysOf(key, image), image,
                     std::move(old_image), at);
}
// `image` may be the whole item or only its keys.
inline SourceRecord Remove(const TableKeySpec& key, const Item& image, const At& at) {
  return EventRecord(ChangeEvent::Kind::kRemove, KeysOf(key, image), std::nullopt, std::nullopt,
                     at);
}
// A record the decoder could not turn into an event.
inline SourceRecord Rejected(absl::Status why, std::string reason, const At& at) {
  SourceRecord record = RecordAt(at);
  record.rejection = std::move(why);
  record.reason = std::move(reason);
  return record;
}

// ---- Descriptions

inline std::string Describe(const AttributeValue& value) {
  switch (value.type()) {
    case AttrType::kS:
      return "S:" + value.scalar();
    case AttrType::kN:
      return "N:" + value.scalar();
    case AttrType::kB:
      return "B:" + absl::CEscape(value.scalar());
    case AttrType::kBool:
      return value.boolean() ? "BOOL:true" : "BOOL:false";
    default:
      return std::string(AttrTypeName(value.type()));
  }
}

// "{PK=S:u1, score=N:7}"
inline std::string Describe(const Item& item) {
  std::vector<std::string> parts;
  for (const auto& [name, value] : item) parts.push_back(name + "=" + Describe(value));
  return "{" + absl::StrJoin(parts, ", ") + "}";
}

// "S:OPEN | S:2024-05-01 | S:CUST#1 | S:ORDER#1": every component of an encoded key.
inline std::string DescribeKey(std::string_view key) {
  std::vector<std::string> parts;
  while (!key.empty()) {
    absl::StatusOr<AttributeValue> component = DecodeKeyComponent(&key);
    if (!component.ok()) return "<bad key: " + component.status().ToString() + ">";
    parts.push_back(Describe(*component));
  }
  return absl::StrJoin(parts, " | ");
}

inline std::string DescribeValue(std::string_view value) {
  absl::StatusOr<Item> item = DecodeItem(value);
  if (!item.ok()) return "<bad value: " + item.status().ToString() + ">";
  return Describe(*item);
}

// "[S:OPEN | S:2024-05-01 | S:CUST#1 | S:ORDER#1] {PK=S:CUST#1, ...}"
inline std::string DescribeEntry(std::string_view key, std::string_view value) {
  return "[" + DescribeKey(key) + "] " + DescribeValue(value);
}

}  // namespace cdcview::test
