#include "index_builders/view_spec.h"

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "index_builders/coding.h"

namespace cdcview {

KeySpec KeySpec::Attribute(std::string name, AttrType type) {
  KeySpec spec;
  spec.kind = Kind::kAttribute;
  spec.attribute = std::move(name);
  spec.type = type;
  return spec;
}

absl::StatusOr<KeySpec> KeySpec::Template(std::string text) {
  KeySpec spec;
  spec.kind = Kind::kTemplate;
  spec.type = AttrType::kS;

  std::string literal;
  auto flush_literal = [&] {
    if (!literal.empty()) {
      spec.parts.push_back(Part{false, std::move(literal)});
      literal.clear();
    }
  };
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == '{' && i + 1 < text.size() && text[i + 1] == '{') {
      literal.push_back('{');
      i += 2;
    } else if (c == '}' && i + 1 < text.size() && text[i + 1] == '}') {
      literal.push_back('}');
      i += 2;
    } else if (c == '{') {
      const size_t close = text.find('}', i + 1);
      if (close == std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat("template \"", text, "\": unclosed \"{\""));
      }
      if (close == i + 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("template \"", text, "\": empty placeholder \"{}\""));
      }
      flush_literal();
      spec.parts.push_back(Part{true, text.substr(i + 1, close - i - 1)});
      i = close + 1;
    } else {
      // A lone "}" has no other meaning, so it is taken literally.
      literal.push_back(c);
      ++i;
    }
  }
  flush_literal();
  spec.template_text = std::move(text);
  return spec;
}

namespace {
constexpr std::string_view kShardPlaceholder = "{shard}";
}  // namespace

absl::Status ValidateShardSuffix(std::string_view suffix) {
  const size_t at = suffix.find(kShardPlaceholder);
  std::string_view rest = at == std::string_view::npos ? suffix : suffix.substr(at + kShardPlaceholder.size());
  if (at == std::string_view::npos || rest.find(kShardPlaceholder) != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard suffix \"", std::string(suffix), "\" must contain {shard} exactly once, e.g. \"#{shard}\""));
  }
  std::string_view literal_before = suffix.substr(0, at);
  for (std::string_view part : {literal_before, rest}) {
    if (part.find_first_of("{}") != std::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shard suffix \"", std::string(suffix), "\" may hold no placeholder but {shard}"));
    }
  }
  return absl::OkStatus();
}

std::optional<std::pair<std::string, uint32_t>> SplitShardSuffix(std::string_view suffix,
                                                                 std::string_view physical,
                                                                 uint32_t limit) {
  const size_t at = suffix.find(kShardPlaceholder);
  if (at == std::string_view::npos) return std::nullopt;
  const std::string_view before = suffix.substr(0, at);
  const std::string_view after = suffix.substr(at + kShardPlaceholder.size());
  if (!physical.ends_with(after)) return std::nullopt;
  physical.remove_suffix(after.size());
  size_t digits = 0;
  while (digits < physical.size() && digits < 10 &&
         physical[physical.size() - 1 - digits] >= '0' && physical[physical.size() - 1 - digits] <= '9') {
    ++digits;
  }
  if (digits == 0) return std::nullopt;
  std::string_view number = physical.substr(physical.size() - digits);
  if (number.size() > 1 && number.front() == '0') return std::nullopt;  // one spelling per shard
  uint64_t shard = 0;
  for (char c : number) shard = shard * 10 + static_cast<uint64_t>(c - '0');
  if (shard > UINT32_MAX || (limit != 0 && shard >= limit)) return std::nullopt;
  physical.remove_suffix(digits);
  if (!physical.ends_with(before)) return std::nullopt;
  physical.remove_suffix(before.size());
  return std::make_pair(std::string(physical), static_cast<uint32_t>(shard));
}

std::string ShardSpec::PhysicalKey(std::string_view logical, uint32_t shard) const {
  const size_t at = suffix.find(kShardPlaceholder);
  return absl::StrCat(std::string(logical), suffix.substr(0, at), shard,
                      suffix.substr(at + kShardPlaceholder.size()));
}

std::optional<std::pair<std::string, uint32_t>> ShardSpec::Split(std::string_view physical) const {
  if (!enabled()) return std::nullopt;
  return SplitShardSuffix(suffix, physical, count);
}

std::string MeasureSpec::Name() const {
  switch (kind) {
    case Kind::kCount: return "count";
    case Kind::kSum: return absl::StrCat("sum(", attribute, ")");
    case Kind::kMin: return absl::StrCat("min(", attribute, ")");
    case Kind::kMax: return absl::StrCat("max(", attribute, ")");
    case Kind::kAvg: return absl::StrCat("avg(", attribute, ")");
  }
  return "count";
}

