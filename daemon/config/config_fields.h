// Config fields: the flat blocks of the config (the sections storage, server, apply and watch,
// and each source kind's block) as tables of fields. ParseConfig reads a block by its table,
// ConfigToYaml prints it by the same table, and the environment variables are the sections'
// fields; so a new field of one of these structs is one line in its table, plus its check if
// it has one beyond its type and bounds. The rules between a block's fields (map_size below
// max_map_size, one of table_name and stream_arn) are code in the loader.
//
// Internal to daemon/config. The tables are built once and never change: safe to read from
// any thread. A rule's member pointer names a field of the struct it belongs to.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "daemon/config/config.h"

namespace cdcview::config_fields {

constexpr uint32_t kNoMax = std::numeric_limits<uint32_t>::max();

// A string that must not be empty; printed only when set.
template <typename S>
struct TextRule {
  std::string S::*member;
};

// "host:port", or also "" (which turns the listener off) where `may_disable`.
// `example_port` completes the example in messages: "host:port like 127.0.0.1:50051".
template <typename S>
struct HostPortRule {
  std::string S::*member;
  std::string_view example_port;
  bool may_disable;
};

// true or false.
template <typename S>
struct FlagRule {
  bool S::*member;
};

// A whole number from `min` to `max`. `check`, where set, says what is wrong with a number in
// that range ("" when nothing is): for the values the range alone would explain badly.
// `why_max`, where set, says in the message why `max` is the limit.
template <typename S>
struct WholeRule {
  uint32_t S::*member;
  uint32_t min;
  uint32_t max;
  std::string_view (*check)(uint32_t);
  std::string_view why_max;
};

// A byte size above 0: "4GiB", "512MiB", "1048576" (see ParseByteSize); printed in the
// largest unit that divides it. At most `max`, which `why_max` explains in the message.
template <typename S>
struct SizeRule {
  uint64_t S::*member;
  uint64_t max;
  std::string_view why_max;
};

// One of `names`, each standing for a value of an enum field: `get` is the index of the
// field's value in `names`, `set` stores the value of names[i].
template <typename S>
struct ChoiceRule {
  std::vector<std::string_view> names;
  std::function<size_t(const S&)> get;
  std::function<void(S&, size_t)> set;
};

// A non-empty list of non-empty strings; printed only when not empty.
template <typename S>
struct NameListRule {
  std::vector<std::string> S::*member;
};

// A mapping of names to scalars, passed through as text (librdkafka properties); printed
// only when not empty.
template <typename S>
struct PropertiesRule {
  std::map<std::string, std::string> S::*member;
};

template <typename S>
struct Field {
  std::string_view key;
  std::variant<TextRule<S>, HostPortRule<S>, FlagRule<S>, WholeRule<S>, SizeRule<S>,
               ChoiceRule<S>, NameListRule<S>, PropertiesRule<S>>
      rule;
  bool required = false;  // else it keeps the struct's default when the file leaves it out
};

// In the order the file's schema lists them: messages offer them in this order, and
// ConfigToYaml prints them in it.
template <typename S>
using FieldTable = std::vector<Field<S>>;

const FieldTable<StorageConfig>& StorageFields();
const FieldTable<ServerConfig>& ServerFields();
const FieldTable<ApplyConfig>& ApplyFields();
const FieldTable<WatchConfig>& WatchFields();
const FieldTable<FileSourceConfig>& FileSourceFields();
const FieldTable<KafkaSourceConfig>& KafkaSourceFields();
const FieldTable<DynamoDbSourceConfig>& DynamoDbSourceFields();

// For std::visit over a Field's rule: one lambda per kind of rule.
template <typename... Visitors>
struct Overloaded : Visitors... {
  using Visitors::operator()...;
};
// clang 14 (the thread-safety build) does not deduce an aggregate's template arguments
// without a guide.
template <typename... Visitors>
Overloaded(Visitors...) -> Overloaded<Visitors...>;

// Calls f(key, table, block) for each section of `config` (a Config or a const Config), in
// the file's order: f("storage", StorageFields(), config.storage), then server, apply, watch.
template <typename C, typename F>
void ForEachSection(C& config, F&& f) {
  f("storage", StorageFields(), config.storage);
  f("server", ServerFields(), config.server);
  f("apply", ApplyFields(), config.apply);
  f("watch", WatchFields(), config.watch);
}

// f(block, table) for the block of `source` (a SourceConfig or a const one) that its kind
// uses: source.kafka and KafkaSourceFields() for a Kafka source. What f returns.
template <typename Source, typename F>
decltype(auto) VisitSourceBlock(Source& source, F&& f) {
  switch (source.kind) {
    case SourceConfig::Kind::kFile:
      return f(source.file, FileSourceFields());
    case SourceConfig::Kind::kKafka:
      return f(source.kafka, KafkaSourceFields());
    case SourceConfig::Kind::kDynamoDb:
      return f(source.dynamodb, DynamoDbSourceFields());
  }
  std::abort();  // a Kind outside the enum: memory was overwritten
}

}  // namespace cdcview::config_fields
