#include "daemon/server/cluster_merge.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "daemon/config/config.h"
#include "daemon/decode/attribute_value_proto.h"
#include "daemon/server/read_consistency.h"
#include "daemon/server/view_reader.h"
#include "index_builders/key_codec.h"

namespace cdcview {
namespace {

std::string MemberName(size_t ordinal) { return absl::StrCat("member ", ordinal); }

// Whether member `ordinal` of `members` owns (source, partition): a Kafka partition by
// OwnsPartition; any other partition is nobody's in particular.
bool Owns(const std::map<std::string, std::string>& kinds, const v1::AppliedPosition::Entry& e,
          uint32_t members, uint32_t ordinal) {
  auto kind = kinds.find(e.source());
  if (kind == kinds.end() || kind->second != "kafka") return false;
  const std::optional<int32_t> n = KafkaPartitionNumber(e.partition());
  return n && OwnsPartition(*n, members, ordinal);
}

}  // namespace

int SourceStateRank(const std::string& state) {
  static const std::map<std::string, int, std::less<>> kRanks = {
      {"finished", 0}, {"caught_up", 1}, {"running", 2},  {"backfilling", 3},
      {"starting", 4}, {"stopped", 5},   {"error", 6}};
  if (state.empty()) return -1;
  auto it = kRanks.find(state);
  return it == kRanks.end() ? 5 : it->second;
}

v1::StatusResponse MergeStatus(const std::vector<v1::StatusResponse>& by_member) {
  const uint32_t members = static_cast<uint32_t>(by_member.size());
  v1::StatusResponse merged;
  std::map<std::string, std::string> kinds;  // source -> kind, the lowest ordinal's
  std::map<std::string, int> index;          // source -> its place in merged.sources
  for (const v1::StatusResponse& member : by_member) {
    for (const v1::SourceStatus& s : member.sources()) {
      if (!s.kind().empty()) kinds.emplace(s.name(), s.kind());
    }
  }

  // The applied entries: each (source, partition) once, from its owner when it is a Kafka
  // partition several members have stored, else from the first member that has it.
  struct Chosen {
    const v1::AppliedPosition::Entry* entry;
    bool owner;
  };
  std::map<std::pair<std::string, std::string>, Chosen> applied;
  for (uint32_t i = 0; i < members; ++i) {
    for (const v1::AppliedPosition::Entry& e : by_member[i].applied().entries()) {
      const bool owner = Owns(kinds, e, members, i);
      auto [it, inserted] = applied.try_emplace({e.source(), e.partition()}, Chosen{&e, owner});
      if (!inserted && owner && !it->second.owner) it->second = Chosen{&e, true};
    }
  }
  for (const auto& [key, chosen] : applied) *merged.mutable_applied()->add_entries() = *chosen.entry;
  merged.mutable_applied()->set_token(EncodePositionToken(merged.applied()));

  for (uint32_t i = 0; i < members; ++i) {
    const v1::StatusResponse& member = by_member[i];
    v1::MemberStatus* m = merged.add_members();
    m->set_ordinal(i);
    m->set_reachable(true);
    for (const v1::SourceStatus& s : member.sources()) {
      v1::MemberStatus::Source* own = m->add_sources();
      own->set_name(s.name());
      own->set_state(s.state());
      own->set_lag_seconds(s.lag_seconds());
      for (const v1::AppliedPosition::Entry& e : s.positions()) {
        if (Owns(kinds, e, members, i)) own->add_partitions(e.partition());
      }

      auto [it, first] = index.try_emplace(s.name(), merged.sources_size());
      if (first) {
        v1::SourceStatus* out = merged.add_sources();
        out->set_name(s.name());
        out->set_kind(s.kind());
        out->set_table(s.table());
        out->set_state(s.state());
        if (s.state() == "backfilling") out->set_progress(s.progress());
        out->set_lag_seconds(s.lag_seconds());
      }
      v1::SourceStatus* out = merged.mutable_sources(it->second);
      if (out->kind().empty()) out->set_kind(s.kind());
      out->set_events_applied(out->events_applied() + s.events_applied());
      out->set_events_skipped(out->events_skipped() + s.events_skipped());
      out->set_events_rejected(out->events_rejected() + s.events_rejected());
      if (!first) {
        out->set_lag_seconds(std::max(out->lag_seconds(), s.lag_seconds()));
        const int was = SourceStateRank(out->state());
        const int is = SourceStateRank(s.state());
        if (is > was) {
          out->set_state(s.state());
          if (s.state() == "backfilling") {
            out->set_progress(s.progress());
          } else {
            out->clear_progress();
          }
        } else if (is == was && s.state() == "backfilling") {
          out->set_progress(std::min(out->progress(), s.progress()));
        }
      }
      if (!s.error().empty()) {
        out->set_error(absl::StrCat(out->error(), out->error().empty() ? "" : "; ",
                                    MemberName(i), ": ", s.error()));
      }
    }
    merged.set_lmdb_map_used_bytes(merged.lmdb_map_used_bytes() + member.lmdb_map_used_bytes());
    merged.set_lmdb_map_size_bytes(merged.lmdb_map_size_bytes() + member.lmdb_map_size_bytes());
  }
  for (v1::SourceStatus& s : *merged.mutable_sources()) {
    for (const v1::AppliedPosition::Entry& e : merged.applied().entries()) {
      if (e.source() == s.name()) *s.add_positions() = e;
    }
  }
  return merged;
}

void MarkMemberUnreachable(uint32_t ordinal, const std::string& why, v1::StatusResponse* merged) {
  while (merged->members_size() <= static_cast<int>(ordinal)) {
    merged->add_members()->set_ordinal(merged->members_size() - 1);
  }
  v1::MemberStatus* m = merged->mutable_members(ordinal);
  m->set_reachable(false);
  m->set_error(why);
  m->clear_sources();
  for (v1::SourceStatus& s : *merged->mutable_sources()) {
    s.set_state("error");
    s.clear_progress();
    s.set_lag_seconds(std::numeric_limits<double>::infinity());
    s.set_error(absl::StrCat(s.error(), s.error().empty() ? "" : "; ", MemberName(ordinal),
                             " did not answer: ", why));
  }
}

namespace {

// The ViewDescription fields a merge computes; every other field must agree.
bool Merged(int field) {
  using D = v1::ViewDescription;
  switch (field) {
    case D::kStateFieldNumber:
    case D::kBuildProgressFieldNumber:
    case D::kItemCountFieldNumber:
    case D::kBytesFieldNumber:
    case D::kIndexWritesPerEventFieldNumber:
    case D::kShardItemCountsFieldNumber:
    case D::kShardSkewFieldNumber:
    case D::kSkippedKeyTypeMismatchFieldNumber:
      return true;
    default:
      return false;
  }
}

// `d` with only `field` set.
v1::ViewDescription Only(const v1::ViewDescription& d, const google::protobuf::FieldDescriptor* field) {
  v1::ViewDescription only;
  const google::protobuf::Reflection* r = only.GetReflection();
  only.CopyFrom(d);
  const google::protobuf::Descriptor* desc = only.GetDescriptor();
  for (int i = 0; i < desc->field_count(); ++i) {
    if (desc->field(i) != field) r->ClearField(&only, desc->field(i));
  }
  return only;
}

std::string Serialized(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  m.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

// A scalar field's value for a message, "" for a message or repeated field.
std::string ValueOf(const v1::ViewDescription& d, const google::protobuf::FieldDescriptor* f) {
  using F = google::protobuf::FieldDescriptor;
  if (f->is_repeated()) return "";
  const google::protobuf::Reflection* r = d.GetReflection();
  switch (f->cpp_type()) {
    case F::CPPTYPE_STRING: return absl::StrCat(" \"", r->GetString(d, f), "\"");
    case F::CPPTYPE_UINT32: return absl::StrCat(" ", r->GetUInt32(d, f));
    case F::CPPTYPE_BOOL: return r->GetBool(d, f) ? " true" : " false";
    default: return "";
  }
}

// `subject`: "view V", "the write sharding of view V".
absl::Status Disagree(const std::string& subject, const std::string& what) {
  return absl::FailedPreconditionError(absl::StrCat(
      "the cluster's members disagree on ", subject, ": ", what,
      "; every member must run the same config (while a rolling update replaces them, "
      "members of both versions disagree until it ends)"));
}

// The merged state's rank: BUILDING > BACKFILLING > READY > unspecified.
int ViewStateRank(v1::ViewDescription::State state) {
  switch (state) {
    case v1::ViewDescription::BUILDING: return 3;
    case v1::ViewDescription::BACKFILLING: return 2;
    case v1::ViewDescription::READY: return 1;
    default: return 0;
  }
}

}  // namespace

absl::StatusOr<v1::ViewDescription> MergeViewDescription(
    const std::vector<v1::ViewDescription>& by_member) {
  if (by_member.empty()) return v1::ViewDescription{};
  const v1::ViewDescription& first = by_member.front();
  const google::protobuf::Descriptor* desc = first.GetDescriptor();
  for (int i = 0; i < desc->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = desc->field(i);
    if (Merged(f->number())) continue;
    const std::string want = Serialized(Only(first, f));
    for (size_t m = 1; m < by_member.size(); ++m) {
      if (Serialized(Only(by_member[m], f)) == want) continue;
      const std::string a = ValueOf(first, f);
      const std::string b = ValueOf(by_member[m], f);
      return Disagree(absl::StrCat("view ", first.name()),
                      a.empty() ? absl::StrCat(MemberName(0), " and ", MemberName(m),
                                               " differ in its ", f->name())
                                : absl::StrCat(MemberName(0), " has ", f->name(), a, ", ",
                                               MemberName(m), " has", b));
    }
  }

  v1::ViewDescription merged = first;
  merged.clear_item_count();
  merged.clear_bytes();
  merged.clear_skipped_key_type_mismatch();
  merged.clear_shard_item_counts();
  std::vector<uint64_t> shards;
  double ratio_sum = 0;
  int ratios = 0;
  for (const v1::ViewDescription& d : by_member) {
    merged.set_item_count(merged.item_count() + d.item_count());
    merged.set_bytes(merged.bytes() + d.bytes());
    merged.set_skipped_key_type_mismatch(merged.skipped_key_type_mismatch() +
                                         d.skipped_key_type_mismatch());
    if (d.index_writes_per_event() != 0) {
      ratio_sum += d.index_writes_per_event();
      ++ratios;
    }
    const int was = ViewStateRank(merged.state());
    const int is = ViewStateRank(d.state());
    if (is > was) {
      merged.set_state(d.state());
      merged.set_build_progress(d.build_progress());
    } else if (is == was) {
      merged.set_build_progress(std::min(merged.build_progress(), d.build_progress()));
    }
    if (shards.size() < static_cast<size_t>(d.shard_item_counts_size())) {
      shards.resize(d.shard_item_counts_size(), 0);
    }
    for (int s = 0; s < d.shard_item_counts_size(); ++s) shards[s] += d.shard_item_counts(s);
  }
  merged.set_index_writes_per_event(ratios == 0 ? 0.0 : ratio_sum / ratios);
  if (!shards.empty()) {
    for (uint64_t c : shards) merged.add_shard_item_counts(c);
    merged.set_shard_skew(ShardSkew(shards));
  } else {
    merged.clear_shard_skew();
  }
  return merged;
}

absl::StatusOr<v1::ListViewsResponse> MergeListViews(
    const std::vector<v1::ListViewsResponse>& by_member) {
  v1::ListViewsResponse merged;
  if (by_member.empty()) return merged;
  std::vector<std::map<std::string, const v1::ViewDescription*>> views(by_member.size());
  for (size_t m = 0; m < by_member.size(); ++m) {
    for (const v1::ViewDescription& d : by_member[m].views()) views[m][d.name()] = &d;
  }
  for (size_t m = 1; m < by_member.size(); ++m) {
    for (size_t a : {size_t{0}, m}) {
      const size_t b = a == 0 ? m : 0;
      for (const auto& [name, d] : views[a]) {
        if (!views[b].contains(name)) {
          return Disagree(absl::StrCat("view ", name), absl::StrCat(MemberName(a), " has it, ", MemberName(b),
                                             " does not"));
        }
      }
    }
  }
  for (const v1::ViewDescription& d : by_member.front().views()) {
    std::vector<v1::ViewDescription> described;
    for (const auto& member : views) described.push_back(*member.at(d.name()));
    absl::StatusOr<v1::ViewDescription> view = MergeViewDescription(described);
    if (!view.ok()) return view.status();
    *merged.add_views() = *std::move(view);
  }
  return merged;
}

namespace {

struct MergedKey {
  v1::HotKey key;
  std::string order;  // the key's encoded form, for ties
};

// Adds `keys` into `merged` by key.
void AddKeys(const google::protobuf::RepeatedPtrField<v1::HotKey>& keys,
             std::map<std::string, MergedKey>* merged) {
  for (const v1::HotKey& k : keys) {
    std::string order;
    if (auto value = FromProto(k.key(), "key"); value.ok()) {
      EncodeKeyComponent(*value, &order);
    } else {
      order = Serialized(k.key());  // cannot be: members give keys they decoded
    }
    auto [it, first] = merged->try_emplace(order);
    MergedKey& m = it->second;
    if (first) {
      m.order = order;
      *m.key.mutable_key() = k.key();
    }
    m.key.set_writes_per_second(m.key.writes_per_second() + k.writes_per_second());
    m.key.set_error_bound(m.key.error_bound() + k.error_bound());
  }
}

void Fill(std::map<std::string, MergedKey> merged, double total, size_t limit,
          google::protobuf::RepeatedPtrField<v1::HotKey>* out) {
  std::vector<MergedKey*> keys;
  for (auto& [order, k] : merged) keys.push_back(&k);
  std::sort(keys.begin(), keys.end(), [](const MergedKey* a, const MergedKey* b) {
    if (a->key.writes_per_second() != b->key.writes_per_second()) {
      return a->key.writes_per_second() > b->key.writes_per_second();
    }
    return a->order < b->order;
  });
  for (size_t i = 0; i < keys.size() && i < limit; ++i) {
    v1::HotKey* k = out->Add();
    *k = std::move(keys[i]->key);
    k->set_share(total > 0 ? k->writes_per_second() / total : 0.0);
  }
}

}  // namespace

absl::StatusOr<v1::HotKeysResponse> MergeHotKeys(
    const std::vector<v1::HotKeysResponse>& by_member, uint32_t limit) {
  v1::HotKeysResponse merged;
  const size_t keep = limit == 0 ? 10 : limit;
  std::map<std::string, MergedKey> keys, logical;
  for (size_t m = 0; m < by_member.size(); ++m) {
    const v1::HotKeysResponse& r = by_member[m];
    if (r.shard_count() != by_member.front().shard_count()) {
      return Disagree("the hot keys' write sharding",
                      absl::StrCat(MemberName(0), " has shard_count ",
                                   by_member.front().shard_count(), ", ", MemberName(m),
                                   " has ", r.shard_count()));
    }
    merged.set_window_seconds(std::max(merged.window_seconds(), r.window_seconds()));
    merged.set_total_writes_per_second(merged.total_writes_per_second() +
                                       r.total_writes_per_second());
    AddKeys(r.keys(), &keys);
    AddKeys(r.logical_keys(), &logical);
  }
  if (!by_member.empty()) merged.set_shard_count(by_member.front().shard_count());
  Fill(std::move(keys), merged.total_writes_per_second(), keep, merged.mutable_keys());
  Fill(std::move(logical), merged.total_writes_per_second(), keep, merged.mutable_logical_keys());
  return merged;
}

}  // namespace cdcview
