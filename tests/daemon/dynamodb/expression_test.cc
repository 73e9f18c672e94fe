// DynamoDB's expression grammar (daemon/dynamodb/expression.h): the grammar and precedence,
// every operator and function on every type, DynamoDB's exact error messages, the placeholders
// each expression uses, projections and item sizes.
#include "daemon/dynamodb/expression.h"

#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "daemon/dynamodb/reserved_words.h"
#include "gtest/gtest.h"

namespace cdcview::dynamodb {
namespace {

AttributeValue S(std::string s) { return AttributeValue::String(std::move(s)); }
AttributeValue B(std::string s) { return AttributeValue::Binary(std::move(s)); }
AttributeValue N(std::string_view text) {
  absl::StatusOr<AttributeValue> n = AttributeValue::Number(text);
  EXPECT_TRUE(n.ok()) << n.status();
  return n.ok() ? *n : AttributeValue::Null();
}
AttributeValue NS(std::vector<std::string> members) {
  absl::StatusOr<AttributeValue> n = AttributeValue::NumberSet(members);
  EXPECT_TRUE(n.ok()) << n.status();
  return n.ok() ? *n : AttributeValue::Null();
}

// One request's placeholders.
struct Request {
  NameMap names;
  ValueMap values;
  Placeholders ph;
  Request(NameMap n, ValueMap v) : names(std::move(n)), values(std::move(v)) {
    ph.names = names.empty() ? nullptr : &names;
    ph.values = values.empty() ? nullptr : &values;
  }
};

// The item every evaluation test reads.
Item Sample() {
  return {
      {"s", S("hello")},
      {"u", S("é")},  // two UTF-8 bytes
      {"n", N("9")},
      {"n2", N("1.50")},
      {"b", B(std::string("\x01\xff", 2))},
      {"t", AttributeValue::Bool(true)},
      {"z", AttributeValue::Null()},
      {"ss", AttributeValue::StringSet({"x", "y"})},
      {"ns", NS({"1", "20"})},
      {"bs", AttributeValue::BinarySet({"\x01", "\x02"})},
      {"l", AttributeValue::List({S("a"), N("2"), AttributeValue::Map({{"k", S("v")}})})},
      {"m", AttributeValue::Map({{"nest", AttributeValue::Map({{"deep", N("5")}})},
                                 {"lst", AttributeValue::List({N("10"), N("11")})}})},
      {"hollow", AttributeValue::Map({})},
  };
}

ValueMap Values() {
  return {
      {":hello", S("hello")}, {":he", S("he")},     {":ell", S("ell")},   {":x", S("x")},
      {":e", S("é")},          {":nine", N("9")},     {":ten", N("10")},    {":one", N("1")},
      {":one5", N("1.5")},     {":two", N("2")},      {":three", N("3")},   {":five", N("5")},
      {":b1", B("\x01")},      {":bff", B(std::string("\x01\xff", 2))}, {":true", AttributeValue::Bool(true)},
      {":null", AttributeValue::Null()},               {":ss", AttributeValue::StringSet({"y", "x"})},
      {":l", AttributeValue::List({S("a"), N("2"), AttributeValue::Map({{"k", S("v")}})})},
      {":kv", AttributeValue::Map({{"k", S("v")}})},  {":a", S("a")},     {":nsone", N("1")},
      {":S", S("S")},          {":N", S("N")},        {":B", S("B")},       {":BOOL", S("BOOL")},
      {":NULL", S("NULL")},    {":SS", S("SS")},      {":NS", S("NS")},     {":BS", S("BS")},
      {":L", S("L")},          {":M", S("M")},        {":s9", S("9")},
  };
}

// Whether `text` holds on the sample item (parse failures fail the test).
bool Holds(const std::string& text, const Item& item = Sample(), NameMap names = {}) {
  Request r(std::move(names), Values());
  absl::StatusOr<std::unique_ptr<const Condition>> c = ParseCondition(text, &r.ph);
  EXPECT_TRUE(c.ok()) << text << ": " << c.status();
  return c.ok() && (*c)->Matches(item);
}

std::string FilterError(const std::string& text, NameMap names = {}, ValueMap values = Values()) {
  Request r(std::move(names), std::move(values));
  absl::StatusOr<std::unique_ptr<const Condition>> c = ParseCondition(text, &r.ph);
  if (c.ok()) return "<ok>";
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(c.status().message());
}

std::string KeyError(const std::string& text, NameMap names = {}, ValueMap values = Values()) {
  Request r(std::move(names), std::move(values));
  absl::StatusOr<KeyCondition> c = ParseKeyCondition(text, &r.ph);
  if (c.ok()) return "<ok>";
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(c.status().message());
}

std::string ProjectionError(const std::string& text, NameMap names = {}) {
  Request r(std::move(names), {});
  absl::StatusOr<std::vector<Path>> p = ParseProjection(text, &r.ph);
  if (p.ok()) return "<ok>";
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(p.status().message());
}

// ---------------------------------------------------------------------------------------------
// Grammar and precedence

TEST(ExpressionGrammarTest, AndBindsTighterThanOrAndNotTighterThanAnd) {
  // s matches, n does not: "true OR (false AND false)" is true, "(true OR false) AND false" not.
  EXPECT_TRUE(Holds("s = :hello OR n = :one AND n = :two"));
  EXPECT_FALSE(Holds("(s = :hello OR n = :one) AND n = :two"));
  // NOT applies to the comparison next to it only.
  EXPECT_TRUE(Holds("NOT n = :one AND s = :hello"));
  EXPECT_FALSE(Holds("NOT (n = :nine AND s = :hello)"));
  EXPECT_TRUE(Holds("NOT n = :nine OR s = :hello"));
}

TEST(ExpressionGrammarTest, KeywordsAreCaseInsensitiveFunctionNamesAreNot) {
  EXPECT_TRUE(Holds("s = :x or n between :one AnD :ten"));
  EXPECT_TRUE(Holds("not n In (:one, :nine) Or s in (:hello)"));
  EXPECT_EQ(FilterError("Attribute_Exists(s)"),
            "Invalid FilterExpression: Invalid function name; function: Attribute_Exists");
}

TEST(ExpressionGrammarTest, WhitespaceAndParenthesesAnywhere) {
  EXPECT_TRUE(Holds("  ( s=:hello )AND(n>:one)  "));
  EXPECT_TRUE(Holds("(s) = :hello"));
  EXPECT_TRUE(Holds("m . nest . deep = :five AND m.lst [ 1 ] > :ten"));
  EXPECT_TRUE(Holds("((s = :hello AND n = :nine) OR n = :one) AND size(l) = :three"));
}

TEST(ExpressionGrammarTest, PlaceholdersAnywhereInAPath) {
  EXPECT_TRUE(Holds("#m.#i.deep = :five", Sample(), {{"#m", "m"}, {"#i", "nest"}}));
  EXPECT_TRUE(Holds("m.#l[0] = :ten", Sample(), {{"#l", "lst"}}));
  // A name placeholder may stand for a reserved word or a name with a dot in it: the dot is
  // part of the name, not a path separator.
  Item item = {{"status", S("ok")}, {"a.b", S("dotted")}};
  Request r({{"#s", "status"}, {"#ab", "a.b"}}, {{":ok", S("ok")}, {":d", S("dotted")}});
  absl::StatusOr<std::unique_ptr<const Condition>> c = ParseCondition("#s = :ok AND #ab = :d", &r.ph);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE((*c)->Matches(item));
}

// ---------------------------------------------------------------------------------------------
// Comparisons

TEST(ExpressionCompareTest, NumbersCompareNumerically) {
  EXPECT_TRUE(Holds("n < :ten"));  // "9" < "10" as numbers, not as text
  EXPECT_TRUE(Holds("n2 = :one5"));  // 1.50 == 1.5
  EXPECT_TRUE(Holds("n >= :nine AND n <= :nine AND n > :one AND n <> :ten"));
  EXPECT_FALSE(Holds("n > :ten"));
}

TEST(ExpressionCompareTest, StringsAndBinariesCompareByUnsignedBytes) {
  EXPECT_TRUE(Holds("s < :e"));    // 'h' (0x68) < 0xC3
  EXPECT_TRUE(Holds("b > :b1"));   // 01 FF > 01: a longer value with the same prefix is greater
  EXPECT_TRUE(Holds("s > :he AND s >= :hello AND s <= :hello"));
}

TEST(ExpressionCompareTest, DifferentTypesNeverCompareTrue) {
  EXPECT_FALSE(Holds("n = :s9"));  // N 9 against S "9"
  EXPECT_FALSE(Holds("n < :s9"));
  EXPECT_FALSE(Holds("n >= :s9"));
  EXPECT_TRUE(Holds("n <> :s9"));
}

TEST(ExpressionCompareTest, OrderOnlyOnNumbersStringsBinaries) {
  EXPECT_FALSE(Holds("t <= :true"));
  EXPECT_TRUE(Holds("t = :true"));
  EXPECT_FALSE(Holds("ss >= :ss"));
  EXPECT_TRUE(Holds("ss = :ss"));  // sets compare as sets: {x,y} = {y,x}
  EXPECT_TRUE(Holds("l = :l AND l[2] = :kv"));  // lists and maps deeply
  EXPECT_FALSE(Holds("l < :l"));
  EXPECT_TRUE(Holds("z = :null"));
}

// A path that does not resolve makes every comparison and function false, except
// attribute_not_exists and <>: DynamoDB (and moto) treat a missing attribute as unequal to any
// value, so "gone <> :v" holds.
TEST(ExpressionCompareTest, MissingAttributes) {
  for (const char* text : {"gone = :one", "gone < :one", "gone <= :one", "gone > :one",
                           "gone >= :one", "gone BETWEEN :one AND :ten", "gone IN (:one)",
                           "attribute_exists(gone)", "attribute_type(gone, :S)",
                           "begins_with(gone, :he)", "contains(gone, :x)",
                           "size(gone) >= :one", "m.nest.nope = :one", "l[7] = :a",
                           "s.part = :a", "s[0] = :a", "m[0] = :a"}) {
    EXPECT_FALSE(Holds(text)) << text;
  }
  EXPECT_TRUE(Holds("gone <> :one"));
  EXPECT_TRUE(Holds("attribute_not_exists(gone)"));
  EXPECT_TRUE(Holds("attribute_not_exists(m.nest.nope)"));
  EXPECT_FALSE(Holds("NOT gone <> :one"));
}

TEST(ExpressionCompareTest, BetweenAndIn) {
  EXPECT_TRUE(Holds("n BETWEEN :one AND :ten"));
  EXPECT_TRUE(Holds("n BETWEEN :nine AND :nine"));
  EXPECT_FALSE(Holds("n BETWEEN :one AND :five"));
  EXPECT_TRUE(Holds("s BETWEEN :he AND :x"));
  EXPECT_FALSE(Holds("s BETWEEN :one AND :ten"));  // types differ
  EXPECT_TRUE(Holds("n IN (:one, :two, :nine)"));
  EXPECT_FALSE(Holds("n IN (:one, :s9)"));
  EXPECT_TRUE(Holds("ss IN (:x, :ss)"));
  // BETWEEN's AND is its own: the next AND is the logical one.
  EXPECT_TRUE(Holds("n BETWEEN :one AND :ten AND s = :hello"));
}

// ---------------------------------------------------------------------------------------------
// Functions on every type

TEST(ExpressionFunctionTest, AttributeExistsAndType) {
  EXPECT_TRUE(Holds("attribute_exists(s) AND attribute_exists(m.nest.deep) AND attribute_exists(l[2].k)"));
  EXPECT_TRUE(Holds("attribute_exists(z)"));  // NULL is a value that exists
  EXPECT_FALSE(Holds("attribute_not_exists(z)"));
  const std::vector<std::pair<std::string, std::string>> types = {
      {"s", ":S"}, {"n", ":N"}, {"b", ":B"}, {"t", ":BOOL"}, {"z", ":NULL"}, {"ss", ":SS"},
      {"ns", ":NS"}, {"bs", ":BS"}, {"l", ":L"}, {"m", ":M"}};
  for (const auto& [attr, type] : types) {
    for (const auto& [other, other_type] : types) {
      EXPECT_EQ(Holds("attribute_type(" + attr + ", " + other_type + ")"), attr == other)
          << attr << " " << other_type;
    }
  }
}

TEST(ExpressionFunctionTest, BeginsWith) {
  EXPECT_TRUE(Holds("begins_with(s, :he)"));
  EXPECT_TRUE(Holds("begins_with(s, :hello)"));
  EXPECT_FALSE(Holds("begins_with(s, :ell)"));
  EXPECT_TRUE(Holds("begins_with(b, :b1)"));
  EXPECT_FALSE(Holds("begins_with(n, :s9)"));  // N has no prefix
  EXPECT_FALSE(Holds("begins_with(ss, :x)"));
  EXPECT_FALSE(Holds("begins_with(b, :he)"));  // B against S
}

TEST(ExpressionFunctionTest, Contains) {
  EXPECT_TRUE(Holds("contains(s, :ell)"));
  EXPECT_FALSE(Holds("contains(s, :x)"));
  EXPECT_TRUE(Holds("contains(ss, :x)"));
  EXPECT_FALSE(Holds("contains(ss, :a)"));
  EXPECT_TRUE(Holds("contains(ns, :nsone)"));
  EXPECT_FALSE(Holds("contains(ns, :two)"));
  EXPECT_FALSE(Holds("contains(ss, :one)"));  // a number is no member of a string set
  EXPECT_TRUE(Holds("contains(bs, :b1)"));
  EXPECT_TRUE(Holds("contains(l, :a) AND contains(l, :two) AND contains(l, :kv)"));
  EXPECT_FALSE(Holds("contains(l, :x)"));
  EXPECT_FALSE(Holds("contains(m, :kv)"));
  EXPECT_FALSE(Holds("contains(n, :nine)"));
  EXPECT_TRUE(Holds("contains(b, :b1)"));
}

TEST(ExpressionFunctionTest, Size) {
  EXPECT_TRUE(Holds("size(s) = :five"));
  EXPECT_TRUE(Holds("size(u) = :two"));  // UTF-8 bytes, not characters
  EXPECT_TRUE(Holds("size(b) = :two"));
  EXPECT_TRUE(Holds("size(ss) = :two AND size(ns) = :two AND size(bs) = :two"));
  EXPECT_TRUE(Holds("size(l) = :three AND size(m) = :two AND size(m.lst) = :two"));
  EXPECT_TRUE(Holds("size(hollow) < :one"));
  EXPECT_FALSE(Holds("size(n) >= :one"));  // N, BOOL, NULL have no size
  EXPECT_FALSE(Holds("size(t) >= :one"));
  EXPECT_TRUE(Holds("size(z) <> :one"));  // no size: <> holds, as for a missing attribute
  EXPECT_TRUE(Holds("size(s) BETWEEN :one AND :ten AND size(l) IN (:three)"));
  EXPECT_TRUE(Holds(":three = size(l)"));
}

// ---------------------------------------------------------------------------------------------
// Errors, exactly as DynamoDB words them

TEST(ExpressionErrorTest, EmptyAndSyntax) {
  EXPECT_EQ(FilterError(""), "Invalid FilterExpression: The expression can not be empty;");
  EXPECT_EQ(FilterError("a = "), "Invalid FilterExpression: Syntax error; token: \"<EOF>\", near: \"= \"");
  EXPECT_EQ(FilterError("things are not gonna be ok"),
            "Invalid FilterExpression: Syntax error; token: \"are\", near: \"things are not\"");
  EXPECT_EQ(FilterError("a > 4"), "Invalid FilterExpression: Syntax error; token: \"4\", near: \"> 4\"");
  EXPECT_EQ(FilterError("a in (:one,)"),
            "Invalid FilterExpression: Syntax error; token: \")\", near: \",)\"");
  EXPECT_EQ(FilterError("a = :one )"),
            "Invalid FilterExpression: Syntax error; token: \")\", near: \":one )\"");
  EXPECT_EQ(FilterError("a.:one = :one"),
            "Invalid FilterExpression: Syntax error; token: \":one\", near: \".:one =\"");
  EXPECT_EQ(FilterError("a > between"),
            "Invalid FilterExpression: Syntax error; token: \"between\", near: \"> between\"");
  EXPECT_EQ(FilterError("ü > a"), "Invalid FilterExpression: Syntax error; token: \"ü\", near: \"ü >\"");
  EXPECT_EQ(FilterError("a"), "Invalid FilterExpression: Syntax error; token: \"<EOF>\", near: \"a\"");
  EXPECT_EQ(FilterError("b[:one] > a"),
            "Invalid FilterExpression: Syntax error; token: \":one\", near: \"[:one]\"");
  EXPECT_EQ(FilterError("Pictures-RearView = :one"),
            "Invalid FilterExpression: Syntax error; token: \"-\", near: \"Pictures-RearView\"");
}

TEST(ExpressionErrorTest, Placeholders) {
  EXPECT_EQ(FilterError("#nope = :one"),
            "Invalid FilterExpression: An expression attribute name used in the document path is not "
            "defined; attribute name: #nope");
  EXPECT_EQ(FilterError("a = :nope"),
            "Invalid FilterExpression: An expression attribute value used in expression is not defined; "
            "attribute value: :nope");
  EXPECT_EQ(FilterError("a = :one", {}, {}),
            "Invalid FilterExpression: An expression attribute value used in expression is not defined; "
            "attribute value: :one");
}

TEST(ExpressionErrorTest, ReservedWords) {
  EXPECT_EQ(FilterError("status = :one"),
            "Invalid FilterExpression: Attribute name is a reserved keyword; reserved keyword: status");
  EXPECT_EQ(FilterError("a.Comment = :one"),
            "Invalid FilterExpression: Attribute name is a reserved keyword; reserved keyword: Comment");
  // A reserved word wins over an undefined placeholder (DynamoDB's precedence).
  EXPECT_EQ(FilterError("attribute_exists(views, #a)"),
            "Invalid FilterExpression: Attribute name is a reserved keyword; reserved keyword: views");
  EXPECT_TRUE(IsReservedWord("sTaTuS"));
  EXPECT_TRUE(IsReservedWord("ABORT"));
  EXPECT_TRUE(IsReservedWord("zone"));
  EXPECT_FALSE(IsReservedWord("pk"));
  EXPECT_FALSE(IsReservedWord(""));
}

TEST(ExpressionErrorTest, Functions) {
  EXPECT_EQ(FilterError("whatever(a)"), "Invalid FilterExpression: Invalid function name; function: whatever");
  EXPECT_EQ(FilterError("attribute_exists(a) > :one"),
            "Invalid FilterExpression: The function is not allowed to be used this way in an expression; "
            "function: attribute_exists");
  EXPECT_EQ(FilterError("size(a)"),
            "Invalid FilterExpression: The function is not allowed to be used this way in an expression; "
            "function: size");
  EXPECT_EQ(FilterError("size(contains(a, :x)) > :one"),
            "Invalid FilterExpression: The function is not allowed to be used this way in an expression; "
            "function: contains");
  EXPECT_EQ(FilterError("begins_with(a)"),
            "Invalid FilterExpression: Incorrect number of operands for operator or function; operator or "
            "function: begins_with, number of operands: 1");
  EXPECT_EQ(FilterError("size(a, b) > :one"),
            "Invalid FilterExpression: Incorrect number of operands for operator or function; operator or "
            "function: size, number of operands: 2");
  EXPECT_EQ(FilterError("begins_with(a, :one)"),
            "Invalid FilterExpression: Incorrect operand type for operator or function; operator or function: "
            "begins_with, operand type: N");
  EXPECT_EQ(FilterError("size(:true) > a"),
            "Invalid FilterExpression: Incorrect operand type for operator or function; operator or function: "
            "size, operand type: BOOL");
  EXPECT_EQ(FilterError("attribute_type(a, :one)"),
            "Invalid FilterExpression: Incorrect operand type for operator or function; operator or function: "
            "attribute_type, operand type: N");
  EXPECT_EQ(FilterError("attribute_type(a, :x)"),
            "Invalid FilterExpression: Invalid attribute type name found; type: x, valid types: "
            "{B,NULL,SS,BOOL,L,BS,N,NS,S,M}");
  EXPECT_EQ(FilterError("attribute_exists(:x)"),
            "Invalid FilterExpression: Operator or function requires a document path; operator or function: "
            "attribute_exists");
}

TEST(ExpressionErrorTest, OperandsAndBounds) {
  EXPECT_EQ(FilterError("a = a"),
            "Invalid FilterExpression: The first operand must be distinct from the remaining operands for "
            "this operator or function; operator: =, first operand: [a]");
  EXPECT_EQ(FilterError("contains(ab.bc[1].a, ab.bc[1].#a)", {{"#a", "a"}}),
            "Invalid FilterExpression: The first operand must be distinct from the remaining operands for "
            "this operator or function; operator: contains, first operand: [ab, bc, [1], a]");
  EXPECT_EQ(FilterError("a BETWEEN :five AND :one"),
            "Invalid FilterExpression: The BETWEEN operator requires upper bound to be greater than or equal "
            "to lower bound; lower bound operand: AttributeValue: {N:5}, upper bound operand: AttributeValue: "
            "{N:1}");
  EXPECT_EQ(FilterError("a BETWEEN :one AND :x"),
            "Invalid FilterExpression: The BETWEEN operator requires same data type for lower and upper "
            "bounds; lower bound operand: AttributeValue: {N:1}, upper bound operand: AttributeValue: {S:x}");
  EXPECT_EQ(FilterError("((a = :one))"), "Invalid FilterExpression: The expression has redundant parentheses;");
  EXPECT_EQ(FilterError("a = :one AND ((b = :one AND c = :one)) AND d = :one"),
            "Invalid FilterExpression: The expression has redundant parentheses;");
  EXPECT_EQ(FilterError("((a = :one) OR (b = :one))"), "<ok>");
  // The first condition with a problem is the one reported.
  EXPECT_EQ(FilterError("a = :nope AND begins_with(a)"),
            "Invalid FilterExpression: An expression attribute value used in expression is not defined; "
            "attribute value: :nope");
}

TEST(ExpressionErrorTest, Limits) {
  const std::string big = "a = :one" + std::string(4090, ' ');
  EXPECT_EQ(FilterError(big),
            "Invalid FilterExpression: Expression size has exceeded the maximum allowed size; expression "
            "size: 4098");
  EXPECT_EQ(FilterError(std::string(2000, '(') + "a = :one" + std::string(2000, ')')),
            "Invalid FilterExpression: The expression nests parentheses more than 64 deep");
  EXPECT_EQ(FilterError(std::string(3000, '(')), "Invalid FilterExpression: The expression nests parentheses more than 64 deep");
  std::string sizes = "a";
  for (int i = 0; i < 100; ++i) sizes = "size(" + sizes + ")";
  EXPECT_EQ(FilterError(sizes + " > :one"), "Invalid FilterExpression: The expression nests parentheses more than 64 deep");
  std::string nots = "a = :one";
  for (int i = 0; i < 3; ++i) nots = "NOT " + nots;
  EXPECT_EQ(FilterError(nots), "Invalid FilterExpression: Syntax error; token: \"NOT\", near: \"NOT NOT NOT\"");
  std::string many = "a = :one";
  for (int i = 0; i < 150; ++i) many += " OR a = :one";  // 151 comparisons + 150 ORs
  EXPECT_EQ(FilterError(many), "Invalid FilterExpression: The expression contains more than 300 operators and functions");
  std::string in = "a IN (:one";
  for (int i = 0; i < 100; ++i) in += ",:one";
  EXPECT_EQ(FilterError(in + ")"),
            "Invalid FilterExpression: The IN operator is provided with too many operands; number of operands: 101");
  EXPECT_EQ(FilterError("a IN (:one" + std::string(99 * 5, ' ') + ")"), "<ok>");
}

TEST(ExpressionTest, UsedPlaceholdersAreMarked) {
  Request r({{"#a", "a"}, {"#unused", "u"}, {"#k", "k"}}, {{":v", S("x")}, {":w", S("y")}, {":spare", S("z")}});
  ASSERT_TRUE(ParseCondition("#a.b = :v OR contains(c, :w)", &r.ph).ok());
  ASSERT_TRUE(ParseProjection("#k, x", &r.ph).ok());
  EXPECT_EQ(r.ph.used_names, (std::set<std::string, std::less<>>{"#a", "#k"}));
  EXPECT_EQ(r.ph.used_values, (std::set<std::string, std::less<>>{":v", ":w"}));
}

// ---------------------------------------------------------------------------------------------
// Key conditions

TEST(KeyConditionTest, ParsesWhatBoto3Writes) {
  Request r({{"#n0", "GSI1PK"}, {"#n1", "GSI1SK"}}, {{":v0", S("USER#1")}, {":v1", S("2025-")}});
  absl::StatusOr<KeyCondition> k = ParseKeyCondition("(#n0 = :v0 AND begins_with(#n1, :v1))", &r.ph);
  ASSERT_TRUE(k.ok()) << k.status();
  ASSERT_EQ(k->terms.size(), 2u);
  EXPECT_EQ(k->terms[0].name, "GSI1PK");
  EXPECT_EQ(k->terms[0].op, KeyCondition::SortOp::kEq);
  EXPECT_EQ(k->terms[0].value, S("USER#1"));
  EXPECT_EQ(k->terms[1].name, "GSI1SK");
  EXPECT_EQ(k->terms[1].op, KeyCondition::SortOp::kBeginsWith);
  EXPECT_EQ(k->terms[1].value, S("2025-"));
  EXPECT_EQ(r.ph.used_names.size(), 2u);
  EXPECT_EQ(r.ph.used_values.size(), 2u);
}

TEST(KeyConditionTest, EveryOperatorEitherOrderParenthesesEach) {
  using Op = KeyCondition::SortOp;
  const std::vector<std::pair<std::string, Op>> cases = {
      {"sk = :one", Op::kEq},  {"sk < :one", Op::kLt},  {"sk <= :one", Op::kLe},
      {"sk > :one", Op::kGt},  {"sk >= :one", Op::kGe}, {":one < sk", Op::kGt},
      {":one >= sk", Op::kLe}, {"sk BETWEEN :one AND :ten", Op::kBetween},
      {"begins_with(sk, :a)", Op::kBeginsWith}};
  for (const auto& [sort, op] : cases) {
    Request r({}, Values());
    absl::StatusOr<KeyCondition> k = ParseKeyCondition("(sk2 = :x) and (" + sort + ")", &r.ph);
    ASSERT_TRUE(k.ok()) << sort << ": " << k.status();
    ASSERT_EQ(k->terms.size(), 2u);
    EXPECT_EQ(k->terms[0].name, "sk2");
    EXPECT_EQ(k->terms[1].name, "sk");
    EXPECT_EQ(k->terms[1].op, op) << sort;
  }
  Request r({}, Values());
  absl::StatusOr<KeyCondition> k = ParseKeyCondition("pk = :x AND sk BETWEEN :one AND :ten", &r.ph);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->terms[1].value, N("1"));
  EXPECT_EQ(k->terms[1].value2, N("10"));
  k = ParseKeyCondition("pk = :x", &r.ph);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->terms.size(), 1u);
}

