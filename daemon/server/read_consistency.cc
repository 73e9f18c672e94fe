#include "daemon/server/read_consistency.h"

#include <algorithm>
#include <charconv>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/server/token_seal.h"
#include "index_builders/coding.h"

namespace cdcview {
namespace {

constexpr std::string_view kMagic = "cp";
constexpr char kVersion = 1;

bool ParseUnsigned(std::string_view text, uint64_t* out) {
  if (text.empty()) return false;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return error == std::errc() && end == text.data() + text.size();
}

size_t VarintSize(uint64_t v) {
  size_t bytes = 1;
  for (; v >= 0x80; v >>= 7) ++bytes;
  return bytes;
}

bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Numeric order of decimal strings of any length (DynamoDB sequence numbers exceed 64 bits).
int CompareDecimal(std::string_view a, std::string_view b) {
  auto strip = [](std::string_view s) {
    while (s.size() > 1 && s.front() == '0') s.remove_prefix(1);
    return s;
  };
  a = strip(a);
  b = strip(b);
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  return a.compare(b) < 0 ? -1 : (a == b ? 0 : 1);
}

// A DynamoDB shard position's rank: "" < TRIM_HORIZON < sequence numbers < END; -1 if none.
int ShardRank(std::string_view p) {
  if (p.empty()) return 0;
  if (p == "TRIM_HORIZON") return 1;
  if (AllDigits(p)) return 2;
  if (p == "END") return 3;
  return -1;
}

// Where a file position "<byte offset>:<line>:<generation>:<inode>" (or the older
// "<byte offset>:<line>", generation 0) is, in the order the source reads: (generation, offset).
bool FilePlace(std::string_view p, std::pair<uint64_t, uint64_t>* place) {
  uint64_t fields[4] = {0, 0, 0, 0};
  size_t n = 0;
  for (size_t start = 0; n < 4; ++n) {
    const size_t colon = p.find(':', start);
    if (!ParseUnsigned(p.substr(start, colon == std::string_view::npos ? colon : colon - start),
                       &fields[n])) {
      return false;
    }
    if (colon == std::string_view::npos) break;
    start = colon + 1;
  }
  if (n != 1 && n != 3) return false;  // 2 or 4 fields
  *place = {fields[2], fields[0]};
  return true;
}

// In a cluster, whether this member waits for `partition` of source `s`: not for a Kafka
// partition ("<topic>/<n>") another member owns; that member's own wait covers it.
bool WaitsHere(const Config& config, const SourceConfig& s, std::string_view partition) {
  if (!config.cluster.Enabled() || s.kind != SourceConfig::Kind::kKafka) return true;
  const std::optional<int32_t> n = KafkaPartitionNumber(partition);
  return !n || OwnsPartition(*n, config.cluster.members, config.cluster.ordinal);
}

}  // namespace

bool IsScanPartition(SourceConfig::Kind kind, std::string_view partition) {
  return kind == SourceConfig::Kind::kDynamoDb && partition.starts_with("scan/");
}

bool IsMarkerPartition(SourceConfig::Kind kind, std::string_view partition) {
  return kind == SourceConfig::Kind::kDynamoDb &&
         (partition == "snapshot" || partition == "trimmed");
}

std::string EncodePositionToken(const v1::AppliedPosition& applied) {
  std::string t(kMagic);
  t.push_back(kVersion);
  PutVarint(applied.entries_size(), &t);
  for (const auto& e : applied.entries()) {
    PutLengthPrefixed(e.source(), &t);
    PutLengthPrefixed(e.partition(), &t);
    PutLengthPrefixed(e.position(), &t);
  }
  return SealToken(std::move(t));
}

size_t PositionTokenSize(const PositionMap& positions) {
  size_t size = kMagic.size() + 1 + VarintSize(positions.size()) + 4;
  for (const auto& [key, position] : positions) {
    for (size_t bytes : {key.first.size(), key.second.size(), position.size()}) {
      size += VarintSize(bytes) + bytes;
    }
  }
  return size;
}

absl::StatusOr<std::vector<v1::AppliedPosition::Entry>> DecodePositionToken(std::string_view token,
                                                                           size_t max_bytes) {
  constexpr char kWhatToPass[] =
      "; pass AppliedPosition.token from an earlier response unchanged";
  auto malformed = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("consistency.min_position is malformed", kWhatToPass));
  };
  if (token.size() > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "consistency.min_position: a token of ", token.size(),
        " bytes is larger than any this daemon gives (at most ", max_bytes, ")", kWhatToPass));
  }
  if (token.size() < kMagic.size() + 1 + 4 || token.substr(0, kMagic.size()) != kMagic) {
    return absl::InvalidArgumentError(
        "consistency.min_position is not a position token; pass AppliedPosition.token from an "
        "earlier response (not a page token), unchanged");
  }
  std::optional<std::string_view> unsealed = UnsealToken(token);
  if (!unsealed.has_value()) return malformed();
  std::string_view body = *unsealed;
  if (body[kMagic.size()] != kVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "consistency.min_position has token version ", int(body[kMagic.size()]),
        "; this server reads version ", int(kVersion),
        ": take the token from a response of a server of this version"));
  }
  body.remove_prefix(kMagic.size() + 1);
  uint64_t n;
  if (!GetVarint(&body, &n)) return malformed();
  // The count is checked against the bytes that hold the entries before it sizes anything;
  // the entries are then added as they are read, so a count that lies costs nothing.
  if (n > body.size() / kMinPositionTokenEntryBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "consistency.min_position: a token of ", token.size(), " bytes claims ", n,
        " entries; it holds at most ", body.size() / kMinPositionTokenEntryBytes, kWhatToPass));
  }
  std::vector<v1::AppliedPosition::Entry> entries;
  for (uint64_t i = 0; i < n; ++i) {
    std::string_view source, partition, position;
    if (!GetLengthPrefixed(&body, &source) || !GetLengthPrefixed(&body, &partition) ||
        !GetLengthPrefixed(&body, &position)) {
      return malformed();
    }
    v1::AppliedPosition::Entry& e = entries.emplace_back();
    e.set_source(std::string(source));
    e.set_partition(std::string(partition));
    e.set_position(std::string(position));
  }
  if (!body.empty()) return malformed();
  return entries;
}

