#include "daemon/dynamodb/api.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "daemon/decode/attribute_value_proto.h"
#include "daemon/decode/base64.h"
#include "daemon/decode/dynamodb_json.h"
#include "daemon/dynamodb/expression.h"
#include "daemon/dynamodb/json_request.h"
#include "daemon/dynamodb/json_response.h"
#include "daemon/server/error_text.h"
#include "daemon/server/read_permission.h"
#include "daemon/server/view_reader.h"
#include "index_builders/coding.h"
#include "index_builders/item_size.h"
#include "index_builders/key_codec.h"
#include "index_builders/view_builder.h"

namespace cdcview::dynamodb {
namespace {

namespace dom = simdjson::dom;

constexpr std::string_view kTargetPrefix = "DynamoDB_20120810.";
// DynamoDB's page limit: a Query or Scan stops once it has read this much (ItemSize).
constexpr uint64_t kPageBytes = 1 << 20;
// The least a page thread's call asks of the store (BoundCall).
constexpr uint64_t kMinCallBytes = kPageBytes / 4;
// Entries asked of ViewQueries per call (its own page size cap).
constexpr uint32_t kEntriesPerCall = 1000;
constexpr size_t kMaxBatchGetKeys = 100;
// DynamoDB's limit on a BatchGetItem answer: past it, the rest are UnprocessedKeys.
constexpr uint64_t kMaxBatchGetBytes = 16 << 20;
// DynamoDB's read capacity unit covers an item of up to 4 KB.
constexpr uint64_t kReadUnitBytes = 4096;
// AttributesToGet as a ProjectionExpression: DynamoDB's 4 KB expression limit.
constexpr uint64_t kMaxAttributesToGetBytes = 4096;
constexpr size_t kMaxJsonDepth = 256;
constexpr size_t kMaxNameBytes = 255;  // DynamoDB's longest table and index names
constexpr char kSyntheticPartition[] = "cdcview_pk";
constexpr char kSyntheticSort[] = "cdcview_sk";
constexpr char kArnPrefix[] = "arn:aws:dynamodb:ddblocal:000000000000:table/";
constexpr char kInvalid[] = "One or more parameter values were invalid: ";
constexpr char kBadStartKey[] =
    "The provided starting key is invalid: The provided key element does not match the schema";

// The operations DynamoDB has that cdcview does not serve. These change tables or items:
constexpr std::string_view kWrites[] = {
    "BatchWriteItem", "CreateBackup", "CreateGlobalTable", "CreateTable", "DeleteBackup",
    "DeleteItem", "DeleteResourcePolicy", "DeleteTable", "DisableKinesisStreamingDestination",
    "EnableKinesisStreamingDestination", "ExportTableToPointInTime", "ImportTable", "PutItem",
    "PutResourcePolicy", "RestoreTableFromBackup", "RestoreTableToPointInTime", "TagResource",
    "TransactWriteItems", "UntagResource", "UpdateContinuousBackups",
    "UpdateContributorInsights", "UpdateGlobalTable", "UpdateGlobalTableSettings", "UpdateItem",
    "UpdateKinesisStreamingDestination", "UpdateTable", "UpdateTableReplicaAutoScaling",
    "UpdateTimeToLive"};
// These read (or, PartiQL, read or write) what cdcview does not keep or serve:
constexpr std::string_view kOtherReads[] = {
    "BatchExecuteStatement", "DescribeBackup", "DescribeContinuousBackups",
    "DescribeContributorInsights", "DescribeEndpoints", "DescribeExport", "DescribeGlobalTable",
    "DescribeGlobalTableSettings", "DescribeImport", "DescribeKinesisStreamingDestination",
    "DescribeLimits", "DescribeTableReplicaAutoScaling", "DescribeTimeToLive",
    "ExecuteStatement", "ExecuteTransaction", "GetResourcePolicy", "ListBackups",
    "ListContributorInsights", "ListExports", "ListGlobalTables", "ListImports",
    "ListTagsOfResource", "TransactGetItems"};

// What a successful operation answers.
struct Answer {
  std::string body;
  std::string applied_token;  // AppliedPosition.token bytes; "" when none
  bool run_long = false;      // read past ApiRequest::inline_bytes: nothing answered
};

#define API_RETURN_IF_ERROR(expr)              \
  do {                                         \
    if (absl::Status _s = (expr); !_s.ok()) {  \
      return _s;                               \
    }                                          \
  } while (0)

#define API_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = *std::move(tmp)

#define API_CONCAT_INNER(a, b) a##b
#define API_CONCAT(a, b) API_CONCAT_INNER(a, b)
#define API_ASSIGN_OR_RETURN(lhs, expr) \
  API_ASSIGN_OR_RETURN_IMPL(API_CONCAT(_api_or_, __LINE__), lhs, expr)

// At most `n` bytes of `text`, never ending inside a UTF-8 sequence.
std::string_view PrefixOnBoundary(std::string_view text, size_t n) {
  if (text.size() <= n) return text;
  size_t end = n;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end);
}

std::string ValueText(std::string_view value) {
  // DynamoDB quotes a value in its constraint messages; a hostile one is cut (on a UTF-8
  // boundary: the error body stays valid UTF-8).
  return value.size() <= kQuotedValueBytes
             ? std::string(value)
             : Cat(PrefixOnBoundary(value, kQuotedValueBytes), "...");
}

// A stored item or key that does not decode is cdcview's fault, not the caller's: 500.
template <typename Proto>
auto Stored(const Proto& proto, const std::string& what) -> decltype(FromProto(proto, what)) {
  auto decoded = FromProto(proto, what);
  if (!decoded.ok()) {
    return absl::InternalError(Cat("A stored ", what, " does not decode: ",
                                   StdView(decoded.status().message())));
  }
  return decoded;
}

absl::Status ConstraintError(std::string_view value, std::string_view member,
                             std::string_view constraint) {
  return ValidationError(Cat("1 validation error detected: Value ", value, " at '",
                                      member, "' failed to satisfy constraint: ", constraint));
}

absl::Status Required(std::string_view member) {
  return ConstraintError("null", member, "Member must not be null");
}

absl::StatusOr<std::string_view> RequiredString(const RequestObject& request,
                                                std::string_view member,
                                                std::string_view path) {
  API_ASSIGN_OR_RETURN(std::optional<std::string_view> value, request.String(member));
  if (!value.has_value()) return Required(path);
  return *value;
}

absl::Status CheckEnum(const RequestObject& request, std::string_view member,
                       std::string_view path, const std::vector<std::string_view>& allowed,
                       std::optional<std::string_view>* out = nullptr) {
  API_ASSIGN_OR_RETURN(std::optional<std::string_view> value, request.String(member));
  if (out != nullptr) *out = value;
  if (!value.has_value()) return absl::OkStatus();
  if (std::find(allowed.begin(), allowed.end(), *value) != allowed.end()) return absl::OkStatus();
  return ConstraintError(Cat("'", ValueText(*value), "'"), path,
                         Cat("Member must satisfy enum value set: [",
                                      Join(allowed, ", "), "]"));
}

// ---- Tables and views as DynamoDB sees them

// A table ARN names the table after "table/" (DynamoDB takes ARNs as TableName); any other
// name is itself.
std::string_view TableNameOf(std::string_view name) {
  if (name.starts_with("arn:")) {
    if (size_t at = name.find(":table/");
        at != std::string_view::npos && name.find('/', at + 7) == std::string_view::npos) {
      return name.substr(at + 7);
    }
  }
  return name;
}

struct IndexKey {
  std::string name;
  AttrType type = AttrType::kS;
  bool synthetic = false;  // cdcview_pk / cdcview_sk: the entry's computed key
};

// The key attribute a view's key is named by: the attribute every rule uses, or the synthetic
// name when a rule uses a template or the rules use different attributes.
IndexKey KeyOf(const ViewSpec& spec, bool sort) {
  IndexKey key;
  key.type = sort ? spec.sort_type() : spec.partition_type();
  const std::string* attribute = nullptr;
  for (const ViewRule& rule : spec.rules) {
    const KeySpec& k = sort ? *rule.sort_key : rule.partition_key;
    if (k.kind != KeySpec::Kind::kAttribute ||
        (attribute != nullptr && *attribute != k.attribute)) {
      attribute = nullptr;
      key.synthetic = true;
      break;
    }
    attribute = &k.attribute;
  }
  key.name = key.synthetic ? (sort ? kSyntheticSort : kSyntheticPartition) : *attribute;
  return key;
}

struct ViewContext {
  const ViewRef* ref = nullptr;
  const ViewSpec* spec = nullptr;
  const TableSpec* table = nullptr;
  IndexKey pk;
  std::optional<IndexKey> sk;
  // KEYS_ONLY / INCLUDE: the attributes DynamoDB's projection keeps; empty for ALL.
  std::set<std::string, std::less<>> projected;
};

ViewContext ContextOf(const Catalog& catalog, const ViewRef& ref) {
  ViewContext v;
  v.ref = &ref;
  v.spec = ref.spec;
  v.table = &catalog.config().tables[ref.table];
  v.pk = KeyOf(*v.spec, false);
  if (v.spec->has_sort_key()) v.sk = KeyOf(*v.spec, true);
  if (v.spec->projection.kind != ProjectionKind::kAll) {
    v.projected.insert(v.table->key.partition);
    if (v.table->key.sort.has_value()) v.projected.insert(*v.table->key.sort);
    v.projected.insert(v.pk.name);
    if (v.sk.has_value()) v.projected.insert(v.sk->name);
    for (const std::string& name : v.spec->projection.include) v.projected.insert(name);
  }
  return v;
}

// The names of an item's key in the view: table key, then the index's (DynamoDB's
// LastEvaluatedKey and ExclusiveStartKey), each once.
std::vector<std::pair<std::string, AttrType>> StartKeyNames(const ViewContext& v) {
  std::vector<std::pair<std::string, AttrType>> names;
  auto add = [&](const std::string& name, AttrType type) {
    for (const auto& n : names) {
      if (n.first == name) return;
    }
    names.emplace_back(name, type);
  };
  add(v.table->key.partition, v.table->key.partition_type);
  if (v.table->key.sort.has_value()) add(*v.table->key.sort, v.table->key.sort_type);
  add(v.pk.name, v.pk.type);
  if (v.sk.has_value()) add(v.sk->name, v.sk->type);
  return names;
}

// The index item DynamoDB would hold for an entry: the projection's attributes and the
// index's key attributes (synthetic ones from the entry's keys).
absl::StatusOr<Item> IndexItem(const v1::ViewEntry& entry, const ViewContext& v) {
  API_ASSIGN_OR_RETURN(Item item, Stored(entry.item(), "item"));
  if (!v.projected.empty()) {
    for (auto it = item.begin(); it != item.end();) {
      it = v.projected.contains(it->first) ? std::next(it) : item.erase(it);
    }
  }
  if (v.pk.synthetic) {
    API_ASSIGN_OR_RETURN(item[kSyntheticPartition], Stored(entry.partition_key(), "partition_key"));
  }
  if (v.sk.has_value() && v.sk->synthetic) {
    API_ASSIGN_OR_RETURN(item[kSyntheticSort], Stored(entry.sort_key(), "sort_key"));
  }
  return item;
}

Item StartKeyOf(const Item& index_item, const ViewContext& v) {
  Item key;
  for (const auto& [name, type] : StartKeyNames(v)) {
    if (auto it = index_item.find(name); it != index_item.end()) key.emplace(name, it->second);
  }
  return key;
}

// DynamoDB's refusal of an empty S or B key value.
std::string EmptyKeyMessage(AttrType type, std::string_view name) {
  return Cat("One or more parameter values are not valid. The AttributeValue for a key attribute "
             "cannot contain an empty ", type == AttrType::kS ? "string" : "binary",
             " value. Key: ", name);
}

// An ExclusiveStartKey as the view entry key it names: enc(view pk)·enc(view sk)?·enc(table
// pk)·enc(table sk)?. `*index_pk` gets the index partition key value.
absl::StatusOr<std::string> EntryKeyOf(const Item& start, const ViewContext& v,
                                       AttributeValue* index_pk) {
  const auto names = StartKeyNames(v);
  if (start.size() != names.size()) return ValidationError(kBadStartKey);
  for (const auto& [name, type] : names) {
    auto it = start.find(name);
    if (it == start.end() || it->second.type() != type) return ValidationError(kBadStartKey);
    if (type != AttrType::kN && it->second.scalar().empty()) {
      return ValidationError(EmptyKeyMessage(it->second.type(), name));
    }
  }
  std::string key;
  EncodeKeyComponent(start.find(v.pk.name)->second, &key);
  if (v.sk.has_value()) EncodeKeyComponent(start.find(v.sk->name)->second, &key);
  EncodeKeyComponent(start.find(v.table->key.partition)->second, &key);
  if (v.table->key.sort.has_value()) {
    EncodeKeyComponent(start.find(*v.table->key.sort)->second, &key);
  }
  *index_pk = start.find(v.pk.name)->second;
  return key;
}

// ---- Expressions of one request

struct Expressions {
  NameMap names;
  ValueMap values;
  bool has_names = false;
  bool has_values = false;
  Placeholders placeholders;
};

bool ValidPlaceholder(std::string_view key, char lead) {
  if (key.size() < 2 || key[0] != lead) return false;
  for (char c : key.substr(1)) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

// ExpressionAttributeNames and ExpressionAttributeValues, and the rules on which expression
// parameters they need. `expressions`: the request's expression parameters (in DynamoDB's
// order); `value_expressions`: those that may use values; `legacy`: its non-expression ones.
absl::Status ReadExpressionAttributes(const RequestObject& request,
                                      const std::vector<std::string_view>& expressions,
                                      const std::vector<std::string_view>& value_expressions,
                                      std::vector<std::string_view> legacy, Expressions* out) {
  std::vector<std::string_view> used_expressions;
  for (std::string_view e : expressions) {
    if (request.Has(e)) used_expressions.push_back(e);
  }
  if (!used_expressions.empty()) {
    // KeyConditions with FilterExpression and no KeyConditionExpression is allowed.
    if (request.Has("KeyConditions") && !request.Has("KeyConditionExpression")) {
      legacy.erase(std::remove(legacy.begin(), legacy.end(), "KeyConditions"), legacy.end());
    }
    std::vector<std::string_view> used_legacy;
    for (std::string_view l : legacy) {
      if (request.Has(l)) used_legacy.push_back(l);
    }
    if (!used_legacy.empty()) {
      return ValidationError(Cat(
          "Can not use both expression and non-expression parameters in the same request: "
          "Non-expression parameters: {",
          Join(used_legacy, ", "), "} Expression parameters: {",
          Join(used_expressions, ", "), "}"));
    }
  }
  API_ASSIGN_OR_RETURN(std::optional<dom::object> names, request.Object("ExpressionAttributeNames"));
  API_ASSIGN_OR_RETURN(std::optional<dom::object> values,
                       request.Object("ExpressionAttributeValues"));
  if (names.has_value() && used_expressions.empty()) {
    return ValidationError("ExpressionAttributeNames can only be specified when using expressions");
  }
  if (values.has_value() && !value_expressions.empty()) {
    bool any = false;
    for (std::string_view e : value_expressions) any = any || request.Has(e);
    if (!any) {
      return ValidationError(Cat(
          "ExpressionAttributeValues can only be specified when using expressions: ",
          Join(value_expressions, " and "), value_expressions.size() > 1 ? " are" : " is",
          " null"));
    }
  }
  if (names.has_value()) {
    out->has_names = true;
    if (names->size() == 0) return ValidationError("ExpressionAttributeNames must not be empty");
    for (dom::key_value_pair field : *names) {
      if (!ValidPlaceholder(field.key, '#')) {
        return ValidationError(Cat(
            "ExpressionAttributeNames contains invalid key: Syntax error; key: ",
            QuoteBounded(AbslView(field.key))));
      }
      if (field.value.is_null()) continue;
      if (!field.value.is_string()) return WrongJsonType(field.value, "String");
      out->names.insert_or_assign(std::string(field.key), std::string(std::string_view(field.value)));
    }
    out->placeholders.names = &out->names;
  }
  if (values.has_value()) {
    out->has_values = true;
    if (values->size() == 0) return ValidationError("ExpressionAttributeValues must not be empty");
    for (dom::key_value_pair field : *values) {
      if (!ValidPlaceholder(field.key, ':')) {
        return ValidationError(Cat(
            "ExpressionAttributeValues contains invalid key: Syntax error; key: ",
            QuoteBounded(AbslView(field.key))));
      }
    }
    for (dom::key_value_pair field : *values) {
      if (field.value.is_null()) continue;
      absl::StatusOr<AttributeValue> value = DecodeAttributeValue(field.value);
      if (!value.ok()) {
        if (!ErrorTypeOf(value.status()).empty()) return value.status();
        return ValidationError(Cat("ExpressionAttributeValues contains invalid value: ",
                                            value.status().message(), " for key ",
                                            std::string_view(field.key)));
      }
      out->values.insert_or_assign(std::string(field.key), *std::move(value));
    }
    out->placeholders.values = &out->values;
  }
  return absl::OkStatus();
}

// After every expression of the request is parsed: DynamoDB refuses placeholders none used.
absl::Status CheckUnused(const Expressions& e) {
  std::vector<std::string_view> unused;
  for (const auto& [name, value] : e.names) {
    if (!e.placeholders.used_names.contains(name)) unused.push_back(name);
  }
  if (!unused.empty()) {
    return ValidationError(Cat(
        "Value provided in ExpressionAttributeNames unused in expressions: keys: {",
        Join(unused, ", "), "}"));
  }
  for (const auto& [name, value] : e.values) {
    if (!e.placeholders.used_values.contains(name)) unused.push_back(name);
  }
  if (!unused.empty()) {
    return ValidationError(Cat(
        "Value provided in ExpressionAttributeValues unused in expressions: keys: {",
        Join(unused, ", "), "}"));
  }
  return absl::OkStatus();
}

// ProjectionExpression or the legacy AttributesToGet; nullopt when neither.
absl::StatusOr<std::optional<std::vector<Path>>> ReadProjection(const RequestObject& request,
                                                               Expressions* e) {
  API_ASSIGN_OR_RETURN(std::optional<std::string_view> text, request.String("ProjectionExpression"));
  if (text.has_value()) {
    API_ASSIGN_OR_RETURN(std::vector<Path> paths, ParseProjection(*text, &e->placeholders));
    return std::optional<std::vector<Path>>(std::move(paths));
  }
  API_ASSIGN_OR_RETURN(std::optional<dom::array> names, request.Array("AttributesToGet"));
  if (!names.has_value()) return std::optional<std::vector<Path>>();
  std::vector<Path> paths;
  std::set<std::string_view> seen;
  uint64_t bytes = 0;
  for (dom::element name : *names) {
    if (!name.is_string()) return WrongJsonType(name, "String");
    // Counted as the ProjectionExpression it stands for ("a,b,c"), against its 4 KB.
    bytes += (paths.empty() ? 0 : 1) + std::string_view(name).size();
    if (bytes > kMaxAttributesToGetBytes) {
      return ValidationError(Cat(
          "AttributesToGet exceeds ", kMaxAttributesToGetBytes,
          " bytes (the names joined by \",\", counted as the ProjectionExpression's 4 KB "
          "limit); ask for fewer attributes"));
    }
    if (!seen.insert(std::string_view(name)).second) {
      return ValidationError(Cat(kInvalid, "Duplicate value in attribute name: ",
                                          ValueText(std::string_view(name))));
    }
    paths.push_back(Path{PathStep{std::string(std::string_view(name)), -1}});
  }
  if (paths.empty()) {
    return ConstraintError("'[]'", "attributesToGet",
                           "Member must have length greater than or equal to 1");
  }
  return std::optional<std::vector<Path>>(std::move(paths));
}

// ---- Key conditions

// The legacy KeyConditions as a KeyCondition.
absl::StatusOr<KeyCondition> ReadKeyConditions(dom::object conditions) {
  static const std::vector<std::string_view> kOperators = {
      "IN", "NULL", "BETWEEN", "LT", "NOT_CONTAINS", "EQ", "GT", "NOT_NULL", "NE", "LE",
      "BEGINS_WITH", "GE", "CONTAINS"};
  KeyCondition out;
  for (dom::key_value_pair field : conditions) {
    if (field.value.is_null()) continue;
    if (!field.value.is_object()) return WrongJsonType(field.value, "structure");
    RequestObject condition{dom::object(field.value)};
    const std::string path = Cat("keyConditions.", ValueText(field.key), ".member");
    std::optional<std::string_view> op;
    API_RETURN_IF_ERROR(CheckEnum(condition, "ComparisonOperator",
                                  Cat(path, ".comparisonOperator"), kOperators, &op));
    if (!op.has_value()) return Required(Cat(path, ".comparisonOperator"));
    API_ASSIGN_OR_RETURN(std::optional<dom::array> list, condition.Array("AttributeValueList"));
    std::vector<AttributeValue> values;
    if (list.has_value()) {
      for (dom::element element : *list) {
        API_ASSIGN_OR_RETURN(AttributeValue value, DecodeAttributeValue(element));
        values.push_back(std::move(value));
      }
    }
    KeyCondition::Term term;
    term.name = std::string(field.key);
    size_t want = 1;
    if (*op == "EQ") term.op = KeyCondition::SortOp::kEq;
    else if (*op == "LT") term.op = KeyCondition::SortOp::kLt;
    else if (*op == "LE") term.op = KeyCondition::SortOp::kLe;
    else if (*op == "GT") term.op = KeyCondition::SortOp::kGt;
    else if (*op == "GE") term.op = KeyCondition::SortOp::kGe;
    else if (*op == "BEGINS_WITH") term.op = KeyCondition::SortOp::kBeginsWith;
    else if (*op == "BETWEEN") {
      term.op = KeyCondition::SortOp::kBetween;
      want = 2;
    } else {
      return ValidationError("Attempted conditional constraint is not an indexable operation");
    }
    if (values.size() != want) {
      return ValidationError(Cat(
          kInvalid, "Invalid number of argument(s) for the ", *op, " ComparisonOperator"));
    }
    term.value = std::move(values[0]);
    if (want == 2) term.value2 = std::move(values[1]);
    out.terms.push_back(std::move(term));
  }
  if (out.terms.empty()) {
    return ConstraintError("'{}'", "keyConditions",
                           "Member must have length greater than or equal to 1");
  }
  return out;
}

// The key condition checked against the index's key schema, as a partition key and an
// optional sort condition of the v1 request.
absl::Status ApplyKeyCondition(const KeyCondition& condition, const ViewContext& v,
                               v1::QueryRequest* q, AttributeValue* partition,
                               const KeyCondition::Term** sort_term) {
  const KeyCondition::Term* pk = nullptr;
  const KeyCondition::Term* sk = nullptr;
  for (const KeyCondition::Term& term : condition.terms) {
    if (term.name == v.pk.name && pk == nullptr) {
      pk = &term;
    } else if (v.sk.has_value() && term.name == v.sk->name && sk == nullptr) {
      sk = &term;
    } else if (!v.sk.has_value() && condition.terms.size() > 1) {
      return ValidationError("Query key condition not supported");
    }
  }
  if (pk == nullptr) {
    return ValidationError(Cat("Query condition missed key schema element: ", v.pk.name));
  }
  if (condition.terms.size() > 1 && sk == nullptr) {
    return ValidationError(Cat("Query condition missed key schema element: ",
                                        v.sk.has_value() ? v.sk->name : v.pk.name));
  }
  if (condition.terms.size() > 2) return ValidationError("Query key condition not supported");
  const std::string type_mismatch =
      Cat(kInvalid, "Condition parameter type does not match schema type");
  if (pk->value.type() != v.pk.type) return ValidationError(type_mismatch);
  if (pk->op != KeyCondition::SortOp::kEq) {
    return ValidationError("Query key condition not supported");
  }
  if (pk->value.type() != AttrType::kN && pk->value.scalar().empty()) {
    return ValidationError(EmptyKeyMessage(pk->value.type(), v.pk.name));
  }
  *partition = pk->value;
  ToProto(pk->value, q->mutable_partition_key());
  *sort_term = sk;
  if (sk == nullptr) return absl::OkStatus();
  if (sk->value.type() != v.sk->type ||
      (sk->op == KeyCondition::SortOp::kBetween && sk->value2.type() != v.sk->type)) {
    return ValidationError(type_mismatch);
  }
  if (v.sk->type != AttrType::kN &&
      (sk->value.scalar().empty() ||
       (sk->op == KeyCondition::SortOp::kBetween && sk->value2.scalar().empty()))) {
    return ValidationError(EmptyKeyMessage(v.sk->type, v.sk->name));
  }
  v1::SortCondition* sort = q->mutable_sort();
  switch (sk->op) {
    case KeyCondition::SortOp::kEq: sort->set_op(v1::SortCondition::EQ); break;
    case KeyCondition::SortOp::kLt: sort->set_op(v1::SortCondition::LT); break;
    case KeyCondition::SortOp::kLe: sort->set_op(v1::SortCondition::LE); break;
    case KeyCondition::SortOp::kGt: sort->set_op(v1::SortCondition::GT); break;
    case KeyCondition::SortOp::kGe: sort->set_op(v1::SortCondition::GE); break;
    case KeyCondition::SortOp::kBeginsWith:
      if (v.sk->type == AttrType::kN) {
        return ValidationError(
            "Invalid KeyConditionExpression: Incorrect operand type for operator or function; "
            "operator or function: begins_with, operand type: N");
      }
      sort->set_op(v1::SortCondition::BEGINS_WITH);
      break;
    case KeyCondition::SortOp::kBetween: {
      std::string low, high;
      EncodeKeyComponent(sk->value, &low);
      EncodeKeyComponent(sk->value2, &high);
      if (high < low) {
        // KeyConditions' words (ParseKeyCondition checks a KeyConditionExpression's bounds).
        return ValidationError(
            "The BETWEEN condition was provided a range where the lower bound is greater than "
            "the upper bound");
      }
      sort->set_op(v1::SortCondition::BETWEEN);
      ToProto(sk->value2, sort->mutable_value2());
      break;
    }
  }
  ToProto(sk->value, sort->mutable_value());
  return absl::OkStatus();
}

// Whether an index sort key value meets the key condition's sort term (the order of encoded
// key components is the view's order).
bool InSortRange(const AttributeValue& value, const KeyCondition::Term& term) {
  if (term.op == KeyCondition::SortOp::kBeginsWith) {
    return value.type() == term.value.type() && value.scalar().starts_with(term.value.scalar());
  }
  std::string x, bound;
  EncodeKeyComponent(value, &x);
  EncodeKeyComponent(term.value, &bound);
  switch (term.op) {
    case KeyCondition::SortOp::kEq: return x == bound;
    case KeyCondition::SortOp::kLt: return x < bound;
    case KeyCondition::SortOp::kLe: return x <= bound;
    case KeyCondition::SortOp::kGt: return x > bound;
    case KeyCondition::SortOp::kGe: return x >= bound;
    case KeyCondition::SortOp::kBetween: {
      std::string high;
      EncodeKeyComponent(term.value2, &high);
      return bound <= x && x <= high;
    }
    case KeyCondition::SortOp::kBeginsWith: break;
  }
  return false;
}

constexpr char kStartOutside[] =
    "The provided starting key is outside query boundaries based on provided conditions";

// ---- Consistency headers

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

absl::StatusOr<std::optional<v1::ReadConsistency>> ReadConsistencyHeaders(const ApiRequest& r) {
  if (!MayWait(r)) return std::optional<v1::ReadConsistency>();
  v1::ReadConsistency c;
  if (!r.min_position.empty()) {
    std::string token;
    if (!Base64Decode(Trim(r.min_position), &token)) {
      return ValidationError(
          "x-cdcview-min-position is not base64; pass an earlier answer's "
          "x-cdcview-applied-position unchanged");
    }
    c.set_min_position(std::move(token));
  }
  if (!r.min_kafka_offsets.empty()) {
    std::string_view rest = r.min_kafka_offsets;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      std::string_view entry = Trim(rest.substr(0, comma));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      const size_t eq = entry.rfind('=');
      const size_t slash = entry.substr(0, eq == std::string_view::npos ? 0 : eq).rfind('/');
      int32_t partition = -1;
      int64_t offset = -1;
      if (eq == std::string_view::npos || slash == std::string_view::npos || slash == 0 ||
          !absl::SimpleAtoi(AbslView(entry.substr(slash + 1, eq - slash - 1)), &partition) ||
          !absl::SimpleAtoi(AbslView(entry.substr(eq + 1)), &offset) || partition < 0 || offset < 0) {
        return ValidationError(Cat(
            "x-cdcview-min-kafka-offsets: entry ", QuoteBounded(AbslView(entry)),
            " is not topic/partition=offset (entries joined by \",\")"));
      }
      v1::KafkaOffset* k = c.add_min_kafka_offsets();
      k->set_topic(std::string(entry.substr(0, slash)));
      k->set_partition(partition);
      k->set_offset(offset);
    }
  }
  if (!r.max_staleness_seconds.empty()) {
    double seconds = 0;
    if (!absl::SimpleAtod(AbslView(r.max_staleness_seconds), &seconds) || !std::isfinite(seconds) ||
        seconds < 0) {
      return ValidationError(Cat(
          "x-cdcview-max-staleness-seconds is ", QuoteBounded(AbslView(r.max_staleness_seconds)),
          "; give a number of seconds >= 0"));
    }
    c.set_max_staleness_seconds(seconds);
  }
  return std::optional<v1::ReadConsistency>(std::move(c));
}

// A view's read refused because it is being built: DynamoDB's word for a GSI being created.
absl::Status ViewReadError(absl::Status status, const ViewContext& v) {
  const std::string_view message = StdView(status.message());
  if (absl::IsUnavailable(status) && (message.find("is being rebuilt") != std::string_view::npos ||
                                      message.find("is backfilling") != std::string_view::npos)) {
    return ValidationError(
        Cat("Cannot read from backfilling global secondary index: ", v.spec->name));
  }
  return status;
}

}  // namespace