TEST(KeyConditionTest, DynamoDBsMessages) {
  EXPECT_EQ(KeyError("pk = :x OR pk = :a"), "Invalid operator used in KeyConditionExpression: OR");
  EXPECT_EQ(KeyError("NOT pk = :x"), "Invalid operator used in KeyConditionExpression: NOT");
  EXPECT_EQ(KeyError("pk IN (:x, :a)"), "Invalid operator used in KeyConditionExpression: IN");
  EXPECT_EQ(KeyError("pk <> :x"), "Invalid operator used in KeyConditionExpression: <>");
  EXPECT_EQ(KeyError("pk = :x AND contains(sk, :a)"), "Invalid operator used in KeyConditionExpression: contains");
  EXPECT_EQ(KeyError("attribute_exists(pk)"), "Invalid operator used in KeyConditionExpression: attribute_exists");
  EXPECT_EQ(KeyError("size(pk) = :one"), "KeyConditionExpressions cannot contain nested operations");
  EXPECT_EQ(KeyError("pk.part = :x"), "KeyConditionExpressions cannot have conditions on nested attributes");
  EXPECT_EQ(KeyError("pk[0] = :x"), "KeyConditionExpressions cannot have conditions on nested attributes");
  EXPECT_EQ(KeyError("pk = sk"),
            "Invalid condition in KeyConditionExpression: Multiple attribute names used in one condition");
  EXPECT_EQ(KeyError(":x = :a"), "Invalid condition in KeyConditionExpression: No key attribute specified");
  EXPECT_EQ(KeyError("begins_with(:a, sk)"),
            "Invalid condition in KeyConditionExpression: begins_with operator must have the key attribute as "
            "its first operand");
  EXPECT_EQ(KeyError(":one BETWEEN sk AND :ten"),
            "Invalid condition in KeyConditionExpression: BETWEEN operator must have the key attribute as its "
            "first operand");
  EXPECT_EQ(KeyError("pk = :x AND pk = :a"), "KeyConditionExpressions must only contain one condition per key");
  EXPECT_EQ(KeyError("a = :x AND b = :x AND c = :x"), "Conditions can be of length 1 or 2 only");
  EXPECT_EQ(KeyError(""), "Invalid KeyConditionExpression: The expression can not be empty;");
  EXPECT_EQ(KeyError("pk = "), "Invalid KeyConditionExpression: Syntax error; token: \"<EOF>\", near: \"= \"");
  EXPECT_EQ(KeyError("#pk = :x"),
            "Invalid KeyConditionExpression: An expression attribute name used in the document path is not "
            "defined; attribute name: #pk");
  EXPECT_EQ(KeyError("pk = :nope"),
            "Invalid KeyConditionExpression: An expression attribute value used in expression is not defined; "
            "attribute value: :nope");
  EXPECT_EQ(KeyError("pk = :x AND sk BETWEEN :ten AND :one"),
            "Invalid KeyConditionExpression: The BETWEEN operator requires upper bound to be greater than or "
            "equal to lower bound; lower bound operand: AttributeValue: {N:10}, upper bound operand: "
            "AttributeValue: {N:1}");
  EXPECT_EQ(KeyError("name = :x"),
            "Invalid KeyConditionExpression: Attribute name is a reserved keyword; reserved keyword: name");
}

