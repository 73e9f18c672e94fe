#include "index_builders/view_builder.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "index_builders/item_codec.h"
#include "index_builders/key_codec.h"
#include "index_builders/number.h"

namespace cdcview {
namespace {

// A broken invariant (a spec that config validation should have refused, a view index out
// of range) is a programming error: crash with a message rather than build a wrong view.
[[noreturn]] void Crash(std::string_view message) {
  std::fprintf(stderr, "cdcview: ViewBuilder: %.*s\n", static_cast<int>(message.size()),
               message.data());
  std::abort();
}

const AttributeValue* Find(const Item& item, std::string_view name) {
  auto it = item.find(name);
  return it == item.end() ? nullptr : &it->second;
}

void SetReason(MissReason* reason, MissReason value) {
  if (reason != nullptr) *reason = value;
}

}  // namespace

bool ConditionHolds(const Condition& cond, const Item& item) {
  const AttributeValue* value = Find(item, cond.attribute);
  switch (cond.op) {
    case Condition::Op::kExists:
      return value != nullptr;
    case Condition::Op::kNotExists:
      return value == nullptr;
    case Condition::Op::kEquals:
      if (value == nullptr) return false;
      switch (value->type()) {
        case AttrType::kS:
          return value->scalar() == cond.operand;
        case AttrType::kN:
          // N values are held in canonical text, so numeric equality is equality of the
          // operand's canonical text; an operand that is not a number never matches.
          return !cond.canonical_number.empty() && cond.canonical_number == value->scalar();
        case AttrType::kBool:
          return cond.operand == (value->boolean() ? "true" : "false");
        default:
          return false;
      }
    case Condition::Op::kBeginsWith:
      if (value == nullptr) return false;
      if (value->type() != AttrType::kS && value->type() != AttrType::kB) return false;
      return absl::StartsWith(value->scalar(), cond.operand);
  }
  return false;
}

const AttributeValue* ResolveKey(const KeySpec& spec, const Item& item, AttributeValue* scratch,
                                 MissReason* reason) {
  if (spec.kind == KeySpec::Kind::kAttribute) {
    const AttributeValue* value = Find(item, spec.attribute);
    if (value == nullptr) {
      SetReason(reason, MissReason::kMissingAttribute);
      return nullptr;
    }
    if (value->type() != spec.type) {
      SetReason(reason, MissReason::kTypeMismatch);
      return nullptr;
    }
    return value;
  }
  std::string text;
  for (const KeySpec::Part& part : spec.parts) {
    if (!part.is_placeholder) {
      text.append(part.text);
      continue;
    }
    const AttributeValue* value = Find(item, part.text);
    if (value == nullptr) {
      SetReason(reason, MissReason::kMissingAttribute);
      return nullptr;
    }
    if (value->type() != AttrType::kS && value->type() != AttrType::kN) {
      SetReason(reason, MissReason::kTypeMismatch);
      return nullptr;
    }
    text.append(value->scalar());  // N: canonical decimal text, so 1.50 -> "1.5"
  }
  *scratch = AttributeValue::String(std::move(text));
  return scratch;
}

void PrepareConditions(std::vector<Condition>* conditions) {
  for (Condition& cond : *conditions) {
    if (cond.op != Condition::Op::kEquals) continue;
    absl::StatusOr<std::string> number = CanonicalNumber(cond.operand);
    cond.canonical_number = number.ok() ? *number : std::string();
  }
}

namespace {

// The first rule whose conditions all hold, or null.
const ViewRule* MatchRule(const ViewSpec& view, const Item& item) {
  for (const ViewRule& rule : view.rules) {
    bool all = true;
    for (const Condition& cond : rule.when) {
      if (!ConditionHolds(cond, item)) {
        all = false;
        break;
      }
    }
    if (all) return &rule;
  }
  return nullptr;
}

// Appends the encoded key component `spec` gives `item`; false (and *reason) if the item
// lacks an attribute the key uses or has it with another type.
// Appends the encoding of the key `spec` gives `item`; *value_bytes: the value's size.
bool AppendKey(const KeySpec& spec, const Item& item, std::string* out, MissReason* reason,
               size_t* value_bytes) {
  AttributeValue scratch;
  const AttributeValue* value = ResolveKey(spec, item, &scratch, reason);
  if (value == nullptr) return false;
  EncodeKeyComponent(*value, out);
  *value_bytes = value->scalar().size();
  return true;
}

// INVALID_ARGUMENT if a key value of `bytes` is over `limit`: "<what> is N bytes, over ...".
absl::Status CheckKeySize(const std::string& what, size_t bytes, size_t limit) {
  if (bytes <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " is ", bytes, " bytes, over DynamoDB's "
                                                 "limit of ", limit, " bytes"));
}

// Copies `name` from `item` into `out` if present.
void Keep(const Item& item, const std::string& name, Item* out) {
  if (out->find(name) != out->end()) return;
  if (const AttributeValue* value = Find(item, name)) out->emplace(name, *value);
}

void KeepKeyAttributes(const KeySpec& spec, const Item& item, Item* out) {
  if (spec.kind == KeySpec::Kind::kAttribute) {
    Keep(item, spec.attribute, out);
    return;
  }
  for (const KeySpec::Part& part : spec.parts) {
    if (part.is_placeholder) Keep(item, part.text, out);
  }
}

// KEYS_ONLY / INCLUDE / ALL for `item` under `rule` (null: no rule matched, so only the
// table key and INCLUDE attributes are kept).
Item ProjectUnder(const TableSpec& table, const ViewSpec& view, const ViewRule* rule,
                  const Item& item) {
  if (view.projection.kind == ProjectionKind::kAll) return item;
  Item out;
  Keep(item, table.key.partition, &out);
  if (table.key.sort.has_value()) Keep(item, *table.key.sort, &out);
  if (rule != nullptr) {
    KeepKeyAttributes(rule->partition_key, item, &out);
    if (rule->sort_key.has_value()) KeepKeyAttributes(*rule->sort_key, item, &out);
  }
  if (view.projection.kind == ProjectionKind::kInclude) {
    for (const std::string& name : view.projection.include) Keep(item, name, &out);
  }
  return out;
}

void AddKeyNames(const KeySpec& spec, std::vector<std::string_view>* names) {
  if (spec.kind == KeySpec::Kind::kAttribute) {
    names->push_back(spec.attribute);
    return;
  }
  for (const KeySpec::Part& part : spec.parts) {
    if (part.is_placeholder) names->push_back(part.text);
  }
}

// The attributes a KEYS_ONLY / INCLUDE entry keeps under `rule` (ProjectUnder's selection).
void ProjectedNames(const TableSpec& table, const ViewSpec& view, const ViewRule* rule,
                    std::vector<std::string_view>* names) {
  names->push_back(table.key.partition);
  if (table.key.sort.has_value()) names->push_back(*table.key.sort);
  if (rule != nullptr) {
    AddKeyNames(rule->partition_key, names);
    if (rule->sort_key.has_value()) AddKeyNames(*rule->sort_key, names);
  }
  if (view.projection.kind == ProjectionKind::kInclude) {
    for (const std::string& name : view.projection.include) names->push_back(name);
  }
}

// The entry's value: the projection of `item`, encoded without copying the item.
std::string EncodeProjection(const TableSpec& table, const ViewSpec& view, const ViewRule* rule,
                             const Item& item) {
  std::string out;
  if (view.projection.kind == ProjectionKind::kAll) {
    EncodeItem(item, &out);
    return out;
  }
  std::vector<std::string_view> names;
  ProjectedNames(table, view, rule, &names);
  EncodeItemSubset(item, names, &out);
  return out;
}

bool SameAttribute(const Item& a, const Item& b, std::string_view name) {
  const AttributeValue* x = Find(a, name);
  const AttributeValue* y = Find(b, name);
  return x == nullptr ? y == nullptr : y != nullptr && *x == *y;
}

// Whether two images project to the same entry value, compared on the values themselves
// rather than by encoding both.
bool SameProjection(const TableSpec& table, const ViewSpec& view, const ViewRule* old_rule,
                    const ViewRule* new_rule, const Item& old_item, const Item& new_item) {
  if (view.projection.kind == ProjectionKind::kAll) return old_item == new_item;
  std::vector<std::string_view> old_names;
  ProjectedNames(table, view, old_rule, &old_names);
  if (new_rule == old_rule) {
    for (std::string_view name : old_names) {
      if (!SameAttribute(old_item, new_item, name)) return false;
    }
    return true;
  }
  // Another rule may keep other attributes: each side's value is what its own rule keeps of
  // its image under that name (nothing where the rule does not keep the name).
  std::vector<std::string_view> new_names;
  ProjectedNames(table, view, new_rule, &new_names);
  auto kept = [](const std::vector<std::string_view>& names, const Item& item,
                 std::string_view name) -> const AttributeValue* {
    return std::find(names.begin(), names.end(), name) != names.end() ? Find(item, name)
                                                                        : nullptr;
  };
  for (const auto* names : {&old_names, &new_names}) {
    for (std::string_view name : *names) {
      const AttributeValue* x = kept(old_names, old_item, name);
      const AttributeValue* y = kept(new_names, new_item, name);
      if (x == nullptr ? y != nullptr : y == nullptr || *x != *y) return false;
    }
  }
  return true;
}

absl::Status CheckKeyAttribute(const std::string& table, const std::string& name,
                               AttrType type, const Item& item) {
  const AttributeValue* value = Find(item, name);
  if (value == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", table, ": key attribute ", name, " is missing"));
  }
  if (value->type() != type) {
    return absl::InvalidArgumentError(absl::StrCat("table ", table, ": key attribute ", name,
                                                   " must be ", std::string(AttrTypeName(type)),
                                                   ", got ",
                                                   std::string(AttrTypeName(value->type()))));
  }
  return absl::OkStatus();
}

// The table's key attributes are present with their declared types.
absl::Status CheckTableKeyAttributes(const TableSpec& table, const Item& item) {
  const TableKeySpec& key = table.key;
  absl::Status status = CheckKeyAttribute(table.name, key.partition, key.partition_type, item);
  if (status.ok() && key.sort.has_value()) {
    status = CheckKeyAttribute(table.name, *key.sort, key.sort_type, item);
  }
  return status;
}

}  // namespace