namespace {

// Canonical serialization for fingerprints: every field is tagged and length-prefixed, so
// two different specs can never serialize to the same bytes. The format is part of the
// on-disk contract (fingerprints are stored in `meta`): change it only together with a
// deliberate rebuild of every view, i.e. bump kFingerprintVersion.
constexpr std::string_view kFingerprintVersion = "cdcview-view-fp-1";

class Canonical {
 public:
  void Tag(char t) { out_.push_back(t); }
  void Str(std::string_view s) {
    Num(s.size());
    out_.append(s);
  }
  void Num(uint64_t n) {
    PutBigEndian64(n, &out_);
  }
  void Type(AttrType t) { Str(AttrTypeName(t)); }

  void Key(const KeySpec& k) {
    if (k.kind == KeySpec::Kind::kAttribute) {
      Tag('a');
      Str(k.attribute);
      Type(k.type);
      return;
    }
    // Templates are serialized from their parsed parts, re-escaped, so that two texts that
    // parse the same ("a}b" and "a}}b") give the same fingerprint.
    Tag('t');
    std::string canonical;
    for (const KeySpec::Part& part : k.parts) {
      if (part.is_placeholder) {
        absl::StrAppend(&canonical, "{", part.text, "}");
        continue;
      }
      for (char c : part.text) {
        if (c == '{' || c == '}') canonical.push_back(c);
        canonical.push_back(c);
      }
    }
    Str(canonical);
  }

  const std::string& bytes() const { return out_; }

 private:
  std::string out_;
};

// Tags rather than enum values, so that reordering an enum cannot change fingerprints.
char OpTag(Condition::Op op) {
  switch (op) {
    case Condition::Op::kEquals:
      return '=';
    case Condition::Op::kBeginsWith:
      return '^';
    case Condition::Op::kExists:
      return '+';
    case Condition::Op::kNotExists:
      return '!';
  }
  return '?';
}

char ProjectionTag(ProjectionKind kind) {
  switch (kind) {
    case ProjectionKind::kKeysOnly:
      return 'K';
    case ProjectionKind::kInclude:
      return 'I';
    case ProjectionKind::kAll:
      return 'A';
  }
  return '?';
}

}  // namespace

std::string ViewSpec::Fingerprint(const TableKeySpec& table_key) const {
  Canonical c;
  c.Str(kFingerprintVersion);

  c.Tag('T');
  c.Str(table);
  c.Str(table_key.partition);
  c.Type(table_key.partition_type);
  if (table_key.sort.has_value()) {
    c.Tag('s');
    c.Str(*table_key.sort);
    c.Type(table_key.sort_type);
  } else {
    c.Tag('-');
  }

  c.Tag('R');
  c.Num(rules.size());
  for (const ViewRule& rule : rules) {
    c.Num(rule.when.size());
    for (const Condition& cond : rule.when) {
      c.Str(cond.attribute);
      c.Tag(OpTag(cond.op));
      c.Str(cond.operand);
    }
    c.Key(rule.partition_key);
    if (rule.sort_key.has_value()) {
      c.Tag('s');
      c.Key(*rule.sort_key);
    } else {
      c.Tag('-');
    }
  }

  c.Tag('P');
  c.Tag(ProjectionTag(projection.kind));
  if (projection.kind == ProjectionKind::kInclude) {
    // The order and repetition of INCLUDE attributes do not change the entries.
    std::vector<std::string> include = projection.include;
    std::sort(include.begin(), include.end());
    include.erase(std::unique(include.begin(), include.end()), include.end());
    c.Num(include.size());
    for (const std::string& name : include) c.Str(name);
  }
  // Not part of it: `name` (renaming keeps the contents) and `inverted` (the rules already
  // hold the swapped keys).

  return absl::StrCat(absl::Hex(Fnv1a64(c.bytes()), absl::kZeroPad16));
}

namespace {

// Its own version string: aggregate and view fingerprints live under different meta keys and
// change independently.
constexpr std::string_view kAggregateFingerprintVersion = "cdcview-agg-fp-1";

char MeasureTag(MeasureSpec::Kind kind) {
  switch (kind) {
    case MeasureSpec::Kind::kCount: return 'c';
    case MeasureSpec::Kind::kSum: return 's';
    case MeasureSpec::Kind::kMin: return '<';
    case MeasureSpec::Kind::kMax: return '>';
    case MeasureSpec::Kind::kAvg: return 'a';
  }
  return '?';
}

}  // namespace

std::string AggregateSpec::Fingerprint() const {
  Canonical c;
  c.Str(kAggregateFingerprintVersion);
  c.Tag('T');
  c.Str(table);
  c.Tag('F');
  c.Num(filter.size());
  for (const Condition& cond : filter) {
    c.Str(cond.attribute);
    c.Tag(OpTag(cond.op));
    c.Str(cond.operand);
  }
  c.Tag('G');
  c.Key(group_by);
  c.Str(strip_shard_suffix);
  // Measures in order: their positions are the measure numbers in the stored state.
  c.Tag('M');
  c.Num(measures.size());
  for (const MeasureSpec& m : measures) {
    c.Tag(MeasureTag(m.kind));
    c.Str(m.attribute);
  }
  // Not part of it: `name`.
  return absl::StrCat(absl::Hex(Fnv1a64(c.bytes()), absl::kZeroPad16));
}

}  // namespace cdcview
