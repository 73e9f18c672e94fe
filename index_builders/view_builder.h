// ViewBuilder: (old image, new image) -> the minimal index mutations for one table's views.
//
// The pure core of cdcview: no I/O, no clock, no threads. A ViewBuilder is immutable after
// construction and safe to use from many threads.
//
// View entry layout (see docs/ARCHITECTURE.md):
//   key   = enc(view pk) · enc(view sk)? · enc(table pk) · enc(table sk)?
//   value = EncodeItem(projected attributes)
// The table key in the entry key keeps entries unique per item.
//
// Key sizes (S: UTF-8 bytes, B: bytes): DynamoDB's limits for the table key, a partition key
// value up to 2,048 bytes and a sort key value up to 1,024; a view's partition and sort key
// values up to 2,048 each (a view's sort key may be the table's partition key, as in an
// inverted view: a lower limit would drop valid items). The store takes entry keys of any
// length (daemon/store/long_key.h).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "index_builders/attribute_value.h"
#include "index_builders/view_spec.h"

namespace cdcview {

inline constexpr size_t kMaxPartitionKeyBytes = 2048;
inline constexpr size_t kMaxSortKeyBytes = 1024;

// The largest key values a ViewBuilder takes (tests lower them): `partition_bytes` for the
// table's partition key and both of a view's keys, `sort_bytes` for the table's sort key.
struct KeyLimits {
  size_t partition_bytes = kMaxPartitionKeyBytes;
  size_t sort_bytes = kMaxSortKeyBytes;
};

struct ViewEntry {
  std::string key;
  std::string value;
};

struct IndexMutation {
  enum class Op { kPut, kDelete };
  Op op;
  size_t view;        // index into TableSpec::views
  std::string key;
  // kPut: the entry's new value. kDelete: the value the entry holds, the old image's projection
  // (the change log records it, and the writer need not read the entry for it).
  std::string value;
};

// Why an item has no entry in a view although a rule matched (for metrics and DescribeView).
enum class MissReason { kNone, kNoRule, kMissingAttribute, kTypeMismatch };

// A view a new image has no entry in because a key attribute its matching rule uses has
// another type than the view declares (an S where it wants an N; a set or a map in a
// template). A missing attribute is not a skip: that is how a sparse view leaves items out.
struct ViewSkip {
  size_t view;  // index into TableSpec::views
  MissReason reason = MissReason::kTypeMismatch;
  friend bool operator==(const ViewSkip&, const ViewSkip&) = default;
};

// The condition semantics of view rules, view filters and aggregate filters (see Condition).
// A kEquals condition must have been through PrepareConditions, which derives the operand's
// canonical number once so that events are not parsed per condition.
bool ConditionHolds(const Condition& cond, const Item& item);
void PrepareConditions(std::vector<Condition>* conditions);

// The value key `spec` gives `item`: for an attribute key the item's own value, for a
// template the text it builds, held in *scratch. Null (and *reason, if given) when the item
// lacks an attribute the key uses or has it with another type. The result points into `item`
// or `scratch`: valid while both are.
const AttributeValue* ResolveKey(const KeySpec& spec, const Item& item, AttributeValue* scratch,
                                 MissReason* reason = nullptr);

class ViewBuilder {
 public:
  explicit ViewBuilder(TableSpec table, KeyLimits limits = KeyLimits());

  const TableSpec& table() const { return table_; }

  // Checks that `item` carries the table's key attributes with the declared types and within
  // the size limits; INVALID_ARGUMENT naming the attribute (and size and limit) otherwise.
  absl::Status ValidateTableKey(const Item& item) const;

  // enc(table pk) · enc(table sk)?, the key in items/<table>. Call after ValidateTableKey.
  std::string PrimaryKey(const Item& item) const;

  // The entry `item` has in view `v`, if any. `reason` (optional) says why there is none.
  // INVALID_ARGUMENT if the entry's partition or sort key value is over its limit (names the
  // view, the key, its size and the limit).
  absl::StatusOr<std::optional<ViewEntry>> EntryFor(size_t v, const Item& item,
                                                    MissReason* reason = nullptr) const;

  // Appends to `out` the mutations that take every view from `old_item` to `new_item`
  // (either may be null: insert / remove). Unchanged entries produce nothing; a changed key
  // produces a delete and a put. `skipped` (optional) gets the views `new_item` is left out of
  // for a key attribute of the wrong type (see ViewSkip), for the caller to count. On error
  // (a key too large) nothing is appended to either and the Status names the view; the event
  // must then be rejected as a whole.
  absl::Status Diff(const Item* old_item, const Item* new_item,
                    std::vector<IndexMutation>* out,
                    std::vector<ViewSkip>* skipped = nullptr) const;

  // Projects `item` for view `v` (KEYS_ONLY: table keys and the view's key attributes).
  Item Project(size_t v, const Item& item) const;

 private:
  // Where an item sits in a view: its entry key and the rule that put it there.
  struct Placement {
    std::string key;
    const ViewRule* rule;
  };
  // The item's placement in view `v`, given its encoded primary key (table key checked).
  absl::StatusOr<std::optional<Placement>> Place(size_t v, const Item& item,
                                                 std::string_view primary_key,
                                                 MissReason* reason) const;

  TableSpec table_;
  KeyLimits limits_;
};

}  // namespace cdcview
