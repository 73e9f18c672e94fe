#include "index_builders/aggregate.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "index_builders/key_codec.h"
#include "index_builders/view_builder.h"

namespace cdcview {
namespace {

AttributeValue S(std::string s) { return AttributeValue::String(std::move(s)); }
AttributeValue N(std::string_view text) { return *AttributeValue::Number(text); }

MeasureSpec Measure(MeasureSpec::Kind kind, std::string attribute = "") {
  return MeasureSpec{kind, std::move(attribute)};
}

// Orders: grouped by status, count / sum / min of total.
TableSpec OrdersTable(std::string strip = "", KeySpec group = KeySpec::Attribute("status", AttrType::kS)) {
  TableSpec t;
  t.name = "orders";
  t.key.partition = "PK";
  AggregateSpec a;
  a.name = "by_status";
  a.table = "orders";
  a.group_by = std::move(group);
  a.strip_shard_suffix = std::move(strip);
  a.measures = {Measure(MeasureSpec::Kind::kCount), Measure(MeasureSpec::Kind::kSum, "total"),
                Measure(MeasureSpec::Kind::kMin, "total")};
  t.aggregates.push_back(a);
  return t;
}

// "group|shard: v1,v2,-" with the group decoded.
std::string Describe(const AggregateContribution& c, bool sharded) {
  auto parts = SplitGroupKey(c.group, sharded);
  EXPECT_TRUE(parts.ok()) << parts.status();
  std::string_view logical = parts->logical;
  auto group = DecodeKeyComponent(&logical);
  std::string out = group->scalar();
  if (sharded) absl::StrAppend(&out, "|", parts->shard ? absl::StrCat(*parts->shard) : "none");
  std::vector<std::string> values;
  for (const auto& v : c.values) values.push_back(v ? CanonicalText(*v) : "-");
  return absl::StrCat(out, ": ", absl::StrJoin(values, ","));
}

std::vector<std::string> Deltas(const AggregateBuilder& b, const Item* old_item, const Item* new_item,
                                bool sharded = false) {
  std::vector<AggregateDelta> out;
  absl::Status s = b.Diff(old_item, new_item, &out);
  EXPECT_TRUE(s.ok()) << s;
  std::vector<std::string> text;
  for (const AggregateDelta& d : out) {
    text.push_back(absl::StrCat(d.retract ? "-" : "+", Describe(d.contribution, sharded)));
  }
  return text;
}

TEST(AggregateBuilderTest, InsertAddsUpdateRetractsAndAddsRemoveRetracts) {
  AggregateBuilder b(OrdersTable(), 511);
  Item open{{"PK", S("o1")}, {"status", S("OPEN")}, {"total", N("10.50")}};
  Item shipped{{"PK", S("o1")}, {"status", S("SHIPPED")}, {"total", N("10.5")}};
  EXPECT_EQ(Deltas(b, nullptr, &open), (std::vector<std::string>{"+OPEN: -,10.5,10.5"}));
  EXPECT_EQ(Deltas(b, &open, &shipped),
            (std::vector<std::string>{"-OPEN: -,10.5,10.5", "+SHIPPED: -,10.5,10.5"}));
  EXPECT_EQ(Deltas(b, &shipped, nullptr), (std::vector<std::string>{"-SHIPPED: -,10.5,10.5"}));
}

TEST(AggregateBuilderTest, ChangesTheAggregateDoesNotSeeProduceNothing) {
  AggregateBuilder b(OrdersTable(), 511);
  Item before{{"PK", S("o1")}, {"status", S("OPEN")}, {"total", N("3")}, {"note", S("a")}};
  Item after = before;
  after["note"] = S("b");
  EXPECT_TRUE(Deltas(b, &before, &after).empty());
  EXPECT_TRUE(Deltas(b, &before, &before).empty());
  Item changed = before;
  changed["total"] = N("4");
  EXPECT_EQ(Deltas(b, &before, &changed),
            (std::vector<std::string>{"-OPEN: -,3,3", "+OPEN: -,4,4"}));
}

TEST(AggregateBuilderTest, ItemsWithoutTheGroupKeyAreNotMembers) {
  AggregateBuilder b(OrdersTable(), 511);
  Item no_status{{"PK", S("o1")}, {"total", N("3")}};
  Item numeric_status{{"PK", S("o1")}, {"status", N("1")}, {"total", N("3")}};
  Item member{{"PK", S("o1")}, {"status", S("OPEN")}};
  EXPECT_TRUE(Deltas(b, nullptr, &no_status).empty());
  EXPECT_TRUE(Deltas(b, nullptr, &numeric_status).empty());
  // A member without a numeric total counts, but has no value for sum and min.
  EXPECT_EQ(Deltas(b, &no_status, &member), (std::vector<std::string>{"+OPEN: -,-,-"}));
  Item text_total = member;
  text_total["total"] = S("12");
  EXPECT_TRUE(Deltas(b, &member, &text_total).empty());
  EXPECT_EQ(Deltas(b, &member, &no_status), (std::vector<std::string>{"-OPEN: -,-,-"}));
}

TEST(AggregateBuilderTest, FilterUsesViewConditionSemantics) {
  TableSpec t = OrdersTable();
  t.aggregates[0].filter = {Condition{"priority", Condition::Op::kEquals, "1.0", ""},
                            Condition{"deleted", Condition::Op::kNotExists, "", ""}};
  AggregateBuilder b(t, 511);
  Item item{{"PK", S("o1")}, {"status", S("OPEN")}, {"priority", N("1")}, {"total", N("2")}};
  EXPECT_EQ(Deltas(b, nullptr, &item), (std::vector<std::string>{"+OPEN: -,2,2"}));
  Item deleted = item;
  deleted["deleted"] = AttributeValue::Bool(true);
  EXPECT_EQ(Deltas(b, &item, &deleted), (std::vector<std::string>{"-OPEN: -,2,2"}));
  Item other_priority = item;
  other_priority["priority"] = N("2");
  EXPECT_TRUE(Deltas(b, nullptr, &other_priority).empty());
}

TEST(AggregateBuilderTest, StripShardSuffixSplitsLogicalGroupAndShard) {
  AggregateBuilder b(OrdersTable("#{shard}", KeySpec::Attribute("PK", AttrType::kS)), 511);
  Item shard3{{"PK", S("COUNTER#likes#3")}, {"total", N("7")}};
  Item plain{{"PK", S("COUNTER#likes")}, {"total", N("1")}};
  Item leading_zero{{"PK", S("COUNTER#likes#03")}, {"total", N("1")}};
  EXPECT_EQ(Deltas(b, nullptr, &shard3, true), (std::vector<std::string>{"+COUNTER#likes|3: -,7,7"}));
  EXPECT_EQ(Deltas(b, nullptr, &plain, true), (std::vector<std::string>{"+COUNTER#likes|none: -,1,1"}));
  EXPECT_EQ(Deltas(b, nullptr, &leading_zero, true),
            (std::vector<std::string>{"+COUNTER#likes#03|none: -,1,1"}));
}

TEST(AggregateBuilderTest, TemplateGroupKey) {
  AggregateBuilder b(OrdersTable("", *KeySpec::Template("DAY#{day}")), 511);
  Item item{{"PK", S("o1")}, {"day", S("2025-03-01")}, {"total", N("1")}};
  EXPECT_EQ(Deltas(b, nullptr, &item), (std::vector<std::string>{"+DAY#2025-03-01: -,1,1"}));
}

TEST(AggregateBuilderTest, GroupKeyTooLongForTheStoreRejects) {
  AggregateBuilder b(OrdersTable(), 100);
  Item item{{"PK", S("o1")}, {"status", S(std::string(90, 'x'))}};
  std::vector<AggregateDelta> out;
  absl::Status s = b.Diff(nullptr, &item, &out);
  EXPECT_EQ(s.message(), "aggregate by_status: group key is 92 bytes, over the 76 bytes the store's key limit leaves for it");
  EXPECT_TRUE(out.empty());
}

TEST(AggregateStateTest, RoundTripAndRetraction) {
  AggregateBuilder b(OrdersTable(), 511);
  Item a{{"PK", S("a")}, {"status", S("OPEN")}, {"total", N("0.1")}};
  Item c{{"PK", S("c")}, {"status", S("OPEN")}, {"total", N("0.2")}};
  const AggregateSpec& spec = b.table().aggregates[0];
  AggregateState state;
  ASSERT_TRUE(ApplyContribution(spec, **b.ContributionOf(0, a), false, &state).ok());
  ASSERT_TRUE(ApplyContribution(spec, **b.ContributionOf(0, c), false, &state).ok());
  EXPECT_EQ(state.members, 2u);
  EXPECT_EQ(state.measures[1].count, 2u);
  EXPECT_EQ(CanonicalText(state.measures[1].sum), "0.3");
  auto decoded = DecodeAggregateState(EncodeAggregateState(state), 3);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, state);
  EXPECT_EQ(DecodeAggregateState(EncodeAggregateState(state), 2).status().message(),
            "aggregate state is malformed or has another number of measures");
  ASSERT_TRUE(ApplyContribution(spec, **b.ContributionOf(0, a), true, &state).ok());
  ASSERT_TRUE(ApplyContribution(spec, **b.ContributionOf(0, c), true, &state).ok());
  EXPECT_EQ(state.members, 0u);
  EXPECT_TRUE(state.measures[1].sum.is_zero());
  EXPECT_EQ(state.measures[1].count, 0u);
  // Retracting from an empty group is no crash: DATA_LOSS naming aggregate and group.
  absl::Status s = ApplyContribution(spec, **b.ContributionOf(0, a), true, &state);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(),
            "aggregate by_status, group \"OPEN\": retracting a member that the stored state does not hold");
  state.members = 1;
  s = ApplyContribution(spec, **b.ContributionOf(0, a), true, &state);
  EXPECT_EQ(s.message(), "aggregate by_status, group \"OPEN\": retracting a value of sum(total) that "
                         "the stored state does not hold");
}

