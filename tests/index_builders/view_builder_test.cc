#include "index_builders/view_builder.h"

#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "index_builders/item_codec.h"
#include "index_builders/key_codec.h"

namespace cdcview {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::StartsWith;

// --- Values and descriptions ---------------------------------------------------------------
//
// Entries and mutations are compared as text built by *decoding* them (DecodeKeyComponent,
// DecodeItem), so a failure shows every key component and projected attribute.

AttributeValue S(std::string s) { return AttributeValue::String(std::move(s)); }

AttributeValue N(std::string_view text) {
  absl::StatusOr<AttributeValue> value = AttributeValue::Number(text);
  EXPECT_TRUE(value.ok()) << value.status();
  return value.ok() ? *std::move(value) : AttributeValue();
}

std::string Describe(const AttributeValue& value) {
  switch (value.type()) {
    case AttrType::kS:
      return "S:" + value.scalar();
    case AttrType::kN:
      return "N:" + value.scalar();
    case AttrType::kB:
      return "B:" + absl::CEscape(value.scalar());
    case AttrType::kBool:
      return value.boolean() ? "BOOL:true" : "BOOL:false";
    default:
      return std::string(AttrTypeName(value.type()));
  }
}

std::string Describe(const Item& item) {
  std::vector<std::string> parts;
  for (const auto& [name, value] : item) parts.push_back(name + "=" + Describe(value));
  return "{" + absl::StrJoin(parts, ", ") + "}";
}

// "S:OPEN | S:2024-05-01 | S:CUST#1 | S:ORDER#1": every component, decoded.
std::string DescribeKey(std::string_view key) {
  std::vector<std::string> parts;
  while (!key.empty()) {
    absl::StatusOr<AttributeValue> component = DecodeKeyComponent(&key);
    if (!component.ok()) return "<bad key: " + component.status().ToString() + ">";
    parts.push_back(Describe(*component));
  }
  return absl::StrJoin(parts, " | ");
}

std::string DescribeValue(std::string_view value) {
  absl::StatusOr<Item> item = DecodeItem(value);
  if (!item.ok()) return "<bad value: " + item.status().ToString() + ">";
  return Describe(*item);
}

std::string Describe(const ViewEntry& entry) {
  return "[" + DescribeKey(entry.key) + "] " + DescribeValue(entry.value);
}

std::string Describe(const ViewBuilder& builder, const IndexMutation& m) {
  const std::string& view = builder.table().views.at(m.view).name;
  if (m.op == IndexMutation::Op::kDelete) {  // its value: checked by DiffOf
    return "del " + view + " [" + DescribeKey(m.key) + "]";
  }
  return "put " + view + " [" + DescribeKey(m.key) + "] " + DescribeValue(m.value);
}

std::vector<std::string> Describe(const ViewBuilder& builder,
                                  const std::vector<IndexMutation>& mutations) {
  std::vector<std::string> out;
  for (const IndexMutation& m : mutations) out.push_back(Describe(builder, m));
  return out;
}

// The mutations Diff produces, described; a Diff error fails the test.
std::vector<std::string> DiffOf(const ViewBuilder& builder, const Item* old_item,
                                const Item* new_item) {
  std::vector<IndexMutation> out;
  absl::Status status = builder.Diff(old_item, new_item, &out);
  EXPECT_TRUE(status.ok()) << status;
  // A delete carries the value its entry holds: what inserting the old image put there (the
  // writer logs it without reading the entry; see Applier::ApplyViewMutations).
  for (const IndexMutation& m : out) {
    if (m.op != IndexMutation::Op::kDelete) continue;
    std::vector<IndexMutation> put;
    EXPECT_TRUE(old_item != nullptr && builder.Diff(nullptr, old_item, &put).ok());
    auto same = std::find_if(put.begin(), put.end(), [&](const IndexMutation& p) {
      return p.view == m.view && p.key == m.key;
    });
    if (same == put.end()) {
      ADD_FAILURE() << "a delete of an entry the old image does not place: "
                    << Describe(builder, m);
      continue;
    }
    EXPECT_EQ(m.value, same->value) << Describe(builder, m);
  }
  return Describe(builder, out);
}
std::vector<std::string> Insert(const ViewBuilder& b, const Item& item) {
  return DiffOf(b, nullptr, &item);
}
std::vector<std::string> Modify(const ViewBuilder& b, const Item& old_item, const Item& new_item) {
  return DiffOf(b, &old_item, &new_item);
}
std::vector<std::string> Remove(const ViewBuilder& b, const Item& item) {
  return DiffOf(b, &item, nullptr);
}

// The entry of `item` in view `v`, described, or "none (<reason>)".
std::string EntryOf(const ViewBuilder& builder, size_t v, const Item& item) {
  MissReason reason = MissReason::kNone;
  absl::StatusOr<std::optional<ViewEntry>> entry = builder.EntryFor(v, item, &reason);
  if (!entry.ok()) return "error: " + entry.status().ToString();
  if (!entry->has_value()) {
    EXPECT_NE(reason, MissReason::kNone) << "no entry must come with a reason";
    switch (reason) {
      case MissReason::kNoRule:
        return "none (no rule)";
      case MissReason::kMissingAttribute:
        return "none (missing attribute)";
      case MissReason::kTypeMismatch:
        return "none (type mismatch)";
      case MissReason::kNone:
        return "none (?)";
    }
  }
  EXPECT_EQ(reason, MissReason::kNone);
  return Describe(**entry);
}

// --- Specs -----------------------------------------------------------------------------------

KeySpec T(std::string text) {
  absl::StatusOr<KeySpec> spec = KeySpec::Template(text);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *std::move(spec) : KeySpec();
}
KeySpec A(std::string name, AttrType type = AttrType::kS) {
  return KeySpec::Attribute(std::move(name), type);
}
Condition Eq(std::string attribute, std::string operand) {
  return Condition{std::move(attribute), Condition::Op::kEquals, std::move(operand), ""};
}
Condition BeginsWith(std::string attribute, std::string operand) {
  return Condition{std::move(attribute), Condition::Op::kBeginsWith, std::move(operand), ""};
}
Condition Exists(std::string attribute) {
  return Condition{std::move(attribute), Condition::Op::kExists, "", ""};
}
Condition NotExists(std::string attribute) {
  return Condition{std::move(attribute), Condition::Op::kNotExists, "", ""};
}

ViewRule Rule(std::vector<Condition> when, KeySpec pk, std::optional<KeySpec> sk = std::nullopt) {
  ViewRule rule;
  rule.when = std::move(when);
  rule.partition_key = std::move(pk);
  rule.sort_key = std::move(sk);
  return rule;
}

Projection KeysOnly() { return Projection{ProjectionKind::kKeysOnly, {}}; }
Projection Include(std::vector<std::string> names) {
  return Projection{ProjectionKind::kInclude, std::move(names)};
}
Projection All() { return Projection{ProjectionKind::kAll, {}}; }

ViewSpec View(std::string name, std::vector<ViewRule> rules, Projection projection) {
  ViewSpec view;
  view.name = std::move(name);
  view.table = "App";
  view.rules = std::move(rules);
  view.projection = std::move(projection);
  return view;
}

// The single-table design of the issue: table App with PK / SK (both S).
TableSpec App(std::vector<ViewSpec> views) {
  TableSpec table;
  table.name = "App";
  table.key.partition = "PK";
  table.key.partition_type = AttrType::kS;
  table.key.sort = "SK";
  table.key.sort_type = AttrType::kS;
  table.views = std::move(views);
  return table;
}

// The views of the issue, one per access pattern.
ViewSpec Gsi1() {  // generic overloaded keys carried by the items; sparse
  return View("GSI1", {Rule({}, A("GSI1PK"), A("GSI1SK"))}, All());
}
ViewSpec OpenOrders() {  // the open-orders work queue: a constant partition
  return View("OpenOrders", {Rule({}, T("OPEN"), A("open_since"))}, KeysOnly());
}
ViewSpec ByLocation() {  // composite sort key
  return View("ByLocation", {Rule({}, A("country"), T("{state}#{city}"))}, Include({"name"}));
}
ViewSpec Gsi2() {  // overloaded by rules
  return View("GSI2",
              {Rule({Eq("type", "order")}, T("STATUS#{status}"), T("{created_at}")),
               Rule({Eq("type", "user")}, T("EMAIL#{email}"), A("PK"))},
              Include({"total"}));
}
ViewSpec Inverted() {
  ViewSpec view = View("Inverted", {Rule({}, A("SK"), A("PK"))}, KeysOnly());
  view.inverted = true;
  return view;
}
ViewSpec Leaderboard() {  // numeric sort key
  return View("Leaderboard", {Rule({}, A("game"), A("score", AttrType::kN))}, KeysOnly());
}

ViewBuilder Builder(ViewSpec view, KeyLimits limits = KeyLimits()) {
  return ViewBuilder(App({std::move(view)}), limits);
}

Item Order() {
  return Item{{"PK", S("CUST#1")},
              {"SK", S("ORDER#100")},
              {"type", S("order")},
              {"status", S("PENDING")},
              {"created_at", S("2024-05-01")},
              {"open_since", S("2024-05-01T10:00:00Z")},
              {"total", N("42.50")},
              {"note", S("leave at the door")}};
}

Item User() {
  return Item{{"PK", S("USER#ann")},
              {"SK", S("PROFILE")},
              {"type", S("user")},
              {"email", S("ann@example.com")},
              {"GSI1PK", S("ORG#acme")},
              {"GSI1SK", S("USER#ann")},
              {"country", S("US")},
              {"state", S("WA")},
              {"city", S("Seattle")},
              {"name", S("Ann")},
              {"phone", S("555-0100")}};
}

// --- Entry layout ------------------------------------------------------------------------------

TEST(ViewBuilderTest, EntryKeyIsViewKeyThenTableKey) {
  ViewBuilder b = Builder(Gsi1());
  const Item user = User();
  absl::StatusOr<std::optional<ViewEntry>> entry = b.EntryFor(0, user);
  ASSERT_TRUE(entry.ok()) << entry.status();
  ASSERT_TRUE(entry->has_value());
  std::string expected_key;
  EncodeKeyComponent(S("ORG#acme"), &expected_key);
  EncodeKeyComponent(S("USER#ann"), &expected_key);
  EncodeKeyComponent(S("USER#ann"), &expected_key);
  EncodeKeyComponent(S("PROFILE"), &expected_key);
  EXPECT_EQ((*entry)->key, expected_key);
  EXPECT_EQ((*entry)->value, EncodeItem(user));  // ALL
  EXPECT_THAT((*entry)->key, testing::EndsWith(b.PrimaryKey(user)));
}

TEST(ViewBuilderTest, PrimaryKeyEncodesTableKey) {
  ViewBuilder b = Builder(Gsi1());
  EXPECT_EQ(DescribeKey(b.PrimaryKey(Order())), "S:CUST#1 | S:ORDER#100");

  TableSpec hash_only = App({Gsi1()});
  hash_only.key.sort.reset();
  hash_only.key.partition = "id";
  hash_only.key.partition_type = AttrType::kN;
  ViewBuilder h(hash_only);
  Item item{{"id", N("7")}, {"GSI1PK", S("X")}, {"GSI1SK", S("Y")}};
  EXPECT_EQ(DescribeKey(h.PrimaryKey(item)), "N:7");
  EXPECT_EQ(EntryOf(h, 0, item), "[S:X | S:Y | N:7] {GSI1PK=S:X, GSI1SK=S:Y, id=N:7}");
}

TEST(ViewBuilderTest, ViewWithoutSortKey) {
  ViewBuilder b = Builder(View("ByEmail", {Rule({}, A("email"))}, KeysOnly()));
  EXPECT_EQ(EntryOf(b, 0, User()),
            "[S:ann@example.com | S:USER#ann | S:PROFILE] "
            "{PK=S:USER#ann, SK=S:PROFILE, email=S:ann@example.com}");
}

// --- Attribute-keyed sparse view (GSI1PK / GSI1SK) ------------------------------------------

TEST(SparseViewTest, InsertWithKeyAttributesPuts) {
  ViewBuilder b = Builder(Gsi1());
  EXPECT_THAT(Insert(b, User()),
              ElementsAre("put GSI1 [S:ORG#acme | S:USER#ann | S:USER#ann | S:PROFILE] " +
                          Describe(User())));
}

TEST(SparseViewTest, InsertWithoutKeyAttributesIsNotIndexed) {
  ViewBuilder b = Builder(Gsi1());
  EXPECT_THAT(Insert(b, Order()), IsEmpty());
  EXPECT_EQ(EntryOf(b, 0, Order()), "none (missing attribute)");

  Item only_pk = Order();
  only_pk["GSI1PK"] = S("ORG#acme");  // the sort key attribute is still missing
  EXPECT_EQ(EntryOf(b, 0, only_pk), "none (missing attribute)");
  EXPECT_THAT(Insert(b, only_pk), IsEmpty());
}

TEST(SparseViewTest, ModifyAddingTheAttributeEntersTheView) {
  ViewBuilder b = Builder(Gsi1());
  Item before = Order();
  Item after = before;
  after["GSI1PK"] = S("ORG#acme");
  after["GSI1SK"] = S("ORDER#100");
  EXPECT_THAT(Modify(b, before, after),
              ElementsAre("put GSI1 [S:ORG#acme | S:ORDER#100 | S:CUST#1 | S:ORDER#100] " +
                          Describe(after)));
}

TEST(SparseViewTest, ModifyRemovingTheAttributeLeavesTheView) {
  ViewBuilder b = Builder(Gsi1());
  Item before = User();
  Item after = before;
  after.erase("GSI1SK");
  EXPECT_THAT(Modify(b, before, after),
              ElementsAre("del GSI1 [S:ORG#acme | S:USER#ann | S:USER#ann | S:PROFILE]"));
}

TEST(SparseViewTest, UnchangedItemProducesNothing) {
  ViewBuilder b = Builder(Gsi1());
  EXPECT_THAT(Modify(b, User(), User()), IsEmpty());
  EXPECT_THAT(Modify(b, Order(), Order()), IsEmpty());  // not in the view before or after
}

TEST(SparseViewTest, ModifyOfAnyAttributeRewritesAnAllProjection) {
  ViewBuilder b = Builder(Gsi1());
  Item after = User();
  after["phone"] = S("555-0199");
  EXPECT_THAT(Modify(b, User(), after),
              ElementsAre("put GSI1 [S:ORG#acme | S:USER#ann | S:USER#ann | S:PROFILE] " +
                          Describe(after)));
}

TEST(SparseViewTest, KeyChangeDeletesAndPuts) {
  ViewBuilder b = Builder(Gsi1());
  Item after = User();
  after["GSI1SK"] = S("USER#ann.smith");
  EXPECT_THAT(Modify(b, User(), after),
              ElementsAre("del GSI1 [S:ORG#acme | S:USER#ann | S:USER#ann | S:PROFILE]",
                          "put GSI1 [S:ORG#acme | S:USER#ann.smith | S:USER#ann | S:PROFILE] " +
                              Describe(after)));
}

TEST(SparseViewTest, RemoveDeletes) {
  ViewBuilder b = Builder(Gsi1());
  EXPECT_THAT(Remove(b, User()),
              ElementsAre("del GSI1 [S:ORG#acme | S:USER#ann | S:USER#ann | S:PROFILE]"));
  EXPECT_THAT(Remove(b, Order()), IsEmpty());
}

TEST(SparseViewTest, WrongTypeIsNotIndexed) {
  ViewBuilder b = Builder(Gsi1());
  Item numeric = User();
  numeric["GSI1PK"] = N("12");
  EXPECT_EQ(EntryOf(b, 0, numeric), "none (type mismatch)");
  EXPECT_THAT(Insert(b, numeric), IsEmpty());
  // Changing the type takes the item out of the view, and back in.
  EXPECT_THAT(Modify(b, User(), numeric),
              ElementsAre("del GSI1 [S:ORG#acme | S:USER#ann | S:USER#ann | S:PROFILE]"));
  EXPECT_THAT(Modify(b, numeric, User()),
              ElementsAre("put GSI1 [S:ORG#acme | S:USER#ann | S:USER#ann | S:PROFILE] " +
                          Describe(User())));

  Item binary = User();
  binary["GSI1SK"] = AttributeValue::Binary("USER#ann");
  EXPECT_EQ(EntryOf(b, 0, binary), "none (type mismatch)");
  Item null = User();
  null["GSI1SK"] = AttributeValue::Null();
  EXPECT_EQ(EntryOf(b, 0, null), "none (type mismatch)");
}

TEST(SparseViewTest, DiffReportsTheViewsANewImageIsLeftOutOfForAKeyOfTheWrongType) {
  ViewBuilder b(App({Gsi1(), ByLocation(), Leaderboard()}));
  Item item = User();
  item["GSI1PK"] = N("12");          // GSI1 wants S
  item["game"] = S("chess");
  item["score"] = S("high");         // Leaderboard wants N
  std::vector<IndexMutation> mutations;
  std::vector<ViewSkip> skipped;
  ASSERT_TRUE(b.Diff(nullptr, &item, &mutations, &skipped).ok());
  EXPECT_EQ(skipped, (std::vector<ViewSkip>{{0, MissReason::kTypeMismatch},
                                           {2, MissReason::kTypeMismatch}}));
  ASSERT_EQ(mutations.size(), 1u);  // ByLocation takes it
  EXPECT_EQ(mutations[0].view, 1u);

  // A missing attribute is a sparse view's way to leave an item out, not a skip; nor is a
  // change that leaves the old entry in place, or an image that is removed.
  skipped.clear();
  Item sparse = User();
  sparse.erase("GSI1PK");
  ASSERT_TRUE(b.Diff(nullptr, &sparse, &mutations, &skipped).ok());
  ASSERT_TRUE(b.Diff(&item, nullptr, &mutations, &skipped).ok());
  EXPECT_THAT(skipped, IsEmpty());

  // An event rejected for a key too large reports nothing either.
  ViewBuilder small(App({Gsi1(), ByLocation()}), KeyLimits{40, 40});
  Item long_key = item;
  long_key["country"] = S(std::string(64, 'x'));
  EXPECT_FALSE(small.Diff(nullptr, &long_key, &mutations, &skipped).ok());
  EXPECT_THAT(skipped, IsEmpty());
}

TEST(SparseViewTest, BinaryAndNumberKeysOfTheDeclaredType) {
  ViewBuilder b = Builder(
      View("ByHash", {Rule({}, A("hash", AttrType::kB), A("version", AttrType::kN))}, KeysOnly()));
  Item item{{"PK", S("DOC#1")},
            {"SK", S("V")},
            {"hash", AttributeValue::Binary(std::string("\x00\xff", 2))},
            {"version", N("3")}};
  EXPECT_EQ(EntryOf(b, 0, item),
            "[B:\\000\\377 | N:3 | S:DOC#1 | S:V] "
            "{PK=S:DOC#1, SK=S:V, hash=B:\\000\\377, version=N:3}");
  item["hash"] = S("abc");
  EXPECT_EQ(EntryOf(b, 0, item), "none (type mismatch)");
}

// --- Constant template: the open-orders work queue -------------------------------------------

TEST(WorkQueueViewTest, OpenOrderIsQueued) {
  ViewBuilder b = Builder(OpenOrders());
  EXPECT_THAT(Insert(b, Order()),
              ElementsAre("put OpenOrders [S:OPEN | S:2024-05-01T10:00:00Z | S:CUST#1 | "
                          "S:ORDER#100] {PK=S:CUST#1, SK=S:ORDER#100, "
                          "open_since=S:2024-05-01T10:00:00Z}"));
  EXPECT_THAT(Insert(b, User()), IsEmpty());
  EXPECT_EQ(EntryOf(b, 0, User()), "none (missing attribute)");
}

TEST(WorkQueueViewTest, ChangeOfANonProjectedAttributeProducesNothing) {
  ViewBuilder b = Builder(OpenOrders());
  Item after = Order();
  after["status"] = S("PICKING");
  after["note"] = S("ring twice");
  EXPECT_THAT(Modify(b, Order(), after), IsEmpty());
}

TEST(WorkQueueViewTest, ClosingAndReopeningTheOrder) {
  ViewBuilder b = Builder(OpenOrders());
  Item closed = Order();
  closed.erase("open_since");
  closed["status"] = S("SHIPPED");
  EXPECT_THAT(Modify(b, Order(), closed),
              ElementsAre("del OpenOrders [S:OPEN | S:2024-05-01T10:00:00Z | S:CUST#1 | "
                          "S:ORDER#100]"));
  Item reopened = closed;
  reopened["open_since"] = S("2024-05-03T08:00:00Z");
  EXPECT_THAT(Modify(b, closed, reopened),
              ElementsAre("put OpenOrders [S:OPEN | S:2024-05-03T08:00:00Z | S:CUST#1 | "
                          "S:ORDER#100] {PK=S:CUST#1, SK=S:ORDER#100, "
                          "open_since=S:2024-05-03T08:00:00Z}"));
  EXPECT_THAT(Remove(b, reopened),
              ElementsAre("del OpenOrders [S:OPEN | S:2024-05-03T08:00:00Z | S:CUST#1 | "
                          "S:ORDER#100]"));
}

TEST(WorkQueueViewTest, OldestOrderSortsFirst) {
  ViewBuilder b = Builder(OpenOrders());
  Item older = Order();
  older["SK"] = S("ORDER#900");  // a later order id but opened earlier
  older["open_since"] = S("2024-04-30T23:59:59Z");
  absl::StatusOr<std::optional<ViewEntry>> a = b.EntryFor(0, older);
  absl::StatusOr<std::optional<ViewEntry>> c = b.EntryFor(0, Order());
  ASSERT_TRUE(a.ok() && a->has_value() && c.ok() && c->has_value());
  EXPECT_LT((*a)->key, (*c)->key);
}

// --- Composite template sort key ---------------------------------------------------------------

TEST(CompositeViewTest, EntryJoinsThePlaceholders) {
  ViewBuilder b = Builder(ByLocation());
  EXPECT_THAT(Insert(b, User()),
              ElementsAre("put ByLocation [S:US | S:WA#Seattle | S:USER#ann | S:PROFILE] "
                          "{PK=S:USER#ann, SK=S:PROFILE, city=S:Seattle, country=S:US, "
                          "name=S:Ann, state=S:WA}"));
}

TEST(CompositeViewTest, BeginsWithOnTheFirstLevelIsAKeyPrefix) {
  ViewBuilder b = Builder(ByLocation());
  absl::StatusOr<std::optional<ViewEntry>> entry = b.EntryFor(0, User());
  ASSERT_TRUE(entry.ok() && entry->has_value());
  std::string prefix;
  EncodeKeyComponent(S("US"), &prefix);
  EncodeKeyPrefix(S("WA#"), &prefix);
  EXPECT_THAT((*entry)->key, StartsWith(prefix));
}

TEST(CompositeViewTest, AnyMissingPlaceholderMeansNoEntry) {
  ViewBuilder b = Builder(ByLocation());
  Item no_city = User();
  no_city.erase("city");
  EXPECT_EQ(EntryOf(b, 0, no_city), "none (missing attribute)");
  EXPECT_THAT(Modify(b, User(), no_city),
              ElementsAre("del ByLocation [S:US | S:WA#Seattle | S:USER#ann | S:PROFILE]"));
  Item bool_city = User();
  bool_city["city"] = AttributeValue::Bool(true);
  EXPECT_EQ(EntryOf(b, 0, bool_city), "none (type mismatch)");
  Item binary_state = User();
  binary_state["state"] = AttributeValue::Binary("WA");
  EXPECT_EQ(EntryOf(b, 0, binary_state), "none (type mismatch)");
}

TEST(CompositeViewTest, MovingCityMovesTheEntry) {
  ViewBuilder b = Builder(ByLocation());
  Item moved = User();
  moved["city"] = S("Spokane");
  EXPECT_THAT(Modify(b, User(), moved),
              ElementsAre("del ByLocation [S:US | S:WA#Seattle | S:USER#ann | S:PROFILE]",
                          "put ByLocation [S:US | S:WA#Spokane | S:USER#ann | S:PROFILE] "
                          "{PK=S:USER#ann, SK=S:PROFILE, city=S:Spokane, country=S:US, "
                          "name=S:Ann, state=S:WA}"));
}

TEST(CompositeViewTest, IncludedAttributeChangeIsOnePut) {
  ViewBuilder b = Builder(ByLocation());
  Item renamed = User();
  renamed["name"] = S("Ann Smith");
  EXPECT_THAT(Modify(b, User(), renamed),
              ElementsAre("put ByLocation [S:US | S:WA#Seattle | S:USER#ann | S:PROFILE] "
                          "{PK=S:USER#ann, SK=S:PROFILE, city=S:Seattle, country=S:US, "
                          "name=S:Ann Smith, state=S:WA}"));
  Item unnamed = User();
  unnamed.erase("name");
  EXPECT_THAT(Modify(b, User(), unnamed),
              ElementsAre("put ByLocation [S:US | S:WA#Seattle | S:USER#ann | S:PROFILE] "
                          "{PK=S:USER#ann, SK=S:PROFILE, city=S:Seattle, country=S:US, "
                          "state=S:WA}"));
}

TEST(CompositeViewTest, NonProjectedAttributeChangeProducesNothing) {
  ViewBuilder b = Builder(ByLocation());
  Item after = User();
  after["phone"] = S("555-0199");
  after["GSI1SK"] = S("USER#other");
  EXPECT_THAT(Modify(b, User(), after), IsEmpty());
}

// --- Numbers in templates ------------------------------------------------------------------

TEST(TemplateNumberTest, PlaceholderTakesTheCanonicalNumber) {
  ViewBuilder b = Builder(View("ByN", {Rule({}, T("N#{n}"), T("{n}"))}, KeysOnly()));
  Item item{{"PK", S("P")}, {"SK", S("S")}, {"n", N("1.50")}};
  EXPECT_EQ(EntryOf(b, 0, item), "[S:N#1.5 | S:1.5 | S:P | S:S] {PK=S:P, SK=S:S, n=N:1.5}");
  item["n"] = N("-0.250");
  EXPECT_EQ(EntryOf(b, 0, item), "[S:N#-0.25 | S:-0.25 | S:P | S:S] {PK=S:P, SK=S:S, n=N:-0.25}");
  item["n"] = N("1e3");
  EXPECT_EQ(EntryOf(b, 0, item), "[S:N#1000 | S:1000 | S:P | S:S] {PK=S:P, SK=S:S, n=N:1000}");
  // An S that looks like a number is taken as written.
  item["n"] = S("1.50");
  EXPECT_EQ(EntryOf(b, 0, item), "[S:N#1.50 | S:1.50 | S:P | S:S] {PK=S:P, SK=S:S, n=S:1.50}");
}

TEST(TemplateNumberTest, EqualNumbersWrittenDifferentlyChangeNothing) {
  ViewBuilder b = Builder(View("ByN", {Rule({}, T("N#{n}"))}, KeysOnly()));
  Item before{{"PK", S("P")}, {"SK", S("S")}, {"n", N("1.50")}};
  Item after{{"PK", S("P")}, {"SK", S("S")}, {"n", N("1.5")}};
  EXPECT_THAT(Modify(b, before, after), IsEmpty());
}

// --- Overloaded view: several rules -----------------------------------------------------------

TEST(OverloadedViewTest, EachEntityTypeUsesItsRule) {
  ViewBuilder b = Builder(Gsi2());
  EXPECT_THAT(Insert(b, Order()),
              ElementsAre("put GSI2 [S:STATUS#PENDING | S:2024-05-01 | S:CUST#1 | S:ORDER#100] "
                          "{PK=S:CUST#1, SK=S:ORDER#100, created_at=S:2024-05-01, "
                          "status=S:PENDING, total=N:42.5}"));
  EXPECT_THAT(Insert(b, User()),
              ElementsAre("put GSI2 [S:EMAIL#ann@example.com | S:USER#ann | S:USER#ann | "
                          "S:PROFILE] {PK=S:USER#ann, SK=S:PROFILE, email=S:ann@example.com}"));
}

TEST(OverloadedViewTest, ItemMatchingNoRuleIsNotIndexed) {
  ViewBuilder b = Builder(Gsi2());
  Item invoice = Order();
  invoice["type"] = S("invoice");
  EXPECT_EQ(EntryOf(b, 0, invoice), "none (no rule)");
  EXPECT_THAT(Insert(b, invoice), IsEmpty());
  Item untyped = Order();
  untyped.erase("type");
  EXPECT_EQ(EntryOf(b, 0, untyped), "none (no rule)");
}

TEST(OverloadedViewTest, StatusChangeMovesTheOrder) {
  ViewBuilder b = Builder(Gsi2());
  Item shipped = Order();
  shipped["status"] = S("SHIPPED");
  EXPECT_THAT(Modify(b, Order(), shipped),
              ElementsAre("del GSI2 [S:STATUS#PENDING | S:2024-05-01 | S:CUST#1 | S:ORDER#100]",
                          "put GSI2 [S:STATUS#SHIPPED | S:2024-05-01 | S:CUST#1 | S:ORDER#100] "
                          "{PK=S:CUST#1, SK=S:ORDER#100, created_at=S:2024-05-01, "
                          "status=S:SHIPPED, total=N:42.5}"));
}

TEST(OverloadedViewTest, ProjectionFollowsTheMatchedRule) {
  ViewBuilder b = Builder(Gsi2());
  Item more = Order();
  more["total"] = N("50");
  EXPECT_THAT(Modify(b, Order(), more),
              ElementsAre("put GSI2 [S:STATUS#PENDING | S:2024-05-01 | S:CUST#1 | S:ORDER#100] "
                          "{PK=S:CUST#1, SK=S:ORDER#100, created_at=S:2024-05-01, "
                          "status=S:PENDING, total=N:50}"));
  Item noted = Order();
  noted["note"] = S("changed");
  noted["email"] = S("not@used.by.order.rule");
  EXPECT_THAT(Modify(b, Order(), noted), IsEmpty());
}

TEST(OverloadedViewTest, RuleChangeMovesTheEntry) {
  ViewBuilder b = Builder(Gsi2());
  Item converted = Order();
  converted["type"] = S("user");
  converted["email"] = S("c1@example.com");
  EXPECT_THAT(Modify(b, Order(), converted),
              ElementsAre("del GSI2 [S:STATUS#PENDING | S:2024-05-01 | S:CUST#1 | S:ORDER#100]",
                          "put GSI2 [S:EMAIL#c1@example.com | S:CUST#1 | S:CUST#1 | "
                          "S:ORDER#100] {PK=S:CUST#1, SK=S:ORDER#100, email=S:c1@example.com, "
                          "total=N:42.5}"));
}

TEST(OverloadedViewTest, ARuleChangeThatKeepsTheKeyRewritesWhatTheNewRuleProjects) {
  // Both rules build the same key from differently named attributes with equal values: the
  // entry stays where it is, but KEYS_ONLY keeps the new rule's attributes, not the old one's.
  ViewBuilder b = Builder(View("Contact",
                               {Rule({Eq("type", "lead")}, A("email")),
                                Rule({Eq("type", "customer")}, A("contact"))},
                               KeysOnly()));
  Item lead{{"PK", S("P")}, {"SK", S("S")}, {"type", S("lead")}, {"email", S("a@x.io")},
            {"contact", S("a@x.io")}};
  Item customer = lead;
  customer["type"] = S("customer");
  EXPECT_THAT(Modify(b, lead, customer),
              ElementsAre("put Contact [S:a@x.io | S:P | S:S] {PK=S:P, SK=S:S, contact=S:a@x.io}"));
  EXPECT_THAT(Modify(b, customer, lead),
              ElementsAre("put Contact [S:a@x.io | S:P | S:S] {PK=S:P, SK=S:S, email=S:a@x.io}"));
  // Rules that keep the same attributes: a change of rule alone changes no value.
  ViewBuilder same = Builder(View("Contact",
                                  {Rule({Eq("type", "lead")}, A("email")),
                                   Rule({Eq("type", "customer")}, A("email"))},
                                  KeysOnly()));
  EXPECT_THAT(Modify(same, lead, customer), IsEmpty());
}

TEST(OverloadedViewTest, FirstMatchingRuleDecidesWithoutFallingThrough) {
  ViewBuilder b = Builder(View("Q",
                               {Rule({Eq("type", "order")}, T("STATUS#{status}")),
                                Rule({}, T("OTHER#{type}"))},
                               KeysOnly()));
  Item order = Order();
  EXPECT_EQ(EntryOf(b, 0, order),
            "[S:STATUS#PENDING | S:CUST#1 | S:ORDER#100] "
            "{PK=S:CUST#1, SK=S:ORDER#100, status=S:PENDING}");
  order.erase("status");  // the first rule matches but cannot key the item
  EXPECT_EQ(EntryOf(b, 0, order), "none (missing attribute)");
  EXPECT_EQ(EntryOf(b, 0, User()),
            "[S:OTHER#user | S:USER#ann | S:PROFILE] {PK=S:USER#ann, SK=S:PROFILE, type=S:user}");
}

// --- Conditions ------------------------------------------------------------------------------

// A KEYS_ONLY view on PK whose single rule has `when`; returns whether `item` is in it.
std::string InViewWhen(Condition cond, const Item& item) {
  ViewBuilder b = Builder(View("F", {Rule({std::move(cond)}, A("PK"))}, KeysOnly()));
  std::string entry = EntryOf(b, 0, item);
  return entry.rfind("none", 0) == 0 ? entry : "in";
}

TEST(ConditionTest, EqualsOnStrings) {
  Item item{{"PK", S("P")}, {"SK", S("S")}, {"s", S("order")}};
  EXPECT_EQ(InViewWhen(Eq("s", "order"), item), "in");
  EXPECT_EQ(InViewWhen(Eq("s", "Order"), item), "none (no rule)");
  EXPECT_EQ(InViewWhen(Eq("s", "orders"), item), "none (no rule)");
  EXPECT_EQ(InViewWhen(Eq("missing", ""), item), "none (no rule)");
}

TEST(ConditionTest, EqualsOnNumbersIsNumeric) {
  Item item{{"PK", S("P")}, {"SK", S("S")}, {"n", N("1")}, {"f", N("-0.5")}};
  EXPECT_EQ(InViewWhen(Eq("n", "1"), item), "in");
  EXPECT_EQ(InViewWhen(Eq("n", "1.0"), item), "in");
  EXPECT_EQ(InViewWhen(Eq("n", "01"), item), "in");
  EXPECT_EQ(InViewWhen(Eq("n", "0.1E1"), item), "in");
  EXPECT_EQ(InViewWhen(Eq("f", "-.50"), item), "in");
  EXPECT_EQ(InViewWhen(Eq("n", "2"), item), "none (no rule)");
  EXPECT_EQ(InViewWhen(Eq("n", "one"), item), "none (no rule)");
  EXPECT_EQ(InViewWhen(Eq("n", ""), item), "none (no rule)");
}

TEST(ConditionTest, EqualsOnBooleans) {
  Item item{{"PK", S("P")}, {"SK", S("S")}, {"t", AttributeValue::Bool(true)},
            {"f", AttributeValue::Bool(false)}};
  EXPECT_EQ(InViewWhen(Eq("t", "true"), item), "in");
  EXPECT_EQ(InViewWhen(Eq("f", "false"), item), "in");
  EXPECT_EQ(InViewWhen(Eq("t", "false"), item), "none (no rule)");
  EXPECT_EQ(InViewWhen(Eq("t", "1"), item), "none (no rule)");
}

TEST(ConditionTest, EqualsNeverMatchesOtherTypes) {
  Item item{{"PK", S("P")},
            {"SK", S("S")},
            {"b", AttributeValue::Binary("x")},
            {"z", AttributeValue::Null()},
            {"l", AttributeValue::StringSet({"x"})}};
  EXPECT_EQ(InViewWhen(Eq("b", "x"), item), "none (no rule)");
  EXPECT_EQ(InViewWhen(Eq("z", ""), item), "none (no rule)");
  EXPECT_EQ(InViewWhen(Eq("l", "x"), item), "none (no rule)");
}

TEST(ConditionTest, BeginsWith) {
  Item item{{"PK", S("P")},
            {"SK", S("ORDER#100")},
            {"b", AttributeValue::Binary(std::string("\x01\x02\x03", 3))},
            {"n", N("123")}};
  EXPECT_EQ(InViewWhen(BeginsWith("SK", "ORDER#"), item), "in");
  EXPECT_EQ(InViewWhen(BeginsWith("SK", ""), item), "in");
  EXPECT_EQ(InViewWhen(BeginsWith("SK", "ORDER#100"), item), "in");
  EXPECT_EQ(InViewWhen(BeginsWith("SK", "ORDER#1000"), item), "none (no rule)");
  EXPECT_EQ(InViewWhen(BeginsWith("SK", "USER#"), item), "none (no rule)");
  EXPECT_EQ(InViewWhen(BeginsWith("b", std::string("\x01\x02", 2)), item), "in");
  EXPECT_EQ(InViewWhen(BeginsWith("n", "12"), item), "none (no rule)");
  EXPECT_EQ(InViewWhen(BeginsWith("missing", ""), item), "none (no rule)");
}

TEST(ConditionTest, ExistsAndNotExists) {
  Item item{{"PK", S("P")}, {"SK", S("S")}, {"z", AttributeValue::Null()}};
  EXPECT_EQ(InViewWhen(Exists("z"), item), "in");  // NULL is present
  EXPECT_EQ(InViewWhen(Exists("missing"), item), "none (no rule)");
  EXPECT_EQ(InViewWhen(NotExists("missing"), item), "in");
  EXPECT_EQ(InViewWhen(NotExists("z"), item), "none (no rule)");
}

TEST(ConditionTest, AllConditionsOfARuleMustHold) {
  ViewRule rule =
      Rule({Eq("type", "order"), Eq("status", "PENDING"), Exists("open_since")}, A("PK"));
  ViewBuilder b = Builder(View("Pending", {rule}, KeysOnly()));
  EXPECT_THAT(Insert(b, Order()),
              ElementsAre("put Pending [S:CUST#1 | S:CUST#1 | S:ORDER#100] "
                          "{PK=S:CUST#1, SK=S:ORDER#100}"));
  Item shipped = Order();
  shipped["status"] = S("SHIPPED");
  EXPECT_EQ(EntryOf(b, 0, shipped), "none (no rule)");
  // A filtered (plain) view: leaving the filter removes the entry.
  EXPECT_THAT(Modify(b, Order(), shipped),
              ElementsAre("del Pending [S:CUST#1 | S:CUST#1 | S:ORDER#100]"));
}

// --- Inverted view -----------------------------------------------------------------------------

TEST(InvertedViewTest, SwapsTheTableKeys) {
  ViewBuilder b = Builder(Inverted());
  Item enrollment{{"PK", S("STUDENT#1")}, {"SK", S("CLASS#math")}, {"grade", S("A")}};
  EXPECT_THAT(Insert(b, enrollment),
              ElementsAre("put Inverted [S:CLASS#math | S:STUDENT#1 | S:STUDENT#1 | "
                          "S:CLASS#math] {PK=S:STUDENT#1, SK=S:CLASS#math}"));
  Item graded = enrollment;
  graded["grade"] = S("B");
  EXPECT_THAT(Modify(b, enrollment, graded), IsEmpty());
  EXPECT_THAT(Remove(b, graded),
              ElementsAre("del Inverted [S:CLASS#math | S:STUDENT#1 | S:STUDENT#1 | "
                          "S:CLASS#math]"));
}

TEST(InvertedViewTest, DeclaredTypesOfTheTableKeys) {
  TableSpec table = App({View("Inverted", {Rule({}, A("SK", AttrType::kN), A("PK"))}, KeysOnly())});
  table.key.sort_type = AttrType::kN;
  ViewBuilder b(table);
  Item item{{"PK", S("SENSOR#1")}, {"SK", N("1700000000")}};
  EXPECT_EQ(EntryOf(b, 0, item),
            "[N:1700000000 | S:SENSOR#1 | S:SENSOR#1 | N:1700000000] "
            "{PK=S:SENSOR#1, SK=N:1700000000}");
}

// --- Numeric sort key ---------------------------------------------------------------------------

TEST(NumericSortKeyTest, EntriesSortByValue) {
  ViewBuilder b = Builder(Leaderboard());
  const std::vector<std::string> scores = {"-100", "-10", "-1.5", "-0.25", "0",
                                           "0.001", "2", "9", "10", "10.25", "1e3"};
  std::vector<std::string> keys;
  for (size_t i = 0; i < scores.size(); ++i) {
    // Player ids in reverse so that table-key order cannot explain the result.
    Item item{{"PK", S("PLAYER#" + std::to_string(100 - i))},
              {"SK", S("GAME#chess")},
              {"game", S("chess")},
              {"score", N(scores[i])}};
    absl::StatusOr<std::optional<ViewEntry>> entry = b.EntryFor(0, item);
    ASSERT_TRUE(entry.ok() && entry->has_value()) << scores[i];
    keys.push_back((*entry)->key);
  }
  EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()));
  EXPECT_EQ(DescribeKey(keys[2]), "S:chess | N:-1.5 | S:PLAYER#98 | S:GAME#chess");
  EXPECT_EQ(DescribeKey(keys[9]), "S:chess | N:10.25 | S:PLAYER#91 | S:GAME#chess");
  EXPECT_EQ(DescribeKey(keys[10]), "S:chess | N:1000 | S:PLAYER#90 | S:GAME#chess");
}

