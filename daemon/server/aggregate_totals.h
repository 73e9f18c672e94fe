// GroupTotals: an aggregate group's totals (members, per measure its count and exact sum, min
// and max), added up from physical groups (the shards of one logical group, read by
// aggregate_reader.cc) or from cluster members' partial answers (cluster_queries.cc), and
// emitted as MeasureValues. One code path computes every measure's value, so a cluster's
// merged answer is the one a single store gives.
//
// Values; thread-compatible. Pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "cdcview/v1/view_service.pb.h"
#include "index_builders/aggregate.h"
#include "index_builders/number.h"
#include "index_builders/view_spec.h"

namespace cdcview {

struct GroupTotals {
  uint64_t members = 0;
  std::vector<AggregateState::Measure> measures;
  std::vector<std::optional<Decimal>> lowest, highest;  // per min/max measure

  explicit GroupTotals(size_t n) : measures(n), lowest(n), highest(n) {}

  void Add(const GroupTotals& other);
};

// Appends `spec`'s measures as configured to `out` (an AggregateGroup or its Shard): count is
// the member count; the others are unset without values. `partial`: with each sum and avg
// measure's count and exact sum (MeasureValue.partial_count / partial_sum), what a cluster
// member answers a local-only call with.
void EmitMeasures(const AggregateSpec& spec, const GroupTotals& totals, bool partial,
                  google::protobuf::RepeatedPtrField<v1::MeasureValue>* out);

// The totals a member's partial answer (`members` and its measures, emitted with partial)
// stands for. INVALID_ARGUMENT naming the measure for an answer that is not one of `spec`'s
// (another definition of the aggregate on that member, or no partial state).
absl::StatusOr<GroupTotals> TotalsOfPartial(
    const AggregateSpec& spec, uint64_t members,
    const google::protobuf::RepeatedPtrField<v1::MeasureValue>& measures);

// MeasureValue.partial_sum: a Decimal exactly, whatever its length ("[-]<digits>e<exponent>",
// value 0.<digits> x 10^exponent; "0" for zero), where number text would be bounded by
// DynamoDB's range and a sum of many numbers need not be.
std::string PartialSumText(const Decimal& d);
std::optional<Decimal> ParsePartialSum(std::string_view text);

}  // namespace cdcview
