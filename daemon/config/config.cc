#include "daemon/config/config.h"

#include <charconv>
#include <algorithm>
#include <cerrno>
#include <concepts>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>
#include <variant>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "daemon/config/config_fields.h"
#include "daemon/config/secret_reference.h"
#include "daemon/config/source_kinds.h"
#include "daemon/log/redact.h"
#include "yaml-cpp/yaml.h"

namespace cdcview {

const TableSpec* Config::FindTable(std::string_view name) const {
  for (const TableSpec& table : tables) {
    if (table.name == name) return &table;
  }
  return nullptr;
}

const std::string& DeadLetterPath(const SourceConfig& source) {
  return config_fields::VisitSourceBlock(
      source, [](const auto& block, const auto&) -> const std::string& {
        return block.dead_letter_path;
      });
}

std::string& DeadLetterPath(SourceConfig& source) {
  return const_cast<std::string&>(DeadLetterPath(std::as_const(source)));
}

uint32_t TombstoneHorizonSeconds(const SourceConfig& source) {
  return config_fields::VisitSourceBlock(
      source, [](const auto& block, const auto&) { return block.tombstone_horizon_seconds; });
}

namespace {

// Debian's Abseil is built with its own absl::string_view (not an alias of
// std::string_view), so absl::StrCat and friends do not take std::string_view. These
// small adapters keep the conversions in one place.
absl::string_view Absl(std::string_view text) { return {text.data(), text.size()}; }
std::string Std(absl::string_view text) { return std::string(text.data(), text.size()); }

void Append(std::string& out, std::string_view text) { out.append(text); }
template <std::integral N>
void Append(std::string& out, N number) {
  out += std::to_string(number);
}
template <typename... Parts>
std::string Cat(const Parts&... parts) {
  std::string out;
  (Append(out, parts), ...);
  return out;
}

// View and source names become LMDB database names and file names.
constexpr size_t kMaxNameLength = 200;
constexpr std::string_view kSizeExpectation = "expected a size like 4GiB, 512MiB or 1048576";

std::string Quote(std::string_view text) { return Cat("\"", absl::CEscape(Absl(text)), "\""); }

// What a node is, for "got ..." in messages.
std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return Quote(node.Scalar());
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    default:
      return "nothing";
  }
}

std::string Child(std::string_view path, std::string_view key) {
  return path.empty() ? std::string(key) : Cat(path, ".", key);
}

std::string Index(std::string_view path, size_t i) { return Cat(path, "[", i, "]"); }

std::string DefaultDeadLetterPath(const std::string& root, const std::string& source) {
  return Cat(root, root.back() == '/' ? "" : "/", "dead-letters/", source, ".ndjson");
}

// "host:port like 127.0.0.1:50051 (or "" to disable)": what an address field expects.
template <typename S>
std::string HostPortExpectation(const config_fields::HostPortRule<S>& rule) {
  return Cat("host:port like 127.0.0.1:", rule.example_port,
             rule.may_disable ? " (or \"\" to disable)" : "");
}

// The rule of the server section's address field `key` ("grpc", "metrics").
const config_fields::HostPortRule<ServerConfig>& ServerAddressRule(std::string_view key) {
  for (const auto& field : config_fields::ServerFields()) {
    if (field.key == key) return std::get<config_fields::HostPortRule<ServerConfig>>(field.rule);
  }
  std::abort();  // not a field of ServerFields()
}

bool IsNameChar(char c) { return absl::ascii_isalnum(c) || c == '_' || c == '.' || c == '-'; }

bool IsValidName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength) return false;
  for (char c : name) {
    if (!IsNameChar(c)) return false;
  }
  return true;
}

// "host:port", "[v6]:port"; port 0..65535. An empty host would bind nowhere useful.
bool IsHostPort(std::string_view text) {
  size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  std::string_view host = text.substr(0, colon);
  std::string_view port = text.substr(colon + 1);
  uint32_t port_number = 0;
  if (port.empty() || port.size() > 5 || !absl::SimpleAtoi(Absl(port), &port_number) ||
      port_number > 65535 || !absl::ascii_isdigit(port.front())) {
    return false;
  }
  if (host.front() == '[') return host.size() > 2 && host.back() == ']';
  for (char c : host) {
    if (c == ':' || absl::ascii_isspace(c)) return false;
  }
  return true;
}

// A mapping whose keys were checked: all plain strings, all allowed, none repeated.
// Looking fields up here (rather than with Node::operator[]) never throws or inserts.
struct Fields {
  struct Entry {
    std::string key;
    YAML::Node key_node;
    YAML::Node value;
  };
  YAML::Node node;
  std::string path;
  std::vector<Entry> entries;

  const Entry* Find(std::string_view key) const {
    for (const Entry& entry : entries) {
      if (entry.key == key) return &entry;
    }
    return nullptr;
  }
  std::string PathOf(std::string_view key) const { return Child(path, key); }
};

// Where each rule's parts were written, to point at the rule that breaks the key schema.
struct RuleNodes {
  YAML::Node rule;
  YAML::Node partition_key;
  YAML::Node sort_key;  // undefined when the rule has none
};

// Turns the YAML tree into a Config. Stops at the first error: one precise message is
// more useful than a cascade of consequences.
class Loader {
 public:
  // `settings`: (loader path, origin) of each value a setting put in the tree, so an error
  // about it names the flag or variable instead of a line of the file.
  Loader(std::string file, std::vector<std::pair<std::string, std::string>> settings = {})
      : file_(std::move(file)), settings_(std::move(settings)) {}

  absl::StatusOr<Config> Load(const YAML::Node& root);

 private:
  absl::Status Error(const YAML::Node& node, std::string_view path,
                     std::string_view problem) const;
  absl::Status ErrorAtLine(int line, std::string_view path, std::string_view problem) const;
  // Where an error about `entry`'s value points: the value, or the key for a null value
  // (yaml-cpp marks an empty value at the following token).
  static const YAML::Node& ValueNode(const Fields::Entry& entry);
  static int LineOf(const YAML::Node& node);

  absl::StatusOr<Fields> ReadFields(const YAML::Node& node, std::string path,
                                    const std::vector<std::string_view>& allowed) const;
  // The same for a field's value; an empty value is reported at its key's line.
  absl::StatusOr<Fields> ReadFields(const Fields::Entry& entry, std::string path,
                                    const std::vector<std::string_view>& allowed) const;
  absl::StatusOr<const Fields::Entry*> Require(const Fields& fields, std::string_view key) const;
  absl::StatusOr<std::string> ReadString(const Fields::Entry& entry, std::string_view path) const;
  absl::StatusOr<std::string> ReadNonEmpty(const Fields::Entry& entry,
                                           std::string_view path) const;
  absl::StatusOr<std::string> ReadName(const Fields::Entry& entry, std::string_view path) const;
  // The required `name` field, valid and not used before by another `kind` ("table", ...).
  absl::StatusOr<std::string> ReadUniqueName(const Fields& fields, const char* kind,
                                             std::map<std::string, int, std::less<>>* lines) const;
  absl::StatusOr<bool> ReadBool(const Fields::Entry& entry, std::string_view path) const;
  // `why_max`, where given, is appended to the message: why `max` is the limit.
  absl::StatusOr<uint32_t> ReadUint32(const Fields::Entry& entry, std::string_view path,
                                      uint32_t min,
                                      uint32_t max = std::numeric_limits<uint32_t>::max(),
                                      std::string_view why_max = {}) const;
  absl::StatusOr<uint64_t> ReadSize(const Fields::Entry& entry, std::string_view path,
                                    uint64_t max, std::string_view why_max) const;
  absl::StatusOr<AttrType> ReadKeyType(const Fields::Entry& entry, std::string_view path) const;
  template <typename S>
  absl::StatusOr<std::string> ReadHostPort(const Fields::Entry& entry, std::string_view path,
                                           const config_fields::HostPortRule<S>& rule) const;
  absl::StatusOr<std::vector<std::string>> ReadStringList(const Fields::Entry& entry,
                                                          std::string_view path) const;
  // The index of the entry's value in `choices`.
  absl::StatusOr<size_t> ReadChoice(const Fields::Entry& entry, std::string_view path,
                                    const std::vector<std::string_view>& choices) const;
  absl::StatusOr<std::map<std::string, std::string>> ReadProperties(const Fields::Entry& entry,
                                                                    std::string_view path) const;

  // A block of fields described by `table` (config_fields.h) into `block`, then the rules
  // between its fields (CheckBlock). Fields the block leaves out keep their values.
  template <typename S>
  absl::Status ParseBlock(const Fields::Entry& entry, std::string path,
                          const config_fields::FieldTable<S>& table, S* block) const;
  template <typename S>
  absl::Status ReadField(const Fields::Entry& entry, std::string_view path,
                         const config_fields::Field<S>& field, S* block) const;
  absl::Status CheckBlock(const Fields& fields, StorageConfig* storage) const;
  absl::Status CheckBlock(const Fields& fields, ServerConfig* server) const;
  absl::Status CheckBlock(const Fields& fields, WatchConfig* watch) const;
  absl::Status CheckBlock(const Fields& fields, DynamoDbSourceConfig* dynamodb) const;
  // Blocks whose fields are independent of each other.
  absl::Status CheckBlock(const Fields&, void*) const { return absl::OkStatus(); }
  // An error about two fields that break a rule together, at `key`, or at `other` when the
  // block does not give `key` (it gives one of them: the defaults keep the rules).
  absl::Status PairError(const Fields& fields, std::string_view key, std::string_view other,
                         std::string_view problem) const;
  absl::Status ParseTables(const Fields::Entry& entry, std::vector<TableSpec>* tables);
  absl::StatusOr<TableSpec> ParseTable(const YAML::Node& node, const std::string& path);
  absl::StatusOr<TableKeySpec> ParseTableKey(const Fields::Entry& entry,
                                             const std::string& path) const;
  absl::StatusOr<std::pair<std::string, AttrType>> ParseTableKeyAttribute(
      const Fields::Entry& entry, const std::string& path) const;
  absl::StatusOr<ViewSpec> ParseView(const YAML::Node& node, const std::string& path,
                                     const TableSpec& table);
  absl::Status ParseAggregates(const Fields::Entry& entry, const std::string& path,
                               TableSpec* table);
  absl::StatusOr<AggregateSpec> ParseAggregate(const YAML::Node& node, const std::string& path,
                                               const TableSpec& table);
  absl::StatusOr<MeasureSpec> ParseMeasure(const YAML::Node& node, const std::string& path) const;
  absl::Status ParseKeyedView(const Fields& fields, ViewSpec* view) const;
  absl::Status ParseShards(const Fields::Entry& entry, const std::string& path,
                           ViewSpec* view) const;
  absl::Status ParseInvertedView(const Fields& fields, const TableSpec& table,
                                 ViewSpec* view) const;
  absl::Status ParseRules(const Fields::Entry& entry, const std::string& path,
                          ViewSpec* view) const;
  absl::Status CheckSameKeySchema(const std::vector<RuleNodes>& nodes, const std::string& path,
                                  const ViewSpec& view) const;
  absl::StatusOr<KeySpec> ParseKeySpec(const Fields::Entry& entry,
                                       const std::string& path) const;
  absl::StatusOr<std::vector<Condition>> ParseConditions(const Fields::Entry& entry,
                                                         const std::string& path) const;
  absl::StatusOr<Condition> ParseCondition(const YAML::Node& node,
                                           const std::string& path) const;
  absl::StatusOr<Projection> ParseProjection(const Fields::Entry& entry,
                                             const std::string& path) const;
  absl::Status ParseCluster(const Fields::Entry& entry, ClusterConfig* cluster) const;
  absl::StatusOr<uint32_t> ReadOrdinal(const Fields::Entry& entry, std::string_view path,
                                       uint32_t members) const;
  absl::StatusOr<std::vector<std::string>> ReadPeers(const Fields::Entry& entry,
                                                     std::string_view path,
                                                     uint32_t members) const;
  // What a cluster allows of `source` (only Kafka, from its earliest offsets), at its block.
  absl::Status CheckClusterSource(const Fields::Entry& block, std::string_view path,
                                  const SourceConfig& source) const;
  absl::Status ParseSources(const Fields::Entry& entry, Config* config);
  absl::StatusOr<SourceConfig> ParseSource(const YAML::Node& node, const std::string& path,
                                           const Config& config);

