#include "index_builders/aggregate.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "index_builders/coding.h"
#include "index_builders/key_codec.h"
#include "index_builders/view_builder.h"

namespace cdcview {
namespace {

[[noreturn]] void Crash(const std::string& message) {
  std::fprintf(stderr, "cdcview: aggregates: %s\n", message.c_str());
  std::abort();
}

constexpr char kNoShard = 0;
constexpr char kShard = 1;

void PutDecimal(const Decimal& d, std::string* out) {
  out->push_back(d.is_zero() ? 0 : (d.negative ? 2 : 1));
  if (d.is_zero()) return;
  // Zigzag: sums may have any exponent.
  const int64_t e = d.exponent;
  PutVarint((static_cast<uint64_t>(e) << 1) ^ static_cast<uint64_t>(e >> 63), out);
  PutLengthPrefixed(d.digits, out);
}

bool GetDecimal(std::string_view* in, Decimal* d) {
  if (in->empty()) return false;
  const char sign = (*in)[0];
  in->remove_prefix(1);
  if (sign == 0) {
    *d = Decimal{};
    return true;
  }
  if (sign != 1 && sign != 2) return false;
  uint64_t zigzag = 0;
  std::string_view digits;
  if (!GetVarint(in, &zigzag) || !GetLengthPrefixed(in, &digits) || digits.empty()) return false;
  d->negative = sign == 2;
  d->exponent = static_cast<int>(static_cast<int64_t>(zigzag >> 1) ^ -static_cast<int64_t>(zigzag & 1));
  d->digits.assign(digits.data(), digits.size());
  return true;
}

}  // namespace

std::string EncodeAggregateState(const AggregateState& state) {
  std::string out;
  PutVarint(state.members, &out);
  PutVarint(state.measures.size(), &out);
  for (const AggregateState::Measure& m : state.measures) {
    PutVarint(m.count, &out);
    PutDecimal(m.sum, &out);
  }
  return out;
}

absl::StatusOr<AggregateState> DecodeAggregateState(std::string_view value, size_t measures) {
  AggregateState state;
  uint64_t n = 0;
  if (!GetVarint(&value, &state.members) || !GetVarint(&value, &n) || n != measures) {
    return absl::DataLossError("aggregate state is malformed or has another number of measures");
  }
  state.measures.resize(n);
  for (AggregateState::Measure& m : state.measures) {
    if (!GetVarint(&value, &m.count) || !GetDecimal(&value, &m.sum)) {
      return absl::DataLossError("aggregate state has a truncated measure");
    }
  }
  if (!value.empty()) return absl::DataLossError("aggregate state has trailing bytes");
  return state;
}

absl::Status ApplyContribution(const AggregateSpec& spec, const AggregateContribution& c,
                               bool retract, AggregateState* state) {
  if (state->measures.size() != c.values.size()) state->measures.resize(c.values.size());
  const auto missing = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat("aggregate ", spec.name, ", ",
                                            DescribeGroupKey(spec, c.group), ": retracting ", what,
                                            " that the stored state does not hold"));
  };
  if (retract && state->members == 0) return missing("a member");
  state->members = retract ? state->members - 1 : state->members + 1;
  for (size_t i = 0; i < c.values.size(); ++i) {
    if (!c.values[i].has_value()) continue;
    AggregateState::Measure& m = state->measures[i];
    const bool keeps_sum = i >= spec.measures.size() || !KeepsValues(spec.measures[i]);
    if (retract) {
      if (m.count == 0) return missing(absl::StrCat("a value of ", spec.measures[i].Name()));
      --m.count;
      if (keeps_sum) m.sum = SubtractDecimal(m.sum, *c.values[i]);
    } else {
      ++m.count;
      if (keeps_sum) m.sum = AddDecimal(m.sum, *c.values[i]);
    }
  }
  return absl::OkStatus();
}

bool KeepsValues(const MeasureSpec& m) {
  return m.kind == MeasureSpec::Kind::kMin || m.kind == MeasureSpec::Kind::kMax;
}

std::string EncodeShardPart(std::optional<uint32_t> shard) {
  std::string out;
  if (!shard.has_value()) {
    out.push_back(kNoShard);
    return out;
  }
  out.push_back(kShard);
  PutBigEndian32(*shard, &out);
  return out;
}

absl::StatusOr<GroupKeyParts> SplitGroupKey(std::string_view key, bool sharded) {
  GroupKeyParts parts;
  std::string_view rest = key;
  if (absl::StatusOr<AttributeValue> group = DecodeKeyComponent(&rest); !group.ok()) {
    return group.status();
  }
  parts.logical = key.substr(0, key.size() - rest.size());
  if (sharded) {
    if (rest.empty() || (rest[0] != kNoShard && rest[0] != kShard) ||
        (rest[0] == kShard && rest.size() < 5)) {
      return absl::DataLossError("aggregate key has a malformed shard part");
    }
    if (rest[0] == kShard) {
      parts.shard = DecodeBigEndian32(rest.data() + 1);
      rest.remove_prefix(5);
    } else {
      rest.remove_prefix(1);
    }
  }
  parts.rest = rest;
  return parts;
}

std::string ExtremePrefix(std::string_view group, size_t measure) {
  std::string key(group);
  key.push_back(static_cast<char>(measure));
  return key;
}