ViewBuilder::ViewBuilder(TableSpec table, KeyLimits limits)
    : table_(std::move(table)), limits_(limits) {
  for (ViewSpec& view : table_.views) {
    for (ViewRule& rule : view.rules) PrepareConditions(&rule.when);
  }
  for (const ViewSpec& view : table_.views) {
    if (view.rules.empty()) Crash(absl::StrCat("view ", view.name, " has no rules"));
    const bool sorted = view.rules.front().sort_key.has_value();
    for (const ViewRule& rule : view.rules) {
      if (rule.sort_key.has_value() != sorted) {
        Crash(absl::StrCat("view ", view.name, ": rules disagree on having a sort key"));
      }
    }
  }
}

absl::Status ViewBuilder::ValidateTableKey(const Item& item) const {
  absl::Status status = CheckTableKeyAttributes(table_, item);
  if (!status.ok()) return status;
  const TableKeySpec& key = table_.key;
  status = CheckKeySize(absl::StrCat("table ", table_.name, ": partition key ", key.partition),
                        Find(item, key.partition)->scalar().size(), limits_.partition_bytes);
  if (status.ok() && key.sort.has_value()) {
    status = CheckKeySize(absl::StrCat("table ", table_.name, ": sort key ", *key.sort),
                          Find(item, *key.sort)->scalar().size(), limits_.sort_bytes);
  }
  return status;
}

