// AggregateBuilder: (old image, new image) -> what an item change retracts from and adds to
// a table's aggregates, plus the stored form of an aggregate group.
//
// Pure like ViewBuilder: no I/O, no clock, no threads. Immutable after construction and safe
// to use from many threads.
//
// Store layout (see docs/ARCHITECTURE.md, "Aggregates"):
//   agg/<name>   enc(logical group) · shard part                    -> EncodeAggregateState
//   aggm/<name>  enc(logical group) · shard part · measure# · enc(N) -> varint count
// The shard part is empty when the aggregate strips no shard suffix; otherwise one byte 0 for
// a group key without the suffix, or byte 1 and the shard number (4 bytes, big-endian), so a
// logical group's shards are one contiguous key range in shard order. The second database is
// a counted multiset of each min/max measure's values: min is the first key of the range,
// max the last, and both stay right when the current extreme is retracted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "index_builders/attribute_value.h"
#include "index_builders/number.h"
#include "index_builders/view_spec.h"

namespace cdcview {

// What one item contributes to one aggregate: a member of `group`, and per measure its
// attribute's N value (nullopt: count, or no N value there). Parsed once here, used for the
// sum and the min/max key alike.
struct AggregateContribution {
  std::string group;  // enc(logical group key) · shard part
  std::vector<std::optional<Decimal>> values;
  friend bool operator==(const AggregateContribution&, const AggregateContribution&) = default;
};

struct AggregateDelta {
  size_t aggregate = 0;  // index into TableSpec::aggregates
  bool retract = false;  // true: take the contribution out (old image); false: add it
  AggregateContribution contribution;
};

// One physical group's state: its members and, per measure, how many members have a number
// there and their exact sum. The sum is kept for sum and avg only; min and max read their
// values from the aggm multiset, so their sum stays zero (no addition per event for them).
struct AggregateState {
  struct Measure {
    uint64_t count = 0;
    Decimal sum;
    friend bool operator==(const Measure&, const Measure&) = default;
  };
  uint64_t members = 0;
  std::vector<Measure> measures;
  friend bool operator==(const AggregateState&, const AggregateState&) = default;
};

std::string EncodeAggregateState(const AggregateState& state);
// DATA_LOSS if `value` is not an encoded state with `measures` measures.
absl::StatusOr<AggregateState> DecodeAggregateState(std::string_view value, size_t measures);
// Adds (or retracts) a contribution to a group of aggregate `spec`. Retracting what was never
// added means the stored state and the items disagree: DATA_LOSS saying what is missing, and
// `state` is then unspecified (the caller rebuilds the aggregate; see Applier).
absl::Status ApplyContribution(const AggregateSpec& spec, const AggregateContribution& c,
                               bool retract, AggregateState* state);

// min and max keep their values in the aggm multiset; the other measures need only the state.
bool KeepsValues(const MeasureSpec& m);

// Shard parts (see the header comment) and the aggm key of one value of measure `m`.
std::string EncodeShardPart(std::optional<uint32_t> shard);
// Splits a stored agg/aggm key into the logical group's encoding and the shard: nullopt shard
// for "no suffix" (and for unsharded aggregates). `sharded`: the aggregate strips a shard
// suffix. The views point into `key`. DATA_LOSS / INVALID_ARGUMENT for a malformed key.
struct GroupKeyParts {
  std::string_view logical;       // enc(logical group key)
  std::optional<uint32_t> shard;  // nullopt: the physical key had no shard suffix
  std::string_view rest;          // whatever follows the shard part
};
absl::StatusOr<GroupKeyParts> SplitGroupKey(std::string_view key, bool sharded);
// The physical group key as written (shard suffix put back), for messages: `group "X"`, or
// `group key 0x..` when `key` does not decode.
std::string DescribeGroupKey(const AggregateSpec& spec, std::string_view key);
// `value`: a number within DynamoDB's range (every measured value is).
std::string ExtremeKey(std::string_view group, size_t measure, const Decimal& value);
std::string ExtremePrefix(std::string_view group, size_t measure);

class AggregateBuilder {
 public:
  // `max_key_bytes`: the store's key size limit; a group key whose aggm keys would not fit
  // makes the event INVALID_ARGUMENT, as an oversized view entry does.
  AggregateBuilder(TableSpec table, size_t max_key_bytes);

  const TableSpec& table() const { return table_; }

  // The item's contribution to aggregate `a`; nullopt when it is not a member (the filter
  // does not hold, or the group key's attributes are missing or of another type).
  // INVALID_ARGUMENT naming the aggregate when the group key is too long for the store.
  absl::StatusOr<std::optional<AggregateContribution>> ContributionOf(size_t a,
                                                                      const Item& item) const;

  // Appends to `out` the deltas taking every aggregate from `old_item` to `new_item` (either
  // may be null). A change the aggregate does not see (same group, same measured values)
  // produces nothing. On error nothing is appended.
  absl::Status Diff(const Item* old_item, const Item* new_item,
                    std::vector<AggregateDelta>* out) const;

 private:
  TableSpec table_;
  size_t max_key_bytes_;
};

}  // namespace cdcview