bool MayWait(const ApiRequest& request) {
  return !request.min_position.empty() || !request.min_kafka_offsets.empty() ||
         !request.max_staleness_seconds.empty();
}

bool RunsShort(const ApiRequest& request) {
  if (!request.target.starts_with(kTargetPrefix)) return true;
  const std::string_view op = request.target.substr(kTargetPrefix.size());
  if (request.body.size() > kMaxShortBody || op == "BatchGetItem") return false;
  if (op != "Query" && op != "Scan") return true;
  thread_local simdjson::dom::parser parser;
  simdjson::dom::object root;
  if (parser.parse(request.body.data(), request.body.size()).get(root)) return true;
  int64_t limit = 0;
  if (root["Limit"].get(limit) || limit < 1 || limit > kShortPageLimit) return false;
  if (op == "Query") return true;
  int64_t segments = 1;
  simdjson::dom::element total;
  if (!root["TotalSegments"].get(total) && !total.is_null() && total.get(segments)) return false;
  return segments == 1;
}

ApiResponse ErrorResponse(int http_status, std::string_view type, std::string_view message,
                          std::string operation) {
  ApiResponse response;
  response.http_status = http_status;
  response.operation = std::move(operation);
  std::string full;
  if (type.find('#') != std::string_view::npos) {
    full = std::string(type);
  } else if (type == "UnknownOperationException" || type == "SerializationException") {
    full = Cat("com.amazon.coral.service#", type);
  } else {
    full = Cat("com.amazonaws.dynamodb.v20120810#", type);
  }
  response.error_type = full.substr(full.find('#') + 1);
  JsonWriter w;
  w.BeginObject();
  w.Key("__type");
  w.String(full);
  w.Key("message");
  w.String(BoundStatusMessage(AbslView(message)));
  w.EndObject();
  response.body = w.Take();
  return response;
}