// ---------------------------------------------------------------------------------------------
// Projections

TEST(ProjectionTest, ParsesPathsWithPlaceholders) {
  Request r({{"#n", "name"}}, {});
  absl::StatusOr<std::vector<Path>> p = ParseProjection("a, #n , m.nest[3].x", &r.ph);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->size(), 3u);
  EXPECT_EQ((*p)[1][0].name, "name");
  ASSERT_EQ((*p)[2].size(), 4u);
  EXPECT_EQ((*p)[2][2].index, 3);
  EXPECT_EQ((*p)[2][3].name, "x");
  EXPECT_EQ(r.ph.used_names.size(), 1u);
}

TEST(ProjectionTest, Errors) {
  EXPECT_EQ(ProjectionError(""), "Invalid ProjectionExpression: The expression can not be empty;");
  EXPECT_EQ(ProjectionError("a,"), "Invalid ProjectionExpression: Syntax error; token: \"<EOF>\", near: \",\"");
  EXPECT_EQ(ProjectionError("a b"), "Invalid ProjectionExpression: Syntax error; token: \"b\", near: \"a b\"");
  EXPECT_EQ(ProjectionError("a, status"),
            "Invalid ProjectionExpression: Attribute name is a reserved keyword; reserved keyword: status");
  EXPECT_EQ(ProjectionError("#x"),
            "Invalid ProjectionExpression: An expression attribute name used in the document path is not "
            "defined; attribute name: #x");
  EXPECT_EQ(ProjectionError("a, a.b"),
            "Invalid ProjectionExpression: Two document paths overlap with each other; must remove or rewrite "
            "one of these paths; path one: [a], path two: [a, b]");
  EXPECT_EQ(ProjectionError("x, #a", {{"#a", "x"}}),
            "Invalid ProjectionExpression: Two document paths overlap with each other; must remove or rewrite "
            "one of these paths; path one: [x], path two: [x]");
  EXPECT_EQ(ProjectionError("a.b, a[0]"),
            "Invalid ProjectionExpression: Two document paths conflict with each other; must remove or rewrite "
            "one of these paths; path one: [a, b], path two: [a, [0]]");
}

