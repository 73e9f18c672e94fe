// DynamoDB expressions: the grammar of KeyConditionExpression, FilterExpression (the
// ConditionExpression grammar) and ProjectionExpression, parsed against the request's
// ExpressionAttributeNames ("#n") and ExpressionAttributeValues (":v"), and evaluated on items.
//
// Errors are INVALID_ARGUMENT with DynamoDB's ValidationException message, prefixed with the
// expression's parameter name as DynamoDB does, e.g.
//   Invalid KeyConditionExpression: Syntax error; token: "<EOF>", near: "= "
//   Invalid FilterExpression: An expression attribute value used in expression is not defined; attribute value: :x
//   Invalid ProjectionExpression: Attribute name is a reserved keyword; reserved keyword: status
// Parsed expressions are immutable and safe to share between threads.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "index_builders/attribute_value.h"
#include "index_builders/item_size.h"  // ItemSize: the 1 MB page and 16 MB answer limits

namespace cdcview::dynamodb {

using NameMap = std::map<std::string, std::string, std::less<>>;     // "#n" -> attribute name
using ValueMap = std::map<std::string, AttributeValue, std::less<>>;  // ":v" -> value

// What one request's expressions may refer to, and which placeholders they used (for
// DynamoDB's "Value provided in ExpressionAttributeValues unused in expressions" errors, which
// the caller raises once every expression of the request is parsed).
struct Placeholders {
  const NameMap* names = nullptr;    // null: the request has none
  const ValueMap* values = nullptr;  // null: the request has none
  std::set<std::string, std::less<>> used_names;
  std::set<std::string, std::less<>> used_values;
  // Bytes substituted so far by every reference to a placeholder (a name's bytes, a value's
  // ItemSize-rule size), over all the request's expressions: at most kMaxSubstitutedBytes.
  uint64_t substituted_bytes = 0;
};

// DynamoDB's limit on the size of all substitution variables of a request (2 MB). cdcview
// counts each reference, so a placeholder used N times counts N times: the parsed expressions
// hold no more than this of substituted names, whatever the references.
inline constexpr uint64_t kMaxSubstitutedBytes = 2 << 20;

// One step of a document path: an attribute name, or a list index ("a.b[2]").
struct PathStep {
  std::string name;     // when index < 0
  int64_t index = -1;   // a list index, or -1
};
using Path = std::vector<PathStep>;

// A KeyConditionExpression: the partition key's equality and at most one sort-key condition,
// in either order, joined by AND, parentheses allowed (boto3 writes "(#n0 = :v0 AND ...)").
// Which names are keys, and their types, is the caller's check (its messages name the schema).
struct KeyCondition {
  enum class SortOp { kEq, kLt, kLe, kGt, kGe, kBetween, kBeginsWith };
  struct Term {
    std::string name;  // the attribute name, placeholders resolved
    SortOp op = SortOp::kEq;
    AttributeValue value;
    AttributeValue value2;  // kBetween's upper bound
  };
  std::vector<Term> terms;  // one or two, in the order written
};
absl::StatusOr<KeyCondition> ParseKeyCondition(std::string_view text, Placeholders* placeholders);

// A FilterExpression (or ConditionExpression): comparisons (= <> < <= > >=), BETWEEN, IN,
// attribute_exists, attribute_not_exists, attribute_type, begins_with, contains, size,
// AND / OR / NOT with DynamoDB's precedence, parentheses, nested paths.
class Condition {
 public:
  virtual ~Condition() = default;
  // DynamoDB's semantics: a path that does not resolve, or operands of different types,
  // make a comparison false (never an error at evaluation time).
  virtual bool Matches(const Item& item) const = 0;
  // The top-level attribute names the condition's document paths start with (placeholders
  // resolved), each once, in the order written.
  virtual std::vector<std::string> TopLevelNames() const { return {}; }
};
absl::StatusOr<std::unique_ptr<const Condition>> ParseCondition(std::string_view text,
                                                                Placeholders* placeholders);

// A ProjectionExpression: paths separated by commas.
absl::StatusOr<std::vector<Path>> ParseProjection(std::string_view text,
                                                  Placeholders* placeholders);
// The item reduced to `paths` as DynamoDB returns it: nested maps keep only the named members,
// list elements picked by index keep their order, paths that do not resolve are left out.
Item Project(const Item& item, const std::vector<Path>& paths);

// `paths` compiled once (a tree of the named members) and applied to many items: what Project
// does, without rebuilding the tree for each item. Immutable; copies share the tree.
struct ProjectionNode;
class Projection {
 public:
  explicit Projection(const std::vector<Path>& paths);
  Item Apply(const Item& item) const;

 private:
  std::shared_ptr<const ProjectionNode> root_;
};

}  // namespace cdcview::dynamodb
