#include "daemon/apply/aggregate_writer.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "index_builders/item_codec.h"

namespace cdcview {
namespace {

// +1 or -1 on the multiset count of one value; the key goes when its count reaches zero.
absl::Status CountValue(WriteTxn* txn, MDB_dbi extremes, const std::string& key, bool retract) {
  auto stored = txn->Get(extremes, key);
  if (!stored.ok()) return stored.status();
  uint64_t count = 0;
  if (*stored) {
    std::string_view value = **stored;
    if (!GetVarint(&value, &count) || !value.empty()) {
      return absl::DataLossError("aggregate min/max count is malformed");
    }
  }
  if (retract) {
    if (count == 0) return absl::DataLossError("retracting a min/max value that is not stored");
    if (--count == 0) return txn->Delete(extremes, key);
  } else {
    ++count;
  }
  std::string encoded;
  PutVarint(count, &encoded);
  return txn->Put(extremes, key, encoded);
}

}  // namespace

absl::Status WriteAggregateDelta(WriteTxn* txn, const AggregateDbs& dbs, const AggregateSpec& spec,
                                 const AggregateDelta& delta) {
  const AggregateContribution& c = delta.contribution;
  auto stored = txn->Get(dbs.groups, c.group);
  if (!stored.ok()) return stored.status();
  AggregateState state;
  state.measures.resize(spec.measures.size());
  if (*stored) {
    auto decoded = DecodeAggregateState(**stored, spec.measures.size());
    if (!decoded.ok()) return decoded.status();
    state = *std::move(decoded);
  } else if (delta.retract) {
    return absl::DataLossError(
        absl::StrCat("aggregate ", spec.name, ": retracting from a group that is not stored"));
  }
  ApplyContribution(c, delta.retract, &state);
  absl::Status s = state.members == 0 ? txn->Delete(dbs.groups, c.group)
                                      : txn->Put(dbs.groups, c.group, EncodeAggregateState(state));
  if (!s.ok()) return s;
  for (size_t m = 0; m < spec.measures.size(); ++m) {
    if (!KeepsValues(spec.measures[m]) || !c.values[m].has_value()) continue;
    s = CountValue(txn, dbs.extremes, ExtremeKey(c.group, m, *c.values[m]), delta.retract);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace cdcview
