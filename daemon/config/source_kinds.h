// Source kinds: the kinds of change source the daemon reads, named in one table. A kind's name
// is its key in a source's config ("kafka: { ... }") and what status, metrics and logs call
// it. Its settings are its block of SourceConfig (config.h), read and printed by its field
// table (config_fields.h); app/ constructs its reader (Application's MakeSource), the only
// other place that lists the kinds.
//
// The table is constant: safe to read from any thread. The views it returns point into it and
// live as long as the program.
#pragma once

#include <span>
#include <string_view>

namespace cdcview {

enum class SourceKind { kFile, kKafka, kDynamoDb };

struct SourceKindInfo {
  SourceKind kind;
  std::string_view name;    // "file", "kafka", "dynamodb"
  std::string_view sketch;  // how a config gives one, for messages: "file: { path: ... }"
};

// Every kind, in the order the config's schema and its messages list them.
std::span<const SourceKindInfo> SourceKinds();

// "file", "kafka", "dynamodb".
std::string_view SourceKindName(SourceKind kind);

}  // namespace cdcview
