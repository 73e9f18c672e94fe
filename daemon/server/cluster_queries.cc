#include "daemon/server/cluster_queries.h"

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/decode/attribute_value_proto.h"
#include "daemon/server/aggregate_totals.h"
#include "daemon/server/cluster_merge.h"
#include "daemon/server/ordered_merge.h"
#include "daemon/server/read_consistency.h"
#include "index_builders/aggregate.h"
#include "index_builders/key_codec.h"

namespace cdcview {
namespace {

using Clock = std::chrono::steady_clock;
// At most this many physical groups are listed per logical group, as a single store lists.
constexpr int kMaxShardsListed = 1000;

template <typename Req, typename Resp>
using PrepareAsync = std::unique_ptr<grpc::ClientAsyncResponseReader<Resp>> (
    v1::ViewService::Stub::*)(grpc::ClientContext*, const Req&, grpc::CompletionQueue*);

// Every member's answer to `request`, by ordinal: this member's from `local()`, run on this
// thread while the others' calls are in flight. A local error cancels the remote calls (the
// local error is what the call answers).
template <typename Req, typename Resp, typename Local>
std::vector<absl::StatusOr<Resp>> AskAll(const ClusterPeers& peers,
                                         PrepareAsync<Req, Resp> prepare, const Req& request,
                                         Clock::time_point bound, Local local) {
  struct Remote {
    grpc::ClientContext ctx;
    Resp answer;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<Resp>> reader;
  };
  const uint32_t n = peers.members();
  std::vector<std::unique_ptr<Remote>> remotes(n);
  grpc::CompletionQueue cq;
  const Clock::time_point start = Clock::now();
  size_t pending = 0;
  std::vector<absl::StatusOr<Resp>> out(n, absl::StatusOr<Resp>(Resp()));
  for (uint32_t i = 0; i < n; ++i) {
    if (i == peers.ordinal()) continue;
    if (peers.stopping()) {  // not started: it would only be cancelled
      out[i] = peers.Stopped(i);
      continue;
    }
    auto r = std::make_unique<Remote>();
    peers.Prepare(&r->ctx, bound);
    r->reader = (peers.stub(i)->*prepare)(&r->ctx, request, &cq);
    r->reader->StartCall();
    r->reader->Finish(&r->answer, &r->status, reinterpret_cast<void*>(static_cast<uintptr_t>(i)));
    remotes[i] = std::move(r);
    ++pending;
  }
  out[peers.ordinal()] = local();
  const bool cancelled = !out[peers.ordinal()].ok();
  if (cancelled) {
    for (auto& r : remotes) {
      if (r != nullptr) r->ctx.TryCancel();
    }
  }
  void* tag;
  bool ok;
  bool stopped = false;  // the remote calls were cancelled by ClusterPeers::Stop
  while (pending > 0) {
    const auto next = cq.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + ClusterPeers::kStopPoll);
    if (next == grpc::CompletionQueue::SHUTDOWN) break;
    if (next == grpc::CompletionQueue::TIMEOUT) {
      if (!stopped && peers.stopping()) {
        stopped = true;
        for (auto& r : remotes) {
          if (r != nullptr) r->ctx.TryCancel();
        }
      }
      continue;
    }
    const auto i = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(tag));
    --pending;
    Remote& r = *remotes[i];
    if (!cancelled && !stopped) {
      peers.Observe(i, std::chrono::duration<double>(Clock::now() - start).count(), r.status);
    }
    if (r.status.ok()) {
      out[i] = std::move(r.answer);
    } else {
      out[i] = stopped && r.status.error_code() == grpc::StatusCode::CANCELLED
                   ? peers.Stopped(i)
                   : peers.PeerError(i, r.status);
    }
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return out;
}

// The answers, or the call's error: this member's own first, then the lowest ordinal's.
template <typename Resp>
absl::StatusOr<std::vector<Resp>> AllAnswered(std::vector<absl::StatusOr<Resp>> by_member,
                                              uint32_t ordinal) {
  if (!by_member[ordinal].ok()) return by_member[ordinal].status();
  std::vector<Resp> out;
  out.reserve(by_member.size());
  for (auto& answer : by_member) {
    if (!answer.ok()) return answer.status();
    out.push_back(*std::move(answer));
  }
  return out;
}

// Every member's answer, or the call's error (AskAll, then AllAnswered).
template <typename Req, typename Resp, typename Local>
absl::StatusOr<std::vector<Resp>> Answers(const ClusterPeers& peers,
                                          PrepareAsync<Req, Resp> prepare, const Req& request,
                                          Clock::time_point bound, Local local) {
  return AllAnswered(AskAll(peers, prepare, request, bound, std::move(local)), peers.ordinal());
}

// The member owning a Kafka partition "topic/N"; nullopt for a partition of another form.
std::optional<uint32_t> OwnerOf(std::string_view partition, const ClusterConfig& cluster) {
  const std::optional<int32_t> n = KafkaPartitionNumber(partition);
  if (!n || cluster.members == 0) return std::nullopt;
  return static_cast<uint32_t>(*n) % cluster.members;
}

absl::Status WithoutKeys(uint32_t member) {
  return absl::InternalError(absl::StrCat(
      "cluster member ", member, " answered without the entries' keys the merge needs; every "
      "member must run the same cdcviewd version"));
}

// One member's page of entries, as OrderedMerge reads it: the current entry's order key is
// its stored key, or (a sharded view's logical key, whose entries sit under several physical
// partition keys) what follows the partition component.
struct PageSource {
  google::protobuf::RepeatedPtrField<v1::ViewEntry>* entries = nullptr;
  int at = 0;
  bool more = false;  // the member has entries after its page
  bool remainder = false;
  size_t skip = 0;

