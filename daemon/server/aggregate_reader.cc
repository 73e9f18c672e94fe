// ViewReader's aggregate reads: GetAggregate and ListAggregates over agg/<name> and
// aggm/<name> (layout in index_builders/aggregate.h).
//
// A logical group is one key range in agg/<name>: its physical groups (shards) are adjacent,
// so one cursor walk reads the group and its per-shard breakdown. Min and max come from the
// first and last aggm key of each physical group's measure range.
#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "daemon/decode/attribute_value_proto.h"
#include "daemon/server/aggregate_totals.h"
#include "daemon/server/proto_convert.h"
#include "daemon/server/store_damage.h"
#include "daemon/server/view_reader.h"
#include "daemon/store/lmdb_status.h"
#include "index_builders/key_codec.h"
#include "index_builders/number.h"

namespace cdcview {
namespace {

// At most this many physical groups are listed per logical group (AggregateGroup.shards).
constexpr int kMaxShardsListed = 1000;

absl::StatusOr<Decimal> ParseKeyNumber(std::string_view encoded) {
  absl::StatusOr<AttributeValue> n = DecodeKeyComponent(&encoded);
  if (!n.ok()) return n.status();
  if (n->type() != AttrType::kN) return absl::DataLossError("aggregate min/max key holds no number");
  return ParseDecimal(n->scalar());
}

// The smallest and largest value of measure `m` in one physical group's multiset.
absl::Status Extremes(const Txn& txn, MDB_dbi extremes, std::string_view physical, size_t m,
                      std::optional<Decimal>* lowest, std::optional<Decimal>* highest) {
  const std::string prefix = ExtremePrefix(physical, m);
  auto cursor = txn.OpenCursor(extremes);
  const bool found = cursor->Seek(prefix) && cursor->key().starts_with(prefix);
  if (!cursor->status().ok()) return cursor->status();
  if (!found) return absl::DataLossError("aggregate measure has values but no min/max entries");
  absl::StatusOr<Decimal> first = ParseKeyNumber(cursor->key().substr(prefix.size()));
  if (!first.ok()) return first.status();
  const std::string after = PrefixSuccessor(prefix);
  bool at = after.empty() ? cursor->SeekLast() : (cursor->Seek(after) ? cursor->Prev() : cursor->SeekLast());
  if (!cursor->status().ok()) return cursor->status();
  if (!at || !cursor->key().starts_with(prefix)) {
    return absl::DataLossError("aggregate min/max entries vanished within a transaction");
  }
  absl::StatusOr<Decimal> last = ParseKeyNumber(cursor->key().substr(prefix.size()));
  if (!last.ok()) return last.status();
  *lowest = *std::move(first);
  *highest = *std::move(last);
  return absl::OkStatus();
}

absl::StatusOr<GroupTotals> ReadPhysicalUnchecked(const Txn& txn, MDB_dbi extremes,
                                                  const AggregateSpec& spec, std::string_view key,
                                                  std::string_view value) {
  auto state = DecodeAggregateState(value, spec.measures.size());
  if (!state.ok()) return state.status();
  GroupTotals totals(spec.measures.size());
  totals.members = state->members;
  for (size_t m = 0; m < spec.measures.size(); ++m) {
    totals.measures[m] = state->measures[m];
    if (KeepsValues(spec.measures[m]) && state->measures[m].count > 0) {
      if (absl::Status s = Extremes(txn, extremes, key, m, &totals.lowest[m], &totals.highest[m]);
          !s.ok()) {
        return s;
      }
    }
  }
  return totals;
}

// One physical group's totals, from its key and stored state. A state that does not read is
// a broken store: DATA_LOSS naming the aggregate, the group and the way out.
absl::StatusOr<GroupTotals> ReadPhysical(const Txn& txn, MDB_dbi extremes, const AggregateSpec& spec,
                                         std::string_view key, std::string_view value) {
  absl::StatusOr<GroupTotals> totals = ReadPhysicalUnchecked(txn, extremes, spec, key, value);
  if (totals.ok() || IsStoreError(totals.status())) return totals;  // the caller names the range
  return absl::DataLossError(absl::StrCat(
      "aggregate ", spec.name, ", ", DescribeGroupKey(spec, key), ": ", totals.status().message(),
      "; the stored aggregate is damaged: to rebuild it from its table's items, remove it from "
      "the configuration, restart, add it back and restart again"));
}

// The end of a group's key range: after a complete component comes a shard part byte or
// another component's tag, never FF.
std::string AfterGroup(std::string_view group) {
  std::string end(group);
  end.push_back('\xFF');
  return end;
}

// The physical group key as written: the logical key with the shard suffix put back.
std::string PhysicalGroup(const AggregateSpec& spec, const std::string& logical,
                          std::optional<uint32_t> shard) {
  if (!shard) return logical;
  ShardSpec suffix;
  suffix.suffix = spec.strip_shard_suffix;
  return suffix.PhysicalKey(logical, *shard);
}

// Reads the logical group starting at the cursor (which stands on its first key) into `out`,
// leaving the cursor on the first key of the next group (or invalid). `logical` is the
// group's encoding.
absl::Status ReadGroup(const Txn& txn, MDB_dbi extremes, const AggregateSpec& spec,
                       Cursor* cursor, std::string_view logical, bool partial,
                       v1::AggregateGroup* out) {
  const bool sharded = !spec.strip_shard_suffix.empty();
  std::string_view encoded = logical;
  auto group = DecodeKeyComponent(&encoded);
  if (!group.ok()) return group.status();
  ToProto(*group, out->mutable_group());
  out->set_aggregate(spec.name);
  GroupTotals totals(spec.measures.size());
  for (bool ok = cursor->valid(); ok; ok = cursor->Next()) {
    auto parts = SplitGroupKey(cursor->key(), sharded);
    if (!parts.ok()) return parts.status();
    if (parts->logical != logical) break;
    absl::StatusOr<GroupTotals> physical =
        ReadPhysical(txn, extremes, spec, cursor->key(), cursor->value());
    if (!physical.ok()) return physical.status();
    totals.Add(*physical);
    if (!sharded) continue;
    if (out->shards_size() == kMaxShardsListed) {
      out->set_shards_omitted(out->shards_omitted() + 1);
      continue;
    }
    v1::AggregateGroup::Shard* shard = out->add_shards();
    shard->mutable_group()->set_s(PhysicalGroup(spec, group->scalar(), parts->shard));
    shard->set_members(physical->members);
    EmitMeasures(spec, *physical, partial, shard->mutable_measures());
  }
  out->set_members(totals.members);
  EmitMeasures(spec, totals, partial, out->mutable_measures());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<const AggregateRef*> ViewReader::ReadyAggregate(const std::string& name) const {
  const AggregateRef* aggregate = catalog_.FindAggregate(name);
  if (aggregate == nullptr) {
    std::vector<std::string> names;
    for (const AggregateRef& a : catalog_.aggregates()) names.push_back(a.spec->name);
    return UnknownName("aggregate", name, names);
  }
  double progress = 0;
  if (published_.GetAggregateState(aggregate->global, &progress) != ViewState::kReady) {
    return absl::UnavailableError(absl::StrCat("aggregate ", name, " is being rebuilt (",
                                               static_cast<int>(progress * 100),
                                               "% done); retry in a moment"));
  }
  if (absl::Status s = MemberCaughtUp(aggregate->table); !s.ok()) return s;
  return aggregate;
}

absl::StatusOr<v1::AggregateGroup> ViewReader::GetAggregate(const v1::GetAggregateRequest& request,
                                                             Deadline deadline) const {
  auto aggregate_or = ReadyAggregate(request.aggregate());
  if (!aggregate_or.ok()) return aggregate_or.status();
  const AggregateSpec& spec = *(*aggregate_or)->spec;
  if (request.group().value_case() == v1::AttributeValue::VALUE_NOT_SET) {
    return absl::InvalidArgumentError("group is required");
  }
  auto group = FromProto(request.group(), "group");
  if (!group.ok()) return group.status();
  const AttrType want = spec.group_by.value_type();
  if (group->type() != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group: aggregate ", spec.name, " groups by ", std::string(AttrTypeName(want)), ", got ",
        std::string(AttrTypeName(group->type()))));
  }
  std::string logical;
  // A physical key of a sharded aggregate (COUNTER#likes#3) names one shard: it is answered
  // alone, as a view answers a physical partition key. No logical group ends with the suffix,
  // since every such key is split when written.
  std::optional<std::string> physical;
  if (!spec.strip_shard_suffix.empty() && group->type() == AttrType::kS) {
    if (auto split = SplitShardSuffix(spec.strip_shard_suffix, group->scalar(), 0)) {
      EncodeKeyComponent(AttributeValue::String(std::move(split->first)), &logical);
      physical = logical + EncodeShardPart(split->second);
    }
  }
  if (!physical) EncodeKeyComponent(*group, &logical);