namespace {

ApiResponse StatusResponse(const absl::Status& status, std::string operation) {
  const std::string type = ErrorTypeOf(status);
  if (!type.empty()) return ErrorResponse(400, type, StdView(status.message()), std::move(operation));
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      return ErrorResponse(400, "ValidationException", StdView(status.message()), std::move(operation));
    case absl::StatusCode::kNotFound:
      return ErrorResponse(400, "ResourceNotFoundException", "Requested resource not found",
                           std::move(operation));
    case absl::StatusCode::kPermissionDenied:
      return ErrorResponse(400, "AccessDeniedException", StdView(status.message()), std::move(operation));
    case absl::StatusCode::kUnauthenticated:
      return ErrorResponse(400, "UnrecognizedClientException",
                           "The security token included in the request is invalid.",
                           std::move(operation));
    case absl::StatusCode::kResourceExhausted:
      return ErrorResponse(400, "ThrottlingException", StdView(status.message()), std::move(operation));
    case absl::StatusCode::kDeadlineExceeded:
      return ErrorResponse(400, "com.cdcview#PositionNotAppliedException", StdView(status.message()),
                           std::move(operation));
    case absl::StatusCode::kFailedPrecondition:
      return ErrorResponse(400, "com.cdcview#StaleReadException", StdView(status.message()),
                           std::move(operation));
    case absl::StatusCode::kUnavailable:
      return ErrorResponse(503, "ServiceUnavailable", StdView(status.message()), std::move(operation));
    default:
      return ErrorResponse(500, "InternalServerError", StdView(status.message()), std::move(operation));
  }
}