TEST(NumericSortKeyTest, ScoreTransitions) {
  ViewBuilder b = Builder(Leaderboard());
  Item before{{"PK", S("PLAYER#1")}, {"SK", S("GAME#chess")}, {"game", S("chess")},
              {"score", N("-3.5")}, {"rating", N("1200")}};
  EXPECT_THAT(Insert(b, before),
              ElementsAre("put Leaderboard [S:chess | N:-3.5 | S:PLAYER#1 | S:GAME#chess] "
                          "{PK=S:PLAYER#1, SK=S:GAME#chess, game=S:chess, score=N:-3.5}"));
  Item same = before;
  same["score"] = N("-3.50");
  same["rating"] = N("1250");
  EXPECT_THAT(Modify(b, before, same), IsEmpty());
  Item better = before;
  better["score"] = N("12.75");
  EXPECT_THAT(Modify(b, before, better),
              ElementsAre("del Leaderboard [S:chess | N:-3.5 | S:PLAYER#1 | S:GAME#chess]",
                          "put Leaderboard [S:chess | N:12.75 | S:PLAYER#1 | S:GAME#chess] "
                          "{PK=S:PLAYER#1, SK=S:GAME#chess, game=S:chess, score=N:12.75}"));
  Item text = before;
  text["score"] = S("12.75");
  EXPECT_EQ(EntryOf(b, 0, text), "none (type mismatch)");
  EXPECT_THAT(Modify(b, better, text),
              ElementsAre("del Leaderboard [S:chess | N:12.75 | S:PLAYER#1 | S:GAME#chess]"));
}

