// DynamoDB's expressions (daemon/dynamodb/expression.h) on arbitrary text: the input's first
// byte picks the kind (FilterExpression, KeyConditionExpression, ProjectionExpression), the rest
// is the expression, read against fixed placeholders. Properties:
// - parsing never aborts or overflows the stack ("((((" of any depth), and a rejection is
//   INVALID_ARGUMENT with DynamoDB's message for that kind;
// - parsing is deterministic and marks only placeholders the request defines;
// - a parsed condition evaluates on items of every type without failing, and the same
//   evaluation twice gives the same answer; a projection keeps only the item's own attributes.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/dynamodb/expression.h"
#include "tests/fuzz/fuzz_support.h"

namespace cdcview {
namespace {

using dynamodb::NameMap;
using dynamodb::Placeholders;
using dynamodb::ValueMap;

const NameMap& Names() {
  static const NameMap* names = new NameMap{
      {"#a", "a"}, {"#b", "b.c"}, {"#n", "status"}, {"#l", "l"}, {"#m", "m"}};
  return *names;
}

const ValueMap& Values() {
  static const ValueMap* values = [] {
    auto* v = new ValueMap;
    (*v)[":s"] = AttributeValue::String("ab");
    (*v)[":n"] = *AttributeValue::Number("-1.5");
    (*v)[":n2"] = *AttributeValue::Number("12345678901234567890");
    (*v)[":b"] = AttributeValue::Binary(std::string("\0\xff", 2));
    (*v)[":t"] = AttributeValue::Bool(true);
    (*v)[":z"] = AttributeValue::Null();
    (*v)[":ss"] = AttributeValue::StringSet({"x", "ab"});
    (*v)[":ns"] = *AttributeValue::NumberSet({"1", "2"});
    (*v)[":bs"] = AttributeValue::BinarySet({"x"});
    (*v)[":l"] = AttributeValue::List({AttributeValue::String("ab"), AttributeValue::Null()});
    (*v)[":m"] = AttributeValue::Map({{"k", AttributeValue::String("ab")}});
    (*v)[":S"] = AttributeValue::String("S");
    (*v)[":L"] = AttributeValue::String("L");
    return v;
  }();
  return *values;
}

const std::vector<Item>& Items() {
  static const std::vector<Item>* items = [] {
    auto* out = new std::vector<Item>;
    Item full;
    for (const auto& [name, value] : Values()) full[name.substr(1)] = value;
    full["a"] = AttributeValue::String("abc");
    full["l"] = AttributeValue::List({AttributeValue::String("ab"), *AttributeValue::Number("3")});
    full["m"] = AttributeValue::Map({{"a", AttributeValue::Map({{"b", AttributeValue::List({full["a"]})}})}});
    full["b.c"] = *AttributeValue::Number("7");
    out->push_back(full);
    out->push_back(Item{});
    out->push_back(Item{{"a", *AttributeValue::Number("0")}, {"status", AttributeValue::Bool(false)}});
    return out;
  }();
  return *items;
}

void RequireUsedDefined(const Placeholders& p) {
  for (const std::string& n : p.used_names) fuzz::Require(Names().count(n) == 1, "a used name is defined");
  for (const std::string& v : p.used_values) fuzz::Require(Values().count(v) == 1, "a used value is defined");
}

void RequireRejection(const absl::Status& s, std::string_view kind, bool key_condition) {
  fuzz::RequireRejectedAs(s, absl::StatusCode::kInvalidArgument, "a bad expression is INVALID_ARGUMENT");
  const std::string m(s.message());
  const std::string prefix = "Invalid " + std::string(kind) + ": ";
  const bool prefixed = m.substr(0, prefix.size()) == prefix && m.size() > prefix.size();
  // A key condition's own checks speak of "KeyConditionExpression(s)" without the prefix.
  const bool key_message = key_condition && (m.find("KeyConditionExpression") != std::string::npos ||
                                             m == "Conditions can be of length 1 or 2 only");
  fuzz::Require(prefixed || key_message, "the message names the expression as DynamoDB does");
}

void Filter(std::string_view text) {
  Placeholders p{&Names(), &Values(), {}, {}};
  absl::StatusOr<std::unique_ptr<const dynamodb::Condition>> c = dynamodb::ParseCondition(text, &p);
  Placeholders again{&Names(), &Values(), {}, {}};
  absl::StatusOr<std::unique_ptr<const dynamodb::Condition>> c2 = dynamodb::ParseCondition(text, &again);
  fuzz::Require(c.ok() == c2.ok() && c.status() == c2.status(), "parsing is deterministic");
  if (!c.ok()) {
    RequireRejection(c.status(), "FilterExpression", false);
    return;
  }
  RequireUsedDefined(p);
  for (const Item& item : Items()) {
    fuzz::Require((*c)->Matches(item) == (*c2)->Matches(item), "evaluation is deterministic");
  }
}

void Key(std::string_view text) {
  Placeholders p{&Names(), &Values(), {}, {}};
  absl::StatusOr<dynamodb::KeyCondition> k = dynamodb::ParseKeyCondition(text, &p);
  if (!k.ok()) {
    RequireRejection(k.status(), "KeyConditionExpression", true);
    return;
  }
  RequireUsedDefined(p);
  fuzz::Require(!k->terms.empty() && k->terms.size() <= 2, "a key condition has one or two terms");
  fuzz::Require(k->terms.size() < 2 || k->terms[0].name != k->terms[1].name, "two terms name two keys");
}

void Projection(std::string_view text) {
  Placeholders p{&Names(), nullptr, {}, {}};
  absl::StatusOr<std::vector<dynamodb::Path>> paths = dynamodb::ParseProjection(text, &p);
  if (!paths.ok()) {
    RequireRejection(paths.status(), "ProjectionExpression", false);
    return;
  }
  RequireUsedDefined(p);
  fuzz::Require(p.used_values.empty(), "a projection uses no values");
  for (const Item& item : Items()) {
    const Item projected = dynamodb::Project(item, *paths);
    for (const auto& [name, value] : projected) {
      fuzz::Require(item.count(name) == 1, "a projection keeps only the item's attributes");
    }
    fuzz::Require(ItemSize(projected) <= ItemSize(item), "a projection is no larger than the item");
  }
}

void WriteSeeds(const std::string& dir) {
  const std::vector<std::pair<char, std::string>> seeds = {
      {'F', "a = :s AND (size(l) > :n OR NOT contains(#b, :s))"},
      {'F', "a BETWEEN :n AND :n2 OR a IN (:s, :t, :z)"},
      {'F', "attribute_exists(m.a.b[0]) AND attribute_not_exists(#n) AND attribute_type(a, :S)"},
      {'F', "begins_with(a, :s) and not (m.a.b[0] <> :s)"},
      {'F', "((a = :s))"},
      {'F', "a = "},
      {'F', "status = :s"},
      {'F', "#x = :nope"},
      {'F', "whatever(a) > size(a, b)"},
      {'F', "(((((((((a = :s)))))))))"},
      {'K', "(#a = :s AND begins_with(#l, :s))"},
      {'K', "a = :s AND b BETWEEN :n AND :n2"},
      {'K', ":s < a"},
      {'K', "a = :s OR b = :s"},
      {'K', "a = :s AND a > :s AND c = :s"},
      {'P', "a, #b, m.a.b[0], l[1]"},
      {'P', "a, a.b"},
      {'P', "a.b, a[0]"},
      {'P', "#m.a , status"},
  };
  for (size_t i = 0; i < seeds.size(); ++i) {
    fuzz::WriteSeed(dir, "seed-" + std::to_string(i), std::string(1, seeds[i].first) + seeds[i].second);
  }
}

}  // namespace
}  // namespace cdcview

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cdcview;
  const std::string_view input = fuzz::Bytes(data, size);
  if (input.empty()) return 0;
  const std::string_view text = input.substr(1);
  switch (static_cast<uint8_t>(input[0]) % 3) {
    case 0: Key(text); break;         // 'K' % 3 == 0
    case 1: Filter(text); break;      // 'F' % 3 == 1
    default: Projection(text); break; // 'P' % 3 == 2
  }
  return 0;
}

CDCVIEW_FUZZ_SEED_MODE(cdcview::WriteSeeds)
