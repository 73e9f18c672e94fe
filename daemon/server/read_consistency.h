// Read consistency: position tokens, comparing positions per source kind, and the
// requirements a ReadConsistency puts on a read (read-your-writes, freshness bounds).
//
// Pure functions; thread-safe. The waiting itself is ViewReader::AwaitConsistency, which
// checks these requirements against the writer's committed positions.
//
// Position token (AppliedPosition.token), opaque to clients:
//   "cp" · version (1) · varint entry count · per entry: varint-prefixed source, partition,
//   position · FNV-1a 32 of everything before, little-endian.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "cdcview/v1/view_service.pb.h"
#include "daemon/config/config.h"
#include "daemon/state/published_state.h"

namespace cdcview {

std::string EncodePositionToken(const v1::AppliedPosition& applied);
// The size of the token EncodePositionToken gives for `positions`, without building it.
size_t PositionTokenSize(const PositionMap& positions);

// The largest position token a read takes, for a daemon whose own token (of its stored
// positions) is `own_token_bytes` long: a token carries one entry per stored (source,
// partition), and stored positions are never deleted, so the daemon's own token is about as
// large as any it gave before, and a replica reading the same sources gives one about as
// large (ahead by a few shards or partitions: hence twice). The floor leaves room for a
// replica that has stored many more partitions than a young store (64 KiB: about 600 DynamoDB
// shards or 1,500 Kafka partitions). Anything larger is refused unread: decoding costs memory
// in proportion to a token's size (a protobuf entry per three bytes), which a client must not
// choose.
inline constexpr size_t kPositionTokenFloor = 64 * 1024;
inline size_t PositionTokenLimit(size_t own_token_bytes) {
  return std::max(kPositionTokenFloor, 2 * own_token_bytes);
}
// Each entry is three length prefixes (source, partition, position) of at least a byte each.
inline constexpr size_t kMinPositionTokenEntryBytes = 3;

// INVALID_ARGUMENT naming the field for a damaged token, one of another version or a page
// token passed by mistake, a token longer than `max_bytes`, or one whose entry count does not
// fit its bytes (checked before anything is sized by it).
absl::StatusOr<std::vector<v1::AppliedPosition::Entry>> DecodePositionToken(
    std::string_view token, size_t max_bytes = kPositionTokenFloor);

// Whether a partition's stored next position `applied` is at or past `wanted`, for a source
// of `kind`:
//   kafka     next offsets, decimal: numeric order;
//   file      "<byte offset>:<line>:<generation>:<inode>" (or the older "<byte offset>:<line>",
//             generation 0): (generation, byte offset) in numeric order, a generation counting
//             the times the source went back to the start of a truncated or rotated file;
//   dynamodb  shard: "" < "TRIM_HORIZON" < sequence numbers (decimal strings of any length,
//             numeric order) < "END"; scan segment ("scan/<i>"): its LastEvaluatedKeys have no
//             order we know, so only the same key or "DONE" reach it.
// An empty `applied` (a partition not applied yet) reaches only an empty `wanted`.
// INVALID_ARGUMENT if `wanted` is not a position of that kind (`applied` comes from the store
// and is trusted; one that does not parse never reaches anything).
absl::StatusOr<bool> PositionReached(SourceConfig::Kind kind, std::string_view partition,
                                     std::string_view applied, std::string_view wanted);

// One partition a read must wait for.
struct PositionRequirement {
  size_t source = 0;      // index in Config::sources
  std::string partition;
  std::string position;   // the next position that must be stored (at least)
  std::string wanted;     // how messages name what is awaited ("57", "offset 56")
};

// A DynamoDB snapshot Scan segment ("scan/<i>"): a backfill's progress, not a stream a client
// writes into.
bool IsScanPartition(SourceConfig::Kind kind, std::string_view partition);
// A DynamoDB source's own markers, not streams a client writes into either: "snapshot"
// (started / done) and "trimmed" (the last data-loss report, any text). Like scan segments,
// they are never awaited by a consistency token.
bool IsMarkerPartition(SourceConfig::Kind kind, std::string_view partition);

// The requirements of `consistency` that concern `table` (sources of other tables do not
// matter to its reads): min_position's entries of its sources, except Scan segments (a token
// carries every stored position, and a segment's LastEvaluatedKeys have no order, so waiting
// for one would hold every read until the backfill ends; a client's own write arrives through
// a stream shard, whose position the token also carries), and min_kafka_offsets mapped
// to the Kafka sources of the table that read the topic (partition "<topic>/<n>", applied
// once the stored next offset is > offset). In a cluster (config.cluster), a Kafka partition
// another member owns (OwnsPartition) is left out: its owner waits for it. INVALID_ARGUMENT: a malformed token, a source
// this server does not have, a position that is not one of its source's kind, a topic no
// source reads, a negative partition or offset; a min_position longer than
// `max_token_bytes` (PositionTokenLimit).
absl::StatusOr<std::vector<PositionRequirement>> RequirementsFor(
    const v1::ReadConsistency& consistency, const Config& config, size_t table,
    size_t max_token_bytes = kPositionTokenFloor);

// When a read's wait for positions gives up, for a call that must be answered by
// `call_deadline`: a tenth of the time left before it, at most kWaitAnswerMargin, so that the
// DEADLINE_EXCEEDED saying what is still awaited reaches the client before the client's own
// deadline cancels the call and leaves it a bare "Deadline Exceeded".
inline constexpr std::chrono::milliseconds kWaitAnswerMargin{200};
std::chrono::steady_clock::time_point WaitDeadline(std::chrono::steady_clock::time_point call_deadline,
                                                   std::chrono::steady_clock::time_point now);

}  // namespace cdcview