  if (absl::Status s = AwaitRequested(request, (*aggregate_or)->table, "aggregate", spec.name,
                                      deadline);
      !s.ok()) {
    return s;
  }
  auto txn = store_.BeginRead();
  if (!txn.ok()) return txn.status();
  v1::AggregateGroup response;
  auto cursor = (*txn)->OpenCursor(store_.aggregate(spec.name));
  if (physical) {
    response.set_aggregate(spec.name);
    *response.mutable_group() = request.group();
    GroupTotals totals(spec.measures.size());
    if (cursor->Seek(*physical) && cursor->key() == *physical) {
      absl::StatusOr<GroupTotals> shard = ReadPhysical(
          **txn, store_.aggregate_extremes(spec.name), spec, cursor->key(), cursor->value());
      if (!shard.ok()) {
        return StoreDamageError(shard.status(), absl::StrCat("aggregate ", spec.name), *physical,
                                AfterGroup(*physical));
      }
      totals = *std::move(shard);
    }
    response.set_members(totals.members);
    EmitMeasures(spec, totals, member_parts_, response.mutable_measures());
  } else {
    cursor->Seek(logical);
    if (absl::Status s = ReadGroup(**txn, store_.aggregate_extremes(spec.name), spec, cursor.get(),
                                   logical, member_parts_, &response);
        !s.ok()) {
      return StoreDamageError(s, absl::StrCat("aggregate ", spec.name), logical,
                              AfterGroup(logical));
    }
  }
  const std::string& key = physical ? *physical : logical;
  if (!cursor->status().ok()) {
    return StoreDamageError(cursor->status(), absl::StrCat("aggregate ", spec.name), key,
                            AfterGroup(key));
  }
  if (absl::Status s = AppliedIn(**txn, store_.meta(), response.mutable_applied()); !s.ok()) {
    return s;
  }
  return response;
}

absl::StatusOr<v1::ListAggregatesResponse> ViewReader::ListAggregates(
    const v1::ListAggregatesRequest& request, Deadline deadline) const {
  auto aggregate_or = ReadyAggregate(request.aggregate());
  if (!aggregate_or.ok()) return aggregate_or.status();
  const AggregateRef& aggregate = **aggregate_or;
  const AggregateSpec& spec = *aggregate.spec;
  const bool sharded = !spec.strip_shard_suffix.empty();

  std::string lower, upper;  // upper "": no bound
  if (request.prefix().value_case() != v1::AttributeValue::VALUE_NOT_SET) {
    auto prefix = FromProto(request.prefix(), "prefix");
    if (!prefix.ok()) return prefix.status();
    const AttrType want = spec.group_by.value_type();
    if (want == AttrType::kN || prefix->type() != want) {
      return absl::InvalidArgumentError(absl::StrCat(
          "prefix: aggregate ", spec.name, " groups by ", std::string(AttrTypeName(want)),
          want == AttrType::kN ? "; a prefix needs S or B groups, drop it"
                               : absl::StrCat(", got ", std::string(AttrTypeName(prefix->type())))));
    }
    EncodeKeyPrefix(*prefix, &lower);
    upper = PrefixSuccessor(lower);
  }
  if (!request.page_token().empty()) {
    // View and merged-query tokens share the codec; their wording would mislead here.
    auto last = DecodePageToken(request.page_token(), aggregate.fingerprint, false);
    if (!last.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "page_token is not a ListAggregates token of aggregate ", spec.name,
          " as it is defined now (malformed, from another query, or issued before the aggregate "
          "changed); pass next_page_token from the previous ListAggregates response unchanged, "
          "or start again without a token"));
    }
    // Past every key of the last group: after a complete component comes a shard part byte
    // (00, 01) or the next group's escaped bytes, never FF (see view_reader.cc AfterComponents).
    std::string after = *std::move(last);
    after.push_back('\xFF');
    lower = std::max(lower, after);
  }
  const uint32_t limit = PageLimit(request.limit());

  if (absl::Status s = AwaitRequested(request, aggregate.table, "aggregate", spec.name, deadline);
      !s.ok()) {
    return s;
  }
  auto txn = store_.BeginRead();
  if (!txn.ok()) return txn.status();
  v1::ListAggregatesResponse response;
  const MDB_dbi extremes = store_.aggregate_extremes(spec.name);
  auto cursor = (*txn)->OpenCursor(store_.aggregate(spec.name));
  bool ok = cursor->Seek(lower);
  std::string last;
  for (uint32_t n = 0; ok && (upper.empty() || cursor->key() < upper); ++n) {
    auto parts = SplitGroupKey(cursor->key(), sharded);
    if (!parts.ok()) return parts.status();
    std::string logical(parts->logical);
    if (n == limit) {
      response.set_next_page_token(EncodePageToken(aggregate.fingerprint, false, last));
      break;
    }
    if (absl::Status s = ReadGroup(**txn, extremes, spec, cursor.get(), logical, member_parts_,
                                   response.add_groups());
        !s.ok()) {
      return StoreDamageError(s, absl::StrCat("aggregate ", spec.name), logical,
                              AfterGroup(logical));
    }
    last = std::move(logical);
    ok = cursor->valid();
  }
  if (!cursor->status().ok()) {
    return StoreDamageError(cursor->status(), absl::StrCat("aggregate ", spec.name),
                            last.empty() ? lower : last, upper);
  }
  if (absl::Status s = AppliedIn(**txn, store_.meta(), response.mutable_applied()); !s.ok()) {
    return s;
  }
  return response;
}

}  // namespace cdcview