  std::string_view order_key() const {
    return std::string_view((*entries)[at].key()).substr(skip);
  }
  // Places `skip` for the current entry. False: the entry has no key (see WithoutKeys).
  bool Settle() {
    std::string_view key = (*entries)[at].key();
    if (key.empty()) return false;
    skip = 0;
    if (remainder) {
      std::string_view rest = key;
      if (!DecodeKeyComponent(&rest).ok()) return false;
      skip = key.size() - rest.size();
    }
    return true;
  }
};

// Merges the members' pages (moving their entries out) into `out`: `limit` entries in order,
// then next_page_token = token(the last one's order key) when any member has more.
template <typename Resp, typename Token>
absl::Status MergePages(std::vector<Resp>* by_member, bool backward, bool remainder,
                        uint32_t limit, Token token, Resp* out) {
  std::vector<PageSource> sources(by_member->size());
  std::vector<PageSource*> current;
  for (size_t m = 0; m < by_member->size(); ++m) {
    PageSource& s = sources[m];
    s.entries = (*by_member)[m].mutable_entries();
    s.more = !(*by_member)[m].next_page_token().empty();
    s.remainder = remainder;
    if (s.entries->empty()) continue;
    if (!s.Settle()) return WithoutKeys(static_cast<uint32_t>(m));
    current.push_back(&s);
  }
  OrderedMerge<PageSource> merge(std::move(current), backward);
  std::string last;
  uint32_t n = 0;
  // A member whose page ran out while it has more: what follows it was not fetched, so the
  // page ends here (short of `limit` only when that member's page ended by max_bytes).
  bool cut = false;
  while (!merge.empty() && n < limit) {
    PageSource* top = merge.Take();
    last.assign(top->order_key());
    v1::ViewEntry* entry = out->add_entries();
    entry->Swap(top->entries->Mutable(top->at));
    entry->clear_key();
    ++n;
    if (++top->at < top->entries->size()) {
      if (!top->Settle()) return WithoutKeys(static_cast<uint32_t>(top - sources.data()));
      merge.Return(top);
    } else if (top->more) {
      cut = true;
      break;
    }
  }
  if (n > 0 && (cut || !merge.empty())) out->set_next_page_token(token(last));
  return absl::OkStatus();
}

template <typename Resp>
std::vector<const v1::AppliedPosition*> AppliedOf(const std::vector<Resp>& by_member) {
  std::vector<const v1::AppliedPosition*> out;
  for (const Resp& r : by_member) out.push_back(&r.applied());
  return out;
}

// The physical group's place among a logical group's shards: its stored shard part.
std::string ShardOrder(const AggregateSpec& spec, const v1::AttributeValue& group) {
  std::optional<uint32_t> shard;
  if (group.value_case() == v1::AttributeValue::kS) {
    if (auto split = SplitShardSuffix(spec.strip_shard_suffix, group.s(), 0)) shard = split->second;
  }
  return EncodeShardPart(shard);
}

// One logical group from the members' parts of it (each emitted with partial state).
absl::StatusOr<v1::AggregateGroup> MergeGroup(const AggregateSpec& spec,
                                              const std::vector<v1::AggregateGroup*>& parts) {
  v1::AggregateGroup out;
  out.set_aggregate(parts.front()->aggregate());
  *out.mutable_group() = parts.front()->group();
  GroupTotals totals(spec.measures.size());
  struct Shard {
    v1::AttributeValue group;
    GroupTotals totals;
  };
  std::map<std::string, Shard> shards;
  uint32_t omitted = 0;
  for (const v1::AggregateGroup* part : parts) {
    auto t = TotalsOfPartial(spec, part->members(), part->measures());
    if (!t.ok()) return t.status();
    totals.Add(*t);
    for (const v1::AggregateGroup::Shard& shard : part->shards()) {
      auto st = TotalsOfPartial(spec, shard.members(), shard.measures());
      if (!st.ok()) return st.status();
      auto [it, inserted] = shards.try_emplace(
          ShardOrder(spec, shard.group()), Shard{shard.group(), GroupTotals(spec.measures.size())});
      it->second.totals.Add(*st);
    }
    omitted += part->shards_omitted();
  }
  out.set_members(totals.members);
  EmitMeasures(spec, totals, false, out.mutable_measures());
  for (const auto& [order, shard] : shards) {
    if (out.shards_size() == kMaxShardsListed) {
      ++omitted;
      continue;
    }
    v1::AggregateGroup::Shard* s = out.add_shards();
    *s->mutable_group() = shard.group;
    s->set_members(shard.totals.members);
    EmitMeasures(spec, shard.totals, false, s->mutable_measures());
  }
  out.set_shards_omitted(omitted);
  return out;
}

}  // namespace