// The overlap and conflict named for random sets of short paths are those of checking every
// pair in order (the later path, then the earlier), as DynamoDB names them.
TEST(ProjectionTest, OverlapsAndConflictsNameTheFirstPairInOrder) {
  auto step_text = [](int code) {
    static const char* const kSteps[] = {"a", "b", "[0]", "[1]"};
    return std::string(kSteps[code]);
  };
  auto shown = [](const std::vector<int>& path) {
    std::string out = "[";
    for (size_t k = 0; k < path.size(); ++k) {
      static const char* const kShown[] = {"a", "b", "[0]", "[1]"};
      out += (k ? ", " : "");
      out += kShown[path[k]];
    }
    return out + "]";
  };
  std::mt19937 rng(7);
  int clashes = 0;
  for (int round = 0; round < 3000; ++round) {
    std::vector<std::vector<int>> paths(1 + rng() % 6);
    std::string text;
    for (auto& path : paths) {
      path.push_back(static_cast<int>(rng() % 2));  // a path starts with a name
      for (size_t k = rng() % 3; k > 0; --k) path.push_back(static_cast<int>(rng() % 4));
      if (!text.empty()) text += ", ";
      for (size_t k = 0; k < path.size(); ++k) {
        const std::string t = step_text(path[k]);
        text += (k > 0 && t[0] != '[' ? "." : "") + t;
      }
    }
    std::string want = "<ok>", conflict;
    for (size_t j = 1; j < paths.size() && want == "<ok>"; ++j) {
      for (size_t i = 0; i < j && want == "<ok>"; ++i) {
        const auto& a = paths[i];
        const auto& b = paths[j];
        size_t k = 0;
        while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
        if (k == a.size() || k == b.size()) {
          want = "Invalid ProjectionExpression: Two document paths overlap with each other; must "
                 "remove or rewrite one of these paths; path one: " + shown(a) +
                 ", path two: " + shown(b);
        } else if ((a[k] >= 2) != (b[k] >= 2) && conflict.empty()) {
          conflict = "Invalid ProjectionExpression: Two document paths conflict with each other; "
                     "must remove or rewrite one of these paths; path one: " + shown(a) +
                     ", path two: " + shown(b);
        }
      }
    }
    if (want == "<ok>" && !conflict.empty()) want = conflict;
    clashes += want != "<ok>";
    ASSERT_EQ(ProjectionError(text), want) << text;
  }
  EXPECT_GT(clashes, 1000);
}