// --- Projections -------------------------------------------------------------------------------

TEST(ProjectionTest, KeysOnlyIncludeAndAll) {
  const Item user = User();
  ViewRule rule = Rule({}, T("{country}#{state}"), A("name"));
  ViewBuilder keys_only = Builder(View("V", {rule}, KeysOnly()));
  EXPECT_EQ(Describe(keys_only.Project(0, user)),
            "{PK=S:USER#ann, SK=S:PROFILE, country=S:US, name=S:Ann, state=S:WA}");

  ViewBuilder include = Builder(View("V", {rule}, Include({"email", "absent", "PK", "city"})));
  EXPECT_EQ(Describe(include.Project(0, user)),
            "{PK=S:USER#ann, SK=S:PROFILE, city=S:Seattle, country=S:US, "
            "email=S:ann@example.com, name=S:Ann, state=S:WA}");

  ViewBuilder all = Builder(View("V", {rule}, All()));
  EXPECT_EQ(Describe(all.Project(0, user)), Describe(user));
}

TEST(ProjectionTest, EntryValueIsTheEncodedProjection) {
  ViewBuilder b = Builder(ByLocation());
  absl::StatusOr<std::optional<ViewEntry>> entry = b.EntryFor(0, User());
  ASSERT_TRUE(entry.ok() && entry->has_value());
  EXPECT_EQ((*entry)->value, EncodeItem(b.Project(0, User())));
}

