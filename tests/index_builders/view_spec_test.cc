#include "index_builders/view_spec.h"

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cdcview {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::MatchesRegex;

// "lit:TEXT" or "ph:NAME" per part, so a failure shows the whole parse.
std::vector<std::string> Parts(const KeySpec& spec) {
  std::vector<std::string> out;
  for (const KeySpec::Part& part : spec.parts) {
    out.push_back((part.is_placeholder ? "ph:" : "lit:") + part.text);
  }
  return out;
}

KeySpec MustTemplate(std::string text) {
  absl::StatusOr<KeySpec> spec = KeySpec::Template(text);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *std::move(spec) : KeySpec();
}

TEST(KeySpecTest, AttributeKeepsNameAndType) {
  KeySpec spec = KeySpec::Attribute("score", AttrType::kN);
  EXPECT_EQ(spec.kind, KeySpec::Kind::kAttribute);
  EXPECT_EQ(spec.attribute, "score");
  EXPECT_EQ(spec.type, AttrType::kN);
  EXPECT_EQ(spec.value_type(), AttrType::kN);
  EXPECT_THAT(spec.parts, IsEmpty());
}

TEST(KeySpecTest, TemplateWithPrefixAndPlaceholder) {
  KeySpec spec = MustTemplate("STATUS#{status}");
  EXPECT_EQ(spec.kind, KeySpec::Kind::kTemplate);
  EXPECT_EQ(spec.template_text, "STATUS#{status}");
  EXPECT_EQ(spec.value_type(), AttrType::kS);
  EXPECT_THAT(Parts(spec), ElementsAre("lit:STATUS#", "ph:status"));
}

TEST(KeySpecTest, CompositeTemplate) {
  EXPECT_THAT(Parts(MustTemplate("{state}#{city}")),
              ElementsAre("ph:state", "lit:#", "ph:city"));
  EXPECT_THAT(Parts(MustTemplate("{country}#{state}#{city}")),
              ElementsAre("ph:country", "lit:#", "ph:state", "lit:#", "ph:city"));
  EXPECT_THAT(Parts(MustTemplate("{a}{b}")), ElementsAre("ph:a", "ph:b"));
}

TEST(KeySpecTest, ConstantTemplate) {
  KeySpec spec = MustTemplate("OPEN");
  EXPECT_THAT(Parts(spec), ElementsAre("lit:OPEN"));
  EXPECT_EQ(spec.value_type(), AttrType::kS);
}

TEST(KeySpecTest, DoubledBracesAreLiteral) {
  EXPECT_THAT(Parts(MustTemplate("{{literal}}")), ElementsAre("lit:{literal}"));
  EXPECT_THAT(Parts(MustTemplate("a{{{x}}}b")), ElementsAre("lit:a{", "ph:x", "lit:}b"));
  EXPECT_THAT(Parts(MustTemplate("{{}}")), ElementsAre("lit:{}"));
  // A lone "}" has no other meaning and is kept as text.
  EXPECT_THAT(Parts(MustTemplate("a}b")), ElementsAre("lit:a}b"));
}

TEST(KeySpecTest, UnclosedPlaceholderIsAnError) {
  for (std::string text : {"STATUS#{status", "{", "a{b", "{{{x"}) {
    absl::StatusOr<KeySpec> spec = KeySpec::Template(text);
    ASSERT_FALSE(spec.ok()) << text;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(spec.status().message(), "template \"" + text + "\": unclosed \"{\"");
  }
}

TEST(KeySpecTest, EmptyPlaceholderIsAnError) {
  for (std::string text : {"{}", "A#{}", "{a}#{}#{b}"}) {
    absl::StatusOr<KeySpec> spec = KeySpec::Template(text);
    ASSERT_FALSE(spec.ok()) << text;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(spec.status().message(), "template \"" + text + "\": empty placeholder \"{}\"");
  }
}

// --- Fingerprints -------------------------------------------------------------------------

TableKeySpec AppKey() {
  TableKeySpec key;
  key.partition = "PK";
  key.partition_type = AttrType::kS;
  key.sort = "SK";
  key.sort_type = AttrType::kS;
  return key;
}

// An overloaded view with conditions, templates, an attribute key and INCLUDE: every
// field the fingerprint covers is set to something.
ViewSpec BaseView() {
  ViewSpec view;
  view.name = "GSI2";
  view.table = "App";
  ViewRule order;
  order.when = {Condition{"type", Condition::Op::kEquals, "order", ""}};
  order.partition_key = MustTemplate("STATUS#{status}");
  order.sort_key = MustTemplate("{created_at}");
  ViewRule user;
  user.when = {Condition{"type", Condition::Op::kEquals, "user", ""},
               Condition{"email", Condition::Op::kExists, "", ""}};
  user.partition_key = MustTemplate("EMAIL#{email}");
  user.sort_key = KeySpec::Attribute("PK", AttrType::kS);
  view.rules = {order, user};
  view.projection.kind = ProjectionKind::kInclude;
  view.projection.include = {"total", "name"};
  return view;
}

TEST(FingerprintTest, IsSixteenHexDigits) {
  EXPECT_THAT(BaseView().Fingerprint(AppKey()), MatchesRegex("[0-9a-f]{16}"));
}

// Fingerprints are stored in LMDB and compared after restarts and upgrades: the value for a
// given spec must never change by accident (no std::hash, no absl::Hash, no pointer
// values). If the serialization changes on purpose, every view gets rebuilt once.
TEST(FingerprintTest, IsStableAcrossBuilds) {
  EXPECT_EQ(BaseView().Fingerprint(AppKey()), "a2034d7230981178");
}

TEST(FingerprintTest, EqualSpecsHaveEqualFingerprints) {
  EXPECT_EQ(BaseView().Fingerprint(AppKey()), BaseView().Fingerprint(AppKey()));
}

TEST(FingerprintTest, IgnoresName) {
  ViewSpec renamed = BaseView();
  renamed.name = "ByStatus";
  EXPECT_EQ(renamed.Fingerprint(AppKey()), BaseView().Fingerprint(AppKey()));
}

TEST(FingerprintTest, IgnoresIncludeOrderAndRepetition) {
  ViewSpec reordered = BaseView();
  reordered.projection.include = {"name", "total", "name"};
  EXPECT_EQ(reordered.Fingerprint(AppKey()), BaseView().Fingerprint(AppKey()));
}

TEST(FingerprintTest, IgnoresTheInvertedFlagAlone) {
  // The rules already hold the swapped keys; the flag is for display.
  ViewSpec flagged = BaseView();
  flagged.inverted = true;
  EXPECT_EQ(flagged.Fingerprint(AppKey()), BaseView().Fingerprint(AppKey()));
}

TEST(FingerprintTest, TemplatesThatParseAlikeAreAlike) {
  ViewSpec a = BaseView();
  a.rules[0].partition_key = MustTemplate("A}B#{status}");
  ViewSpec b = BaseView();
  b.rules[0].partition_key = MustTemplate("A}}B#{status}");
  EXPECT_EQ(a.Fingerprint(AppKey()), b.Fingerprint(AppKey()));
}

TEST(FingerprintTest, ChangesWithEverythingThatShapesEntries) {
  struct Change {
    std::string what;
    std::function<void(ViewSpec*, TableKeySpec*)> apply;
  };
  using V = ViewSpec*;
  using K = TableKeySpec*;
  const std::vector<Change> changes = {
      {"table", [](V v, K) { v->table = "Other"; }},
      {"table partition name", [](V, K k) { k->partition = "pk"; }},
      {"table partition type", [](V, K k) { k->partition_type = AttrType::kN; }},
      {"table sort name", [](V, K k) { k->sort = "sk"; }},
      {"table sort type", [](V, K k) { k->sort_type = AttrType::kB; }},
      {"table without sort key", [](V, K k) { k->sort.reset(); }},
      {"condition operand", [](V v, K) { v->rules[0].when[0].operand = "Order"; }},
      {"condition attribute", [](V v, K) { v->rules[0].when[0].attribute = "kind"; }},
      {"condition op", [](V v, K) { v->rules[0].when[0].op = Condition::Op::kBeginsWith; }},
      {"exists -> not exists", [](V v, K) { v->rules[1].when[1].op = Condition::Op::kNotExists; }},
      {"condition added",
       [](V v, K) { v->rules[0].when.push_back(Condition{"status", Condition::Op::kExists, "", ""}); }},
      {"condition removed", [](V v, K) { v->rules[1].when.pop_back(); }},
      {"rule order", [](V v, K) { std::swap(v->rules[0], v->rules[1]); }},
      {"rule removed", [](V v, K) { v->rules.pop_back(); }},
      {"template text", [](V v, K) { v->rules[0].partition_key = MustTemplate("STATE#{status}"); }},
      {"template placeholder",
       [](V v, K) { v->rules[0].partition_key = MustTemplate("STATUS#{state}"); }},
      {"template -> attribute",
       [](V v, K) { v->rules[0].sort_key = KeySpec::Attribute("created_at", AttrType::kS); }},
      {"attribute name",
       [](V v, K) { v->rules[1].sort_key = KeySpec::Attribute("SK", AttrType::kS); }},
      {"attribute type",
       [](V v, K) { v->rules[1].sort_key = KeySpec::Attribute("PK", AttrType::kB); }},
      {"sort key dropped",
       [](V v, K) {
         v->rules[0].sort_key.reset();
         v->rules[1].sort_key.reset();
       }},
      {"keys swapped", [](V v, K) { std::swap(v->rules[0].partition_key, *v->rules[0].sort_key); }},
      {"projection ALL", [](V v, K) { v->projection.kind = ProjectionKind::kAll; }},
      {"projection KEYS_ONLY",
       [](V v, K) {
         v->projection.kind = ProjectionKind::kKeysOnly;
         v->projection.include.clear();
       }},
      {"include added", [](V v, K) { v->projection.include.push_back("zip"); }},
      {"include removed", [](V v, K) { v->projection.include.pop_back(); }},
  };
  const std::string base = BaseView().Fingerprint(AppKey());
  std::vector<std::string> seen = {base};
  for (const Change& change : changes) {
    ViewSpec view = BaseView();
    TableKeySpec key = AppKey();
    change.apply(&view, &key);
    const std::string fingerprint = view.Fingerprint(key);
    EXPECT_NE(fingerprint, base) << change.what;
    for (const std::string& other : seen) {
      EXPECT_NE(fingerprint, other) << change.what << " collides with an earlier change";
    }
    seen.push_back(fingerprint);
  }
}

TEST(FingerprintTest, FieldBoundariesCannotBeShifted) {
  // "ab" + "c" and "a" + "bc" must serialize differently.
  ViewSpec a = BaseView();
  a.rules[0].when[0] = Condition{"ab", Condition::Op::kEquals, "c", ""};
  ViewSpec b = BaseView();
  b.rules[0].when[0] = Condition{"a", Condition::Op::kEquals, "bc", ""};
  EXPECT_NE(a.Fingerprint(AppKey()), b.Fingerprint(AppKey()));
}

TEST(ShardSpecTest, PhysicalKeysAppendTheSuffixWithTheShardNumber) {
  ShardSpec shards{4, "#{shard}"};
  EXPECT_EQ(shards.PhysicalKey("DAY#2025-03-01", 0), "DAY#2025-03-01#0");
  EXPECT_EQ(shards.PhysicalKey("DAY#2025-03-01", 3), "DAY#2025-03-01#3");
  ShardSpec wrapped{16, "-s{shard}!"};
  EXPECT_EQ(wrapped.PhysicalKey("K", 12), "K-s12!");
}

TEST(ShardSpecTest, SplitFindsTheLogicalKeyAndShardOfAPhysicalKey) {
  ShardSpec shards{4, "#{shard}"};
  EXPECT_EQ(shards.Split("DAY#2025-03-01#2"), std::make_pair(std::string("DAY#2025-03-01"), 2u));
  EXPECT_EQ(shards.Split("COUNTER#likes#0"), std::make_pair(std::string("COUNTER#likes"), 0u));
  EXPECT_EQ(shards.Split("#3"), std::make_pair(std::string(""), 3u));
  EXPECT_EQ(shards.Split("DAY#2025-03-01#4"), std::nullopt);   // shard out of range
  EXPECT_EQ(shards.Split("DAY#2025-03-01#02"), std::nullopt);  // not how shard 2 is written
  EXPECT_EQ(shards.Split("DAY#2025-03-01"), std::nullopt);     // a logical key
  EXPECT_EQ(shards.Split("DAY#2025-03-01#"), std::nullopt);
  EXPECT_EQ(shards.Split("DAY-1"), std::nullopt);
  EXPECT_EQ(ShardSpec{}.Split("DAY#1"), std::nullopt);         // not sharded

  ShardSpec wrapped{16, "-s{shard}!"};
  EXPECT_EQ(wrapped.Split("K-s12!"), std::make_pair(std::string("K"), 12u));
  EXPECT_EQ(wrapped.Split("K-s12"), std::nullopt);
  EXPECT_EQ(wrapped.Split("K#12!"), std::nullopt);
  // Without a limit (aggregates' strip_shard_suffix), any shard number splits.
  EXPECT_EQ(SplitShardSuffix("#{shard}", "COUNTER#likes#1234", 0),
            std::make_pair(std::string("COUNTER#likes"), 1234u));
  EXPECT_EQ(SplitShardSuffix("#{shard}", "COUNTER#likes#99999999999", 0), std::nullopt);
}

TEST(ShardSpecTest, ValidateShardSuffixNeedsExactlyOneShardPlaceholder) {
  EXPECT_TRUE(ValidateShardSuffix("#{shard}").ok());
  EXPECT_TRUE(ValidateShardSuffix("{shard}").ok());
  EXPECT_EQ(ValidateShardSuffix("#").message(),
            "shard suffix \"#\" must contain {shard} exactly once, e.g. \"#{shard}\"");
  EXPECT_EQ(ValidateShardSuffix("#{shard}#{shard}").message(),
            "shard suffix \"#{shard}#{shard}\" must contain {shard} exactly once, e.g. \"#{shard}\"");
  EXPECT_EQ(ValidateShardSuffix("#{day}#{shard}").message(),
            "shard suffix \"#{day}#{shard}\" may hold no placeholder but {shard}");
}

TEST(MeasureSpecTest, NamesReadLikeTheConfig) {
  EXPECT_EQ((MeasureSpec{MeasureSpec::Kind::kCount, ""}).Name(), "count");
  EXPECT_EQ((MeasureSpec{MeasureSpec::Kind::kSum, "amount"}).Name(), "sum(amount)");
  EXPECT_EQ((MeasureSpec{MeasureSpec::Kind::kMin, "score"}).Name(), "min(score)");
  EXPECT_EQ((MeasureSpec{MeasureSpec::Kind::kMax, "score"}).Name(), "max(score)");
  EXPECT_EQ((MeasureSpec{MeasureSpec::Kind::kAvg, "score"}).Name(), "avg(score)");
}

}  // namespace
}  // namespace cdcview