TEST(ProjectionTest, ProjectKeepsNamedMembersAndPickedElementsInOrder) {
  Request r({}, {});
  absl::StatusOr<std::vector<Path>> p =
      ParseProjection("s, m.nest.deep, l[2].k, l[0], gone, m.nope, ns", &r.ph);
  ASSERT_TRUE(p.ok()) << p.status();
  const Item got = Project(Sample(), *p);
  const Item want = {
      {"s", S("hello")},
      {"m", AttributeValue::Map({{"nest", AttributeValue::Map({{"deep", N("5")}})}})},
      {"l", AttributeValue::List({S("a"), AttributeValue::Map({{"k", S("v")}})})},
      {"ns", NS({"1", "20"})},
  };
  EXPECT_EQ(AttributeValue::Map(got), AttributeValue::Map(want));
  // An index past the end, a name on a list, an index on a map: left out.
  p = ParseProjection("l[9], hollow", &r.ph);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(AttributeValue::Map(Project(Sample(), *p)),
            AttributeValue::Map({{"hollow", AttributeValue::Map({})}}));
  for (const char* text : {"l.x", "m[0]", "s.part", "gone"}) {
    p = ParseProjection(text, &r.ph);
    ASSERT_TRUE(p.ok()) << text;
    EXPECT_TRUE(Project(Sample(), *p).empty()) << text;
  }
}

