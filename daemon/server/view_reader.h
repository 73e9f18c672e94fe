// ViewReader: the local ViewQueries, answering from LMDB read transactions and what the writer
// publishes (PublishedState). The gRPC ports are thin adapters over ViewQueries, so the query
// semantics are testable without a network.
//
// Thread-safe: every call opens its own read transaction; many may run at once and none
// takes a lock the writer waits for.
//
// Ranges: a view's entries for one partition key are the keys that begin with enc(pk); a sort
// condition narrows that to [lower, upper) over enc(pk)·enc(sk) (see key_codec.h), so every
// condition is one cursor walk in either direction. Page tokens carry the last key returned
// and the view's fingerprint, and resume strictly after (or before) it.
//
// Write-sharded views: a query for a logical partition key (one that is not itself a
// physical key "<logical><suffix of shard i>") reads the N physical partitions in one read
// transaction and merges them lazily (a heap of N cursors) by each entry's remainder,
// enc(sk)·enc(table key), which is unique per item and is the order within one partition.
// A page token holds the last remainder; every shard resumes strictly after it.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cdcview/v1/view_service.pb.h"
#include "daemon/server/view_queries.h"
#include "daemon/state/catalog.h"
#include "daemon/state/published_state.h"
#include "daemon/store/store.h"
#include "index_builders/view_spec.h"

namespace cdcview {

class ViewReader : public ViewQueries {
 public:
  // Reads `store`, and what the writer publishes (view states, positions, counters, the
  // sources' health) from `published`; both must outlive the reader. `member_parts`: the
  // reader of a cluster member answering for itself only (the x-cdcview-local-only calls and
  // its own part of a merged answer): its answers also carry what the merge needs, each
  // entry's stored key (ViewEntry.key) and the partial state of sum and avg measures
  // (MeasureValue.partial_count and partial_sum).
  ViewReader(const Catalog& catalog, const Store& store, const PublishedState& published,
             uint32_t max_page_size = 1000, bool member_parts = false);

  const Catalog& catalog() const { return catalog_; }
  uint32_t max_page_size() const { return max_page_size_; }
  // A request's page size: its limit (0: unset) capped at max_page_size.
  uint32_t PageLimit(uint32_t requested) const;

  absl::StatusOr<v1::QueryResponse> Query(const v1::QueryRequest& request,
                                          Deadline deadline = Deadline::max()) const override;
  absl::StatusOr<v1::ScanResponse> Scan(const v1::ScanRequest& request,
                                        Deadline deadline = Deadline::max()) const override;
  absl::StatusOr<v1::GetItemResponse> GetItem(const v1::GetItemRequest& request,
                                              Deadline deadline = Deadline::max()) const override;

  // What every read with a ReadConsistency calls before it opens its read transaction (views,
  // GetItem, aggregates): waits until min_position and min_kafka_offsets are applied for the
  // sources of `table` (index in Config::tables), woken by the writer's commits, then checks
  // max_staleness_seconds against those sources. `what` names the object in messages
  // ("view GSI1", "table App", "aggregate Likes").
  // INVALID_ARGUMENT: a malformed min_position, an unknown source or topic, a negative
  // max_staleness_seconds. DEADLINE_EXCEEDED: the deadline passed first (the message names the
  // partition, what is applied and what is awaited). UNAVAILABLE: a source being waited for is
  // in error. FAILED_PRECONDITION: a source of the table is further behind than
  // max_staleness_seconds, or in error.
  absl::Status AwaitConsistency(const v1::ReadConsistency& consistency, size_t table,
                                const std::string& what, Deadline deadline) const;

  // The heaviest partition keys of a view or table (HotKeyTracker). NOT_FOUND: unknown view or
  // table. INVALID_ARGUMENT: neither or both of view and table.
  absl::StatusOr<v1::HotKeysResponse> GetHotKeys(
      const v1::GetHotKeysRequest& request) const override;
  // A sharded view's shard_item_counts and shard_skew walk all its entries (O(entries)).
  absl::StatusOr<v1::ViewDescription> DescribeView(const std::string& name) const override;
  // INTERNAL if the store cannot be read. Every view as DescribeView describes it, except that
  // shard_item_counts and shard_skew are left unset (shard_count and shard_suffix are set):
  // listing stays cheap however large the views; DescribeView a view for its shard balance.
  absl::StatusOr<v1::ListViewsResponse> ListViews() const override;
  // Counters and positions come from one published snapshot (PublishedState::Snapshot), so
  // they describe the same commits; no lock the writer waits for is taken.
  v1::StatusResponse GetStatus() const override;
  // Names (of views, tables, aggregates) longer than this, and than any configured one,
  // cannot exist: INVALID_ARGUMENT, where a shorter unknown name is NOT_FOUND.
  static constexpr size_t kMaxNameBytes = 1024;
  // The view, READY: NOT_FOUND naming the views for an unknown name (INVALID_ARGUMENT for
  // one over kMaxNameBytes), UNAVAILABLE with the progress while it is rebuilt. Every RPC on
  // a view (Query, Scan, Watch) starts here.
  absl::StatusOr<const ViewRef*> ReadyView(const std::string& name) const;
  // For a cluster member's own part (member_parts): UNAVAILABLE while a source of `table` is
  // backfilling its partitions, since the cluster's answer would miss what they hold; OK
  // otherwise, and always for a standalone reader (a backfilling view answers, as DescribeView
  // says BACKFILLING).
  absl::Status MemberCaughtUp(size_t table) const;