TEST(ProjectionTest, KeysOnlyUsesTheMatchedRulesKeys) {
  ViewBuilder b = Builder(View("GSI2", Gsi2().rules, KeysOnly()));
  EXPECT_EQ(Describe(b.Project(0, Order())),
            "{PK=S:CUST#1, SK=S:ORDER#100, created_at=S:2024-05-01, status=S:PENDING}");
  EXPECT_EQ(Describe(b.Project(0, User())),
            "{PK=S:USER#ann, SK=S:PROFILE, email=S:ann@example.com}");
  Item invoice = Order();
  invoice["type"] = S("invoice");
  EXPECT_EQ(Describe(b.Project(0, invoice)), "{PK=S:CUST#1, SK=S:ORDER#100}");
}

// --- Key size limits ------------------------------------------------------------------------

TEST(KeySizeTest, ViewKeysUpToDynamoDbsIndexKeyLimitsMakeEntriesOfAnyLength) {
  ViewBuilder b = Builder(Gsi1());
  Item item{{"PK", S(std::string(2048, 'p'))}, {"SK", S(std::string(1024, 's'))},
            {"GSI1PK", S(std::string(2048, 'x'))}, {"GSI1SK", S(std::string(1024, 'y'))}};
  ASSERT_TRUE(b.ValidateTableKey(item).ok());
  absl::StatusOr<std::optional<ViewEntry>> entry = b.EntryFor(0, item);
  ASSERT_TRUE(entry.ok()) << entry.status();
  ASSERT_TRUE(entry->has_value());
  EXPECT_EQ((*entry)->key.size(), 2 * (2048 + 2 + 1024 + 2));

  item["GSI1PK"] = S(std::string(2049, 'x'));
  EXPECT_EQ(b.EntryFor(0, item).status(),
            absl::InvalidArgumentError(
                "view GSI1: partition key is 2049 bytes, over DynamoDB's limit of 2048 bytes"));
  item["GSI1PK"] = S(std::string(2048, 'x'));
  item["GSI1SK"] = S(std::string(2048, 'y'));  // a view's sort key may be a table's partition key
  EXPECT_TRUE(b.EntryFor(0, item).ok());
  item["GSI1SK"] = S(std::string(2049, 'y'));
  EXPECT_EQ(b.EntryFor(0, item).status(),
            absl::InvalidArgumentError(
                "view GSI1: sort key is 2049 bytes, over DynamoDB's limit of 2048 bytes"));
}

