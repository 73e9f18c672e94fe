// Typed specifications of tables and views: what the config becomes after validation.
//
// Plain structs, built once at start-up (daemon/config) and then only read: safe to share
// between threads as const. A ViewSpec's Fingerprint() changes whenever anything that
// affects the view's contents changes, so a changed definition triggers a rebuild.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "index_builders/attribute_value.h"

namespace cdcview {

// A key component of a view: an attribute of the declared type, or a template whose
// placeholders take S or N attributes ("STATUS#{status}", "{state}#{city}", "OPEN").
// A template always yields an S value.
struct KeySpec {
  struct Part {
    bool is_placeholder = false;
    std::string text;  // literal text, or the attribute name of a placeholder
  };
  enum class Kind { kAttribute, kTemplate };

  Kind kind = Kind::kAttribute;
  std::string attribute;           // kAttribute
  AttrType type = AttrType::kS;    // kAttribute: S, N or B; kTemplate: always S
  std::string template_text;       // kTemplate, as written
  std::vector<Part> parts;         // kTemplate, parsed

  static KeySpec Attribute(std::string name, AttrType type);
  // Parses "{name}" placeholders; "{{" and "}}" are literal braces. INVALID_ARGUMENT for an
  // unclosed or empty placeholder.
  static absl::StatusOr<KeySpec> Template(std::string text);

  // The key's type in the view (S for templates).
  AttrType value_type() const { return kind == Kind::kTemplate ? AttrType::kS : type; }
};

// A condition on an item, as in view rules, view filters and aggregate filters.
struct Condition {
  enum class Op { kEquals, kBeginsWith, kExists, kNotExists };
  std::string attribute;
  Op op = Op::kExists;
  // kEquals: matches an S equal to this text, an N numerically equal to it, or a BOOL
  // whose text ("true"/"false") equals it. kBeginsWith: an S (or B) starting with it.
  std::string operand;
  // kEquals: the operand's canonical number text, "" if it is not a number. Derived from
  // `operand` by ViewBuilder (so numbers are not parsed per event); not part of fingerprints.
  std::string canonical_number;
};

enum class ProjectionKind { kKeysOnly, kInclude, kAll };

struct Projection {
  ProjectionKind kind = ProjectionKind::kAll;
  std::vector<std::string> include;  // kInclude: non-key attributes to keep
};

// One way an item enters a view. An item is in the view under the first rule whose
// conditions all match; it has an entry there only if every attribute its keys use is
// present with the declared type (templates: S or N).
struct ViewRule {
  std::vector<Condition> when;
  KeySpec partition_key;
  std::optional<KeySpec> sort_key;
};

struct TableKeySpec {
  std::string partition;
  AttrType partition_type = AttrType::kS;
  std::optional<std::string> sort;
  AttrType sort_type = AttrType::kS;
};

// Write sharding of a view's partition keys: writers append a shard suffix to the logical
// key ("DAY#2025-03-01" -> "DAY#2025-03-01#0" .. "#3"); a query for the logical key reads
// every shard and merges them. Only for S partition keys.
// INVALID_ARGUMENT unless `suffix` holds "{shard}" exactly once (and no other braces).
absl::Status ValidateShardSuffix(std::string_view suffix);
// If `physical` ends with `suffix` (a valid shard suffix template) for some shard number
// (decimal, no leading zeros; below `limit` unless limit is 0): the logical key and shard.
std::optional<std::pair<std::string, uint32_t>> SplitShardSuffix(std::string_view suffix,
                                                                 std::string_view physical,
                                                                 uint32_t limit);

struct ShardSpec {
  uint32_t count = 0;   // 0: not sharded
  std::string suffix;   // the suffix template, with exactly one "{shard}": "#{shard}"

  bool enabled() const { return count > 0; }
  // logical + suffix with {shard} replaced by the shard number.
  std::string PhysicalKey(std::string_view logical, uint32_t shard) const;
  // If `physical` ends with the suffix of some shard < count: its logical key and shard.
  std::optional<std::pair<std::string, uint32_t>> Split(std::string_view physical) const;
  friend bool operator==(const ShardSpec&, const ShardSpec&) = default;
};

struct ViewSpec {
  std::string name;
  std::string table;  // the table it indexes
  std::vector<ViewRule> rules;  // one for plain views; several for overloaded ones
  Projection projection;
  bool inverted = false;  // for information; rules already hold the swapped keys
  ShardSpec shards;       // write sharding of the partition key (count 0: none)

  bool has_sort_key() const { return rules.front().sort_key.has_value(); }
  AttrType partition_type() const { return rules.front().partition_key.value_type(); }
  AttrType sort_type() const { return rules.front().sort_key->value_type(); }

  // Hex digest of everything that determines the view's contents (not its name).
  std::string Fingerprint(const TableKeySpec& table_key) const;
};

// An aggregate: items of one table (those matching `filter`) grouped by a key, with
// measures kept exactly under inserts, updates and removes.
struct MeasureSpec {
  enum class Kind { kCount, kSum, kMin, kMax, kAvg };
  Kind kind = Kind::kCount;
  std::string attribute;  // "" for kCount; N values only contribute to the others

  // "count", "sum(amount)", ...: the name in MeasureValue.
  std::string Name() const;
  friend bool operator==(const MeasureSpec&, const MeasureSpec&) = default;
};

struct AggregateSpec {
  std::string name;
  std::string table;
  std::vector<Condition> filter;  // all must hold; empty: every item
  KeySpec group_by;               // attribute (S, N or B) or template (S)
  // Write-sharded group keys: strip this suffix template ("#{shard}", any shard number) so
  // COUNTER#likes#0..N-1 form one group COUNTER#likes. Empty: no stripping.
  std::string strip_shard_suffix;
  std::vector<MeasureSpec> measures;

  // Hex digest of everything that determines the aggregate's contents (not its name).
  std::string Fingerprint() const;
};

struct TableSpec {
  std::string name;
  TableKeySpec key;
  std::vector<ViewSpec> views;
  std::vector<AggregateSpec> aggregates;
};

}  // namespace cdcview