std::string ViewBuilder::PrimaryKey(const Item& item) const {
  std::string key;
  const AttributeValue* pk = Find(item, table_.key.partition);
  if (pk == nullptr) Crash(absl::StrCat("PrimaryKey: item lacks ", table_.key.partition));
  EncodeKeyComponent(*pk, &key);
  if (table_.key.sort.has_value()) {
    const AttributeValue* sk = Find(item, *table_.key.sort);
    if (sk == nullptr) Crash(absl::StrCat("PrimaryKey: item lacks ", *table_.key.sort));
    EncodeKeyComponent(*sk, &key);
  }
  return key;
}

absl::StatusOr<std::optional<ViewBuilder::Placement>> ViewBuilder::Place(
    size_t v, const Item& item, std::string_view primary_key, MissReason* reason) const {
  const ViewSpec& view = table_.views[v];
  SetReason(reason, MissReason::kNone);
  // The first matching rule decides; if its keys do not resolve the item is not in the
  // view, even if a later rule would have given it keys: rule order is the precedence the
  // user wrote, and an item has one meaning per view.
  const ViewRule* rule = MatchRule(view, item);
  if (rule == nullptr) {
    SetReason(reason, MissReason::kNoRule);
    return std::optional<Placement>();
  }
  Placement place{std::string(), rule};
  place.key.reserve(64 + primary_key.size());
  size_t partition_bytes = 0, sort_bytes = 0;
  if (!AppendKey(rule->partition_key, item, &place.key, reason, &partition_bytes)) {
    return std::optional<Placement>();
  }
  if (rule->sort_key.has_value() &&
      !AppendKey(*rule->sort_key, item, &place.key, reason, &sort_bytes)) {
    return std::optional<Placement>();
  }
  if (absl::Status s = CheckKeySize(absl::StrCat("view ", view.name, ": partition key"),
                                    partition_bytes, limits_.partition_bytes);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckKeySize(absl::StrCat("view ", view.name, ": sort key"), sort_bytes,
                                    limits_.partition_bytes);
      !s.ok()) {
    return s;
  }
  place.key.append(primary_key);
  return std::optional<Placement>(std::move(place));
}