TEST(KeySizeTest, KeyOfExactlyTheLimitFits) {
  ViewBuilder b = Builder(Gsi1(), KeyLimits{9, 1});
  Item fits{{"PK", S("P")}, {"SK", S("S")}, {"GSI1PK", S("123456789")}, {"GSI1SK", S("A")}};
  EXPECT_EQ(EntryOf(b, 0, fits).substr(0, 1), "[");
  Item over = fits;
  over["GSI1PK"] = S("1234567890");
  EXPECT_EQ(EntryOf(b, 0, over),
            "error: INVALID_ARGUMENT: view GSI1: partition key is 10 bytes, over DynamoDB's limit "
            "of 9 bytes");
}

TEST(KeySizeTest, DiffAppendsNothingWhenAnyViewKeyIsTooLarge) {
  ViewBuilder b(App({OpenOrders(), Gsi1(), Inverted()}));
  Item item = User();
  item["open_since"] = S("2024-05-01");
  Item huge = item;
  huge["GSI1SK"] = S(std::string(2049, 'y'));

  std::vector<IndexMutation> out(1);  // a mutation from an earlier event stays untouched
  out[0] = IndexMutation{IndexMutation::Op::kDelete, 2, "earlier", ""};
  for (const Item* old_item : std::vector<const Item*>{nullptr, &item}) {
    absl::Status status = b.Diff(old_item, &huge, &out);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), StartsWith("view GSI1: sort key is 2049 bytes"));
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].key, "earlier");
  }
  // Removing it is fine: the old image's entries are only deleted.
  EXPECT_THAT(Remove(b, item), ElementsAre(StartsWith("del OpenOrders"), StartsWith("del GSI1"),
                                           StartsWith("del Inverted")));
}