// One request's handling: its parsed body and what the operations share.
class Operation {
 public:
  Operation(const Catalog& catalog, const ViewQueries& queries, const ApiRequest& request,
            double creation_date_time)
      : catalog_(catalog),
        queries_(queries),
        request_(request),
        creation_date_time_(creation_date_time) {}

  absl::StatusOr<Answer> Run(std::string_view op, dom::object body) {
    RequestObject r(body);
    if (op == "Query") return Query(r);
    if (op == "Scan") return Scan(r);
    if (op == "GetItem") return GetItem(r);
    if (op == "BatchGetItem") return BatchGetItem(r);
    if (op == "DescribeTable") return DescribeTable(r);
    return ListTables(r);
  }

 private:
  struct TableRef {
    size_t index = 0;
    const TableSpec* spec = nullptr;
  };

  // A cdcview table by its own name, or by the table_name (or stream ARN's table) of a
  // DynamoDB source feeding it.
  absl::StatusOr<TableRef> FindTable(std::string_view name,
                                     std::string_view not_found = "Requested resource not found") const {
    name = TableNameOf(name);
    int index = catalog_.FindTable(name);
    if (index < 0) {
      for (const SourceConfig& source : catalog_.config().sources) {
        if (source.kind != SourceKind::kDynamoDb) continue;
        std::string_view table = source.dynamodb.table_name;
        if (table.empty()) {
          // arn:aws:dynamodb:REGION:ACCOUNT:table/NAME/stream/LABEL
          std::string_view arn = source.dynamodb.stream_arn;
          if (size_t at = arn.find(":table/"); at != std::string_view::npos) {
            table = arn.substr(at + 7);
            table = table.substr(0, table.find('/'));
          }
        }
        if (table == name) {
          index = catalog_.FindTable(source.table);
          break;
        }
      }
    }
    if (index < 0) return TypedError("ResourceNotFoundException", not_found);
    return TableRef{static_cast<size_t>(index), &catalog_.config().tables[index]};
  }

  absl::StatusOr<TableRef> ReadTableName(const RequestObject& r, std::string_view* name) const {
    API_ASSIGN_OR_RETURN(*name, RequiredString(r, "TableName", "tableName"));
    return FindTable(*name);
  }

  // IndexName of a Query or Scan: one of the table's views.
  absl::StatusOr<ViewContext> ReadIndex(const RequestObject& r, const TableRef& table) const {
    API_ASSIGN_OR_RETURN(std::optional<std::string_view> index, r.String("IndexName"));
    if (!index.has_value()) {
      return ValidationError(
          "cdcview serves Query and Scan on its views (IndexName); read the table by GetItem or "
          "BatchGetItem, or query it at DynamoDB");
    }
    if (index->size() > kMaxNameBytes) {
      return ConstraintError(Cat("'", ValueText(*index), "'"), "indexName",
                             "Member must have length less than or equal to 255");
    }
    const ViewRef* view = catalog_.FindView(*index);
    if (view == nullptr || view->table != table.index) {
      return ValidationError(
          Cat("The table does not have the specified index: ", *index));
    }
    return ContextOf(catalog_, *view);
  }

  absl::Status Permit(const auto& v1_request) const {
    if (request_.who == nullptr) return absl::OkStatus();
    return PermitRead(*request_.who, v1_request);
  }

  // Whether the caller is limited to some views (a token without views: all).
  bool Restricted() const { return request_.who != nullptr && !request_.who->all_views; }

  // Whether the caller may know of `table`: it may read one of its views, or everything.
  bool MayKnow(const TableRef& table) const {
    if (!Restricted()) return true;
    for (const ViewRef& ref : catalog_.views()) {
      if (ref.table == table.index && request_.who->MayRead(ref.spec->name)) return true;
    }
    return false;
  }

  // `table`, found by the name the caller gave, when the caller may know of it. A restricted
  // caller is refused alike for a table it may not know of and one that does not exist, naming
  // what it gave, before anything of the request is read against the table's schema, as IAM
  // refuses a resource whether or not it exists.
  absl::StatusOr<TableRef> Known(absl::StatusOr<TableRef> table, std::string_view given) const {
    if (!Restricted()) return table;
    if (table.ok() ? MayKnow(*table) : ErrorTypeOf(table.status()) != "ResourceNotFoundException") {
      return table;
    }
    return absl::PermissionDeniedError(Cat(
        "token \"", request_.who->name, "\" may not read table ", QuoteBounded(AbslView(given)),
        ": it reads only the tables of the views in its views (server.tokens_file)"));
  }

  // TableName, read and found as Known finds it.
  absl::StatusOr<TableRef> ReadKnownTable(const RequestObject& r, std::string_view* name) const {
    absl::StatusOr<TableRef> table = ReadTableName(r, name);
    return Known(std::move(table), *name);
  }

  // A restricted caller's IndexName, checked against its views before the table's indexes are
  // looked up, so that a refusal tells nothing of which exist. The only check of the index's
  // right: ReadIndex finds the view by this very name.
  absl::Status PermitIndexName(const RequestObject& r) const {
    if (!Restricted()) return absl::OkStatus();
    API_ASSIGN_OR_RETURN(std::optional<std::string_view> index, r.String("IndexName"));
    if (!index.has_value() || index->size() > kMaxNameBytes) return absl::OkStatus();
    v1::DescribeViewRequest d;
    d.set_view(std::string(*index));
    return Permit(d);
  }

  // A table's items (GetItem, BatchGetItem): only for a caller with views: all, checked before
  // the table is looked up.
  absl::Status PermitItems(std::string_view given) const {
    if (!Restricted()) return absl::OkStatus();
    return PermitEverything(*request_.who,
                            Cat("table ", QuoteBounded(AbslView(given)), "'s items"));
  }

  // Select's checks; the effective Select.
  // `query`: Query words the projection-with-COUNT refusal as a validation error list ("1
  // validation error detected: ..."), Scan without that prefix, as DynamoDB does.
  absl::StatusOr<std::string_view> ReadSelect(const RequestObject& r, const ViewContext& v,
                                              bool has_projection, bool query) const {
    std::optional<std::string_view> select;
    API_RETURN_IF_ERROR(CheckEnum(
        r, "Select", "select",
        {"SPECIFIC_ATTRIBUTES", "COUNT", "ALL_ATTRIBUTES", "ALL_PROJECTED_ATTRIBUTES"}, &select));
    std::string_view s = select.value_or(has_projection ? "SPECIFIC_ATTRIBUTES"
                                                        : "ALL_PROJECTED_ATTRIBUTES");
    const std::string_view given = r.Has("ProjectionExpression") ? "ProjectionExpression"
                                                                 : "AttributesToGet";
    if (s == "SPECIFIC_ATTRIBUTES") {
      if (!has_projection) {
        return ValidationError(
            "Must specify the AttributesToGet or ProjectionExpression when choosing to get "
            "SPECIFIC_ATTRIBUTES");
      }
    } else if (has_projection) {
      return ValidationError(Cat(query ? "1 validation error detected: " : "",
                                 "Cannot specify the ", given, " when choosing to get ",
                                 s == "COUNT" ? "only the Count" : s));
    }
    if (s == "ALL_ATTRIBUTES" && v.spec->projection.kind != ProjectionKind::kAll) {
      return ValidationError(Cat(
          kInvalid, "Select type ALL_ATTRIBUTES is not supported for global secondary index ",
          v.spec->name, " because its projection type is not ALL"));
    }
    return s;
  }

  // A GSI answers only what it projects: DynamoDB refuses a projection of anything else.
  static absl::Status CheckProjected(const std::optional<std::vector<Path>>& paths,
                                     const ViewContext& v) {
    if (!paths.has_value() || v.projected.empty()) return absl::OkStatus();
    std::vector<std::string_view> missing;
    std::set<std::string_view> seen;
    for (const Path& path : *paths) {
      const std::string& top = path.front().name;
      if (!v.projected.contains(top) && seen.insert(top).second) missing.push_back(top);
    }
    if (missing.empty()) return absl::OkStatus();
    return ValidationError(Cat(kInvalid, "Global secondary index ", v.spec->name,
                               " does not project [", Join(missing, ", "), "]"));
  }