  // Aggregates (implemented in aggregate_reader.cc). NOT_FOUND: unknown aggregate (the message
  // lists them). INVALID_ARGUMENT: a group or prefix of the wrong type, a malformed or foreign
  // page token. UNAVAILABLE: the aggregate is being rebuilt. A group without members answers
  // members 0, count 0 and the other measures unset. `consistency` as for Query.
  absl::StatusOr<v1::AggregateGroup> GetAggregate(
      const v1::GetAggregateRequest& request, Deadline deadline = Deadline::max()) const override;
  absl::StatusOr<v1::ListAggregatesResponse> ListAggregates(
      const v1::ListAggregatesRequest& request,
      Deadline deadline = Deadline::max()) const override;

 private:
  absl::StatusOr<const AggregateRef*> ReadyAggregate(const std::string& name) const;
  // Without shard_item_counts and shard_skew (DescribeView adds them, walking the entries).
  v1::ViewDescription Describe(const ViewRef& view, const Txn& txn) const;
  // Why source `source` cannot advance (the writer's or the source's error), "" if it can.
  std::string SourceError(size_t source) const;
  absl::Status CheckStaleness(double max_staleness_seconds, size_t table,
                              const std::string& what) const;
  // AwaitConsistency when the request carries a ReadConsistency, naming the object
  // "<kind> <name>" in messages; OK at once otherwise.
  template <typename Request>
  absl::Status AwaitRequested(const Request& request, size_t table, std::string_view kind,
                              const std::string& name, Deadline deadline) const {
    if (!request.has_consistency()) return absl::OkStatus();
    return AwaitConsistency(request.consistency(), table, std::string(kind) + " " + name,
                            deadline);
  }
  // The index of table `name` in Config::tables; NOT_FOUND listing the tables.
  absl::StatusOr<size_t> FindTable(const std::string& name) const;
  // Why `name` names no `kind` ("view", "table", "aggregate") of `names`: INVALID_ARGUMENT
  // when it is longer than any can be (kMaxNameBytes, or the longest configured), without
  // echoing it; else NOT_FOUND quoting it (QuoteBounded). Both list `names`.
  static absl::Status UnknownName(absl::string_view kind, absl::string_view name,
                                  const std::vector<std::string>& names);

  const Catalog& catalog_;
  const Store& store_;
  const PublishedState& published_;
  uint32_t max_page_size_;
  bool member_parts_;
};

// The stored source positions as seen by `txn`, so a response's position matches what it read.
// A store error as StoreDamageError says (store_damage.h).
absl::Status AppliedIn(const Txn& txn, MDB_dbi meta, v1::AppliedPosition* out);

// A sharded view's shard_skew from its shard_item_counts: the largest shard over the mean
// shard (1.0: even, and for an empty view).
double ShardSkew(const std::vector<uint64_t>& counts);

// Page tokens (exposed for tests): opaque bytes binding a resume key to a view definition.
std::string EncodePageToken(std::string_view fingerprint, bool backward, std::string_view last_key);
// INVALID_ARGUMENT with an actionable message for a token that is malformed or was issued for
// another view definition or direction, or for a merged query.
absl::StatusOr<std::string> DecodePageToken(std::string_view token, std::string_view fingerprint,
                                            bool backward);

// Merged page tokens, for a sharded view queried by its logical partition key: the remainder
// of the last entry returned (its key after the partition component), bound to the sharding
// and the encoded logical key, because the fingerprint leaves the sharding out.
std::string EncodeMergedPageToken(std::string_view fingerprint, bool backward,
                                  const ShardSpec& shards, std::string_view logical_key,
                                  std::string_view last_remainder);
// INVALID_ARGUMENT for a malformed token, or one issued for another view definition, a
// single-partition query, another sharding, direction or logical key; returns the remainder.
absl::StatusOr<std::string> DecodeMergedPageToken(std::string_view token,
                                                  std::string_view fingerprint, bool backward,
                                                  const ShardSpec& shards,
                                                  std::string_view logical_key);

}  // namespace cdcview
