#include "daemon/server/aggregate_totals.h"

#include <charconv>

#include "absl/strings/str_cat.h"

namespace cdcview {
namespace {

void SetNumber(const Decimal& d, v1::AttributeValue* out) { out->set_n(CanonicalText(d)); }

bool HasPartial(const MeasureSpec& m) {
  return m.kind == MeasureSpec::Kind::kSum || m.kind == MeasureSpec::Kind::kAvg;
}

}  // namespace

void GroupTotals::Add(const GroupTotals& other) {
  members += other.members;
  for (size_t m = 0; m < measures.size(); ++m) {
    measures[m].count += other.measures[m].count;
    measures[m].sum = AddDecimal(measures[m].sum, other.measures[m].sum);
    if (other.lowest[m] && (!lowest[m] || CompareDecimal(*other.lowest[m], *lowest[m]) < 0)) {
      lowest[m] = other.lowest[m];
    }
    if (other.highest[m] && (!highest[m] || CompareDecimal(*other.highest[m], *highest[m]) > 0)) {
      highest[m] = other.highest[m];
    }
  }
}

void EmitMeasures(const AggregateSpec& spec, const GroupTotals& totals, bool partial,
                  google::protobuf::RepeatedPtrField<v1::MeasureValue>* out) {
  for (size_t m = 0; m < spec.measures.size(); ++m) {
    const MeasureSpec& measure = spec.measures[m];
    v1::MeasureValue* value = out->Add();
    value->set_name(measure.Name());
    const AggregateState::Measure& state = totals.measures[m];
    switch (measure.kind) {
      case MeasureSpec::Kind::kCount:
        value->mutable_value()->set_n(absl::StrCat(totals.members));
        break;
      case MeasureSpec::Kind::kSum:
        if (state.count > 0) SetNumber(state.sum, value->mutable_value());
        break;
      case MeasureSpec::Kind::kAvg:
        if (state.count > 0) SetNumber(DivideDecimal(state.sum, state.count), value->mutable_value());
        break;
      case MeasureSpec::Kind::kMin:
        if (totals.lowest[m]) SetNumber(*totals.lowest[m], value->mutable_value());
        break;
      case MeasureSpec::Kind::kMax:
        if (totals.highest[m]) SetNumber(*totals.highest[m], value->mutable_value());
        break;
    }
    if (partial && HasPartial(measure)) {
      value->set_partial_count(state.count);
      value->set_partial_sum(PartialSumText(state.sum));
    }
  }
}

absl::StatusOr<GroupTotals> TotalsOfPartial(
    const AggregateSpec& spec, uint64_t members,
    const google::protobuf::RepeatedPtrField<v1::MeasureValue>& measures) {
  if (static_cast<size_t>(measures.size()) != spec.measures.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "aggregate ", spec.name, ": a member answered ", measures.size(), " measures, this one has ",
        spec.measures.size(), "; every member must run the same configuration"));
  }
  GroupTotals totals(spec.measures.size());
  totals.members = members;
  for (size_t m = 0; m < spec.measures.size(); ++m) {
    const MeasureSpec& measure = spec.measures[m];
    const v1::MeasureValue& value = measures[static_cast<int>(m)];
    auto mismatch = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat(
          "aggregate ", spec.name, ": a member's measure ", value.name(), " ", why,
          "; every member must run the same configuration"));
    };
    if (value.name() != measure.Name()) return mismatch(absl::StrCat("is not ", measure.Name()));
    switch (measure.kind) {
      case MeasureSpec::Kind::kCount:
        break;
      case MeasureSpec::Kind::kSum:
      case MeasureSpec::Kind::kAvg: {
        std::optional<Decimal> sum = ParsePartialSum(value.partial_sum());
        if (!sum) return mismatch("has no partial sum");
        totals.measures[m].count = value.partial_count();
        totals.measures[m].sum = *std::move(sum);
        break;
      }
      case MeasureSpec::Kind::kMin:
      case MeasureSpec::Kind::kMax: {
        if (!value.has_value()) break;
        absl::StatusOr<Decimal> n = ParseDecimal(value.value().n());
        if (!n.ok()) return mismatch(std::string(n.status().message()));
        auto& slot = measure.kind == MeasureSpec::Kind::kMin ? totals.lowest[m] : totals.highest[m];
        slot = *std::move(n);
        break;
      }
    }
  }
  return totals;
}

std::string PartialSumText(const Decimal& d) {
  if (d.is_zero()) return "0";
  return absl::StrCat(d.negative ? "-" : "", d.digits, "e", d.exponent);
}

constexpr size_t kMaxPartialSumDigits = 1024;
constexpr int kMaxPartialSumExponent = 1024;

std::optional<Decimal> ParsePartialSum(std::string_view text) {
  if (text == "0") return Decimal{};
  Decimal d;
  if (text.starts_with('-')) {
    d.negative = true;
    text.remove_prefix(1);
  }
  const size_t e = text.find('e');
  if (e == std::string_view::npos || e == 0) return std::nullopt;
  d.digits = std::string(text.substr(0, e));
  if (d.digits.front() == '0' || d.digits.back() == '0') return std::nullopt;
  for (char c : d.digits) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  const std::string_view exponent = text.substr(e + 1);
  auto [end, error] =
      std::from_chars(exponent.data(), exponent.data() + exponent.size(), d.exponent);
  if (error != std::errc() || end != exponent.data() + exponent.size()) return std::nullopt;
  // A sum of DynamoDB numbers (38 digits, exponents -130 to 125) spans at most about 300
  // digits; a peer's answer beyond these bounds is refused rather than added, which would size
  // strings by its exponent.
  if (d.digits.size() > kMaxPartialSumDigits || d.exponent > kMaxPartialSumExponent ||
      d.exponent < -kMaxPartialSumExponent) {
    return std::nullopt;
  }
  return d;
}

}  // namespace cdcview