  absl::StatusOr<std::optional<uint64_t>> ReadLimit(const RequestObject& r) const {
    API_ASSIGN_OR_RETURN(std::optional<int64_t> limit, r.Integer("Limit"));
    if (!limit.has_value()) return std::optional<uint64_t>();
    if (*limit < 1) {
      return ConstraintError(Cat("'", *limit, "'"), "limit",
                             "Member must have value greater than or equal to 1");
    }
    return std::optional<uint64_t>(static_cast<uint64_t>(*limit));
  }

  absl::Status ReadConsistentReadOnIndex(const RequestObject& r) const {
    API_ASSIGN_OR_RETURN(std::optional<bool> consistent, r.Bool("ConsistentRead"));
    if (consistent.value_or(false)) {
      return ValidationError("Consistent reads are not supported on global secondary indexes");
    }
    return absl::OkStatus();
  }

  // A page of evaluated entries, as DynamoDB counts it.
  struct Page {
    std::string items;  // the items' JSON, joined by ","
    uint64_t count = 0;
    uint64_t scanned = 0;
    uint64_t bytes = 0;  // their ItemSize
    uint64_t charged = 0;  // the ItemSize of those in the segment: what DynamoDB reads for it
    std::optional<Item> last_evaluated;
    std::string applied_token;
    bool stopped = false;  // by Limit or the 1 MB
  };

  // Evaluates `entries` into `page` (filter, projection, Select); stops at Limit or 1 MB. Returns
  // whether the page is complete; `in_segment` picks the entries that count (Scan segments).
  template <typename Entries, typename InSegment>
  absl::Status Evaluate(const Entries& entries, bool more_after, const ViewContext& v,
                        const Condition* filter, const Projection* projection,
                        bool count_only, std::optional<uint64_t> limit, InSegment in_segment,
                        Page* page) const {
    for (int i = 0; i < entries.size(); ++i) {
      const v1::ViewEntry& entry = entries[i];
      API_ASSIGN_OR_RETURN(Item item, IndexItem(entry, v));
      const uint64_t size = ItemSize(item);
      page->bytes += size;
      if (in_segment(entry)) {
        page->charged += size;
        ++page->scanned;
        if (filter == nullptr || filter->Matches(item)) {
          ++page->count;
          if (!count_only) {
            if (!page->items.empty()) page->items.push_back(',');
            page->items.append(EncodeDynamoDbJson(projection != nullptr ? projection->Apply(item) : item));
          }
        }
      }
      const bool full = (limit.has_value() && page->scanned >= *limit) || page->bytes >= kPageBytes;
      if (full) {
        page->stopped = true;
        if (i + 1 < entries.size() || more_after) page->last_evaluated = StartKeyOf(item, v);
        return absl::OkStatus();
      }
    }
    return absl::OkStatus();
  }

  // Bounds the next ViewQueries call: at most kEntriesPerCall entries (`limit_left` at most)
  // and none after the one that reaches its max_bytes of stored entries. Under
  // ApiRequest::inline_bytes that is the bound itself, and the page is that one call. Else it
  // is what is left of the 1 MB page (ItemSize), at least kMinCallBytes: the store counts its
  // own bytes, a little more than ItemSize, and without the floor the calls near the end of a
  // page would shrink by that margin each; what is read past the page Evaluate leaves. A call
  // that carries the request's wait reads one entry when ApiRequest::before_build is set.
  template <typename Request>
  void BoundCall(const Page& page, std::optional<uint64_t> limit_left, Request* call) const {
    uint64_t want = kEntriesPerCall;
    if (limit_left.has_value()) want = std::min(want, *limit_left);
    uint64_t bound = request_.inline_bytes;
    if (bound == 0) bound = std::max(kMinCallBytes, kPageBytes - std::min(kPageBytes, page.bytes));
    if (call->has_consistency() && request_.before_build) want = bound = 1;
    call->set_limit(static_cast<uint32_t>(want));
    call->set_max_bytes(static_cast<uint32_t>(bound));
  }

  // Before a read that builds the page (not one that carries the request's wait):
  // ApiRequest::before_build, once.
  absl::Status BeforeBuild() {
    if (!request_.before_build || built_) return absl::OkStatus();
    built_ = true;
    return request_.before_build();
  }

  // One DynamoDB page of a Query or Scan: ViewQueries calls through `read`, each bounded by
  // BoundCall (the first carries the request's wait, the rest come after BeforeBuild),
  // evaluated until Limit, 1 MB or the view's end; under ApiRequest::inline_bytes one call, or
  // run_long. `limit_bounds_calls`: whether Limit also bounds what a call reads.
  template <typename Request, typename Read, typename InSegment>
  absl::StatusOr<Answer> ReadPage(Request* call, Read read, const ViewContext& v,
                                  const Condition* filter,
                                  const std::optional<std::vector<Path>>& paths, bool count_only,
                                  std::optional<uint64_t> limit, bool limit_bounds_calls,
                                  InSegment in_segment) {
    std::optional<Projection> projection;
    if (paths.has_value()) projection.emplace(*paths);
    Page page;
    for (;;) {
      std::optional<uint64_t> limit_left;
      if (limit.has_value() && limit_bounds_calls) limit_left = *limit - page.scanned;
      BoundCall(page, limit_left, call);
      if (!call->has_consistency()) API_RETURN_IF_ERROR(BeforeBuild());
      auto response = read(*call);
      if (!response.ok()) return ViewReadError(response.status(), v);
      call->clear_consistency();  // waited for once; the later calls read later states
      page.applied_token = response->applied().token();
      const bool more = !response->next_page_token().empty();
      API_RETURN_IF_ERROR(Evaluate(response->entries(), more, v, filter,
                                   projection.has_value() ? &*projection : nullptr, count_only,
                                   limit, in_segment, &page));
      if (page.stopped || !more) break;
      if (request_.inline_bytes > 0) return RunLong();  // its one read ended by its bytes
      call->set_page_token(response->next_page_token());
    }
    return PageAnswer(page, count_only);
  }

  static Answer RunLong() {
    Answer answer;
    answer.run_long = true;
    return answer;
  }

  Answer PageAnswer(const Page& page, bool count_only) const {
    JsonWriter w;
    w.BeginObject();
    WriteCapacity(w, ReadUnits(page.charged, /*consistent=*/false));
    if (!count_only) {
      w.Key("Items");
      w.RawArray(page.items);
    }
    w.Key("Count");
    w.Int(page.count);
    w.Key("ScannedCount");
    w.Int(page.scanned);
    if (page.last_evaluated.has_value()) {
      w.Key("LastEvaluatedKey");
      w.ItemValue(*page.last_evaluated);
    }
    w.EndObject();
    return Answer{w.Take(), page.applied_token};
  }

  // ---- ConsumedCapacity: what DynamoDB would have charged for the same read

  // ReturnConsumedCapacity TOTAL or INDEXES, with what the answer names: the table as the
  // caller named it, and the index read (none for GetItem and BatchGetItem).
  struct CapacityAsked {
    std::string mode;
    std::string table;
    std::string index;
  };
  absl::Status AskCapacity(const RequestObject& r, std::string_view table,
                           std::string_view index = {}) {
    API_ASSIGN_OR_RETURN(std::optional<std::string_view> mode, r.String("ReturnConsumedCapacity"));
    if (mode.has_value() && *mode != "NONE") {
      capacity_ = CapacityAsked{std::string(*mode), std::string(table), std::string(index)};
    }
    return absl::OkStatus();
  }

  // DynamoDB's read units for `bytes` of items: one per 4 KB begun, at least one; half a unit
  // each for an eventually consistent read.
  static double ReadUnits(uint64_t bytes, bool consistent) {
    const uint64_t units = std::max<uint64_t>(1, (bytes + kReadUnitBytes - 1) / kReadUnitBytes);
    return static_cast<double>(units) * (consistent ? 1.0 : 0.5);
  }

  // "ConsumedCapacity" (a member of the answer's object being written) when it was asked.
  void WriteCapacity(JsonWriter& w, double units) const {
    if (!capacity_.has_value()) return;
    w.Key("ConsumedCapacity");
    WriteCapacityOf(w, capacity_->table, units);
  }
  // DynamoDB gives the read units twice, as CapacityUnits and ReadCapacityUnits, at each level.
  void WriteCapacityOf(JsonWriter& w, std::string_view table, double units) const {
    auto both = [&w, units] {
      w.Key("CapacityUnits");
      w.Double(units);
      w.Key("ReadCapacityUnits");
      w.Double(units);
    };
    w.BeginObject();
    w.Key("TableName");
    w.String(table);
    both();
    if (capacity_->mode == "INDEXES") {
      w.Key(capacity_->index.empty() ? "Table" : "GlobalSecondaryIndexes");
      w.BeginObject();
      if (!capacity_->index.empty()) {
        w.Key(capacity_->index);
        w.BeginObject();
      }
      both();
      if (!capacity_->index.empty()) w.EndObject();
      w.EndObject();
    }
    w.EndObject();
  }

  // Query's and Scan's enumerated members, checked before anything else as DynamoDB does.
  absl::Status CheckReadEnums(const RequestObject& r) const {
    API_RETURN_IF_ERROR(CheckEnum(r, "Select", "select",
                                  {"SPECIFIC_ATTRIBUTES", "COUNT", "ALL_ATTRIBUTES",
                                   "ALL_PROJECTED_ATTRIBUTES"}));
    API_RETURN_IF_ERROR(CheckEnum(r, "ReturnConsumedCapacity", "returnConsumedCapacity",
                                  {"INDEXES", "TOTAL", "NONE"}));
    API_RETURN_IF_ERROR(CheckEnum(r, "ConditionalOperator", "conditionalOperator", {"AND", "OR"}));
    return absl::OkStatus();
  }