TEST(AggregateStateTest, MinMaxMeasuresKeepNoSum) {
  AggregateBuilder b(OrdersTable(), 511);
  Item a{{"PK", S("a")}, {"status", S("OPEN")}, {"total", N("2.5")}};
  AggregateState state;
  ASSERT_TRUE(ApplyContribution(b.table().aggregates[0], **b.ContributionOf(0, a), false, &state).ok());
  EXPECT_EQ(CanonicalText(state.measures[1].sum), "2.5");  // sum(total)
  EXPECT_EQ(state.measures[2].count, 1u);                   // min(total): counted ...
  EXPECT_TRUE(state.measures[2].sum.is_zero());             // ... but not summed
}

// The longest aggm key is group · measure byte · a 38-digit number (tag, class, exponent and
// 20 bytes of digits: 23 bytes). A group key at exactly the limit fits with such a value.
TEST(AggregateBuilderTest, GroupKeyAtTheLimitFitsTheLongestNumber) {
  AggregateBuilder b(OrdersTable(), 100);
  const std::string longest = "-1.0000000000000000000000000000000000001e-100";
  Item fits{{"PK", S("o1")}, {"status", S(std::string(74, 'x'))}, {"total", N(longest)}};
  std::string encoded;
  EncodeKeyComponent(N(longest), &encoded);
  EXPECT_EQ(encoded.size(), kMaxNumberKeyComponentBytes);
  EXPECT_EQ(kMaxNumberKeyComponentBytes, 23u);
  auto c = b.ContributionOf(0, fits);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ((*c)->group.size(), 76u);
  EXPECT_EQ(ExtremeKey((*c)->group, 2, *(*c)->values[2]).size(), 100u);
  Item over{{"PK", S("o1")}, {"status", S(std::string(75, 'x'))}, {"total", N("1")}};
  EXPECT_EQ(b.ContributionOf(0, over).status().message(),
            "aggregate by_status: group key is 77 bytes, over the 76 bytes the store's key limit "
            "leaves for it");
}

