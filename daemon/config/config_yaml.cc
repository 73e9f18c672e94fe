#include "daemon/config/config_yaml.h"

#include <cstdint>
#include <string_view>
#include <variant>

#include "daemon/config/config_fields.h"
#include "daemon/config/secret_reference.h"
#include "daemon/config/source_kinds.h"
#include "daemon/log/redact.h"
#include "yaml-cpp/yaml.h"

namespace cdcview {
namespace {

std::string Str(std::string_view text) { return std::string(text); }

void Field(YAML::Emitter& out, const char* key, const std::string& value) {
  // Always quoted: an empty string or "true" must come back as the same string.
  out << YAML::Key << key << YAML::Value << YAML::DoubleQuoted << value;
}

template <typename T>
void Field(YAML::Emitter& out, const char* key, const T& value) {
  out << YAML::Key << key << YAML::Value << value;
}

void StringList(YAML::Emitter& out, const char* key, const std::vector<std::string>& values) {
  out << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (const std::string& v : values) out << YAML::DoubleQuoted << v;
  out << YAML::EndSeq;
}

// The fields of `block` in its table's order; what the loader would read back unchanged.
template <typename S>
void EmitBlock(YAML::Emitter& out, const config_fields::FieldTable<S>& table, const S& block) {
  using config_fields::ChoiceRule, config_fields::FlagRule, config_fields::HostPortRule,
      config_fields::NameListRule, config_fields::Overloaded, config_fields::PropertiesRule,
      config_fields::SizeRule, config_fields::TextRule, config_fields::WholeRule;
  for (const config_fields::Field<S>& field : table) {
    const std::string key(field.key);
    std::visit(
        Overloaded{
            [&](const TextRule<S>& r) {
              if (!(block.*r.member).empty()) Field(out, key.c_str(), block.*r.member);
            },
            [&](const HostPortRule<S>& r) { Field(out, key.c_str(), block.*r.member); },
            [&](const FlagRule<S>& r) { Field(out, key.c_str(), block.*r.member); },
            [&](const WholeRule<S>& r) { Field(out, key.c_str(), block.*r.member); },
            [&](const SizeRule<S>& r) { Field(out, key.c_str(), FormatByteSize(block.*r.member)); },
            [&](const ChoiceRule<S>& r) { Field(out, key.c_str(), Str(r.names[r.get(block)])); },
            [&](const NameListRule<S>& r) {
              if (!(block.*r.member).empty()) StringList(out, key.c_str(), block.*r.member);
            },
            [&](const PropertiesRule<S>& r) {
              if ((block.*r.member).empty()) return;
              out << YAML::Key << key << YAML::Value << YAML::BeginMap;
              // A secret written in the file is not printed; a reference to one is.
              for (const auto& [name, value] : block.*r.member) {
                Field(out, name.c_str(),
                      IsSecretProperty(name) && !IsSecretReference(value) ? Str(kRedacted)
                                                                          : value);
              }
              out << YAML::EndMap;
            },
        },
        field.rule);
  }
}

void EmitSections(YAML::Emitter& out, const Config& c) {
  config_fields::ForEachSection(c, [&](std::string_view key, const auto& table, const auto& block) {
    out << YAML::Key << Str(key) << YAML::Value << YAML::BeginMap;
    EmitBlock(out, table, block);
    out << YAML::EndMap;
  });
}

// Only a cluster's: a standalone daemon has no `cluster:` block (members 0 is not a value the
// block takes). The peers are printed expanded, one per member.
void EmitCluster(YAML::Emitter& out, const ClusterConfig& c) {
  if (!c.Enabled()) return;
  out << YAML::Key << "cluster" << YAML::Value << YAML::BeginMap;
  Field(out, "members", c.members);
  Field(out, "ordinal", c.ordinal);
  StringList(out, "peers", c.peers);
  out << YAML::EndMap;
}

void EmitSource(YAML::Emitter& out, const SourceConfig& s) {
  out << YAML::BeginMap;
  Field(out, "name", s.name);
  Field(out, "table", s.table);
  out << YAML::Key << Str(SourceKindName(s.kind)) << YAML::Value << YAML::BeginMap;
  config_fields::VisitSourceBlock(
      s, [&](const auto& block, const auto& table) { EmitBlock(out, table, block); });
  out << YAML::EndMap << YAML::EndMap;
}

void EmitKeyAttribute(YAML::Emitter& out, const char* key, const std::string& attribute,
                      AttrType type) {
  out << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginMap;
  Field(out, "attribute", attribute);
  Field(out, "type", Str(AttrTypeName(type)));
  out << YAML::EndMap;
}

void EmitKeySpec(YAML::Emitter& out, const char* key, const KeySpec& spec) {
  if (spec.kind == KeySpec::Kind::kAttribute) {
    EmitKeyAttribute(out, key, spec.attribute, spec.type);
    return;
  }
  out << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginMap;
  Field(out, "template", spec.template_text);
  out << YAML::EndMap;
}

void EmitConditions(YAML::Emitter& out, const char* key, const std::vector<Condition>& when) {
  out << YAML::Key << key << YAML::Value << YAML::BeginSeq;
  for (const Condition& c : when) {
    out << YAML::Flow << YAML::BeginMap;
    Field(out, "attribute", c.attribute);
    switch (c.op) {
      case Condition::Op::kEquals:
        Field(out, "equals", c.operand);
        break;
      case Condition::Op::kBeginsWith:
        Field(out, "begins_with", c.operand);
        break;
      case Condition::Op::kExists:
      case Condition::Op::kNotExists:
        Field(out, "exists", c.op == Condition::Op::kExists);
        break;
    }
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
}

void EmitRuleKeys(YAML::Emitter& out, const ViewRule& rule) {
  EmitKeySpec(out, "partition_key", rule.partition_key);
  if (rule.sort_key) EmitKeySpec(out, "sort_key", *rule.sort_key);
}

void EmitProjection(YAML::Emitter& out, const Projection& p) {
  out << YAML::Key << "projection" << YAML::Value;
  if (p.kind == ProjectionKind::kAll) out << "ALL";
  if (p.kind == ProjectionKind::kKeysOnly) out << "KEYS_ONLY";
  if (p.kind == ProjectionKind::kInclude) {
    out << YAML::Flow << YAML::BeginMap;
    StringList(out, "include", p.include);
    out << YAML::EndMap;
  }
}

// An inverted view's rule holds the swapped keys, which the loader derives again from the
// table key; one rule is the keyed form; several are `rules`.
void EmitView(YAML::Emitter& out, const ViewSpec& v) {
  out << YAML::BeginMap;
  Field(out, "name", v.name);
  const ViewRule& first = v.rules.front();
  if (v.inverted) {
    Field(out, "inverted", true);
    if (!first.when.empty()) EmitConditions(out, "filter", first.when);
  } else if (v.rules.size() == 1) {
    EmitRuleKeys(out, first);
    if (!first.when.empty()) EmitConditions(out, "filter", first.when);
  } else {
    out << YAML::Key << "rules" << YAML::Value << YAML::BeginSeq;
    for (const ViewRule& rule : v.rules) {
      out << YAML::BeginMap;
      if (!rule.when.empty()) EmitConditions(out, "when", rule.when);
      EmitRuleKeys(out, rule);
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  EmitProjection(out, v.projection);
  if (v.shards.enabled()) {
    out << YAML::Key << "shards" << YAML::Value << YAML::Flow << YAML::BeginMap;
    Field(out, "count", v.shards.count);
    Field(out, "suffix", v.shards.suffix);
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
}

void EmitAggregate(YAML::Emitter& out, const AggregateSpec& a) {
  out << YAML::BeginMap;
  Field(out, "name", a.name);
  if (!a.filter.empty()) EmitConditions(out, "filter", a.filter);
  EmitKeySpec(out, "group_by", a.group_by);
  if (!a.strip_shard_suffix.empty()) Field(out, "strip_shard_suffix", a.strip_shard_suffix);
  out << YAML::Key << "measures" << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (const MeasureSpec& m : a.measures) {
    switch (m.kind) {
      case MeasureSpec::Kind::kCount: out << "count"; continue;
      case MeasureSpec::Kind::kSum: out << YAML::BeginMap; Field(out, "sum", m.attribute); break;
      case MeasureSpec::Kind::kMin: out << YAML::BeginMap; Field(out, "min", m.attribute); break;
      case MeasureSpec::Kind::kMax: out << YAML::BeginMap; Field(out, "max", m.attribute); break;
      case MeasureSpec::Kind::kAvg: out << YAML::BeginMap; Field(out, "avg", m.attribute); break;
    }
    out << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
}

void EmitTable(YAML::Emitter& out, const TableSpec& t) {
  out << YAML::BeginMap;
  Field(out, "name", t.name);
  out << YAML::Key << "key" << YAML::Value << YAML::BeginMap;
  EmitKeyAttribute(out, "partition", t.key.partition, t.key.partition_type);
  if (t.key.sort) EmitKeyAttribute(out, "sort", *t.key.sort, t.key.sort_type);
  out << YAML::EndMap;
  if (!t.views.empty()) {
    out << YAML::Key << "views" << YAML::Value << YAML::BeginSeq;
    for (const ViewSpec& v : t.views) EmitView(out, v);
    out << YAML::EndSeq;
  }
  if (!t.aggregates.empty()) {
    out << YAML::Key << "aggregates" << YAML::Value << YAML::BeginSeq;
    for (const AggregateSpec& a : t.aggregates) EmitAggregate(out, a);
    out << YAML::EndSeq;
  }
  out << YAML::EndMap;
}

}  // namespace

std::string ConfigToYaml(const Config& config) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  EmitSections(out, config);
  EmitCluster(out, config.cluster);
  if (!config.sources.empty()) {
    out << YAML::Key << "sources" << YAML::Value << YAML::BeginSeq;
    for (const SourceConfig& s : config.sources) EmitSource(out, s);
    out << YAML::EndSeq;
  }
  out << YAML::Key << "tables" << YAML::Value << YAML::BeginSeq;
  for (const TableSpec& t : config.tables) EmitTable(out, t);
  out << YAML::EndSeq << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace cdcview