  absl::StatusOr<Answer> Query(const RequestObject& r) {
    API_RETURN_IF_ERROR(CheckReadEnums(r));
    API_ASSIGN_OR_RETURN(std::optional<uint64_t> limit, ReadLimit(r));
    API_ASSIGN_OR_RETURN(std::optional<bool> forward, r.Bool("ScanIndexForward"));
    API_ASSIGN_OR_RETURN(std::optional<dom::object> key_conditions, r.Object("KeyConditions"));
    std::optional<dom::element> start = r.Element("ExclusiveStartKey");
    std::string_view table_name;
    API_ASSIGN_OR_RETURN(TableRef table, ReadKnownTable(r, &table_name));
    API_RETURN_IF_ERROR(PermitIndexName(r));
    API_ASSIGN_OR_RETURN(ViewContext v, ReadIndex(r, table));
    API_RETURN_IF_ERROR(AskCapacity(r, table_name, v.spec->name));
    API_RETURN_IF_ERROR(ReadConsistentReadOnIndex(r));

    Expressions e;
    API_RETURN_IF_ERROR(ReadExpressionAttributes(
        r, {"KeyConditionExpression", "FilterExpression", "ProjectionExpression"},
        {"KeyConditionExpression", "FilterExpression"},
        {"KeyConditions", "QueryFilter", "AttributesToGet", "ConditionalOperator"}, &e));
    if (r.Has("QueryFilter")) {
      return ValidationError("cdcview serves FilterExpression; QueryFilter is not served");
    }
    API_ASSIGN_OR_RETURN(std::optional<std::string_view> key_text,
                         r.String("KeyConditionExpression"));
    KeyCondition condition;
    if (key_text.has_value()) {
      API_ASSIGN_OR_RETURN(condition, ParseKeyCondition(*key_text, &e.placeholders));
    } else if (key_conditions.has_value()) {
      API_ASSIGN_OR_RETURN(condition, ReadKeyConditions(*key_conditions));
    } else {
      return ValidationError(
          "Either the KeyConditions or KeyConditionExpression parameter must be specified in the "
          "request.");
    }
    API_ASSIGN_OR_RETURN(std::optional<std::string_view> filter_text, r.String("FilterExpression"));
    std::unique_ptr<const Condition> filter;
    if (filter_text.has_value()) {
      API_ASSIGN_OR_RETURN(filter, ParseCondition(*filter_text, &e.placeholders));
    }
    API_ASSIGN_OR_RETURN(std::optional<std::vector<Path>> paths, ReadProjection(r, &e));
    API_RETURN_IF_ERROR(CheckUnused(e));

    v1::QueryRequest q;
    q.set_view(v.spec->name);
    q.set_scan_backward(!forward.value_or(true));
    AttributeValue partition;
    const KeyCondition::Term* sort_term = nullptr;
    API_RETURN_IF_ERROR(ApplyKeyCondition(condition, v, &q, &partition, &sort_term));
    if (filter != nullptr) {
      // DynamoDB filters a Query on attributes other than the queried index's keys, which
      // belong in the key condition. The table's own keys are ordinary attributes of an index
      // item (an inverted index has them as its keys).
      for (const std::string& name : filter->TopLevelNames()) {
        for (const std::string* key : {&v.pk.name, v.sk.has_value() ? &v.sk->name : nullptr}) {
          if (key != nullptr && *key == name) {
            return ValidationError(Cat(
                "Filter Expression can only contain non-primary key attributes: Primary key "
                "attribute: ", name));
          }
        }
      }
    }
    API_ASSIGN_OR_RETURN(std::string_view select,
                         ReadSelect(r, v, paths.has_value(), /*query=*/true));
    API_RETURN_IF_ERROR(CheckProjected(paths, v));

    const bool merged = v.spec->shards.enabled() && !v.spec->shards.Split(partition.scalar());
    if (merged && request_.inline_shards > 0 && v.spec->shards.count > request_.inline_shards) {
      return RunLong();
    }
    if (start.has_value()) {
      API_ASSIGN_OR_RETURN(Item start_key, DecodeAttributeMap(*start));
      AttributeValue start_pk;
      API_ASSIGN_OR_RETURN(std::string entry_key, EntryKeyOf(start_key, v, &start_pk));
      std::string encoded_pk;
      EncodeKeyComponent(start_pk, &encoded_pk);
      if (sort_term != nullptr && !InSortRange(start_key.find(v.sk->name)->second, *sort_term)) {
        return ValidationError(kStartOutside);
      }
      if (merged) {
        auto split = v.spec->shards.Split(start_pk.scalar());
        if (!split.has_value() || split->first != partition.scalar()) {
          return ValidationError(kStartOutside);
        }
        std::string logical_key;
        EncodeKeyComponent(partition, &logical_key);
        q.set_page_token(EncodeMergedPageToken(v.ref->fingerprint, q.scan_backward(),
                                               v.spec->shards, logical_key,
                                               std::string_view(entry_key).substr(encoded_pk.size())));
      } else {
        if (start_pk != partition) return ValidationError(kStartOutside);
        q.set_page_token(EncodePageToken(v.ref->fingerprint, q.scan_backward(), entry_key));
      }
    }

    API_ASSIGN_OR_RETURN(std::optional<v1::ReadConsistency> consistency,
                         ReadConsistencyHeaders(request_));
    if (consistency.has_value()) *q.mutable_consistency() = *consistency;

    return ReadPage(
        &q, [&](const v1::QueryRequest& call) { return queries_.Query(call, request_.deadline); },
        v, filter.get(), paths, select == "COUNT", limit, /*limit_bounds_calls=*/true,
        [](const v1::ViewEntry&) { return true; });
  }

  absl::StatusOr<Answer> Scan(const RequestObject& r) {
    API_RETURN_IF_ERROR(CheckReadEnums(r));
    API_ASSIGN_OR_RETURN(std::optional<uint64_t> limit, ReadLimit(r));
    API_ASSIGN_OR_RETURN(std::optional<int64_t> segment, r.Integer("Segment"));
    API_ASSIGN_OR_RETURN(std::optional<int64_t> total, r.Integer("TotalSegments"));
    if (total.has_value() && (*total < 1 || *total > 1000000)) {
      return ConstraintError(Cat("'", *total, "'"), "totalSegments",
                             *total < 1 ? "Member must have value greater than or equal to 1"
                                        : "Member must have value less than or equal to 1000000");
    }
    if (segment.has_value() && (*segment < 0 || *segment > 999999)) {
      return ConstraintError(Cat("'", *segment, "'"), "segment",
                             *segment < 0 ? "Member must have value greater than or equal to 0"
                                          : "Member must have value less than or equal to 999999");
    }
    if (segment.has_value() && !total.has_value()) {
      return ValidationError(
          "The TotalSegments parameter is required but was not present in the request when "
          "Segment parameter is present");
    }
    if (total.has_value() && !segment.has_value()) {
      return ValidationError(
          "The Segment parameter is required but was not present in the request when parameter "
          "TotalSegments is present");
    }
    if (segment.has_value() && *segment >= *total) {
      return ValidationError(Cat(
          "The Segment parameter is zero-based and must be less than parameter TotalSegments: "
          "Segment: ", *segment, " is not less than TotalSegments: ", *total));
    }
    std::optional<dom::element> start = r.Element("ExclusiveStartKey");
    std::string_view table_name;
    API_ASSIGN_OR_RETURN(TableRef table, ReadKnownTable(r, &table_name));
    API_RETURN_IF_ERROR(PermitIndexName(r));
    API_ASSIGN_OR_RETURN(ViewContext v, ReadIndex(r, table));
    API_RETURN_IF_ERROR(AskCapacity(r, table_name, v.spec->name));
    API_RETURN_IF_ERROR(ReadConsistentReadOnIndex(r));

    Expressions e;
    API_RETURN_IF_ERROR(ReadExpressionAttributes(
        r, {"FilterExpression", "ProjectionExpression"}, {"FilterExpression"},
        {"ScanFilter", "AttributesToGet", "ConditionalOperator"}, &e));
    if (r.Has("ScanFilter")) {
      return ValidationError("cdcview serves FilterExpression; ScanFilter is not served");
    }
    API_ASSIGN_OR_RETURN(std::optional<std::string_view> filter_text, r.String("FilterExpression"));
    std::unique_ptr<const Condition> filter;
    if (filter_text.has_value()) {
      API_ASSIGN_OR_RETURN(filter, ParseCondition(*filter_text, &e.placeholders));
    }
    API_ASSIGN_OR_RETURN(std::optional<std::vector<Path>> paths, ReadProjection(r, &e));
    API_RETURN_IF_ERROR(CheckUnused(e));
    API_ASSIGN_OR_RETURN(std::string_view select,
                         ReadSelect(r, v, paths.has_value(), /*query=*/false));
    API_RETURN_IF_ERROR(CheckProjected(paths, v));

    v1::ScanRequest s;
    s.set_view(v.spec->name);
    if (start.has_value()) {
      API_ASSIGN_OR_RETURN(Item start_key, DecodeAttributeMap(*start));
      AttributeValue start_pk;
      API_ASSIGN_OR_RETURN(std::string entry_key, EntryKeyOf(start_key, v, &start_pk));
      s.set_page_token(EncodePageToken(v.ref->fingerprint, false, entry_key));
    }
    API_ASSIGN_OR_RETURN(std::optional<v1::ReadConsistency> consistency,
                         ReadConsistencyHeaders(request_));
    if (consistency.has_value()) *s.mutable_consistency() = *consistency;

    // A partition belongs to one segment: FNV-1a-64 of its encoded key, modulo TotalSegments.
    const uint64_t segments = total.value_or(1);
    const uint64_t mine = segment.value_or(0);
    auto in_segment = [&](const v1::ViewEntry& entry) {
      if (segments == 1) return true;
      absl::StatusOr<AttributeValue> pk = FromProto(entry.partition_key(), "partition_key");
      if (!pk.ok()) return false;
      std::string encoded;
      EncodeKeyComponent(*pk, &encoded);
      return Fnv1a64(encoded) % segments == mine;
    };
    // A segment keeps its own entries of the whole view's: Limit cannot bound what a call reads.
    return ReadPage(
        &s, [&](const v1::ScanRequest& call) { return queries_.Scan(call, request_.deadline); },
        v, filter.get(), paths, select == "COUNT", limit, /*limit_bounds_calls=*/segments == 1,
        in_segment);
  }