TEST(KeySizeTest, OldEntryThatCannotExistIsNotDeleted) {
  // An old image whose entry does not fit (the limit was lowered since it was stored) has no
  // entry in the store: nothing to delete, and the item can still change or go away.
  ViewBuilder b = Builder(Gsi1(), KeyLimits{9, 1});
  Item big{{"PK", S("P")}, {"SK", S("S")}, {"GSI1PK", S("1234567890")}, {"GSI1SK", S("A")}};
  Item small = big;
  small["GSI1PK"] = S("1");
  EXPECT_THAT(Remove(b, big), IsEmpty());
  EXPECT_THAT(Modify(b, big, small),
              ElementsAre("put GSI1 [S:1 | S:A | S:P | S:S] " + Describe(small)));
}

TEST(KeySizeTest, ValidateTableKey) {
  ViewBuilder b = Builder(Gsi1());
  EXPECT_TRUE(b.ValidateTableKey(User()).ok());

  Item no_pk = User();
  no_pk.erase("PK");
  EXPECT_EQ(b.ValidateTableKey(no_pk),
            absl::InvalidArgumentError("table App: key attribute PK is missing"));
  Item no_sk = User();
  no_sk.erase("SK");
  EXPECT_EQ(b.ValidateTableKey(no_sk),
            absl::InvalidArgumentError("table App: key attribute SK is missing"));
  Item numeric_pk = User();
  numeric_pk["PK"] = N("1");
  EXPECT_EQ(b.ValidateTableKey(numeric_pk),
            absl::InvalidArgumentError("table App: key attribute PK must be S, got N"));
  Item bool_sk = User();
  bool_sk["SK"] = AttributeValue::Bool(false);
  EXPECT_EQ(b.ValidateTableKey(bool_sk),
            absl::InvalidArgumentError("table App: key attribute SK must be S, got BOOL"));

  // DynamoDB's limits: a 2,048-byte partition key and a 1,024-byte sort key.
  Item long_key = User();
  long_key["PK"] = S(std::string(2048, 'p'));
  long_key["SK"] = S(std::string(1024, 's'));
  EXPECT_TRUE(b.ValidateTableKey(long_key).ok());
  long_key["PK"] = S(std::string(2049, 'p'));
  EXPECT_EQ(b.ValidateTableKey(long_key),
            absl::InvalidArgumentError(
                "table App: partition key PK is 2049 bytes, over DynamoDB's limit of 2048 bytes"));
  long_key["PK"] = S("p");
  long_key["SK"] = S(std::string(1025, 's'));
  EXPECT_EQ(b.ValidateTableKey(long_key),
            absl::InvalidArgumentError(
                "table App: sort key SK is 1025 bytes, over DynamoDB's limit of 1024 bytes"));
}

