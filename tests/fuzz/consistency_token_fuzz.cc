// The read-your-writes position token a client sends as ReadConsistency.min_position
// (daemon/server/read_consistency.h) on arbitrary bytes:
// - DecodePositionToken: the entries or INVALID_ARGUMENT, never an abort or an allocation the
//   token's size does not pay for; entries it decoded, encoded again, decode to the same;
// - RequirementsFor, for a config with a Kafka, a file and a DynamoDB source on one table
//   (what a read does with the token): requirements or INVALID_ARGUMENT;
// - PositionReached for every entry's position as each kind of source, against a stored
//   position of that kind: an answer or INVALID_ARGUMENT.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/config/config.h"
#include "daemon/server/read_consistency.h"
#include "tests/fuzz/fuzz_support.h"

namespace cdcview {
namespace {

const Config& TheConfig() {
  static const Config* config = [] {
    absl::StatusOr<Config> parsed = ParseConfig(fuzz::kConfigYaml, "fuzz.yaml");
    fuzz::Require(parsed.ok(), "the fuzz target's config parses");
    return new Config(*std::move(parsed));
  }();
  return *config;
}

void CheckRejected(const absl::Status& status, const char* what) {
  fuzz::RequireRejectedAs(status, absl::StatusCode::kInvalidArgument, what);
}

// Seeds: tokens as the server hands them out (AppliedPosition.token), for each kind of source.
void WriteSeeds(const std::string& dir) {
  const struct {
    const char* name;
    std::vector<std::array<const char*, 3>> entries;
  } tokens[] = {
      {"empty", {}},
      {"kafka", {{"orders", "orders/0", "57"}, {"orders", "orders/3", "9"}}},
      {"file", {{"lines", "", "1024:12:1:77"}, {"lines", "", "88:3"}}},
      {"dynamodb",
       {{"stream", "shardId-000001", "100000000000000000015"}, {"stream", "shardId-2", "END"},
        {"stream", "scan/1", "DONE"}, {"stream", "snapshot", "done"}}},
  };
  for (const auto& t : tokens) {
    v1::AppliedPosition applied;
    for (const auto& [source, partition, position] : t.entries) {
      auto* e = applied.add_entries();
      e->set_source(source);
      e->set_partition(partition);
      e->set_position(position);
    }
    fuzz::WriteSeed(dir, t.name, EncodePositionToken(applied));
  }
}

}  // namespace
}  // namespace cdcview

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cdcview;
  const std::string_view token = fuzz::Bytes(data, size);
  absl::StatusOr<std::vector<v1::AppliedPosition::Entry>> entries = DecodePositionToken(token);
  if (entries.ok()) {
    v1::AppliedPosition applied;
    for (const auto& e : *entries) *applied.add_entries() = e;
    const std::string again = EncodePositionToken(applied);
    absl::StatusOr<std::vector<v1::AppliedPosition::Entry>> back = DecodePositionToken(again);
    fuzz::Require(back.ok() && back->size() == entries->size(), "decode(encode(entries)) size");
    for (size_t i = 0; i < entries->size(); ++i) {
      const auto &a = (*entries)[i], &b = (*back)[i];
      fuzz::Require(a.source() == b.source() && a.partition() == b.partition() &&
                        a.position() == b.position(),
                    "decode(encode(entries)) == entries");
    }
    const struct {
      SourceConfig::Kind kind;
      std::string_view applied;
    } kinds[] = {{SourceConfig::Kind::kKafka, "57"},
                 {SourceConfig::Kind::kFile, "1024:12:1:77"},
                 {SourceConfig::Kind::kDynamoDb, "100000000000000000015"}};
    for (const auto& e : *entries) {
      for (const auto& k : kinds) {
        for (std::string_view stored : {k.applied, std::string_view()}) {
          absl::StatusOr<bool> reached = PositionReached(k.kind, e.partition(), stored, e.position());
          if (!reached.ok()) CheckRejected(reached.status(), "a bad position is INVALID_ARGUMENT");
        }
      }
    }
  } else {
    CheckRejected(entries.status(), "a bad token is INVALID_ARGUMENT");
  }
  v1::ReadConsistency consistency;
  consistency.set_min_position(std::string(token));
  absl::StatusOr<std::vector<PositionRequirement>> wanted =
      RequirementsFor(consistency, TheConfig(), 0);
  if (!wanted.ok()) CheckRejected(wanted.status(), "a bad min_position is INVALID_ARGUMENT");
  return 0;
}

CDCVIEW_FUZZ_SEED_MODE(cdcview::WriteSeeds)
