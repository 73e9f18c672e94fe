#include "daemon/apply/aggregate_writer.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "index_builders/coding.h"

namespace cdcview {
namespace {

absl::Status Inconsistent(const AggregateSpec& spec, std::string_view group, std::string_view what) {
  return absl::DataLossError(absl::StrCat("aggregate ", spec.name, ", ", DescribeGroupKey(spec, group),
                                          ": ", std::string(what)));
}

// +1 or -1 on the multiset count of one value; the key goes when its count reaches zero.
absl::Status CountValue(WriteTxn* txn, MDB_dbi extremes, const AggregateSpec& spec,
                        std::string_view group, size_t measure, const Decimal& value, bool retract) {
  const std::string key = ExtremeKey(group, measure, value);
  auto stored = txn->Get(extremes, key);
  if (!stored.ok()) return stored.status();
  uint64_t count = 0;
  if (*stored) {
    std::string_view encoded = **stored;
    if (!GetVarint(&encoded, &count) || !encoded.empty()) {
      return Inconsistent(spec, group, absl::StrCat("the stored count of ", spec.measures[measure].Name(),
                                                    " value ", CanonicalText(value), " is malformed"));
    }
  }
  if (retract) {
    if (count == 0) {
      return Inconsistent(spec, group, absl::StrCat("retracting ", spec.measures[measure].Name(),
                                                    " value ", CanonicalText(value),
                                                    ", which is not stored"));
    }
    if (--count == 0) return txn->Delete(extremes, key);
  } else {
    ++count;
  }
  std::string encoded;
  PutVarint(count, &encoded);
  return txn->Put(extremes, key, encoded);
}

}  // namespace

absl::Status WriteAggregateChange(WriteTxn* txn, const AggregateDbs& dbs, const AggregateSpec& spec,
                                  const AggregateContribution* retract,
                                  const AggregateContribution* add) {
  if (retract == nullptr && add == nullptr) return absl::OkStatus();
  const std::string& group = retract != nullptr ? retract->group : add->group;
  auto stored = txn->Get(dbs.groups, group);
  if (!stored.ok()) return stored.status();
  AggregateState state;
  state.measures.resize(spec.measures.size());
  if (*stored) {
    auto decoded = DecodeAggregateState(**stored, spec.measures.size());
    if (!decoded.ok()) return Inconsistent(spec, group, std::string(decoded.status().message()));
    state = *std::move(decoded);
  } else if (retract != nullptr) {
    return Inconsistent(spec, group, "retracting a member from a group that is not stored");
  }
  if (retract != nullptr) {
    if (absl::Status s = ApplyContribution(spec, *retract, true, &state); !s.ok()) return s;
  }
  if (add != nullptr) {
    if (absl::Status s = ApplyContribution(spec, *add, false, &state); !s.ok()) return s;
  }
  absl::Status s = state.members == 0 ? txn->Delete(dbs.groups, group)
                                      : txn->Put(dbs.groups, group, EncodeAggregateState(state));
  if (!s.ok()) return s;
  for (size_t m = 0; m < spec.measures.size(); ++m) {
    if (!KeepsValues(spec.measures[m])) continue;
    const std::optional<Decimal>* out = retract != nullptr ? &retract->values[m] : nullptr;
    const std::optional<Decimal>* in = add != nullptr ? &add->values[m] : nullptr;
    if (out != nullptr && in != nullptr && *out == *in) continue;  // the value stays
    if (out != nullptr && out->has_value()) {
      s = CountValue(txn, dbs.extremes, spec, group, m, **out, true);
      if (!s.ok()) return s;
    }
    if (in != nullptr && in->has_value()) {
      s = CountValue(txn, dbs.extremes, spec, group, m, **in, false);
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace cdcview