TEST(AggregateStateTest, ExtremeKeysSortNumerically) {
  std::string group;
  EncodeKeyComponent(S("g"), &group);
  const auto ExtremeKey = [](const std::string& g, size_t m, const char* n) {
    return cdcview::ExtremeKey(g, m, *ParseDecimal(n));
  };
  EXPECT_LT(ExtremeKey(group, 2, "-10"), ExtremeKey(group, 2, "-9.5"));
  EXPECT_LT(ExtremeKey(group, 2, "-9.5"), ExtremeKey(group, 2, "0"));
  EXPECT_LT(ExtremeKey(group, 2, "0"), ExtremeKey(group, 2, "0.001"));
  EXPECT_LT(ExtremeKey(group, 2, "0.001"), ExtremeKey(group, 2, "1e100"));
  EXPECT_TRUE(ExtremeKey(group, 2, "5").starts_with(ExtremePrefix(group, 2)));
  EXPECT_FALSE(ExtremeKey(group, 3, "5").starts_with(ExtremePrefix(group, 2)));
}

TEST(AggregateSpecTest, FingerprintCoversDefinitionNotName) {
  AggregateSpec a = OrdersTable().aggregates[0];
  AggregateSpec renamed = a;
  renamed.name = "other";
  EXPECT_EQ(a.Fingerprint(), renamed.Fingerprint());
  std::vector<AggregateSpec> variants(6, a);
  variants[0].table = "t2";
  variants[1].filter.push_back(Condition{"x", Condition::Op::kExists, "", ""});
  variants[2].group_by = KeySpec::Attribute("status", AttrType::kN);
  variants[3].strip_shard_suffix = "#{shard}";
  variants[4].measures[2].kind = MeasureSpec::Kind::kMax;
  variants[5].measures.pop_back();
  for (const AggregateSpec& v : variants) EXPECT_NE(v.Fingerprint(), a.Fingerprint());
  EXPECT_EQ(a.Fingerprint().size(), 16u);
}

}  // namespace
}  // namespace cdcview