  // A table key given by the client: exactly the table's key attributes, of their types.
  absl::StatusOr<Item> ReadKey(dom::element value, const TableSpec& table) const {
    API_ASSIGN_OR_RETURN(Item key, DecodeAttributeMap(value));
    const size_t want = table.key.sort.has_value() ? 2 : 1;
    auto matches = [&](const std::string& name, AttrType type) {
      auto it = key.find(name);
      return it != key.end() && it->second.type() == type;
    };
    if (key.size() != want || !matches(table.key.partition, table.key.partition_type) ||
        (table.key.sort.has_value() && !matches(*table.key.sort, table.key.sort_type))) {
      return ValidationError("The provided key element does not match the schema");
    }
    for (const auto& [name, v] : key) {
      if (v.type() != AttrType::kN && v.scalar().empty()) {
        return ValidationError(EmptyKeyMessage(v.type(), name));
      }
    }
    // DynamoDB's key size limits, in its words (the missing space is DynamoDB's).
    if (AttributeValueSize(key.at(table.key.partition)) > kMaxPartitionKeyBytes) {
      return ValidationError(Cat("One or more parameter values were invalid: Size of hashkey has "
                                 "exceeded the maximum size limit of", kMaxPartitionKeyBytes,
                                 " bytes"));
    }
    if (table.key.sort.has_value() &&
        AttributeValueSize(key.at(*table.key.sort)) > kMaxSortKeyBytes) {
      return ValidationError(Cat("One or more parameter values were invalid: Aggregated size of "
                                 "all range keys has exceeded the size limit of ",
                                 kMaxSortKeyBytes, " bytes"));
    }
    return key;
  }

  absl::StatusOr<Answer> GetItem(const RequestObject& r) {
    API_RETURN_IF_ERROR(CheckEnum(r, "ReturnConsumedCapacity", "returnConsumedCapacity",
                                  {"INDEXES", "TOTAL", "NONE"}));
    // Answered from the applied state either way; it sets what ConsumedCapacity says.
    API_ASSIGN_OR_RETURN(std::optional<bool> consistent, r.Bool("ConsistentRead"));
    std::optional<dom::element> key_json = r.Element("Key");
    std::string_view table_name;
    API_ASSIGN_OR_RETURN(table_name, RequiredString(r, "TableName", "tableName"));
    if (!key_json.has_value()) return Required("key");
    API_RETURN_IF_ERROR(PermitItems(table_name));
    API_ASSIGN_OR_RETURN(TableRef table, FindTable(table_name));
    v1::GetItemRequest g;
    g.set_table(table.spec->name);
    API_RETURN_IF_ERROR(AskCapacity(r, table_name));
    API_ASSIGN_OR_RETURN(Item key, ReadKey(*key_json, *table.spec));
    Expressions e;
    API_RETURN_IF_ERROR(ReadExpressionAttributes(r, {"ProjectionExpression"}, {},
                                                 {"AttributesToGet"}, &e));
    API_ASSIGN_OR_RETURN(std::optional<std::vector<Path>> paths, ReadProjection(r, &e));
    API_RETURN_IF_ERROR(CheckUnused(e));

    ToProto(key, g.mutable_key());
    API_ASSIGN_OR_RETURN(std::optional<v1::ReadConsistency> consistency,
                         ReadConsistencyHeaders(request_));
    if (consistency.has_value()) *g.mutable_consistency() = *consistency;
    API_ASSIGN_OR_RETURN(v1::GetItemResponse response, queries_.GetItem(g, request_.deadline));
    JsonWriter w;
    w.BeginObject();
    uint64_t size = 0;
    if (response.found()) {
      API_ASSIGN_OR_RETURN(Item item, Stored(response.item(), "item"));
      size = ItemSize(item);
      w.Key("Item");
      w.ItemValue(paths.has_value() ? Project(item, *paths) : item);
    }
    WriteCapacity(w, ReadUnits(size, consistent.value_or(false)));
    w.EndObject();
    return Answer{w.Take(), response.applied().token()};
  }

  absl::StatusOr<Answer> BatchGetItem(const RequestObject& r) {
    API_RETURN_IF_ERROR(CheckEnum(r, "ReturnConsumedCapacity", "returnConsumedCapacity",
                                  {"INDEXES", "TOTAL", "NONE"}));
    API_RETURN_IF_ERROR(AskCapacity(r, ""));
    API_ASSIGN_OR_RETURN(std::optional<dom::object> request_items, r.Object("RequestItems"));
    if (!request_items.has_value()) return Required("requestItems");
    if (request_items->size() == 0) {
      return ConstraintError("'{}'", "requestItems",
                             "Member must have length greater than or equal to 1");
    }
    struct TableRead {
      std::string_view name;  // as the caller named it
      TableRef table;
      dom::object spec;       // as the caller gave it (UnprocessedKeys repeats its members)
      std::vector<Item> keys;
      std::optional<Projection> projection;
      bool consistent = false;  // ConsistentRead: what ConsumedCapacity says
      double units = 0;         // ConsumedCapacity's, for the keys read
    };
    std::vector<TableRead> reads;
    size_t total = 0;
    for (dom::key_value_pair field : *request_items) {
      if (field.value.is_null()) continue;
      if (!field.value.is_object()) return WrongJsonType(field.value, "structure");
      RequestObject spec{dom::object(field.value)};
      API_ASSIGN_OR_RETURN(std::optional<dom::array> keys, spec.Array("Keys"));
      if (!keys.has_value()) return Required(Cat("requestItems.", ValueText(field.key), ".member.keys"));
      total += keys->size();
      if (total > kMaxBatchGetKeys) {
        return ValidationError("Too many items requested for the BatchGetItem call");
      }
      if (keys->size() == 0) {
        return ConstraintError("'[]'", Cat("requestItems.", ValueText(field.key), ".member.keys"),
                               "Member must have length greater than or equal to 1");
      }
    }
    for (dom::key_value_pair field : *request_items) {
      if (field.value.is_null()) continue;
      RequestObject spec{dom::object(field.value)};
      TableRead read;
      read.name = field.key;
      read.spec = dom::object(field.value);
      API_RETURN_IF_ERROR(PermitItems(field.key));
      API_ASSIGN_OR_RETURN(read.table, FindTable(field.key));
      for (const TableRead& earlier : reads) {
        if (earlier.table.index == read.table.index) {
          return ValidationError(Cat(
              "RequestItems names table ", read.table.spec->name, " more than once (as ",
              QuoteBounded(AbslView(earlier.name)), " and ", QuoteBounded(AbslView(read.name)),
              "); name each table once"));
        }
      }
      API_ASSIGN_OR_RETURN(std::optional<bool> consistent, spec.Bool("ConsistentRead"));
      read.consistent = consistent.value_or(false);
      API_ASSIGN_OR_RETURN(std::optional<dom::array> keys, spec.Array("Keys"));
      std::set<std::string> seen;
      for (dom::element key_json : *keys) {
        API_ASSIGN_OR_RETURN(Item key, ReadKey(key_json, *read.table.spec));
        if (!seen.insert(catalog_.builder(read.table.index).PrimaryKey(key)).second) {
          return ValidationError("Provided list of item keys contains duplicates");
        }
        read.keys.push_back(std::move(key));
      }
      Expressions e;
      API_RETURN_IF_ERROR(ReadExpressionAttributes(spec, {"ProjectionExpression"}, {},
                                                   {"AttributesToGet"}, &e));
      API_ASSIGN_OR_RETURN(std::optional<std::vector<Path>> paths, ReadProjection(spec, &e));
      API_RETURN_IF_ERROR(CheckUnused(e));
      if (paths.has_value()) read.projection.emplace(*paths);
      reads.push_back(std::move(read));
    }
    API_ASSIGN_OR_RETURN(std::optional<v1::ReadConsistency> consistency,
                         ReadConsistencyHeaders(request_));
    // The waits first: one key of each table (each table waits for its own sources), then
    // the build.
    if (request_.before_build && consistency.has_value()) {
      for (const TableRead& read : reads) {
        v1::GetItemRequest g;
        g.set_table(read.table.spec->name);
        ToProto(read.keys.front(), g.mutable_key());
        *g.mutable_consistency() = *consistency;
        API_RETURN_IF_ERROR(queries_.GetItem(g, request_.deadline).status());
      }
    }
    API_RETURN_IF_ERROR(BeforeBuild());
    Answer answer;
    JsonWriter w;
    w.BeginObject();
    w.Key("Responses");
    w.BeginObject();
    // DynamoDB answers at most 16 MB of items; the keys past that are UnprocessedKeys, in the
    // request's shape: (read, first unprocessed key).
    uint64_t bytes = 0;
    std::optional<std::pair<size_t, size_t>> unprocessed;
    for (size_t t = 0; t < reads.size(); ++t) {
      TableRead& read = reads[t];
      w.Key(read.name);
      w.BeginArray();
      for (size_t k = 0; k < read.keys.size() && !unprocessed.has_value(); ++k) {
        v1::GetItemRequest g;
        g.set_table(read.table.spec->name);
        ToProto(read.keys[k], g.mutable_key());
        if (consistency.has_value()) *g.mutable_consistency() = *consistency;
        API_ASSIGN_OR_RETURN(v1::GetItemResponse response, queries_.GetItem(g, request_.deadline));
        answer.applied_token = response.applied().token();
        if (!response.found()) {
          read.units += ReadUnits(0, read.consistent);
          continue;
        }
        API_ASSIGN_OR_RETURN(Item item, Stored(response.item(), "item"));
        const double units = ReadUnits(ItemSize(item), read.consistent);
        if (read.projection.has_value()) item = read.projection->Apply(item);
        const uint64_t size = ItemSize(item);
        if (bytes + size > kMaxBatchGetBytes) {
          unprocessed.emplace(t, k);
          break;
        }
        bytes += size;
        read.units += units;
        w.ItemValue(item);
      }
      w.EndArray();  // a table past the 16 MB answers [], as DynamoDB lists every table
    }
    w.EndObject();
    w.Key("UnprocessedKeys");
    w.BeginObject();
    if (unprocessed.has_value()) {
      for (size_t t = unprocessed->first; t < reads.size(); ++t) {
        const TableRead& read = reads[t];
        w.Key(read.name);
        w.BeginObject();
        w.Key("Keys");
        w.BeginArray();
        for (size_t k = t == unprocessed->first ? unprocessed->second : 0; k < read.keys.size(); ++k) {
          w.ItemValue(read.keys[k]);
        }
        w.EndArray();
        for (dom::key_value_pair member : read.spec) {
          if (std::string_view(member.key) == "Keys" || member.value.is_null()) continue;
          w.Key(member.key);
          w.RawValue(simdjson::minify(member.value));
        }
        w.EndObject();
      }
    }
    w.EndObject();
    if (capacity_.has_value()) {
      w.Key("ConsumedCapacity");
      w.BeginArray();
      for (const TableRead& read : reads) WriteCapacityOf(w, read.name, read.units);
      w.EndArray();
    }
    w.EndObject();
    answer.body = w.Take();
    return answer;
  }