absl::StatusOr<std::optional<ViewEntry>> ViewBuilder::EntryFor(size_t v, const Item& item,
                                                               MissReason* reason) const {
  if (v >= table_.views.size()) Crash(absl::StrCat("EntryFor: no view ", v));
  SetReason(reason, MissReason::kNone);
  // The table key is part of every entry key; an item without a valid one has no entries.
  absl::Status status = CheckTableKeyAttributes(table_, item);
  if (!status.ok()) return status;
  absl::StatusOr<std::optional<Placement>> place = Place(v, item, PrimaryKey(item), reason);
  if (!place.ok()) return place.status();
  if (!place->has_value()) return std::optional<ViewEntry>();
  Placement& p = **place;
  return std::optional<ViewEntry>(ViewEntry{
      std::move(p.key), EncodeProjection(table_, table_.views[v], p.rule, item)});
}

absl::Status ViewBuilder::Diff(const Item* old_item, const Item* new_item,
                               std::vector<IndexMutation>* out,
                               std::vector<ViewSkip>* skipped) const {
  // An unchanged image changes no entry (a replayed or no-op MODIFY).
  if (old_item != nullptr && new_item != nullptr && *old_item == *new_item) return absl::OkStatus();

  // The table key is checked and encoded once per image, not once per view. The old image is
  // the stored one: it was accepted, so its entries fit. If it has no valid entry now (the
  // limit shrank), there is nothing in the view to delete, and refusing would leave the item
  // stuck forever.
  const bool has_old = old_item != nullptr && CheckTableKeyAttributes(table_, *old_item).ok();
  const std::string old_pk = has_old ? PrimaryKey(*old_item) : std::string();
  std::string new_pk;
  if (new_item != nullptr) {
    if (absl::Status s = CheckTableKeyAttributes(table_, *new_item); !s.ok()) return s;
    new_pk = PrimaryKey(*new_item);
  }

  // Staged first, so that an error in any view leaves `out` and `skipped` untouched.
  const size_t first = out->size();
  const size_t first_skip = skipped != nullptr ? skipped->size() : 0;
  for (size_t v = 0; v < table_.views.size(); ++v) {
    std::optional<Placement> old_place;
    if (has_old) {
      absl::StatusOr<std::optional<Placement>> place = Place(v, *old_item, old_pk, nullptr);
      if (place.ok()) old_place = *std::move(place);
    }
    std::optional<Placement> new_place;
    if (new_item != nullptr) {
      MissReason reason = MissReason::kNone;
      absl::StatusOr<std::optional<Placement>> place = Place(v, *new_item, new_pk, &reason);
      if (!place.ok()) {
        out->resize(first);
        if (skipped != nullptr) skipped->resize(first_skip);
        return place.status();
      }
      new_place = *std::move(place);
      if (reason == MissReason::kTypeMismatch && skipped != nullptr) {
        skipped->push_back(ViewSkip{v, reason});
      }
    }
    const ViewSpec& view = table_.views[v];
    if (old_place.has_value() && new_place.has_value() && old_place->key == new_place->key) {
      if (!SameProjection(table_, view, old_place->rule, new_place->rule, *old_item, *new_item)) {
        out->push_back(IndexMutation{IndexMutation::Op::kPut, v, std::move(new_place->key),
                                     EncodeProjection(table_, view, new_place->rule, *new_item)});
      }
      continue;
    }
    if (old_place.has_value()) {
      out->push_back(IndexMutation{IndexMutation::Op::kDelete, v, std::move(old_place->key),
                                   EncodeProjection(table_, view, old_place->rule, *old_item)});
    }
    if (new_place.has_value()) {
      out->push_back(IndexMutation{IndexMutation::Op::kPut, v, std::move(new_place->key),
                                   EncodeProjection(table_, view, new_place->rule, *new_item)});
    }
  }
  return absl::OkStatus();
}

Item ViewBuilder::Project(size_t v, const Item& item) const {
  if (v >= table_.views.size()) Crash(absl::StrCat("Project: no view ", v));
  const ViewSpec& view = table_.views[v];
  return ProjectUnder(table_, view, MatchRule(view, item), item);
}

}  // namespace cdcview