TEST(ProjectionTest, CompiledProjectionAppliesToManyItems) {
  Request r({}, {});
  absl::StatusOr<std::vector<Path>> p =
      ParseProjection("s, m.nest.deep, l[2].k, l[0], gone, m.nope, ns", &r.ph);
  ASSERT_TRUE(p.ok()) << p.status();
  const Projection compiled(*p);
  EXPECT_EQ(AttributeValue::Map(compiled.Apply(Sample())), AttributeValue::Map(Project(Sample(), *p)));
  // More projected names than the item has attributes, and the other way round.
  std::vector<Path> many;
  for (int i = 0; i < 50; ++i) many.push_back(Path{PathStep{"x" + std::to_string(i), -1}});
  many.push_back(Path{PathStep{"s", -1}});
  const Projection wide(many);
  EXPECT_EQ(AttributeValue::Map(wide.Apply({{"s", S("v")}, {"x7", N("7")}, {"y", N("1")}})),
            AttributeValue::Map({{"s", S("v")}, {"x7", N("7")}}));
  const Projection copy = wide;  // copies share the compiled tree
  EXPECT_EQ(AttributeValue::Map(copy.Apply(Sample())), AttributeValue::Map({{"s", S("hello")}}));
  EXPECT_TRUE(Projection({}).Apply(Sample()).empty());
}