  std::string file_;
  std::vector<std::pair<std::string, std::string>> settings_;
  // Name -> line of first use: view names are global (LMDB databases), so are sources.
  std::map<std::string, int, std::less<>> table_lines_;
  std::map<std::string, int, std::less<>> view_lines_;
  std::map<std::string, int, std::less<>> source_lines_;
  // Aggregate names are global too: they name LMDB databases (agg/<name>, aggm/<name>).
  std::map<std::string, int, std::less<>> aggregate_lines_;
};

int Loader::LineOf(const YAML::Node& node) {
  // An empty document has no mark; line 1 is the best place to point at.
  return node.Mark().is_null() ? 1 : node.Mark().line + 1;
}

absl::Status Loader::Error(const YAML::Node& node, std::string_view path,
                           std::string_view problem) const {
  // An error at or inside a set value is the setting's (a value parsed from "[a, b]" has marks
  // of its own text); one above it only when the node has no mark: a key the setting created
  // (an unknown field name), not one of the file's.
  auto step_after = [](std::string_view longer, std::string_view prefix) {
    return longer.size() > prefix.size() && longer.starts_with(prefix) &&
           (prefix.empty() || longer[prefix.size()] == '.' || longer[prefix.size()] == '[');
  };
  for (const auto& [set_path, origin] : settings_) {
    if (set_path == path || step_after(path, set_path) ||
        (node.Mark().is_null() && step_after(set_path, path))) {
      if (path.empty()) return absl::InvalidArgumentError(Cat(origin, ": ", problem));
      return absl::InvalidArgumentError(Cat(origin, ": ", path, ": ", problem));
    }
  }
  return ErrorAtLine(LineOf(node), path, problem);
}

absl::Status Loader::ErrorAtLine(int line, std::string_view path,
                                 std::string_view problem) const {
  if (path.empty()) return absl::InvalidArgumentError(Cat(file_, ":", line, ": ", problem));
  return absl::InvalidArgumentError(Cat(file_, ":", line, ": ", path, ": ", problem));
}

const YAML::Node& Loader::ValueNode(const Fields::Entry& entry) {
  return entry.value.IsNull() ? entry.key_node : entry.value;
}

absl::StatusOr<Fields> Loader::ReadFields(const YAML::Node& node, std::string path,
                                          const std::vector<std::string_view>& allowed) const {
  if (!node.IsMap()) {
    return Error(node, path, Cat("expected a mapping, got ", Describe(node)));
  }
  Fields fields{node, std::move(path), {}};
  for (auto it = node.begin(); it != node.end(); ++it) {
    // A copy: `it->first` lives in a proxy object that is gone after this statement.
    const YAML::Node key = it->first;
    if (!key.IsScalar()) {
      return Error(key, fields.path,
                   Cat("expected field names to be plain strings, got ", Describe(key)));
    }
    const std::string& name = key.Scalar();
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
      std::vector<std::string> expected(allowed.begin(), allowed.end());
      return Error(key, fields.path,
                   Cat("unknown field ", Quote(name), " (expected one of ",
                       absl::StrJoin(expected, ", "), ")"));
    }
    // yaml-cpp keeps both entries of a repeated key; silently using one would hide a typo.
    if (const Fields::Entry* first = fields.Find(name)) {
      return Error(key, fields.PathOf(name),
                   Cat("is given twice (also at line ", LineOf(first->key_node), ")"));
    }
    fields.entries.push_back({name, key, it->second});
  }
  return fields;
}

absl::StatusOr<Fields> Loader::ReadFields(const Fields::Entry& entry, std::string path,
                                          const std::vector<std::string_view>& allowed) const {
  if (!entry.value.IsMap()) {
    return Error(ValueNode(entry), path, Cat("expected a mapping, got ", Describe(entry.value)));
  }
  return ReadFields(entry.value, std::move(path), allowed);
}

absl::StatusOr<const Fields::Entry*> Loader::Require(const Fields& fields,
                                                     std::string_view key) const {
  const Fields::Entry* entry = fields.Find(key);
  if (entry == nullptr) return Error(fields.node, fields.PathOf(key), "is required");
  return entry;
}

absl::StatusOr<std::string> Loader::ReadString(const Fields::Entry& entry,
                                               std::string_view path) const {
  if (!entry.value.IsScalar()) {
    return Error(ValueNode(entry), path,
                 Cat("expected a string, got ", Describe(entry.value)));
  }
  return entry.value.Scalar();
}

absl::StatusOr<std::string> Loader::ReadNonEmpty(const Fields::Entry& entry,
                                                 std::string_view path) const {
  absl::StatusOr<std::string> text = ReadString(entry, path);
  if (text.ok() && text->empty()) return Error(entry.value, path, "must not be empty");
  return text;
}

absl::StatusOr<std::string> Loader::ReadName(const Fields::Entry& entry,
                                             std::string_view path) const {
  absl::StatusOr<std::string> name = ReadString(entry, path);
  if (!name.ok()) return name.status();
  if (!IsValidName(*name)) {
    return Error(entry.value, path,
                 Cat("expected a name of 1 to ", kMaxNameLength,
                     " characters from A-Z, a-z, 0-9, _, . and -, got ", Quote(*name)));
  }
  return name;
}

absl::StatusOr<bool> Loader::ReadBool(const Fields::Entry& entry, std::string_view path) const {
  bool value = false;
  if (!entry.value.IsScalar() || !YAML::convert<bool>::decode(entry.value, value)) {
    return Error(ValueNode(entry), path,
                 Cat("expected true or false, got ", Describe(entry.value)));
  }
  return value;
}

absl::StatusOr<uint32_t> Loader::ReadUint32(const Fields::Entry& entry, std::string_view path,
                                            uint32_t min, uint32_t max,
                                            std::string_view why_max) const {
  uint32_t value = 0;
  if (!entry.value.IsScalar() || !absl::SimpleAtoi(entry.value.Scalar(), &value) ||
      value < min || value > max || !absl::ascii_isdigit(entry.value.Scalar().front())) {
    return Error(ValueNode(entry), path,
                 Cat("expected a whole number from ", min, " to ", max, ", got ",
                     Describe(entry.value),
                     why_max.empty() ? std::string() : Cat(" (at most ", max, ": ", why_max, ")")));
  }
  return value;
}

absl::StatusOr<uint64_t> Loader::ReadSize(const Fields::Entry& entry, std::string_view path,
                                          uint64_t max, std::string_view why_max) const {
  if (!entry.value.IsScalar()) {
    return Error(ValueNode(entry), path,
                 Cat(kSizeExpectation, ", got ", Describe(entry.value)));
  }
  absl::StatusOr<uint64_t> size = ParseByteSize(entry.value.Scalar());
  if (!size.ok()) return Error(entry.value, path, Std(size.status().message()));
  if (*size == 0) return Error(entry.value, path, "must be greater than 0");
  if (*size > max) {
    return Error(entry.value, path,
                 Cat(entry.value.Scalar(), " is larger than this system allows (at most ",
                     FormatByteSize(max), ": ", why_max, ")"));
  }
  return size;
}

absl::StatusOr<AttrType> Loader::ReadKeyType(const Fields::Entry& entry,
                                             std::string_view path) const {
  AttrType type = AttrType::kS;
  bool ok = entry.value.IsScalar() && ParseAttrType(entry.value.Scalar(), &type) &&
            (type == AttrType::kS || type == AttrType::kN || type == AttrType::kB);
  if (!ok) {
    return Error(ValueNode(entry), path,
                 Cat("expected one of S, N, B, got ", Describe(entry.value)));
  }
  return type;
}

absl::StatusOr<std::vector<std::string>> Loader::ReadStringList(const Fields::Entry& entry,
                                                                std::string_view path) const {
  if (!entry.value.IsSequence() || entry.value.size() == 0) {
    return Error(ValueNode(entry), path,
                 Cat("expected a non-empty list of names, got ", Describe(entry.value)));
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < entry.value.size(); ++i) {
    const YAML::Node& item = entry.value[i];
    if (!item.IsScalar() || item.Scalar().empty()) {
      return Error(item.IsNull() ? entry.value : item, Index(path, i),
                   Cat("expected a non-empty string, got ", Describe(item)));
    }
    out.push_back(item.Scalar());
  }
  return out;
}

absl::StatusOr<size_t> Loader::ReadChoice(const Fields::Entry& entry, std::string_view path,
                                          const std::vector<std::string_view>& choices) const {
  if (entry.value.IsScalar()) {
    auto it = std::find(choices.begin(), choices.end(), entry.value.Scalar());
    if (it != choices.end()) return it - choices.begin();
  }
  std::vector<std::string> names(choices.begin(), choices.end());
  return Error(ValueNode(entry), path,
               Cat("expected one of ", absl::StrJoin(names, ", "), ", got ",
                   Describe(entry.value)));
}

