// GroupTotals' partial state: the exact sum a cluster member sends survives the wire whatever
// its size, and a member's answer for another definition of the aggregate is refused.
#include "daemon/server/aggregate_totals.h"

#include "gtest/gtest.h"

namespace cdcview {
namespace {

Decimal Number(const char* text) {
  absl::StatusOr<Decimal> d = ParseDecimal(text);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *d : Decimal{};
}

TEST(PartialSumTest, RoundTripsEverySumExactly) {
  Decimal huge = Number("9.99e125");
  for (int i = 0; i < 20; ++i) huge = AddDecimal(huge, Number("9.99e125"));  // past DynamoDB's range
  for (const Decimal& d : {Decimal{}, Number("-1.5"), Number("0.001"), Number("123456789"), huge}) {
    const std::string text = PartialSumText(d);
    std::optional<Decimal> back = ParsePartialSum(text);
    ASSERT_TRUE(back.has_value()) << text;
    EXPECT_EQ(*back, d) << text;
  }
  EXPECT_EQ(PartialSumText(Number("-1.5")), "-15e1");
  EXPECT_EQ(PartialSumText(Decimal{}), "0");
  for (const char* bad : {"", "e1", "15", "015e1", "150e1", "1xe1", "15e", "15e1x"}) {
    EXPECT_FALSE(ParsePartialSum(bad).has_value()) << bad;
  }
}

TEST(TotalsOfPartialTest, AddsUpToWhatOneStoreEmits) {
  AggregateSpec spec;
  spec.name = "totals";
  spec.measures = {{MeasureSpec::Kind::kCount, ""},
                   {MeasureSpec::Kind::kSum, "t"},
                   {MeasureSpec::Kind::kMin, "t"},
                   {MeasureSpec::Kind::kMax, "t"},
                   {MeasureSpec::Kind::kAvg, "t"}};
  // Member a: values 1 and 2; member b: value 4 (and a member without a number there).
  GroupTotals a(5), b(5);
  a.members = 2;
  b.members = 2;
  for (size_t m : {1u, 4u}) {
    a.measures[m] = {2, Number("3")};
    b.measures[m] = {1, Number("4")};
  }
  a.lowest[2] = Number("1");
  a.highest[3] = Number("2");
  b.lowest[2] = Number("4");
  b.highest[3] = Number("4");
  GroupTotals whole(5);
  whole.Add(a);
  whole.Add(b);
  google::protobuf::RepeatedPtrField<v1::MeasureValue> pa, pb, want, got;
  EmitMeasures(spec, a, true, &pa);
  EmitMeasures(spec, b, true, &pb);
  EmitMeasures(spec, whole, false, &want);
  EXPECT_EQ(pa[4].partial_count(), 2u);
  EXPECT_EQ(pa[4].partial_sum(), "3e1");
  EXPECT_EQ(pa[4].value().n(), "1.5");
  GroupTotals merged(5);
  for (const auto* p : {&pa, &pb}) {
    auto t = TotalsOfPartial(spec, 2, *p);
    ASSERT_TRUE(t.ok()) << t.status();
    merged.Add(*t);
  }
  EmitMeasures(spec, merged, false, &got);
  ASSERT_EQ(got.size(), 5);
  std::vector<std::string> values;
  for (const auto& m : got) values.push_back(m.name() + "=" + m.value().n());
  EXPECT_EQ(values, (std::vector<std::string>{"count=4", "sum(t)=7", "min(t)=1", "max(t)=4",
                                              "avg(t)=2.3333333333333333333333333333333333333"}));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(got[i].ShortDebugString(), want[i].ShortDebugString());

  pa.RemoveLast();
  EXPECT_EQ(TotalsOfPartial(spec, 2, pa).status().message(),
            "aggregate totals: a member answered 4 measures, this one has 5; every member must "
            "run the same configuration");
  pb[4].clear_partial_sum();
  EXPECT_EQ(TotalsOfPartial(spec, 2, pb).status().message(),
            "aggregate totals: a member's measure avg(t) has no partial sum; every member must "
            "run the same configuration");
}

}  // namespace
}  // namespace cdcview