TEST(KeySizeTest, EntryForAnItemWithoutTableKeyIsAnError) {
  ViewBuilder b = Builder(Gsi1());
  Item no_sk = User();
  no_sk.erase("SK");
  absl::StatusOr<std::optional<ViewEntry>> entry = b.EntryFor(0, no_sk);
  EXPECT_EQ(entry.status(), absl::InvalidArgumentError("table App: key attribute SK is missing"));
  std::vector<IndexMutation> out;
  EXPECT_FALSE(b.Diff(nullptr, &no_sk, &out).ok());
  EXPECT_THAT(out, IsEmpty());
}

// --- Several views at once ------------------------------------------------------------------

TEST(DiffTest, EveryViewInOrder) {
  ViewBuilder b(App({Gsi1(), OpenOrders(), ByLocation(), Gsi2(), Inverted(), Leaderboard()}));
  Item user = User();
  EXPECT_THAT(
      Insert(b, user),
      ElementsAre(StartsWith("put GSI1 [S:ORG#acme | S:USER#ann | "),
                  StartsWith("put ByLocation [S:US | S:WA#Seattle | "),
                  StartsWith("put GSI2 [S:EMAIL#ann@example.com | "),
                  StartsWith("put Inverted [S:PROFILE | S:USER#ann | ")));

  std::vector<IndexMutation> out;
  ASSERT_TRUE(b.Diff(nullptr, &user, &out).ok());
  std::vector<size_t> views;
  for (const IndexMutation& m : out) views.push_back(m.view);
  EXPECT_THAT(views, ElementsAre(0, 2, 3, 4));

  Item moved = user;
  moved["GSI1PK"] = S("ORG#other");  // key change in GSI1
  moved["name"] = S("Annie");        // projected in ByLocation only
  moved["phone"] = S("0");           // projected nowhere but GSI1 (ALL)
  EXPECT_THAT(Modify(b, user, moved),
              ElementsAre("del GSI1 [S:ORG#acme | S:USER#ann | S:USER#ann | S:PROFILE]",
                          "put GSI1 [S:ORG#other | S:USER#ann | S:USER#ann | S:PROFILE] " +
                              Describe(moved),
                          StartsWith("put ByLocation [S:US | S:WA#Seattle | S:USER#ann | "
                                     "S:PROFILE] {")));

  EXPECT_THAT(Remove(b, moved),
              ElementsAre(StartsWith("del GSI1 "), StartsWith("del ByLocation "),
                          StartsWith("del GSI2 "), StartsWith("del Inverted ")));
}