TEST(ConditionTest, TopLevelNamesInOrderEachOnce) {
  Request r({{"#n", "named"}}, {{":v", N("1")}});
  absl::StatusOr<std::unique_ptr<const Condition>> c = ParseCondition(
      "a.b = :v AND (#n[0] > :v OR size(c) > :v) AND a.c = :v AND NOT attribute_exists(d) AND "
      ":v BETWEEN e AND f",
      &r.ph);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->TopLevelNames(), (std::vector<std::string>{"a", "named", "c", "d", "e", "f"}));
}

// A placeholder referenced many times counts each time against DynamoDB's 2 MB of
// substitution variables, over all the request's expressions; the parsed value is shared.
TEST(ExpressionErrorTest, SubstitutedBytesAreBounded) {
  std::vector<AttributeValue> nulls(60000, AttributeValue::Null());
  const AttributeValue big = AttributeValue::List(nulls);  // 3 + 60000 * 2 = 120003 bytes
  auto in_list = [](int refs) {
    std::string text = "a IN (";
    for (int i = 0; i < refs; ++i) text += i ? ",:b" : ":b";
    return text + ")";
  };
  {
    Request r({}, {{":b", big}});
    absl::StatusOr<std::unique_ptr<const Condition>> c = ParseCondition(in_list(17), &r.ph);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(r.ph.substituted_bytes, 17u * 120003u);
    EXPECT_TRUE((*c)->Matches({{"a", big}}));
    EXPECT_FALSE((*c)->Matches({{"a", AttributeValue::List({})}}));
  }
  const std::string limit =
      "The expression attribute names and values substituted in the request's expressions "
      "exceed 2097152 bytes (DynamoDB's limit on the size of all substitution variables; each "
      "reference counts)";
  {
    Request r({}, {{":b", big}});
    absl::StatusOr<std::unique_ptr<const Condition>> c = ParseCondition(in_list(18), &r.ph);
    EXPECT_EQ(c.status().message(), "Invalid FilterExpression: " + limit);
    // 100 IN operands three times over (300 references of 120 KB): refused as early.
    Request r2({}, {{":b", big}});
    c = ParseCondition(in_list(100) + " OR " + in_list(100) + " OR " + in_list(100), &r2.ph);
    EXPECT_EQ(c.status().message(), "Invalid FilterExpression: " + limit);
    EXPECT_LE(r2.ph.substituted_bytes, 18u * 120003u);
  }
  {
    // Names: an 800 KB name referenced three times.
    Request r({{"#n", std::string(800000, 'n')}}, {});
    absl::StatusOr<std::vector<Path>> p = ParseProjection("#n.a, #n.b", &r.ph);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(r.ph.substituted_bytes, 1600000u);
    Request r2({{"#n", std::string(800000, 'n')}}, {});
    p = ParseProjection("#n.a, #n.b, #n.c", &r2.ph);
    EXPECT_EQ(p.status().message(), "Invalid ProjectionExpression: " + limit);
  }
  {
    // One request: its expressions share the budget.
    Request r({{"#n", std::string(100000, 'n')}}, {{":b", big}});
    ASSERT_TRUE(ParseCondition(in_list(17), &r.ph).ok());
    EXPECT_EQ(ParseProjection("#n", &r.ph).status().message(), "Invalid ProjectionExpression: " + limit);
  }
}

