#include "index_builders/view_builder.h"

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

bool Matches(const Condition& cond, const Item& item) {
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
        case AttrType::kN: {
          // N values are held in canonical text, so numeric equality is equality of the
          // operand's canonical text; an operand that is not a number never matches.
          absl::StatusOr<std::string> operand = CanonicalNumber(cond.operand);
          return operand.ok() && *operand == value->scalar();
        }
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

// The first rule whose conditions all hold, or null.
const ViewRule* MatchRule(const ViewSpec& view, const Item& item) {
  for (const ViewRule& rule : view.rules) {
    bool all = true;
    for (const Condition& cond : rule.when) {
      if (!Matches(cond, item)) {
        all = false;
        break;
      }
    }
    if (all) return &rule;
  }
  return nullptr;
}

void SetReason(MissReason* reason, MissReason value) {
  if (reason != nullptr) *reason = value;
}

// Appends the encoded key component `spec` gives `item`; false (and *reason) if the item
// lacks an attribute the key uses or has it with another type.
bool AppendKey(const KeySpec& spec, const Item& item, std::string* out, MissReason* reason) {
  if (spec.kind == KeySpec::Kind::kAttribute) {
    const AttributeValue* value = Find(item, spec.attribute);
    if (value == nullptr) {
      SetReason(reason, MissReason::kMissingAttribute);
      return false;
    }
    if (value->type() != spec.type) {
      SetReason(reason, MissReason::kTypeMismatch);
      return false;
    }
    EncodeKeyComponent(*value, out);
    return true;
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
      return false;
    }
    if (value->type() != AttrType::kS && value->type() != AttrType::kN) {
      SetReason(reason, MissReason::kTypeMismatch);
      return false;
    }
    text.append(value->scalar());  // N: canonical decimal text, so 1.50 -> "1.5"
  }
  EncodeKeyComponent(AttributeValue::String(std::move(text)), out);
  return true;
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

}  // namespace

ViewBuilder::ViewBuilder(TableSpec table, size_t max_key_bytes)
    : table_(std::move(table)), max_key_bytes_(max_key_bytes) {
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

namespace {

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

}  // namespace

absl::Status ViewBuilder::ValidateTableKey(const Item& item) const {
  const TableKeySpec& key = table_.key;
  absl::Status status = CheckKeyAttribute(table_.name, key.partition, key.partition_type, item);
  if (!status.ok()) return status;
  if (key.sort.has_value()) {
    status = CheckKeyAttribute(table_.name, *key.sort, key.sort_type, item);
    if (!status.ok()) return status;
  }
  const size_t size = PrimaryKey(item).size();
  if (size > max_key_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat("table ", table_.name, ": primary key is ",
                                                   size, " bytes, over the store's limit of ",
                                                   max_key_bytes_, " bytes"));
  }
  return absl::OkStatus();
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

absl::StatusOr<std::optional<ViewEntry>> ViewBuilder::EntryFor(size_t v, const Item& item,
                                                               MissReason* reason) const {
  if (v >= table_.views.size()) Crash(absl::StrCat("EntryFor: no view ", v));
  const ViewSpec& view = table_.views[v];
  SetReason(reason, MissReason::kNone);

  // The table key is part of every entry key; an item without a valid one has no entries.
  const TableKeySpec& table_key = table_.key;
  absl::Status status =
      CheckKeyAttribute(table_.name, table_key.partition, table_key.partition_type, item);
  if (status.ok() && table_key.sort.has_value()) {
    status = CheckKeyAttribute(table_.name, *table_key.sort, table_key.sort_type, item);
  }
  if (!status.ok()) return status;

  // The first matching rule decides; if its keys do not resolve the item is not in the
  // view, even if a later rule would have given it keys: rule order is the precedence the
  // user wrote, and an item has one meaning per view.
  const ViewRule* rule = MatchRule(view, item);
  if (rule == nullptr) {
    SetReason(reason, MissReason::kNoRule);
    return std::optional<ViewEntry>();
  }
  std::string key;
  if (!AppendKey(rule->partition_key, item, &key, reason)) return std::optional<ViewEntry>();
  if (rule->sort_key.has_value() && !AppendKey(*rule->sort_key, item, &key, reason)) {
    return std::optional<ViewEntry>();
  }
  key.append(PrimaryKey(item));
  if (key.size() > max_key_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat("view ", view.name, ": entry key is ",
                                                   key.size(),
                                                   " bytes, over the store's limit of ",
                                                   max_key_bytes_, " bytes"));
  }
  return std::optional<ViewEntry>(
      ViewEntry{std::move(key), EncodeItem(ProjectUnder(table_, view, rule, item))});
}

absl::Status ViewBuilder::Diff(const Item* old_item, const Item* new_item,
                               std::vector<IndexMutation>* out) const {
  // Staged first, so that an error in any view leaves `out` untouched.
  std::vector<IndexMutation> staged;
  for (size_t v = 0; v < table_.views.size(); ++v) {
    std::optional<ViewEntry> old_entry;
    if (old_item != nullptr) {
      // The old image is the stored one: it was accepted, so its entries fit. If it has no
      // valid entry now (the limit shrank), there is nothing in the view to delete, and
      // refusing would leave the item stuck forever.
      absl::StatusOr<std::optional<ViewEntry>> entry = EntryFor(v, *old_item);
      if (entry.ok()) old_entry = *std::move(entry);
    }
    std::optional<ViewEntry> new_entry;
    if (new_item != nullptr) {
      absl::StatusOr<std::optional<ViewEntry>> entry = EntryFor(v, *new_item);
      if (!entry.ok()) return entry.status();
      new_entry = *std::move(entry);
    }

    if (old_entry.has_value() && new_entry.has_value() && old_entry->key == new_entry->key) {
      if (old_entry->value != new_entry->value) {
        staged.push_back(IndexMutation{IndexMutation::Op::kPut, v, std::move(new_entry->key),
                                       std::move(new_entry->value)});
      }
      continue;
    }
    if (old_entry.has_value()) {
      staged.push_back(
          IndexMutation{IndexMutation::Op::kDelete, v, std::move(old_entry->key), ""});
    }
    if (new_entry.has_value()) {
      staged.push_back(IndexMutation{IndexMutation::Op::kPut, v, std::move(new_entry->key),
                                     std::move(new_entry->value)});
    }
  }
  out->insert(out->end(), std::make_move_iterator(staged.begin()),
              std::make_move_iterator(staged.end()));
  return absl::OkStatus();
}

Item ViewBuilder::Project(size_t v, const Item& item) const {
  if (v >= table_.views.size()) Crash(absl::StrCat("Project: no view ", v));
  const ViewSpec& view = table_.views[v];
  return ProjectUnder(table_, view, MatchRule(view, item), item);
}

}  // namespace cdcview