absl::StatusOr<bool> PositionReached(SourceConfig::Kind kind, std::string_view partition,
                                     std::string_view applied, std::string_view wanted) {
  auto bad = [&](const char* what) {
    return absl::InvalidArgumentError(absl::StrCat("position \"", std::string(wanted),
                                                   "\" of partition \"", std::string(partition),
                                                   "\" is not ", what));
  };
  if (wanted.empty()) return true;
  switch (kind) {
    case SourceConfig::Kind::kKafka: {
      uint64_t want, have;
      if (!ParseUnsigned(wanted, &want)) return bad("a Kafka next offset");
      return ParseUnsigned(applied, &have) && have >= want;
    }
    case SourceConfig::Kind::kFile: {
      std::pair<uint64_t, uint64_t> want, have;
      if (!FilePlace(wanted, &want)) {
        return bad("a file position <byte offset>:<line>:<generation>:<inode>");
      }
      return FilePlace(applied, &have) && have >= want;
    }
    case SourceConfig::Kind::kDynamoDb: {
      if (partition.starts_with("scan/")) return applied == wanted || applied == "DONE";
      if (partition == "trimmed") return true;  // a report, not a position
      if (partition == "snapshot") {
        if (wanted != "started" && wanted != "done") {
          return bad("a snapshot marker (started, done)");
        }
        return applied == wanted || applied == "done";
      }
      const int want = ShardRank(wanted), have = ShardRank(applied);
      if (want < 0) return bad("a DynamoDB shard position (TRIM_HORIZON, a sequence number, END)");
      if (have != want) return have > want;
      return want != 2 || CompareDecimal(applied, wanted) >= 0;
    }
  }
  return false;
}

absl::StatusOr<std::vector<PositionRequirement>> RequirementsFor(
    const v1::ReadConsistency& consistency, const Config& config, size_t table,
    size_t max_token_bytes) {
  std::vector<PositionRequirement> out;
  const std::string& table_name = config.tables[table].name;
  if (!consistency.min_position().empty()) {
    auto entries = DecodePositionToken(consistency.min_position(), max_token_bytes);
    if (!entries.ok()) return entries.status();
    for (const auto& e : *entries) {
      auto it = std::find_if(config.sources.begin(), config.sources.end(),
                             [&](const SourceConfig& s) { return s.name == e.source(); });
      if (it == config.sources.end()) {
        std::vector<std::string> names;
        for (const SourceConfig& s : config.sources) names.push_back(s.name);
        return absl::InvalidArgumentError(absl::StrCat(
            "consistency.min_position names source \"", e.source(),
            "\", which this server does not read (sources: ", absl::StrJoin(names, ", "),
            "); pass a token from a server with the same sources"));
      }
      auto reached = PositionReached(it->kind, e.partition(), "", e.position());
      if (!reached.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("consistency.min_position: source ",
                                                       it->name, ": ", reached.status().message()));
      }
      if (it->table != table_name || IsScanPartition(it->kind, e.partition()) ||
          IsMarkerPartition(it->kind, e.partition()) || !WaitsHere(config, *it, e.partition())) {
        continue;
      }
      out.push_back({static_cast<size_t>(it - config.sources.begin()), e.partition(),
                     e.position(), e.position()});
    }
  }
  for (const v1::KafkaOffset& k : consistency.min_kafka_offsets()) {
    if (k.partition() < 0 || k.offset() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "consistency.min_kafka_offsets: topic ", k.topic(), " partition ", k.partition(),
          " offset ", k.offset(), ": partition and offset must not be negative"));
    }
    bool read = false;
    for (size_t i = 0; i < config.sources.size(); ++i) {
      const SourceConfig& s = config.sources[i];
      if (s.kind != SourceConfig::Kind::kKafka ||
          std::find(s.kafka.topics.begin(), s.kafka.topics.end(), k.topic()) == s.kafka.topics.end()) {
        continue;
      }
      read = true;
      if (s.table != table_name || !OwnsPartition(k.partition(), config.cluster.members,
                                                  config.cluster.ordinal)) {
        continue;
      }
      out.push_back({i, absl::StrCat(k.topic(), "/", k.partition()), std::to_string(k.offset() + 1),
                     absl::StrCat("offset ", k.offset())});
    }
    if (!read) {
      std::vector<std::string> topics;
      for (const SourceConfig& s : config.sources) {
        if (s.kind == SourceConfig::Kind::kKafka) topics.insert(topics.end(), s.kafka.topics.begin(), s.kafka.topics.end());
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "consistency.min_kafka_offsets: no source reads topic \"", k.topic(),
          "\" (topics read: ", topics.empty() ? "none" : absl::StrJoin(topics, ", "), ")"));
    }
  }
  return out;
}

std::chrono::steady_clock::time_point WaitDeadline(std::chrono::steady_clock::time_point call_deadline,
                                                   std::chrono::steady_clock::time_point now) {
  if (call_deadline <= now) return call_deadline;
  const auto margin = std::min<std::chrono::steady_clock::duration>(kWaitAnswerMargin,
                                                                    (call_deadline - now) / 10);
  return call_deadline - margin;
}

}  // namespace cdcview