// ---------------------------------------------------------------------------------------------
// Item size (DynamoDB's documented rules)

TEST(ItemSizeTest, DocumentedRules) {
  // Name bytes plus the string's UTF-8 bytes.
  EXPECT_EQ(ItemSize({{"id", S("abc")}}), 2u + 3u);
  EXPECT_EQ(ItemSize({{"u", S("é")}}), 1u + 2u);
  // N: one byte per two significant digits, plus one; leading and trailing zeros do not count.
  EXPECT_EQ(ItemSize({{"n", N("12345")}}), 1u + 4u);
  EXPECT_EQ(ItemSize({{"n", N("1200")}}), 1u + 2u);
  EXPECT_EQ(ItemSize({{"n", N("0.001")}}), 1u + 2u);
  EXPECT_EQ(ItemSize({{"n", N("0")}}), 1u + 1u);
  // B: bytes; BOOL and NULL: one byte.
  EXPECT_EQ(ItemSize({{"b", B("xyz")}, {"t", AttributeValue::Bool(false)}, {"z", AttributeValue::Null()}}),
            1u + 3u + 1u + 1u + 1u + 1u);
  // Sets: the members' sizes.
  EXPECT_EQ(ItemSize({{"ss", AttributeValue::StringSet({"ab", "c"})}}), 2u + 3u);
  EXPECT_EQ(ItemSize({{"ns", NS({"1", "123"})}}), 2u + 2u + 3u);
  // L and M: 3 bytes, plus one per element, plus the elements (a map's with their names).
  EXPECT_EQ(ItemSize({{"l", AttributeValue::List({})}}), 1u + 3u);
  EXPECT_EQ(ItemSize({{"l", AttributeValue::List({S("ab"), N("1")})}}), 1u + 3u + (1u + 2u) + (1u + 2u));
  EXPECT_EQ(ItemSize({{"m", AttributeValue::Map({{"k", S("v")}})}}), 1u + 3u + 1u + 1u + 1u);
}

}  // namespace
}  // namespace cdcview::dynamodb