  void KeySchema(JsonWriter& w, std::string_view hash, const std::string* range) const {
    w.Key("KeySchema");
    w.BeginArray();
    w.BeginObject();
    w.Key("AttributeName");
    w.String(hash);
    w.Key("KeyType");
    w.String("HASH");
    w.EndObject();
    if (range != nullptr) {
      w.BeginObject();
      w.Key("AttributeName");
      w.String(*range);
      w.Key("KeyType");
      w.String("RANGE");
      w.EndObject();
    }
    w.EndArray();
  }

  static void ZeroThroughput(JsonWriter& w) {
    w.Key("ProvisionedThroughput");
    w.BeginObject();
    w.Key("NumberOfDecreasesToday");
    w.Int(0);
    w.Key("ReadCapacityUnits");
    w.Int(0);
    w.Key("WriteCapacityUnits");
    w.Int(0);
    w.EndObject();
  }

  absl::StatusOr<Answer> DescribeTable(const RequestObject& r) {
    API_ASSIGN_OR_RETURN(std::string_view given, RequiredString(r, "TableName", "tableName"));
    const std::string_view name = TableNameOf(given);
    API_ASSIGN_OR_RETURN(
        TableRef table,
        Known(FindTable(name, Cat("Requested resource not found: Table: ",
                                  name.size() <= kMaxNameBytes ? name : ValueText(name),
                                  " not found")),
              given));
    API_ASSIGN_OR_RETURN(v1::ListViewsResponse views, queries_.ListViews());
    const TableSpec& spec = *table.spec;
    std::vector<std::pair<std::string, AttrType>> definitions;
    auto define = [&](const std::string& attribute, AttrType type) {
      for (const auto& d : definitions) {
        if (d.first == attribute) return;
      }
      definitions.emplace_back(attribute, type);
    };
    define(spec.key.partition, spec.key.partition_type);
    if (spec.key.sort.has_value()) define(*spec.key.sort, spec.key.sort_type);
    std::vector<ViewContext> indexes;
    for (const ViewRef& ref : catalog_.views()) {
      if (ref.table != table.index) continue;
      if (request_.who != nullptr) {
        v1::DescribeViewRequest d;
        d.set_view(ref.spec->name);
        if (!PermitRead(*request_.who, d).ok()) continue;
      }
      ViewContext v = ContextOf(catalog_, ref);
      define(v.pk.name, v.pk.type);
      if (v.sk.has_value()) define(v.sk->name, v.sk->type);
      indexes.push_back(std::move(v));
    }
    const std::string arn = Cat(kArnPrefix, name);
    JsonWriter w;
    w.BeginObject();
    w.Key("Table");
    w.BeginObject();
    w.Key("AttributeDefinitions");
    w.BeginArray();
    for (const auto& [attribute, type] : definitions) {
      w.BeginObject();
      w.Key("AttributeName");
      w.String(attribute);
      w.Key("AttributeType");
      w.String(AttrTypeName(type));
      w.EndObject();
    }
    w.EndArray();
    w.Key("TableName");
    w.String(name);
    KeySchema(w, spec.key.partition, spec.key.sort.has_value() ? &*spec.key.sort : nullptr);
    w.Key("TableStatus");
    w.String("ACTIVE");
    w.Key("CreationDateTime");
    w.Double(creation_date_time_);
    ZeroThroughput(w);
    w.Key("TableSizeBytes");
    w.Int(0);
    w.Key("ItemCount");
    w.Int(0);
    w.Key("TableArn");
    w.String(arn);
    w.Key("BillingModeSummary");
    w.BeginObject();
    w.Key("BillingMode");
    w.String("PAY_PER_REQUEST");
    w.Key("LastUpdateToPayPerRequestDateTime");
    w.Double(creation_date_time_);
    w.EndObject();
    if (!indexes.empty()) {
      w.Key("GlobalSecondaryIndexes");
      w.BeginArray();
      for (const ViewContext& v : indexes) {
        const v1::ViewDescription* d = nullptr;
        for (const v1::ViewDescription& candidate : views.views()) {
          if (candidate.name() == v.spec->name) d = &candidate;
        }
        w.BeginObject();
        w.Key("IndexName");
        w.String(v.spec->name);
        KeySchema(w, v.pk.name, v.sk.has_value() ? &v.sk->name : nullptr);
        w.Key("Projection");
        w.BeginObject();
        w.Key("ProjectionType");
        switch (v.spec->projection.kind) {
          case ProjectionKind::kAll: w.String("ALL"); break;
          case ProjectionKind::kKeysOnly: w.String("KEYS_ONLY"); break;
          case ProjectionKind::kInclude: {
            w.String("INCLUDE");
            w.Key("NonKeyAttributes");
            w.BeginArray();
            for (const std::string& a : v.spec->projection.include) w.String(a);
            w.EndArray();
            break;
          }
        }
        w.EndObject();
        const bool active = d != nullptr && d->state() == v1::ViewDescription::READY;
        w.Key("IndexStatus");
        w.String(active ? "ACTIVE" : "CREATING");
        if (!active) {
          w.Key("Backfilling");
          w.Bool(true);
        }
        ZeroThroughput(w);
        w.Key("IndexSizeBytes");
        w.Int(d != nullptr ? d->bytes() : 0);
        w.Key("ItemCount");
        w.Int(d != nullptr ? d->item_count() : 0);
        w.Key("IndexArn");
        w.String(Cat(arn, "/index/", v.spec->name));
        w.EndObject();
      }
      w.EndArray();
    }
    w.EndObject();
    w.EndObject();
    return Answer{w.Take(), ""};
  }

  absl::StatusOr<Answer> ListTables(const RequestObject& r) {
    API_ASSIGN_OR_RETURN(std::optional<std::string_view> after, r.String("ExclusiveStartTableName"));
    API_ASSIGN_OR_RETURN(std::optional<int64_t> limit, r.Integer("Limit"));
    if (limit.has_value() && (*limit < 1 || *limit > 100)) {
      return ConstraintError(Cat("'", *limit, "'"), "limit",
                             *limit < 1 ? "Member must have value greater than or equal to 1"
                                        : "Member must have value less than or equal to 100");
    }
    std::vector<std::string_view> names;
    for (const TableSpec& t : catalog_.config().tables) {
      API_ASSIGN_OR_RETURN(TableRef table, FindTable(t.name));
      if (MayKnow(table)) names.push_back(t.name);
    }
    std::sort(names.begin(), names.end());
    auto first = names.begin();
    if (after.has_value()) first = std::upper_bound(names.begin(), names.end(), *after);
    const size_t max = static_cast<size_t>(limit.value_or(100));
    JsonWriter w;
    w.BeginObject();
    w.Key("TableNames");
    w.BeginArray();
    size_t n = 0;
    std::string_view last;
    for (auto it = first; it != names.end() && n < max; ++it, ++n) {
      w.String(*it);
      last = *it;
    }
    w.EndArray();
    if (first + n != names.end() && n > 0) {
      w.Key("LastEvaluatedTableName");
      w.String(last);
    }
    w.EndObject();
    return Answer{w.Take(), ""};
  }

  const Catalog& catalog_;
  const ViewQueries& queries_;
  const ApiRequest& request_;
  double creation_date_time_;
  bool built_ = false;  // ApiRequest::before_build was called
  std::optional<CapacityAsked> capacity_;  // ReturnConsumedCapacity, when asked
};

}  // namespace

DynamoDbApi::DynamoDbApi(const Catalog& catalog, const ViewQueries& queries,
                         double creation_date_time)
    : catalog_(catalog), queries_(queries), creation_date_time_(creation_date_time) {}

double DynamoDbApi::NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

ApiResponse DynamoDbApi::Handle(const ApiRequest& request) const {
  std::string_view target = request.target;
  if (!target.starts_with(kTargetPrefix)) {
    return ErrorResponse(400, "UnknownOperationException", "", "unknown");
  }
  const std::string_view op = target.substr(kTargetPrefix.size());
  static constexpr std::string_view kServed[] = {"Query",        "Scan",          "GetItem",
                                                 "BatchGetItem", "DescribeTable", "ListTables"};
  if (std::find(std::begin(kServed), std::end(kServed), op) == std::end(kServed)) {
    if (std::find(std::begin(kWrites), std::end(kWrites), op) != std::end(kWrites)) {
      return ErrorResponse(
          400, "ValidationException",
          Cat("cdcview's DynamoDB endpoint is read-only: ", op,
                       " is not served; write to the table itself (its stream feeds cdcview)"),
          std::string(op));
    }
    if (std::find(std::begin(kOtherReads), std::end(kOtherReads), op) != std::end(kOtherReads)) {
      return ErrorResponse(
          400, "ValidationException",
          Cat("cdcview's DynamoDB endpoint does not serve ", op,
              "; it serves Query and Scan on indexes, GetItem, BatchGetItem, DescribeTable and "
              "ListTables"),
          std::string(op));
    }
    return ErrorResponse(400, "UnknownOperationException", "", "unknown");
  }
  const std::string operation(op);

  // Attribute values nest at most 32 levels (two JSON levels each) inside a few levels of
  // request structure: deeper JSON is refused by the parser, before any recursion of ours.
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  simdjson::error_code error = parser.allocate(request.body.size(), kMaxJsonDepth);
  if (!error) error = parser.parse(request.body.data(), request.body.size()).get(root);
  if (error == simdjson::DEPTH_ERROR) {
    return ErrorResponse(400, "SerializationException",
                         Cat("The request body nests more than ", kMaxJsonDepth,
                             " levels deep"),
                         operation);
  }
  if (error || !root.is_object()) {
    return ErrorResponse(400, "SerializationException",
                         "The request body is not a JSON object", operation);
  }
  Operation handling(catalog_, queries_, request, creation_date_time_);
  absl::StatusOr<Answer> answer = handling.Run(op, simdjson::dom::object(root));
  if (!answer.ok()) return StatusResponse(answer.status(), operation);
  ApiResponse response;
  response.run_long = answer->run_long;
  response.body = std::move(answer->body);
  if (!answer->applied_token.empty()) response.applied_position = Base64Encode(answer->applied_token);
  response.operation = operation;
  return response;
}

}  // namespace cdcview::dynamodb