template <typename S>
absl::StatusOr<std::string> Loader::ReadHostPort(const Fields::Entry& entry, std::string_view path,
                                                 const config_fields::HostPortRule<S>& rule) const {
  absl::StatusOr<std::string> address = ReadString(entry, path);
  if (!address.ok()) return address.status();
  if (!IsHostPort(*address) && !(rule.may_disable && address->empty())) {
    return Error(entry.value, path,
                 Cat("expected ", HostPortExpectation(rule), ", got ", Quote(*address)));
  }
  return address;
}

absl::StatusOr<std::map<std::string, std::string>> Loader::ReadProperties(
    const Fields::Entry& entry, std::string_view path) const {
  if (!entry.value.IsMap()) {
    return Error(ValueNode(entry), path,
                 Cat("expected a mapping of librdkafka properties, got ", Describe(entry.value)));
  }
  std::map<std::string, std::string> properties;
  for (const auto& kv : entry.value) {
    const std::string key = kv.first.as<std::string>("");
    if (!kv.second.IsScalar()) {
      return Error(kv.second.IsNull() ? kv.first : kv.second, Child(path, key),
                   Cat("expected a scalar value, got ", Describe(kv.second)));
    }
    // A reference stays as written (--print-config shows it, not the secret); resolving it
    // here only checks it, so that a missing secret stops the start with its property named.
    if (absl::StatusOr<std::string> resolved = ResolveSecretReference(kv.second.Scalar());
        !resolved.ok()) {
      return Error(kv.second, Child(path, key), Std(resolved.status().message()));
    }
    properties[key] = kv.second.Scalar();
  }
  return properties;
}

// ---- blocks of fields: the sections and each source kind's block ----

template <typename S>
absl::Status Loader::ParseBlock(const Fields::Entry& entry, std::string path,
                                const config_fields::FieldTable<S>& table, S* block) const {
  std::vector<std::string_view> keys;
  for (const config_fields::Field<S>& field : table) keys.push_back(field.key);
  absl::StatusOr<Fields> fields = ReadFields(entry, std::move(path), keys);
  if (!fields.ok()) return fields.status();
  for (const config_fields::Field<S>& field : table) {
    const Fields::Entry* given = fields->Find(field.key);
    if (given == nullptr && field.required) {
      return Error(fields->node, fields->PathOf(field.key), "is required");
    }
    if (given == nullptr) continue;
    if (absl::Status s = ReadField(*given, fields->PathOf(field.key), field, block); !s.ok()) {
      return s;
    }
  }
  return CheckBlock(*fields, block);
}

template <typename S>
absl::Status Loader::ReadField(const Fields::Entry& entry, std::string_view path,
                               const config_fields::Field<S>& field, S* block) const {
  using config_fields::ChoiceRule, config_fields::FlagRule, config_fields::HostPortRule,
      config_fields::NameListRule, config_fields::Overloaded, config_fields::PropertiesRule,
      config_fields::SizeRule, config_fields::TextRule, config_fields::WholeRule;
  auto store = [](auto value, auto& out) -> absl::Status {
    if (!value.ok()) return value.status();
    out = *std::move(value);
    return absl::OkStatus();
  };
  return std::visit(
      Overloaded{
          [&](const TextRule<S>& r) { return store(ReadNonEmpty(entry, path), block->*r.member); },
          [&](const HostPortRule<S>& r) {
            return store(ReadHostPort(entry, path, r), block->*r.member);
          },
          [&](const FlagRule<S>& r) { return store(ReadBool(entry, path), block->*r.member); },
          [&](const WholeRule<S>& r) {
            absl::StatusOr<uint32_t> n = ReadUint32(entry, path, r.min, r.max, r.why_max);
            if (n.ok() && r.check != nullptr) {
              if (std::string_view problem = r.check(*n); !problem.empty()) {
                return Error(entry.value, path, problem);
              }
            }
            return store(n, block->*r.member);
          },
          [&](const SizeRule<S>& r) {
            return store(ReadSize(entry, path, r.max, r.why_max), block->*r.member);
          },
          [&](const ChoiceRule<S>& r) {
            absl::StatusOr<size_t> i = ReadChoice(entry, path, r.names);
            if (i.ok()) r.set(*block, *i);
            return i.status();
          },
          [&](const NameListRule<S>& r) {
            return store(ReadStringList(entry, path), block->*r.member);
          },
          [&](const PropertiesRule<S>& r) {
            return store(ReadProperties(entry, path), block->*r.member);
          },
      },
      field.rule);
}

absl::Status Loader::PairError(const Fields& fields, std::string_view key, std::string_view other,
                               std::string_view problem) const {
  const Fields::Entry* culprit = fields.Find(key);
  if (culprit == nullptr) culprit = fields.Find(other);
  return Error(culprit->value, fields.PathOf(culprit->key), problem);
}

absl::Status Loader::CheckBlock(const Fields& fields, StorageConfig* storage) const {
  if (storage->map_size > storage->max_map_size) {
    return PairError(fields, "map_size", "max_map_size",
                     Cat("map_size (", storage->map_size, " bytes) must not exceed max_map_size (",
                         storage->max_map_size, " bytes)"));
  }
  return absl::OkStatus();
}

// TLS needs both halves of the server's key pair; a client CA or bearer tokens need TLS under
// them (a token sent in clear text is a token given to anyone on the path), /metrics included.
absl::Status Loader::CheckBlock(const Fields& fields, ServerConfig* server) const {
  if (server->tls_cert_file.empty() != server->tls_key_file.empty()) {
    const bool has_cert = !server->tls_cert_file.empty();
    return PairError(fields, has_cert ? "tls_cert_file" : "tls_key_file",
                     has_cert ? "tls_key_file" : "tls_cert_file",
                     has_cert ? "tls_cert_file needs tls_key_file: set both (the certificate "
                                "chain and its private key, PEM)"
                              : "tls_key_file needs tls_cert_file: set both (the certificate "
                                "chain and its private key, PEM)");
  }
  if (!server->TlsEnabled()) {
    if (!server->tls_client_ca_file.empty()) {
      return PairError(fields, "tls_client_ca_file", "tls_client_ca_file",
                       "tls_client_ca_file needs TLS: set tls_cert_file and tls_key_file too");
    }
    if (!server->tokens_file.empty()) {
      return PairError(fields, "tokens_file", "tokens_file",
                       "tokens_file needs TLS, or a bearer token would cross the network in clear "
                       "text: set tls_cert_file and tls_key_file too");
    }
  } else if (!server->tls_metrics && !server->tokens_file.empty()) {
    return PairError(fields, "tls_metrics", "tokens_file",
                     "tls_metrics: false with tokens_file would send the scrape's bearer token in "
                     "clear text: keep tls_metrics true, or leave tokens_file unset for a "
                     "plaintext /metrics without tokens");
  }
  return absl::OkStatus();
}

absl::Status Loader::CheckBlock(const Fields& fields, WatchConfig* watch) const {
  if (fields.Find("retain_changes") != nullptr && fields.Find("max_lag_changes") == nullptr) {
    watch->max_lag_changes = std::max<uint32_t>(1, watch->retain_changes / 2);
  }
  // A watcher cut off at max_lag_changes must find its resume position still in the log.
  if (watch->max_lag_changes >= watch->retain_changes) {
    return PairError(fields, "max_lag_changes", "retain_changes",
                     Cat("max_lag_changes (", watch->max_lag_changes,
                         ") must be below retain_changes (", watch->retain_changes,
                         "), so a watcher cut off for lagging can still resume"));
  }
  return absl::OkStatus();
}

absl::Status Loader::CheckBlock(const Fields& fields, DynamoDbSourceConfig* dynamodb) const {
  if (dynamodb->table_name.empty() == dynamodb->stream_arn.empty()) {
    return Error(fields.node, fields.path, "give exactly one of table_name and stream_arn");
  }
  return absl::OkStatus();
}

// ---- tables and views ----