v1::AppliedPosition MergeApplied(const std::vector<const v1::AppliedPosition*>& by_member,
                                 const ClusterConfig& cluster) {
  struct Chosen {
    const v1::AppliedPosition::Entry* entry;
    bool from_owner;
  };
  std::map<std::pair<std::string, std::string>, Chosen> merged;
  for (size_t m = 0; m < by_member.size(); ++m) {
    for (const v1::AppliedPosition::Entry& e : by_member[m]->entries()) {
      const bool owner = OwnerOf(e.partition(), cluster) == m;
      auto [it, inserted] = merged.try_emplace({e.source(), e.partition()}, Chosen{&e, owner});
      if (!inserted && owner && !it->second.from_owner) it->second = Chosen{&e, true};
    }
  }
  v1::AppliedPosition out;
  for (const auto& [key, chosen] : merged) *out.add_entries() = *chosen.entry;
  out.set_token(EncodePositionToken(out));
  return out;
}

ClusterQueries::ClusterQueries(const ViewReader& local, const ClusterPeers& peers,
                               const Config& config)
    : local_(local), peers_(peers), config_(config) {}

ViewQueries::Deadline ClusterQueries::Bound(Deadline deadline) const {
  // A member waits at most server.max_wait_ms for a position, so a part still missing a
  // second after that is a member that does not answer, whatever deadline the client gave.
  const Deadline bound =
      Clock::now() + std::chrono::milliseconds(config_.server.max_wait_ms) + std::chrono::seconds(1);
  return std::min(deadline, bound);
}