std::string ExtremeKey(std::string_view group, size_t measure, const Decimal& value) {
  std::string key = ExtremePrefix(group, measure);
  EncodeNumberKeyComponent(value, &key);
  return key;
}

std::string DescribeGroupKey(const AggregateSpec& spec, std::string_view key) {
  absl::StatusOr<GroupKeyParts> parts = SplitGroupKey(key, !spec.strip_shard_suffix.empty());
  std::string_view logical = parts.ok() ? parts->logical : std::string_view();
  absl::StatusOr<AttributeValue> group =
      parts.ok() ? DecodeKeyComponent(&logical) : absl::StatusOr<AttributeValue>(parts.status());
  if (!group.ok()) return absl::StrCat("group key 0x", absl::BytesToHexString(std::string(key)));
  if (group->type() == AttrType::kB) {
    return absl::StrCat("group 0x", absl::BytesToHexString(group->scalar()));
  }
  std::string text = group->scalar();
  if (parts->shard.has_value()) {
    ShardSpec suffix;
    suffix.suffix = spec.strip_shard_suffix;
    text = suffix.PhysicalKey(text, *parts->shard);
  }
  return absl::StrCat("group \"", text, "\"");
}

AggregateBuilder::AggregateBuilder(TableSpec table, size_t max_key_bytes)
    : table_(std::move(table)), max_key_bytes_(max_key_bytes) {
  for (AggregateSpec& spec : table_.aggregates) {
    PrepareConditions(&spec.filter);
    // Measure numbers are one byte in aggm keys; config validation keeps the list short.
    if (spec.measures.size() > 255) Crash(absl::StrCat("aggregate ", spec.name, " has over 255 measures"));
  }
}

absl::StatusOr<std::optional<AggregateContribution>> AggregateBuilder::ContributionOf(
    size_t a, const Item& item) const {
  const AggregateSpec& spec = table_.aggregates[a];
  for (const Condition& cond : spec.filter) {
    if (!ConditionHolds(cond, item)) return std::optional<AggregateContribution>();
  }
  AttributeValue scratch;
  const AttributeValue* key = ResolveKey(spec.group_by, item, &scratch);
  if (key == nullptr) return std::optional<AggregateContribution>();

  AggregateContribution c;
  if (spec.strip_shard_suffix.empty()) {
    EncodeKeyComponent(*key, &c.group);
  } else {
    // Only S group keys are split (config refuses a suffix on N or B group keys).
    auto split = SplitShardSuffix(spec.strip_shard_suffix, key->scalar(), 0);
    if (split.has_value()) {
      EncodeKeyComponent(AttributeValue::String(std::move(split->first)), &c.group);
      c.group.append(EncodeShardPart(split->second));
    } else {
      EncodeKeyComponent(*key, &c.group);
      c.group.append(EncodeShardPart(std::nullopt));
    }
  }
  // The longest aggm key: group · measure byte · the longest number.
  if (c.group.size() + 1 + kMaxNumberKeyComponentBytes > max_key_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "aggregate ", spec.name, ": group key is ", c.group.size(), " bytes, over the ",
        max_key_bytes_ - 1 - kMaxNumberKeyComponentBytes, " bytes the store's key limit leaves for it"));
  }
  c.values.reserve(spec.measures.size());
  for (const MeasureSpec& m : spec.measures) {
    std::optional<Decimal> value;
    if (m.kind != MeasureSpec::Kind::kCount) {
      auto it = item.find(m.attribute);
      if (it != item.end() && it->second.type() == AttrType::kN) {
        absl::StatusOr<Decimal> d = ParseDecimal(it->second.scalar());
        if (!d.ok()) {
          return absl::InvalidArgumentError(absl::StrCat("aggregate ", spec.name, ": ", m.Name(),
                                                         ": ", d.status().message()));
        }
        value = *std::move(d);
      }
    }
    c.values.push_back(std::move(value));
  }
  return std::optional<AggregateContribution>(std::move(c));
}

absl::Status AggregateBuilder::Diff(const Item* old_item, const Item* new_item,
                                    std::vector<AggregateDelta>* out) const {
  // Most tables have no aggregates: no image comparison for them.
  if (table_.aggregates.empty()) return absl::OkStatus();
  if (old_item != nullptr && new_item != nullptr && *old_item == *new_item) return absl::OkStatus();
  const size_t first = out->size();
  for (size_t a = 0; a < table_.aggregates.size(); ++a) {
    std::optional<AggregateContribution> before;
    if (old_item != nullptr) {
      // A stored image whose group key does not fit was never counted (a rebuild leaves it
      // out, as for views), so there is nothing to retract.
      absl::StatusOr<std::optional<AggregateContribution>> c = ContributionOf(a, *old_item);
      if (c.ok()) before = *std::move(c);
    }
    std::optional<AggregateContribution> after;
    if (new_item != nullptr) {
      absl::StatusOr<std::optional<AggregateContribution>> c = ContributionOf(a, *new_item);
      if (!c.ok()) {
        out->resize(first);
        return c.status();
      }
      after = *std::move(c);
    }
    if (before == after) continue;
    if (before.has_value()) out->push_back(AggregateDelta{a, true, *std::move(before)});
    if (after.has_value()) out->push_back(AggregateDelta{a, false, *std::move(after)});
  }
  return absl::OkStatus();
}

}  // namespace cdcview