absl::Status Loader::ParseTables(const Fields::Entry& entry, std::vector<TableSpec>* tables) {
  if (!entry.value.IsSequence() || entry.value.size() == 0) {
    return Error(ValueNode(entry), "tables",
                 Cat("expected a list of at least one table, got ",
                     entry.value.IsSequence() ? "an empty list" : Describe(entry.value)));
  }
  for (size_t i = 0; i < entry.value.size(); ++i) {
    absl::StatusOr<TableSpec> table = ParseTable(entry.value[i], Index("tables", i));
    if (!table.ok()) return table.status();
    tables->push_back(*std::move(table));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Loader::ReadUniqueName(const Fields& fields, const char* kind,
                                                   std::map<std::string, int, std::less<>>* lines) const {
  absl::StatusOr<const Fields::Entry*> name = Require(fields, "name");
  if (!name.ok()) return name.status();
  absl::StatusOr<std::string> text = ReadName(**name, fields.PathOf("name"));
  if (!text.ok()) return text.status();
  if (auto [it, fresh] = lines->emplace(*text, LineOf((*name)->value)); !fresh) {
    return Error((*name)->value, fields.PathOf("name"),
                 Cat(kind, " name ", Quote(*text), " is used twice (also at line ", it->second,
                     ")"));
  }
  return text;
}

absl::StatusOr<TableSpec> Loader::ParseTable(const YAML::Node& node, const std::string& path) {
  absl::StatusOr<Fields> fields = ReadFields(node, path, {"name", "key", "views", "aggregates"});
  if (!fields.ok()) return fields.status();
  TableSpec table;
  absl::StatusOr<std::string> name = ReadUniqueName(*fields, "table", &table_lines_);
  if (!name.ok()) return name.status();
  table.name = *name;
  absl::StatusOr<const Fields::Entry*> key = Require(*fields, "key");
  if (!key.ok()) return key.status();
  absl::StatusOr<TableKeySpec> key_spec = ParseTableKey(**key, fields->PathOf("key"));
  if (!key_spec.ok()) return key_spec.status();
  table.key = *std::move(key_spec);

  if (const Fields::Entry* aggregates = fields->Find("aggregates")) {
    if (absl::Status s = ParseAggregates(*aggregates, fields->PathOf("aggregates"), &table); !s.ok()) {
      return s;
    }
  }

  // A table without views is legal: its items are still kept and served by key.
  const Fields::Entry* views = fields->Find("views");
  if (views == nullptr) return table;
  std::string views_path = fields->PathOf("views");
  if (!views->value.IsSequence()) {
    return Error(ValueNode(*views), views_path,
                 Cat("expected a list of views, got ", Describe(views->value)));
  }
  for (size_t i = 0; i < views->value.size(); ++i) {
    absl::StatusOr<ViewSpec> view = ParseView(views->value[i], Index(views_path, i), table);
    if (!view.ok()) return view.status();
    table.views.push_back(*std::move(view));
  }
  return table;
}

// ---- aggregates ----

absl::Status Loader::ParseAggregates(const Fields::Entry& entry, const std::string& path,
                                     TableSpec* table) {
  if (!entry.value.IsSequence()) {
    return Error(ValueNode(entry), path,
                 Cat("expected a list of aggregates, got ", Describe(entry.value)));
  }
  for (size_t i = 0; i < entry.value.size(); ++i) {
    absl::StatusOr<AggregateSpec> aggregate = ParseAggregate(entry.value[i], Index(path, i), *table);
    if (!aggregate.ok()) return aggregate.status();
    table->aggregates.push_back(*std::move(aggregate));
  }
  return absl::OkStatus();
}

absl::StatusOr<AggregateSpec> Loader::ParseAggregate(const YAML::Node& node,
                                                     const std::string& path,
                                                     const TableSpec& table) {
  absl::StatusOr<Fields> fields = ReadFields(
      node, path, {"name", "filter", "group_by", "strip_shard_suffix", "measures"});
  if (!fields.ok()) return fields.status();
  AggregateSpec aggregate;
  aggregate.table = table.name;
  absl::StatusOr<std::string> name = ReadUniqueName(*fields, "aggregate", &aggregate_lines_);
  if (!name.ok()) return name.status();
  aggregate.name = *name;

  if (const Fields::Entry* filter = fields->Find("filter")) {
    absl::StatusOr<std::vector<Condition>> when = ParseConditions(*filter, fields->PathOf("filter"));
    if (!when.ok()) return when.status();
    aggregate.filter = *std::move(when);
  }
  absl::StatusOr<const Fields::Entry*> group_by = Require(*fields, "group_by");
  if (!group_by.ok()) return group_by.status();
  absl::StatusOr<KeySpec> group = ParseKeySpec(**group_by, fields->PathOf("group_by"));
  if (!group.ok()) return group.status();
  aggregate.group_by = *std::move(group);

  if (const Fields::Entry* strip = fields->Find("strip_shard_suffix")) {
    const std::string strip_path = fields->PathOf("strip_shard_suffix");
    absl::StatusOr<std::string> suffix = ReadNonEmpty(*strip, strip_path);
    if (!suffix.ok()) return suffix.status();
    if (absl::Status valid = ValidateShardSuffix(*suffix); !valid.ok()) {
      return Error(strip->value, strip_path, Std(valid.message()));
    }
    if (aggregate.group_by.value_type() != AttrType::kS) {
      return Error(strip->key_node, strip_path,
                   Cat("needs an S group key; group_by is ",
                       AttrTypeName(aggregate.group_by.value_type()),
                       " (use type: S or a template)"));
    }
    aggregate.strip_shard_suffix = *suffix;
  }

  absl::StatusOr<const Fields::Entry*> measures = Require(*fields, "measures");
  if (!measures.ok()) return measures.status();
  const std::string measures_path = fields->PathOf("measures");
  const YAML::Node& list = (*measures)->value;
  if (!list.IsSequence() || list.size() == 0) {
    return Error(ValueNode(**measures), measures_path,
                 Cat("expected a list of measures (count, {sum: ATTR}, {min: ATTR}, {max: ATTR}, "
                     "{avg: ATTR}), got ",
                     list.IsSequence() ? std::string("an empty list") : Describe(list)));
  }
  // Measure numbers are one byte in the store's keys; far more than anyone lists.
  constexpr size_t kMaxMeasures = 64;
  if (list.size() > kMaxMeasures) {
    return Error(ValueNode(**measures), measures_path,
                 Cat("at most 64 measures per aggregate, got ", list.size()));
  }
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < list.size(); ++i) {
    absl::StatusOr<MeasureSpec> measure = ParseMeasure(list[i], Index(measures_path, i));
    if (!measure.ok()) return measure.status();
    const std::string measure_name = measure->Name();
    if (auto [it, fresh] = seen.emplace(measure_name, i); !fresh) {
      return Error(list[i], Index(measures_path, i),
                   Cat(measure_name, " is listed twice (also at ", Index(measures_path, it->second), ")"));
    }
    aggregate.measures.push_back(*std::move(measure));
  }
  return aggregate;
}

// `count`, or a one-entry mapping { sum | min | max | avg: ATTRIBUTE }.
absl::StatusOr<MeasureSpec> Loader::ParseMeasure(const YAML::Node& node, const std::string& path) const {
  constexpr std::string_view kExpected =
      "expected count or one of {sum: ATTR}, {min: ATTR}, {max: ATTR}, {avg: ATTR}, got ";
  if (node.IsScalar()) {
    if (node.Scalar() == "count") return MeasureSpec{MeasureSpec::Kind::kCount, ""};
    return Error(node, path, Cat(kExpected, Describe(node)));
  }
  if (!node.IsMap() || node.size() != 1) return Error(node, path, Cat(kExpected, Describe(node)));
  absl::StatusOr<Fields> fields = ReadFields(node, path, {"sum", "min", "max", "avg"});
  if (!fields.ok()) return fields.status();
  const Fields::Entry& entry = fields->entries.front();
  MeasureSpec measure;
  if (entry.key == "sum") measure.kind = MeasureSpec::Kind::kSum;
  if (entry.key == "min") measure.kind = MeasureSpec::Kind::kMin;
  if (entry.key == "max") measure.kind = MeasureSpec::Kind::kMax;
  if (entry.key == "avg") measure.kind = MeasureSpec::Kind::kAvg;
  absl::StatusOr<std::string> attribute = ReadNonEmpty(entry, fields->PathOf(entry.key));
  if (!attribute.ok()) return attribute.status();
  measure.attribute = *attribute;
  return measure;
}

absl::StatusOr<TableKeySpec> Loader::ParseTableKey(const Fields::Entry& entry,
                                                   const std::string& path) const {
  absl::StatusOr<Fields> fields = ReadFields(entry, path, {"partition", "sort"});
  if (!fields.ok()) return fields.status();
  TableKeySpec key;
  absl::StatusOr<const Fields::Entry*> partition = Require(*fields, "partition");
  if (!partition.ok()) return partition.status();
  auto partition_attr = ParseTableKeyAttribute(**partition, fields->PathOf("partition"));
  if (!partition_attr.ok()) return partition_attr.status();
  std::tie(key.partition, key.partition_type) = *partition_attr;
  if (const Fields::Entry* sort = fields->Find("sort")) {
    auto sort_attr = ParseTableKeyAttribute(*sort, fields->PathOf("sort"));
    if (!sort_attr.ok()) return sort_attr.status();
    key.sort = sort_attr->first;
    key.sort_type = sort_attr->second;
  }
  return key;
}

// `PK` (an S attribute) or `{ attribute: PK, type: N }`.
absl::StatusOr<std::pair<std::string, AttrType>> Loader::ParseTableKeyAttribute(
    const Fields::Entry& entry, const std::string& path) const {
  if (entry.value.IsScalar()) {
    absl::StatusOr<std::string> name = ReadNonEmpty(entry, path);
    if (!name.ok()) return name.status();
    return std::make_pair(*name, AttrType::kS);
  }
  if (!entry.value.IsMap()) {
    return Error(ValueNode(entry), path,
                 Cat("expected an attribute name or { attribute: NAME, type: S|N|B }, got ",
                     Describe(entry.value)));
  }
  absl::StatusOr<Fields> fields = ReadFields(entry.value, path, {"attribute", "type"});
  if (!fields.ok()) return fields.status();
  absl::StatusOr<const Fields::Entry*> attribute = Require(*fields, "attribute");
  if (!attribute.ok()) return attribute.status();
  absl::StatusOr<std::string> name = ReadNonEmpty(**attribute, fields->PathOf("attribute"));
  if (!name.ok()) return name.status();
  AttrType type = AttrType::kS;
  if (const Fields::Entry* type_entry = fields->Find("type")) {
    absl::StatusOr<AttrType> parsed = ReadKeyType(*type_entry, fields->PathOf("type"));
    if (!parsed.ok()) return parsed.status();
    type = *parsed;
  }
  return std::make_pair(*name, type);
}

absl::StatusOr<ViewSpec> Loader::ParseView(const YAML::Node& node, const std::string& path,
                                           const TableSpec& table) {
  absl::StatusOr<Fields> fields =
      ReadFields(node, path,
                 {"name", "partition_key", "sort_key", "rules", "inverted", "projection",
                  "filter", "shards"});
  if (!fields.ok()) return fields.status();
  ViewSpec view;
  view.table = table.name;
  // View names are LMDB database names, so they are unique across all tables.
  absl::StatusOr<std::string> name = ReadUniqueName(*fields, "view", &view_lines_);
  if (!name.ok()) return name.status();
  view.name = *name;

  if (const Fields::Entry* inverted = fields->Find("inverted")) {
    absl::StatusOr<bool> flag = ReadBool(*inverted, fields->PathOf("inverted"));
    if (!flag.ok()) return flag.status();
    view.inverted = *flag;
  }
  absl::Status status;
  if (view.inverted) {
    status = ParseInvertedView(*fields, table, &view);
  } else if (const Fields::Entry* rules = fields->Find("rules")) {
    for (std::string_view other : {"partition_key", "sort_key", "filter"}) {
      if (const Fields::Entry* clash = fields->Find(other)) {
        return Error(clash->key_node, fields->PathOf(other),
                     "cannot be combined with rules (give it inside each rule)");
      }
    }
    status = ParseRules(*rules, fields->PathOf("rules"), &view);
  } else {
    status = ParseKeyedView(*fields, &view);
  }
  if (!status.ok()) return status;

  if (const Fields::Entry* projection = fields->Find("projection")) {
    absl::StatusOr<Projection> parsed = ParseProjection(*projection, fields->PathOf("projection"));
    if (!parsed.ok()) return parsed.status();
    view.projection = *std::move(parsed);
  }
  if (const Fields::Entry* shards = fields->Find("shards")) {
    if (absl::Status s = ParseShards(*shards, fields->PathOf("shards"), &view); !s.ok()) return s;
  }
  return view;
}

// { count: N, suffix: "#{shard}" }: the partition keys writers spread over N physical keys.
// Not part of the fingerprint: entries are stored under the physical keys as written, so
// changing the sharding changes how queries read, never what is stored.
absl::Status Loader::ParseShards(const Fields::Entry& entry, const std::string& path,
                                 ViewSpec* view) const {
  absl::StatusOr<Fields> fields = ReadFields(entry, path, {"count", "suffix"});
  if (!fields.ok()) return fields.status();
  // The suffix is appended to text; an N or B key has no text to append it to.
  if (view->partition_type() != AttrType::kS) {
    return Error(entry.key_node, path,
                 Cat("needs an S partition key (an attribute of type S or a template); view ",
                     Quote(view->name), "'s partition key is ",
                     AttrTypeName(view->partition_type())));
  }
  absl::StatusOr<const Fields::Entry*> count = Require(*fields, "count");
  if (!count.ok()) return count.status();
  constexpr uint32_t kMinShards = 2, kMaxShards = 1024;
  const std::string count_path = fields->PathOf("count");
  absl::StatusOr<uint32_t> n = ReadUint32(**count, count_path, kMinShards);
  if (!n.ok() || *n > kMaxShards) {
    return Error(ValueNode(**count), count_path,
                 Cat("expected a whole number from ", kMinShards, " to ", kMaxShards,
                     " (a query reads every shard), got ", Describe((*count)->value)));
  }
  view->shards.count = *n;
  view->shards.suffix = "#{shard}";
  if (const Fields::Entry* suffix = fields->Find("suffix")) {
    const std::string suffix_path = fields->PathOf("suffix");
    absl::StatusOr<std::string> text = ReadString(*suffix, suffix_path);
    if (!text.ok()) return text.status();
    if (absl::Status valid = ValidateShardSuffix(*text); !valid.ok()) {
      return Error(ValueNode(*suffix), suffix_path, Std(valid.message()));
    }
    view->shards.suffix = *text;
  }
  return absl::OkStatus();
}

// partition_key [+ sort_key] [+ filter]: one rule.
absl::Status Loader::ParseKeyedView(const Fields& fields, ViewSpec* view) const {
  const Fields::Entry* partition = fields.Find("partition_key");
  if (partition == nullptr) {
    return Error(fields.node, fields.PathOf("partition_key"),
                 "is required (or give rules, or inverted: true)");
  }
  ViewRule rule;
  absl::StatusOr<KeySpec> pk = ParseKeySpec(*partition, fields.PathOf("partition_key"));
  if (!pk.ok()) return pk.status();
  rule.partition_key = *std::move(pk);
  if (const Fields::Entry* sort = fields.Find("sort_key")) {
    absl::StatusOr<KeySpec> sk = ParseKeySpec(*sort, fields.PathOf("sort_key"));
    if (!sk.ok()) return sk.status();
    rule.sort_key = *std::move(sk);
  }
  if (const Fields::Entry* filter = fields.Find("filter")) {
    absl::StatusOr<std::vector<Condition>> when = ParseConditions(*filter, fields.PathOf("filter"));
    if (!when.ok()) return when.status();
    rule.when = *std::move(when);
  }
  view->rules.push_back(std::move(rule));
  return absl::OkStatus();
}

// The table's keys swapped: pk = table sort key, sk = table partition key. A filter still
// applies (a sparse inverted index).
absl::Status Loader::ParseInvertedView(const Fields& fields, const TableSpec& table,
                                       ViewSpec* view) const {
  for (std::string_view other : {"partition_key", "sort_key", "rules"}) {
    if (const Fields::Entry* clash = fields.Find(other)) {
      return Error(clash->key_node, fields.PathOf(other),
                   "cannot be combined with inverted: true (an inverted view's keys are the "
                   "table's keys swapped)");
    }
  }
  if (!table.key.sort.has_value()) {
    const Fields::Entry* inverted = fields.Find("inverted");
    return Error(inverted->value, fields.PathOf("inverted"),
                 Cat("table ", Quote(table.name),
                     " has no sort key, so there is nothing to invert"));
  }
  ViewRule rule;
  rule.partition_key = KeySpec::Attribute(*table.key.sort, table.key.sort_type);
  rule.sort_key = KeySpec::Attribute(table.key.partition, table.key.partition_type);
  if (const Fields::Entry* filter = fields.Find("filter")) {
    absl::StatusOr<std::vector<Condition>> when = ParseConditions(*filter, fields.PathOf("filter"));
    if (!when.ok()) return when.status();
    rule.when = *std::move(when);
  }
  view->rules.push_back(std::move(rule));
  return absl::OkStatus();
}

absl::Status Loader::ParseRules(const Fields::Entry& entry, const std::string& path,
                                ViewSpec* view) const {
  if (!entry.value.IsSequence() || entry.value.size() == 0) {
    return Error(ValueNode(entry), path,
                 Cat("expected a list of at least one rule, got ",
                     entry.value.IsSequence() ? "an empty list" : Describe(entry.value)));
  }
  std::vector<RuleNodes> nodes;
  for (size_t i = 0; i < entry.value.size(); ++i) {
    absl::StatusOr<Fields> fields =
        ReadFields(entry.value[i], Index(path, i), {"when", "partition_key", "sort_key"});
    if (!fields.ok()) return fields.status();
    ViewRule rule;
    RuleNodes where{fields->node, {}, {}};
    absl::StatusOr<const Fields::Entry*> partition = Require(*fields, "partition_key");
    if (!partition.ok()) return partition.status();
    absl::StatusOr<KeySpec> pk = ParseKeySpec(**partition, fields->PathOf("partition_key"));
    if (!pk.ok()) return pk.status();
    rule.partition_key = *std::move(pk);
    where.partition_key = ValueNode(**partition);
    if (const Fields::Entry* sort = fields->Find("sort_key")) {
      absl::StatusOr<KeySpec> sk = ParseKeySpec(*sort, fields->PathOf("sort_key"));
      if (!sk.ok()) return sk.status();
      rule.sort_key = *std::move(sk);
      where.sort_key = ValueNode(*sort);
    }
    // A rule without `when` matches every item: useful as the last, catch-all rule.
    if (const Fields::Entry* when = fields->Find("when")) {
      absl::StatusOr<std::vector<Condition>> conditions =
          ParseConditions(*when, fields->PathOf("when"));
      if (!conditions.ok()) return conditions.status();
      rule.when = *std::move(conditions);
    }
    view->rules.push_back(std::move(rule));
    nodes.push_back(std::move(where));
  }
  return CheckSameKeySchema(nodes, path, *view);
}

// DynamoDB gives an index one key schema; so does a view, whichever rule an item matched.
absl::Status Loader::CheckSameKeySchema(const std::vector<RuleNodes>& nodes,
                                        const std::string& path, const ViewSpec& view) const {
  constexpr std::string_view kWhy = "; all rules of a view share one key schema";
  const ViewRule& first = view.rules.front();
  for (size_t i = 1; i < view.rules.size(); ++i) {
    const ViewRule& rule = view.rules[i];
    std::string name = Cat("rules[", i, "]");
    std::string rule_path = Index(path, i);
    if (rule.partition_key.value_type() != first.partition_key.value_type()) {
      return Error(nodes[i].partition_key, Child(rule_path, "partition_key"),
                   Cat("type ", AttrTypeName(rule.partition_key.value_type()),
                       " differs from rules[0].partition_key (type ",
                       AttrTypeName(first.partition_key.value_type()), ")", kWhy));
    }
    if (rule.sort_key.has_value() != first.sort_key.has_value()) {
      bool this_has = rule.sort_key.has_value();
      return Error(this_has ? nodes[i].sort_key : nodes[i].rule, Child(rule_path, "sort_key"),
                   Cat(this_has ? name : "rules[0]", " has a sort key but ",
                       this_has ? "rules[0]" : name, " has none", kWhy));
    }
    if (rule.sort_key.has_value() &&
        rule.sort_key->value_type() != first.sort_key->value_type()) {
      return Error(nodes[i].sort_key, Child(rule_path, "sort_key"),
                   Cat("type ", AttrTypeName(rule.sort_key->value_type()),
                       " differs from rules[0].sort_key (type ",
                       AttrTypeName(first.sort_key->value_type()), ")", kWhy));
    }
  }
  return absl::OkStatus();
}

// { attribute: X, type: S|N|B } or { template: "..." }.
absl::StatusOr<KeySpec> Loader::ParseKeySpec(const Fields::Entry& entry,
                                             const std::string& path) const {
  absl::StatusOr<Fields> fields = ReadFields(entry, path, {"attribute", "type", "template"});
  if (!fields.ok()) return fields.status();
  const Fields::Entry* attribute = fields->Find("attribute");
  const Fields::Entry* text = fields->Find("template");
  const Fields::Entry* type = fields->Find("type");
  if (attribute != nullptr && text != nullptr) {
    return Error(text->key_node, path, "give either attribute or template, not both");
  }
  if (text != nullptr) {
    if (type != nullptr) {
      return Error(type->key_node, fields->PathOf("type"),
                   "applies to attribute keys only (a template always yields an S value)");
    }
    absl::StatusOr<std::string> written = ReadNonEmpty(*text, fields->PathOf("template"));
    if (!written.ok()) return written.status();
    absl::StatusOr<KeySpec> spec = KeySpec::Template(*written);
    if (!spec.ok()) {
      return Error(text->value, fields->PathOf("template"), Std(spec.status().message()));
    }
    return spec;
  }
  if (attribute == nullptr) {
    return Error(fields->node, path,
                 "expected { attribute: NAME, type: S|N|B } or { template: \"...\" }");
  }
  absl::StatusOr<std::string> name = ReadNonEmpty(*attribute, fields->PathOf("attribute"));
  if (!name.ok()) return name.status();
  AttrType key_type = AttrType::kS;
  if (type != nullptr) {
    absl::StatusOr<AttrType> parsed = ReadKeyType(*type, fields->PathOf("type"));
    if (!parsed.ok()) return parsed.status();
    key_type = *parsed;
  }
  return KeySpec::Attribute(*name, key_type);
}

// One condition, or a list of them (all must hold).
absl::StatusOr<std::vector<Condition>> Loader::ParseConditions(const Fields::Entry& entry,
                                                               const std::string& path) const {
  std::vector<Condition> conditions;
  if (entry.value.IsMap()) {
    absl::StatusOr<Condition> condition = ParseCondition(entry.value, path);
    if (!condition.ok()) return condition.status();
    conditions.push_back(*std::move(condition));
    return conditions;
  }
  if (!entry.value.IsSequence() || entry.value.size() == 0) {
    return Error(ValueNode(entry), path,
                 Cat("expected a condition { attribute: NAME, equals | begins_with | "
                     "exists: ... } or a non-empty list of them, got ",
                     entry.value.IsSequence() ? "an empty list" : Describe(entry.value)));
  }
  for (size_t i = 0; i < entry.value.size(); ++i) {
    absl::StatusOr<Condition> condition = ParseCondition(entry.value[i], Index(path, i));
    if (!condition.ok()) return condition.status();
    conditions.push_back(*std::move(condition));
  }
  return conditions;
}

absl::StatusOr<Condition> Loader::ParseCondition(const YAML::Node& node,
                                                 const std::string& path) const {
  absl::StatusOr<Fields> fields =
      ReadFields(node, path, {"attribute", "equals", "begins_with", "exists"});
  if (!fields.ok()) return fields.status();
  Condition condition;
  absl::StatusOr<const Fields::Entry*> attribute = Require(*fields, "attribute");
  if (!attribute.ok()) return attribute.status();
  absl::StatusOr<std::string> name = ReadNonEmpty(**attribute, fields->PathOf("attribute"));
  if (!name.ok()) return name.status();
  condition.attribute = *name;

  const Fields::Entry* op = nullptr;
  for (const Fields::Entry& field : fields->entries) {
    if (field.key == "attribute") continue;
    if (op != nullptr) {
      return Error(field.key_node, path,
                   Cat("expected exactly one of equals, begins_with, exists, got both ",
                       op->key, " and ", field.key));
    }
    op = &field;
  }
  if (op == nullptr) {
    return Error(fields->node, path,
                 "expected exactly one of equals, begins_with, exists, got none");
  }
  std::string op_path = fields->PathOf(op->key);
  if (op->key == "exists") {
    absl::StatusOr<bool> exists = ReadBool(*op, op_path);
    if (!exists.ok()) return exists.status();
    condition.op = *exists ? Condition::Op::kExists : Condition::Op::kNotExists;
    return condition;
  }
  if (op->key == "begins_with") {
    absl::StatusOr<std::string> prefix = ReadNonEmpty(*op, op_path);
    if (!prefix.ok()) return prefix.status();
    condition.op = Condition::Op::kBeginsWith;
    condition.operand = *prefix;
    return condition;
  }
  // equals: any YAML scalar, kept as written; the builder compares S, N and BOOL by text.
  if (!op->value.IsScalar()) {
    return Error(ValueNode(*op), op_path,
                 Cat("expected a string, number or bool, got ", Describe(op->value)));
  }
  condition.op = Condition::Op::kEquals;
  condition.operand = op->value.Scalar();
  return condition;
}

absl::StatusOr<Projection> Loader::ParseProjection(const Fields::Entry& entry,
                                                   const std::string& path) const {
  constexpr std::string_view kExpected = "expected ALL, KEYS_ONLY or { include: [NAMES] }, got ";
  Projection projection;
  if (entry.value.IsScalar()) {
    const std::string& text = entry.value.Scalar();
    if (text == "ALL") return projection;
    if (text == "KEYS_ONLY") {
      projection.kind = ProjectionKind::kKeysOnly;
      return projection;
    }
    return Error(entry.value, path, Cat(kExpected, Quote(text)));
  }
  if (!entry.value.IsMap()) {
    return Error(ValueNode(entry), path, Cat(kExpected, Describe(entry.value)));
  }
  absl::StatusOr<Fields> fields = ReadFields(entry.value, path, {"include"});
  if (!fields.ok()) return fields.status();
  absl::StatusOr<const Fields::Entry*> include = Require(*fields, "include");
  if (!include.ok()) return include.status();
  const YAML::Node& names = (*include)->value;
  std::string include_path = fields->PathOf("include");
  if (!names.IsSequence() || names.size() == 0) {
    return Error(ValueNode(**include), include_path,
                 Cat("expected a non-empty list of attribute names, got ",
                     names.IsSequence() ? "an empty list" : Describe(names)));
  }
  projection.kind = ProjectionKind::kInclude;
  for (size_t i = 0; i < names.size(); ++i) {
    const YAML::Node& name = names[i];
    if (!name.IsScalar() || name.Scalar().empty()) {
      return Error(name.IsNull() ? names : name, Index(include_path, i),
                   Cat("expected an attribute name, got ", Describe(name)));
    }
    for (const std::string& seen : projection.include) {
      if (seen == name.Scalar()) {
        return Error(name, Index(include_path, i),
                     Cat("attribute ", Quote(seen), " is listed twice"));
      }
    }
    projection.include.push_back(name.Scalar());
  }
  return projection;
}

// ---- sources ----

absl::Status Loader::ParseSources(const Fields::Entry& entry, Config* config) {
  if (!entry.value.IsSequence()) {
    return Error(ValueNode(entry), "sources",
                 Cat("expected a list of sources, got ", Describe(entry.value)));
  }
  for (size_t i = 0; i < entry.value.size(); ++i) {
    absl::StatusOr<SourceConfig> source = ParseSource(entry.value[i], Index("sources", i), *config);
    if (!source.ok()) return source.status();
    config->sources.push_back(*std::move(source));
  }
  return absl::OkStatus();
}

absl::StatusOr<SourceConfig> Loader::ParseSource(const YAML::Node& node, const std::string& path,
                                                 const Config& config) {
  std::vector<std::string_view> keys = {"name", "table"};
  for (const SourceKindInfo& kind : SourceKinds()) keys.push_back(kind.name);
  absl::StatusOr<Fields> fields = ReadFields(node, path, keys);
  if (!fields.ok()) return fields.status();
  SourceConfig source;
  absl::StatusOr<std::string> name = ReadUniqueName(*fields, "source", &source_lines_);
  if (!name.ok()) return name.status();
  source.name = *name;
  std::string label = Cat("source ", Quote(source.name), ": ");

  absl::StatusOr<const Fields::Entry*> table = Require(*fields, "table");
  if (!table.ok()) return table.status();
  absl::StatusOr<std::string> table_name = ReadNonEmpty(**table, fields->PathOf("table"));
  if (!table_name.ok()) return table_name.status();
  if (config.FindTable(*table_name) == nullptr) {
    std::vector<std::string> defined;
    for (const TableSpec& t : config.tables) defined.push_back(t.name);
    return Error((*table)->value, fields->PathOf("table"),
                 Cat("source ", Quote(source.name), " names table ", Quote(*table_name),
                     ", which is not defined (tables: ", absl::StrJoin(defined, ", "),
                     ")"));
  }
  source.table = *table_name;

  const Fields::Entry* type = nullptr;
  std::vector<std::string_view> sketches;
  for (const SourceKindInfo& kind : SourceKinds()) {
    sketches.push_back(kind.sketch);
    const Fields::Entry* entry = fields->Find(kind.name);
    if (entry == nullptr) continue;
    if (type != nullptr) {
      return Error(entry->key_node, path,
                   Cat(label, "has two source types (", type->key, " and ", entry->key,
                       "); give exactly one"));
    }
    type = entry;
    source.kind = kind.kind;
  }
  if (type == nullptr) {
    std::string listed;
    for (size_t i = 0; i < sketches.size(); ++i) {
      listed += Cat(i == 0 ? "" : i + 1 == sketches.size() ? " or " : ", ", sketches[i]);
    }
    return Error(fields->node, path, Cat(label, "expected a source type: ", listed));
  }
  DeadLetterPath(source) = DefaultDeadLetterPath(config.storage.path, source.name);
  absl::Status parsed =
      config_fields::VisitSourceBlock(source, [&](auto& block, const auto& table) {
        return ParseBlock(*type, fields->PathOf(type->key), table, &block);
      });
  if (!parsed.ok()) return parsed;
  if (config.cluster.Enabled()) {
    if (absl::Status s = CheckClusterSource(*type, fields->PathOf(type->key), source); !s.ok()) {
      return s;
    }
  }
  return source;
}

// ---- cluster ----

absl::Status Loader::ParseCluster(const Fields::Entry& entry, ClusterConfig* cluster) const {
  absl::StatusOr<Fields> fields = ReadFields(entry, "cluster", {"members", "ordinal", "peers"});
  if (!fields.ok()) return fields.status();
  absl::StatusOr<const Fields::Entry*> members = Require(*fields, "members");
  if (!members.ok()) return members.status();
  absl::StatusOr<uint32_t> count =
      ReadUint32(**members, fields->PathOf("members"), 1, ClusterConfig::kMaxMembers,
                 "every member keeps a channel to every other and asks each of them on every read");
  if (!count.ok()) return count.status();
  cluster->members = *count;
  absl::StatusOr<const Fields::Entry*> ordinal = Require(*fields, "ordinal");
  if (!ordinal.ok()) return ordinal.status();
  absl::StatusOr<uint32_t> me = ReadOrdinal(**ordinal, fields->PathOf("ordinal"), *count);
  if (!me.ok()) return me.status();
  cluster->ordinal = *me;
  absl::StatusOr<const Fields::Entry*> peers = Require(*fields, "peers");
  if (!peers.ok()) return peers.status();
  absl::StatusOr<std::vector<std::string>> addresses =
      ReadPeers(**peers, fields->PathOf("peers"), *count);
  if (!addresses.ok()) return addresses.status();
  cluster->peers = *std::move(addresses);
  return absl::OkStatus();
}

// A number, or a StatefulSet pod's name ("cdcview-2"): Kubernetes gives a pod its ordinal only
// as the end of its name (or the pod-index label), and either can be passed in unchanged.
absl::StatusOr<uint32_t> Loader::ReadOrdinal(const Fields::Entry& entry, std::string_view path,
                                             uint32_t members) const {
  const std::string_view text =
      entry.value.IsScalar() ? std::string_view(entry.value.Scalar()) : std::string_view();
  const size_t dash = text.rfind('-');
  const std::string_view digits =
      dash == std::string_view::npos ? text : text.substr(dash + 1);
  uint32_t number = 0;
  const bool ok = !digits.empty() && dash != 0 &&
                  std::all_of(digits.begin(), digits.end(),
                              [](char c) { return absl::ascii_isdigit(c); }) &&
                  absl::SimpleAtoi(Absl(digits), &number);
  if (!ok) {
    return Error(ValueNode(entry), path,
                 Cat("expected this member's number, 0 to ", members - 1,
                     ", or a StatefulSet pod name ending in it like cdcview-", members - 1,
                     ", got ", Describe(entry.value)));
  }
  if (number >= members) {
    return Error(entry.value, path,
                 Cat("ordinal ", number,
                     digits.size() == text.size() ? std::string()
                                                  : Cat(" (from ", Quote(text), ")"),
                     " is not below members (", members, "): members are numbered 0 to ",
                     members - 1, "; set cluster.members to the StatefulSet's replicas"));
  }
  return number;
}

// A list of `members` addresses, or one string with "{i}" that stands for each ordinal
// ("cdcview-{i}.cdcview-members:50051", the StatefulSet's pods behind its headless Service).
absl::StatusOr<std::vector<std::string>> Loader::ReadPeers(const Fields::Entry& entry,
                                                           std::string_view path,
                                                           uint32_t members) const {
  const std::string expected =
      Cat("expected a list of ", members, " host:port addresses (every member's gRPC address, by "
          "ordinal), or one string with {i} for the ordinal like "
          "\"cdcview-{i}.cdcview-members:50051\"");
  std::vector<std::string> peers;
  if (entry.value.IsScalar()) {
    const std::string& text = entry.value.Scalar();
    if (text.find("{i}") == std::string::npos) {
      return Error(entry.value, path, Cat(expected, ", got ", Describe(entry.value)));
    }
    for (uint32_t i = 0; i < members; ++i) {
      peers.push_back(Std(absl::StrReplaceAll(text, {{"{i}", std::to_string(i)}})));
      if (!IsHostPort(peers.back())) {
        return Error(entry.value, path,
                     Cat("member ", i, "'s address ", Quote(peers.back()),
                         " is not host:port like cdcview-", i, ".cdcview-members:50051"));
      }
    }
    return peers;
  }
  if (!entry.value.IsSequence()) {
    return Error(ValueNode(entry), path, Cat(expected, ", got ", Describe(entry.value)));
  }
  if (entry.value.size() != members) {
    return Error(entry.value, path,
                 Cat("expected ", members, " addresses, one per member (members: ", members,
                     "), got ", entry.value.size(), "; list every member's gRPC address by "
                     "ordinal, or give one string with {i} for the ordinal"));
  }
  for (size_t i = 0; i < entry.value.size(); ++i) {
    const YAML::Node& item = entry.value[i];
    if (!item.IsScalar() || !IsHostPort(item.Scalar())) {
      return Error(item.IsNull() ? entry.value : item, Index(path, i),
                   Cat("expected host:port like 10.0.0.", i + 1, ":50051, got ", Describe(item)));
    }
    peers.push_back(item.Scalar());
  }
  return peers;
}

absl::Status Loader::CheckClusterSource(const Fields::Entry& block, std::string_view path,
                                        const SourceConfig& source) const {
  switch (source.kind) {
    case SourceConfig::Kind::kFile:
      return Error(block.key_node, path,
                   "a file source cannot be split between the members of a cluster: a file has "
                   "one reader, which would hold every item; run standalone replicas instead "
                   "(leave out cluster:, each daemon reads the whole file), or produce the "
                   "changes to a Kafka topic and read that with a kafka source");
    case SourceConfig::Kind::kDynamoDb:
      return Error(block.key_node, path,
                   "a DynamoDB source cannot be split between the members of a cluster: a "
                   "DynamoDB Streams shard allows only two readers at once, and shards split "
                   "and close as the table changes, so no fixed rule can give each member its "
                   "share; run standalone replicas instead (leave out cluster:, at most two per "
                   "stream), or bridge the stream to a Kafka topic and read that with a kafka "
                   "source");
    case SourceConfig::Kind::kKafka:
      if (source.kafka.start == KafkaSourceConfig::Start::kLatest) {
        // The block was read already, so it is a mapping with "start" given once.
        YAML::Node start_node = block.key_node;
        for (auto it = block.value.begin(); it != block.value.end(); ++it) {
          if (it->first.Scalar() == "start") start_node = it->second;
        }
        return Error(start_node, Child(path, "start"),
                     "latest cannot be used in a cluster: a member that gains partitions when the "
                     "cluster is resized must read their whole history; use start: earliest");
      }
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::StatusOr<Config> Loader::Load(const YAML::Node& root) {
  if (!root.IsMap()) {
    return Error(root, "",
                 Cat("expected a mapping with tables: (and optionally storage:, "
                     "server:, apply:, sources:), got ",
                     root.IsNull() ? "an empty document" : Describe(root)));
  }
  absl::StatusOr<Fields> fields =
      ReadFields(root, "", {"storage", "server", "apply", "watch", "cluster", "sources", "tables"});
  if (!fields.ok()) return fields.status();
  Config config;
  config.file = file_;
  // Storage comes before sources (dead-letter paths default under it), tables before
  // sources (sources name them), whatever the order in the file.
  absl::Status sections;
  config_fields::ForEachSection(config, [&](std::string_view key, const auto& table, auto& block) {
    const Fields::Entry* entry = fields->Find(key);
    if (sections.ok() && entry != nullptr) {
      sections = ParseBlock(*entry, std::string(key), table, &block);
    }
  });
  if (!sections.ok()) return sections;
  // Before sources: a cluster allows only some of them.
  if (const Fields::Entry* cluster = fields->Find("cluster")) {
    if (absl::Status s = ParseCluster(*cluster, &config.cluster); !s.ok()) return s;
  }
  absl::StatusOr<const Fields::Entry*> tables = Require(*fields, "tables");
  if (!tables.ok()) return tables.status();
  if (absl::Status s = ParseTables(**tables, &config.tables); !s.ok()) return s;
  if (const Fields::Entry* sources = fields->Find("sources")) {
    if (absl::Status s = ParseSources(*sources, &config); !s.ok()) return s;
  }
  return config;
}

}  // namespace

namespace {

// Puts `setting` into the parsed file's tree, creating the mappings on its path; a
// `sources.<name>` step picks the source of that name. Returns the loader's path of the value
// ("sources[1].kafka.brokers") for its error messages.
absl::StatusOr<std::string> PutSetting(YAML::Node& root, const ConfigSetting& setting) {
  std::vector<std::string> steps = absl::StrSplit(Absl(setting.path), '.');
  for (const std::string& step : steps) {
    if (step.empty()) {
      return absl::InvalidArgumentError(
          Cat(setting.origin, ": expected a field path like apply.batch_size, got ",
              Quote(setting.path)));
    }
  }
  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) return std::string();  // the loader reports the document itself
  YAML::Node value;
  // A flow list or mapping (topics: [a, b]) is YAML; anything else is the scalar as given,
  // so "true" or "" stay strings for string fields and parse as the field's type otherwise.
  if (!setting.value.empty() && (setting.value.front() == '[' || setting.value.front() == '{')) {
    try {
      value = YAML::Load(setting.value);
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError(Cat(setting.origin, ": invalid YAML: ", e.msg));
    }
  } else {
    value = YAML::Node(setting.value);
  }
  YAML::Node node = root;  // node.reset() moves it; assignment would overwrite the tree
  std::string path;
  for (size_t i = 0; i < steps.size(); ++i) {
    const std::string& step = steps[i];
    if (node.IsSequence() && i > 0 && steps[i - 1] == "sources") {
      std::vector<std::string> names;
      size_t found = node.size();
      for (size_t n = 0; n < node.size(); ++n) {
        YAML::Node name = node[n].IsMap() ? node[n]["name"] : YAML::Node();
        if (!name.IsScalar()) continue;
        names.push_back(name.Scalar());
        if (name.Scalar() == step && found == node.size()) found = n;
      }
      if (found == node.size()) {
        return absl::InvalidArgumentError(Cat(setting.origin, ": no source named ", Quote(step),
                                              " (sources: ", absl::StrJoin(names, ", "), ")"));
      }
      if (i + 1 == steps.size()) {
        return absl::InvalidArgumentError(
            Cat(setting.origin, ": set a field of source ", Quote(step),
                ", like sources.", step, ".kafka.brokers"));
      }
      path = Cat(path, "[", found, "]");
      YAML::Node next = node[found];
      node.reset(next);
      continue;
    }
    if (!node.IsMap() && !node.IsNull()) {
      return absl::InvalidArgumentError(
          Cat(setting.origin, ": ", path, " is not a mapping in the file, so it has no field ",
              Quote(step)));
    }
    path = path.empty() ? step : Cat(path, ".", step);
    if (i + 1 == steps.size()) {
      node[step] = value;
      break;
    }
    YAML::Node next = node[step];
    if (!next.IsDefined() || next.IsNull()) {
      node[step] = YAML::Node(YAML::NodeType::Map);
      next.reset(node[step]);
    }
    node.reset(next);
  }
  return path;
}

// The lines of `text`, without their newlines.
std::vector<std::string_view> Lines(std::string_view text) {
  std::vector<std::string_view> lines;
  for (absl::string_view line : absl::StrSplit(Absl(text), '\n')) {
    lines.emplace_back(line.data(), line.size());
  }
  return lines;
}

size_t Indentation(std::string_view line) {
  size_t n = 0;
  while (n < line.size() && line[n] == ' ') ++n;
  return n;
}

// Whether the quote or bracket at `text[i]` opens something rather than sitting inside a
// plain scalar: at a line's start, after "- ", "? " or ": ", and in a flow collection
// (`in_flow`) also right after "[", "{", "," or ":".
bool AtTokenStart(std::string_view text, size_t i, bool in_flow) {
  size_t j = i;
  while (j > 0 && text[j - 1] == ' ') --j;
  if (j == 0 || text[j - 1] == '\n') return true;
  char before = text[j - 1];
  if (in_flow && std::string_view("[{,:").find(before) != std::string_view::npos) return true;
  if (j == i) return false;
  if (before == ':') return true;
  if (before != '-' && before != '?') return false;
  size_t k = j - 1;  // the indicator must be the first thing on its line
  while (k > 0 && text[k - 1] == ' ') --k;
  return k == 0 || text[k - 1] == '\n';
}

// What is still open at `end` of `text`: the 0-based lines of the "[" and "{" (innermost
// last), and of a quote that is never closed. Comments are skipped.
struct OpenAt {
  std::vector<int> brackets;
  std::optional<int> quote;
};

OpenAt ScanOpen(std::string_view text, size_t end) {
  OpenAt open;
  int line = 0;
  end = std::min(end, text.size());
  for (size_t i = 0; i < end; ++i) {
    char c = text[i];
    if (c == '\n') {
      ++line;
    } else if (c == '#' && (i == 0 || text[i - 1] == ' ' || text[i - 1] == '\n')) {
      while (i + 1 < end && text[i + 1] != '\n') ++i;
    } else if ((c == '"' || c == '\'') && AtTokenStart(text, i, !open.brackets.empty())) {
      // To the closing quote: "\x" escapes in double quotes, '' is a quote in single ones.
      const int quote_line = line;
      bool closed = false;
      for (++i; i < end && !closed; ++i) {
        if (text[i] == '\n') ++line;
        if (c == '"' && text[i] == '\\') {
          ++i;
        } else if (text[i] == c) {
          if (c == '\'' && i + 1 < end && text[i + 1] == '\'') {
            ++i;
          } else {
            closed = true;
          }
        }
      }
      --i;
      if (!closed) open.quote = quote_line;
    } else if ((c == '[' || c == '{') && AtTokenStart(text, i, !open.brackets.empty())) {
      open.brackets.push_back(line);
    } else if ((c == ']' || c == '}') && !open.brackets.empty()) {
      open.brackets.pop_back();
    }
  }
  return open;
}

// Whether `line` reads as a key without its colon ("  path /srv/x"): plain text that is no
// list item, comment, quoted or flow value, and holds no ": " (nor ends in ":").
bool LooksLikeKeyWithoutColon(std::string_view line) {
  std::string_view content = line.substr(Indentation(line));
  if (content.empty() || std::string_view("-#\"'[{?|>&*!%@`").find(content.front()) !=
                             std::string_view::npos) {
    return false;
  }
  return content.find(": ") == std::string_view::npos && content.back() != ':';
}

// The message for yaml-cpp's `e` about `yaml`: "<file>:<line>: invalid YAML: ...". yaml-cpp
// notices some mistakes only at a later token: an unclosed "[" or "{" where the document or
// the enclosing block ends, a key without its colon at the ":" of the next line's key (the
// two lines read as one plain scalar). Those point at the line of the mistake.
std::string InvalidYaml(const std::string& yaml, const std::string& file,
                        const YAML::Exception& e) {
  if (e.mark.is_null()) return Cat(file, ":1: invalid YAML: ", e.msg);
  const int noticed = e.mark.line;  // 0-based
  if (e.msg == YAML::ErrorMsg::END_OF_SEQ_FLOW || e.msg == YAML::ErrorMsg::END_OF_MAP_FLOW) {
    const char* bracket = e.msg == YAML::ErrorMsg::END_OF_SEQ_FLOW ? "[" : "{";
    OpenAt open = ScanOpen(yaml, static_cast<size_t>(e.mark.pos));
    if (!open.brackets.empty()) {
      return Cat(file, ":", open.brackets.back() + 1, ": invalid YAML: ", e.msg, " (the \"", bracket,
                 "\" on this line is never closed)");
    }
    return Cat(file, ":", noticed + 1, ": invalid YAML: ", e.msg, " (a \"", bracket,
               "\" at or before this line is never closed)");
  }
  if (e.msg == YAML::ErrorMsg::MAP_VALUE) {
    std::vector<std::string_view> lines = Lines(yaml);
    int previous = noticed - 1;
    while (previous >= 0 && (lines[previous].find_first_not_of(' ') == std::string_view::npos ||
                             lines[previous].substr(Indentation(lines[previous])).front() == '#')) {
      --previous;
    }
    if (previous >= 0 && LooksLikeKeyWithoutColon(lines[previous])) {
      return Cat(file, ":", previous + 1, ": invalid YAML: ", e.msg,
                 " (a key on this line has no \":\" after it)");
    }
  }
  return Cat(file, ":", noticed + 1, ": invalid YAML: ", e.msg);
}


}  // namespace

absl::StatusOr<Config> ParseConfig(const std::string& yaml, const std::string& file,
                                   const std::vector<ConfigSetting>& settings) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(InvalidYaml(yaml, file, e));
  }
  // yaml-cpp reads a quoted scalar that is never closed to the end of the document, so the
  // fields after it vanish into a string; an error about them would point past the mistake.
  if (std::optional<int> quote = ScanOpen(yaml, yaml.size()).quote) {
    return absl::InvalidArgumentError(
        Cat(file, ":", *quote + 1, ": invalid YAML: the quote on this line is never closed"));
  }
  // The loader only uses accessors that do not throw; this keeps a yaml-cpp surprise from
  // crossing the module boundary as an exception all the same.
  try {
    std::vector<std::pair<std::string, std::string>> origins;
    for (const ConfigSetting& setting : settings) {
      absl::StatusOr<std::string> path = PutSetting(root, setting);
      if (!path.ok()) return path.status();
      // The latest setting of a path is the one in the tree.
      std::erase_if(origins, [&](const auto& o) { return o.first == *path; });
      origins.emplace_back(*path, setting.origin);
    }
    return Loader(file, std::move(origins)).Load(root);
  } catch (const YAML::Exception& e) {
    return absl::InternalError(Cat(file, ": unexpected yaml-cpp error: ", e.what()));
  }
}