absl::StatusOr<v1::QueryResponse> ClusterQueries::Query(const v1::QueryRequest& request,
                                                        Deadline deadline) const {
  auto answers = Answers(peers_, &v1::ViewService::Stub::PrepareAsyncQuery, request,
                         Bound(deadline), [&] { return local_.Query(request, deadline); });
  if (!answers.ok()) return answers.status();
  const ViewRef* view = local_.catalog().FindView(request.view());
  if (view == nullptr) return absl::InternalError("the view is gone from the catalog");
  const ViewSpec& spec = *view->spec;
  // A sharded view's logical key merges its shards by remainder, as a single store does.
  const bool logical = spec.shards.enabled() &&
                       request.partition_key().value_case() == v1::AttributeValue::kS &&
                       !spec.shards.Split(request.partition_key().s()).has_value();
  std::string logical_key;
  if (logical) {
    EncodeKeyComponent(AttributeValue::String(request.partition_key().s()), &logical_key);
  }
  const bool backward = request.scan_backward();
  v1::QueryResponse response;
  absl::Status merged = MergePages(
      &*answers, backward, logical, local_.PageLimit(request.limit()),
      [&](std::string_view last) {
        return logical ? EncodeMergedPageToken(view->fingerprint, backward, spec.shards,
                                               logical_key, last)
                       : EncodePageToken(view->fingerprint, backward, last);
      },
      &response);
  if (!merged.ok()) return merged;
  *response.mutable_applied() = MergeApplied(AppliedOf(*answers), config_.cluster);
  return response;
}

absl::StatusOr<v1::ScanResponse> ClusterQueries::Scan(const v1::ScanRequest& request,
                                                      Deadline deadline) const {
  auto answers = Answers(peers_, &v1::ViewService::Stub::PrepareAsyncScan, request,
                         Bound(deadline), [&] { return local_.Scan(request, deadline); });
  if (!answers.ok()) return answers.status();
  const ViewRef* view = local_.catalog().FindView(request.view());
  if (view == nullptr) return absl::InternalError("the view is gone from the catalog");
  v1::ScanResponse response;
  absl::Status merged = MergePages(
      &*answers, false, false, local_.PageLimit(request.limit()),
      [&](std::string_view last) { return EncodePageToken(view->fingerprint, false, last); },
      &response);
  if (!merged.ok()) return merged;
  *response.mutable_applied() = MergeApplied(AppliedOf(*answers), config_.cluster);
  return response;
}

absl::StatusOr<v1::GetItemResponse> ClusterQueries::GetItem(const v1::GetItemRequest& request,
                                                            Deadline deadline) const {
  auto answers = Answers(peers_, &v1::ViewService::Stub::PrepareAsyncGetItem, request,
                         Bound(deadline), [&] { return local_.GetItem(request, deadline); });
  if (!answers.ok()) return answers.status();
  v1::GetItemResponse response;
  for (v1::GetItemResponse& answer : *answers) {
    if (answer.found()) {
      response.set_found(true);
      *response.mutable_item() = std::move(*answer.mutable_item());
      break;
    }
  }
  *response.mutable_applied() = MergeApplied(AppliedOf(*answers), config_.cluster);
  return response;
}

absl::StatusOr<v1::AggregateGroup> ClusterQueries::GetAggregate(
    const v1::GetAggregateRequest& request, Deadline deadline) const {
  auto answers = Answers(peers_, &v1::ViewService::Stub::PrepareAsyncGetAggregate, request,
                         Bound(deadline), [&] { return local_.GetAggregate(request, deadline); });
  if (!answers.ok()) return answers.status();
  const AggregateRef* aggregate = local_.catalog().FindAggregate(request.aggregate());
  if (aggregate == nullptr) return absl::InternalError("the aggregate is gone from the catalog");
  std::vector<v1::AggregateGroup*> parts;
  for (v1::AggregateGroup& answer : *answers) parts.push_back(&answer);
  auto response = MergeGroup(*aggregate->spec, parts);
  if (!response.ok()) return response.status();
  *response->mutable_applied() = MergeApplied(AppliedOf(*answers), config_.cluster);
  return response;
}