TEST(DiffTest, NothingToNothing) {
  ViewBuilder b(App({Gsi1(), OpenOrders()}));
  std::vector<IndexMutation> out;
  EXPECT_TRUE(b.Diff(nullptr, nullptr, &out).ok());
  EXPECT_THAT(out, IsEmpty());
}

TEST(DiffTest, AppendsToExistingMutations) {
  ViewBuilder b = Builder(Gsi1());
  std::vector<IndexMutation> out(1, IndexMutation{IndexMutation::Op::kPut, 0, "k", "v"});
  const Item user = User();
  ASSERT_TRUE(b.Diff(nullptr, &user, &out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].key, "k");
  EXPECT_EQ(out[1].op, IndexMutation::Op::kPut);
}

// Random images of one item, one after another, through overloaded, sparse, composite,
// inverted, numeric and projected views whose rules change under it. Applying each Diff to a model of the views
// must leave what inserting the current image alone gives (a rebuild), and every delete must
// carry the value its entry holds in the model (the change log logs it without reading it).
TEST(DiffTest, ASequenceOfImagesLeavesWhatARebuildGivesAndDeletesCarryTheValueHeld) {
  ViewBuilder b(App({Gsi1(), Gsi2(), OpenOrders(), ByLocation(), Inverted(), Leaderboard(),
                     View("ByN", {Rule({}, T("N#{score}"))}, Include({"score", "note"})),
                     View("Contact",
                          {Rule({Eq("type", "order")}, A("email")),
                           Rule({Eq("type", "user")}, A("contact")),
                           Rule({}, T("{email}#{status}"))},
                          Include({"note"})),
                     View("Keys",
                          {Rule({Eq("type", "order")}, T("K#{status}")),
                           Rule({}, T("K#{email}"))},
                          KeysOnly())}));
  using Model = std::map<std::pair<size_t, std::string>, std::string>;
  auto rebuild = [&](const Item* item) {
    Model out;
    std::vector<IndexMutation> puts;
    if (item != nullptr) {
      EXPECT_TRUE(b.Diff(nullptr, item, &puts).ok());
    }
    for (IndexMutation& m : puts) out[{m.view, m.key}] = m.value;
    return out;
  };
  std::mt19937 rng(7);
  auto pick = [&](std::vector<const char*> choices) {
    return S(choices[rng() % choices.size()]);
  };
  auto image = [&] {
    Item item{{"PK", S("P")}, {"SK", S("S")}};
    auto maybe = [&](const char* name, std::vector<const char*> choices) {
      if (rng() % 4 != 0) item[name] = pick(std::move(choices));
    };
    maybe("type", {"order", "user", "other"});
    maybe("status", {"OPEN", "SHIPPED"});
    maybe("created_at", {"2024-05-01", "2024-06-01"});
    maybe("email", {"a@x.io", "b@x.io"});
    maybe("contact", {"a@x.io", "b@x.io"});
    maybe("open_since", {"2024-05-01"});
    maybe("country", {"DE"});
    maybe("state", {"BY", "BE"});
    maybe("city", {"Munich"});
    maybe("note", {"x", "y"});
    maybe("name", {"Ann"});
    maybe("GSI1PK", {"ORG#a", "ORG#b"});
    maybe("GSI1SK", {"U#1"});
    maybe("game", {"chess", "go"});
    if (rng() % 4 != 0) {  // equal numbers written differently, and the wrong type
      std::vector<AttributeValue> scores{N("1"), N("1.0"), N("2"), S("1")};
      item["score"] = scores[rng() % scores.size()];
    }
    return item;
  };
  Model model;
  std::optional<Item> current;
  for (int step = 0; step < 2000; ++step) {
    SCOPED_TRACE(absl::StrCat("step ", step));
    std::optional<Item> next;
    if (rng() % 8 != 0) next = image();
    std::vector<IndexMutation> out;
    ASSERT_TRUE(b.Diff(current ? &*current : nullptr, next ? &*next : nullptr, &out).ok());
    for (const IndexMutation& m : out) {
      auto it = model.find({m.view, m.key});
      if (m.op == IndexMutation::Op::kDelete) {
        ASSERT_NE(it, model.end()) << "a delete of an entry that is not there: " << Describe(b, m);
        EXPECT_EQ(m.value, it->second) << Describe(b, m);
        model.erase(it);
      } else {
        model[{m.view, m.key}] = m.value;
      }
    }
    ASSERT_EQ(model, rebuild(next ? &*next : nullptr));
    current = std::move(next);
  }
}

}  // namespace
}  // namespace cdcview