const std::vector<std::string>& EnvironmentSettablePaths() {
  // Every field of the sections except those with their own flag and variable
  // (--storage-path, --grpc, --metrics: ConfigOverrides), then the cluster's: a StatefulSet
  // gives each pod its ordinal through the environment (its name, by the downward API).
  static const std::vector<std::string> paths = [] {
    constexpr std::string_view kOwnFlag[] = {"storage.path", "server.grpc", "server.metrics"};
    std::vector<std::string> out;
    const Config config;
    config_fields::ForEachSection(config, [&](std::string_view section, const auto& table,
                                              const auto&) {
      for (const auto& field : table) {
        std::string path = Cat(section, ".", field.key);
        if (std::find(std::begin(kOwnFlag), std::end(kOwnFlag), path) == std::end(kOwnFlag)) {
          out.push_back(std::move(path));
        }
      }
    });
    for (std::string_view field : {"members", "ordinal", "peers"}) {
      out.push_back(Cat("cluster.", field));
    }
    return out;
  }();
  return paths;
}

std::string EnvironmentName(std::string_view path) {
  std::string name = Cat("CDCVIEW_", path);
  for (char& c : name) c = c == '.' ? '_' : absl::ascii_toupper(static_cast<unsigned char>(c));
  return name;
}

std::vector<ConfigSetting> SettingsFromEnvironment(
    const std::function<const char*(const char*)>& getenv) {
  std::vector<ConfigSetting> settings;
  for (const std::string& path : EnvironmentSettablePaths()) {
    const std::string name = EnvironmentName(path);
    const char* value = getenv(name.c_str());
    // Empty counts as unset, as for the flags' variables (CLI11).
    if (value == nullptr || *value == '\0') continue;
    settings.push_back({path, value, name});
  }
  return settings;
}