absl::StatusOr<v1::ListAggregatesResponse> ClusterQueries::ListAggregates(
    const v1::ListAggregatesRequest& request, Deadline deadline) const {
  auto answers = Answers(peers_, &v1::ViewService::Stub::PrepareAsyncListAggregates, request,
                         Bound(deadline), [&] { return local_.ListAggregates(request, deadline); });
  if (!answers.ok()) return answers.status();
  const AggregateRef* aggregate = local_.catalog().FindAggregate(request.aggregate());
  if (aggregate == nullptr) return absl::InternalError("the aggregate is gone from the catalog");
  // Every group up to the smallest last group of the members that have more is complete in
  // every member's page (each page is whole groups in key order); there are at least `limit`
  // of them, since that member's page alone holds `limit`.
  std::map<std::string, std::vector<v1::AggregateGroup*>> groups;
  std::optional<std::string> bound;
  bool more = false;
  for (v1::ListAggregatesResponse& answer : *answers) {
    std::string last;
    for (v1::AggregateGroup& group : *answer.mutable_groups()) {
      auto value = FromProto(group.group(), "group");
      if (!value.ok()) return value.status();
      last.clear();
      EncodeKeyComponent(*value, &last);
      groups[last].push_back(&group);
    }
    if (!answer.next_page_token().empty()) {
      more = true;
      if (!bound || last < *bound) bound = last;
    }
  }
  const uint32_t limit = local_.PageLimit(request.limit());
  v1::ListAggregatesResponse response;
  std::string last;
  for (const auto& [key, parts] : groups) {
    if (bound && key > *bound) break;
    if (static_cast<uint32_t>(response.groups_size()) == limit) {
      more = true;
      break;
    }
    auto group = MergeGroup(*aggregate->spec, parts);
    if (!group.ok()) return group.status();
    *response.add_groups() = *std::move(group);
    last = key;
  }
  if (more && response.groups_size() > 0) {
    response.set_next_page_token(EncodePageToken(aggregate->fingerprint, false, last));
  }
  *response.mutable_applied() = MergeApplied(AppliedOf(*answers), config_.cluster);
  return response;
}

absl::StatusOr<v1::ListViewsResponse> ClusterQueries::ListViews() const {
  auto answers = Answers(peers_, &v1::ViewService::Stub::PrepareAsyncListViews, v1::ListViewsRequest(),
                         Bound(Deadline::max()), [&] { return local_.ListViews(); });
  if (!answers.ok()) return answers.status();
  return MergeListViews(*answers);
}

absl::StatusOr<v1::ViewDescription> ClusterQueries::DescribeView(const std::string& name) const {
  v1::DescribeViewRequest request;
  request.set_view(name);
  auto answers = Answers(peers_, &v1::ViewService::Stub::PrepareAsyncDescribeView, request,
                         Bound(Deadline::max()), [&] { return local_.DescribeView(name); });
  if (!answers.ok()) return answers.status();
  return MergeViewDescription(*answers);
}

v1::StatusResponse ClusterQueries::GetStatus() const {
  auto answers =
      AskAll(peers_, &v1::ViewService::Stub::PrepareAsyncGetStatus, v1::GetStatusRequest(),
             Bound(Deadline::max()),
             [&] { return absl::StatusOr<v1::StatusResponse>(local_.GetStatus()); });
  std::vector<v1::StatusResponse> by_member;
  for (auto& answer : answers) {
    by_member.push_back(answer.ok() ? *std::move(answer) : v1::StatusResponse());
  }
  v1::StatusResponse merged = MergeStatus(by_member);
  for (uint32_t i = 0; i < answers.size(); ++i) {
    merged.mutable_members(i)->set_address(peers_.address(i));
    if (!answers[i].ok()) {
      MarkMemberUnreachable(i, std::string(answers[i].status().message()), &merged);
    }
  }
  return merged;
}

absl::StatusOr<v1::HotKeysResponse> ClusterQueries::GetHotKeys(
    const v1::GetHotKeysRequest& request) const {
  // Each member lists only its own hottest keys; twice as many leaves a margin for a key that
  // is hot across members but below `limit` on some (MergeHotKeys).
  const uint32_t limit = request.limit() == 0 ? 10 : request.limit();
  v1::GetHotKeysRequest wider = request;
  wider.set_limit(limit > UINT32_MAX / 2 ? UINT32_MAX : limit * 2);
  auto answers = Answers(peers_, &v1::ViewService::Stub::PrepareAsyncGetHotKeys, wider,
                         Bound(Deadline::max()), [&] { return local_.GetHotKeys(wider); });
  if (!answers.ok()) return answers.status();
  return MergeHotKeys(*answers, limit);
}

}  // namespace cdcview