absl::StatusOr<ConfigSetting> ParseSetFlag(std::string_view text) {
  size_t eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    return absl::InvalidArgumentError(
        Cat("--set ", Quote(text), ": expected <field path>=<value>, like apply.batch_size=512"));
  }
  const std::string_view path = text.substr(0, eq);
  // Errors name the setting by its origin: a secret's value stays out of them. The property's
  // name may have dots of its own (sasl.password), so a path into properties is judged by the
  // whole name after "properties.".
  constexpr std::string_view kProperties = ".properties.";
  const size_t properties = path.find(kProperties);
  const std::string_view name =
      properties != std::string_view::npos ? path.substr(properties + kProperties.size())
                                           : path.substr(path.rfind('.') + 1);
  return ConfigSetting{std::string(path), std::string(text.substr(eq + 1)),
                       IsSecretProperty(name) ? Cat("--set ", path, "=", kRedacted)
                                              : Cat("--set ", text)};
}

absl::StatusOr<Config> LoadConfig(const std::string& path,
                                  const std::vector<ConfigSetting>& settings) {
  auto unreadable = [&path](int error) {
    return absl::NotFoundError(
        Cat("cannot read config file ", Quote(path), ": ", std::strerror(error)));
  };
  errno = 0;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                       &std::fclose);
  if (file == nullptr) return unreadable(errno);
  std::string text;
  char buffer[1 << 14];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, file.get())) > 0) text.append(buffer, n);
  // Opening a directory succeeds; reading it fails (EISDIR) and must not look empty.
  if (std::ferror(file.get())) return unreadable(errno != 0 ? errno : EIO);
  return ParseConfig(text, path, settings);
}

absl::Status ApplyOverrides(const ConfigOverrides& overrides, Config* config) {
  auto bad = [](std::string_view field, std::string_view flag, std::string_view env,
                std::string_view expected, const std::string& got) {
    return absl::InvalidArgumentError(Cat(field, " (", flag, " or ", env, "): expected ", expected,
                                          ", got ", Quote(got)));
  };
  if (overrides.grpc && !IsHostPort(*overrides.grpc)) {
    return bad("server.grpc", "--grpc", "CDCVIEW_GRPC",
               HostPortExpectation(ServerAddressRule("grpc")), *overrides.grpc);
  }
  if (overrides.metrics && !overrides.metrics->empty() && !IsHostPort(*overrides.metrics)) {
    return bad("server.metrics", "--metrics", "CDCVIEW_METRICS",
               HostPortExpectation(ServerAddressRule("metrics")), *overrides.metrics);
  }
  if (overrides.storage_path && overrides.storage_path->empty()) {
    return bad("storage.path", "--storage-path", "CDCVIEW_STORAGE_PATH", "a directory",
               *overrides.storage_path);
  }
  if (overrides.grpc) config->server.grpc = *overrides.grpc;
  if (overrides.metrics) config->server.metrics = *overrides.metrics;
  if (overrides.storage_path) {
    for (SourceConfig& source : config->sources) {
      std::string& dead_letters = DeadLetterPath(source);
      if (dead_letters == DefaultDeadLetterPath(config->storage.path, source.name)) {
        dead_letters = DefaultDeadLetterPath(*overrides.storage_path, source.name);
      }
    }
    config->storage.path = *overrides.storage_path;
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ParseByteSize(std::string_view text) {
  struct Unit {
    std::string_view name;
    uint64_t bytes;
  };
  // GB is 10^9 and GiB 2^30, as the SI and IEC prefixes say.
  constexpr Unit kUnits[] = {{"", 1},
                             {"B", 1},
                             {"KB", 1000ull},
                             {"MB", 1000ull * 1000},
                             {"GB", 1000ull * 1000 * 1000},
                             {"TB", 1000ull * 1000 * 1000 * 1000},
                             {"KiB", 1ull << 10},
                             {"MiB", 1ull << 20},
                             {"GiB", 1ull << 30},
                             {"TiB", 1ull << 40}};
  absl::Status malformed = absl::InvalidArgumentError(
      Cat(kSizeExpectation, ", got ", Quote(text)));
  size_t digits = 0;
  while (digits < text.size() && absl::ascii_isdigit(text[digits])) ++digits;
  if (digits == 0) return malformed;
  std::string_view unit = text.substr(digits);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  absl::Status too_big = absl::InvalidArgumentError(
      Cat("size ", Quote(text), " does not fit in 64 bits"));
  uint64_t number = 0;
  if (!absl::SimpleAtoi(Absl(text.substr(0, digits)), &number)) return too_big;
  for (const Unit& u : kUnits) {
    if (u.name != unit) continue;
    if (number > std::numeric_limits<uint64_t>::max() / u.bytes) return too_big;
    return number * u.bytes;
  }
  return malformed;
}

std::string FormatByteSize(uint64_t bytes) {
  constexpr std::pair<const char*, int> kUnits[] = {{"TiB", 40}, {"GiB", 30}, {"MiB", 20},
                                                    {"KiB", 10}};
  for (const auto& [name, shift] : kUnits) {
    uint64_t unit = uint64_t{1} << shift;
    if (bytes != 0 && bytes % unit == 0) return std::to_string(bytes / unit) + name;
  }
  return std::to_string(bytes);
}

std::optional<int32_t> KafkaPartitionNumber(std::string_view partition) {
  const size_t slash = partition.rfind('/');
  if (slash == std::string_view::npos) return std::nullopt;
  const std::string_view digits = partition.substr(slash + 1);
  int32_t n = -1;
  auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (digits.empty() || error != std::errc() || end != digits.data() + digits.size() || n < 0) {
    return std::nullopt;
  }
  return n;
}

}  // namespace cdcview
