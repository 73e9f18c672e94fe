// DynamoDB's expression grammar (Developer Guide, "Condition and filter expressions, operators,
// and functions"; "Key condition expressions for Query"; "Projection expressions"):
//
//   condition ::= or
//   or        ::= and (OR and)*
//   and       ::= not (AND not)*
//   not       ::= NOT comparison | comparison
//   comparison::= primary [comparator primary | BETWEEN primary AND primary
//                          | IN '(' primary (',' primary)* ')']
//   primary   ::= '(' or ')' | function '(' primary (',' primary)* ')' | :value | path
//   path      ::= element ('.' element | '[' digits ']')*     element ::= name | #name
//
// which gives DynamoDB's precedence (comparators, IN, BETWEEN, functions, parentheses bind
// tighter than NOT, NOT tighter than AND, AND tighter than OR). One recursive-descent parser
// reads all three expression kinds; a parenthesized primary may hold an operand ("(a) = :v") or
// a condition, and the level that needs a condition checks what it got.
//
// Error precedence follows DynamoDB's: a syntax error (the first token the grammar cannot take,
// reported with the tokens around it) wins over everything; then, once the whole expression has
// parsed, redundant parentheses, an unknown function, a function used where it cannot be, a
// reserved word, and last the first condition (in reading order) with an undefined placeholder,
// a wrong operand count, identical operands, or an operand of the wrong type.
#include "daemon/dynamodb/expression.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "daemon/decode/base64.h"
#include "daemon/dynamodb/reserved_words.h"
#include "index_builders/number.h"

namespace cdcview::dynamodb {

// Projection: the paths as a tree, applied to one value.
struct ProjectionNode {
  bool whole = false;  // a path ends here: the value is kept whole
  std::map<std::string, ProjectionNode, std::less<>> names;
  std::map<int64_t, ProjectionNode> indexes;
};

namespace {

// Concatenation of text and numbers (this Abseil's StrCat does not take std::string_view).
template <typename T>
void AppendPart(std::string* out, const T& part) {
  if constexpr (std::is_arithmetic_v<T>) {
    out->append(std::to_string(part));
  } else {
    out->append(std::string_view(part));
  }
}
template <typename... Parts>
std::string Cat(const Parts&... parts) {
  std::string out;
  (AppendPart(&out, parts), ...);
  return out;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (absl::ascii_tolower(static_cast<unsigned char>(a[i])) != absl::ascii_tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

// DynamoDB's limits on an expression: 4 KB of text, 300 operators and functions, 100 operands
// of IN. The nesting bound is ours: it keeps the recursive descent's stack small whatever the
// input ("((((..." of 4 KB), far above what any real expression nests.
constexpr size_t kMaxExpressionBytes = 4096;
constexpr int kMaxOperators = 300;
constexpr size_t kMaxInOperands = 100;
constexpr int kMaxNesting = 64;

// ---------------------------------------------------------------------------------------------
// Tokens

enum class Tok {
  kIdent,    // letters, digits, '_' (not starting with a digit)
  kName,     // #name
  kValue,    // :value
  kNumber,   // digits (list indexes)
  kLParen,
  kRParen,
  kLBracket,
  kRBracket,
  kComma,
  kDot,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kSpace,
  kInvalid,  // a character outside the grammar
  kEof,
};

struct Token {
  Tok type;
  size_t begin;
  size_t end;
};

bool IsIdentChar(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_'; }

std::vector<Token> Lex(std::string_view text) {
  std::vector<Token> out;
  size_t i = 0;
  auto add = [&](Tok t, size_t end) {
    out.push_back({t, i, end});
    i = end;
  };
  while (i < text.size()) {
    const char c = text[i];
    size_t j = i + 1;
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      while (j < text.size() && (text[j] == ' ' || text[j] == '\t' || text[j] == '\r' || text[j] == '\n')) ++j;
      add(Tok::kSpace, j);
    } else if (absl::ascii_isalpha(static_cast<unsigned char>(c)) || c == '_') {
      while (j < text.size() && IsIdentChar(text[j])) ++j;
      add(Tok::kIdent, j);
    } else if (absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      while (j < text.size() && absl::ascii_isdigit(static_cast<unsigned char>(text[j]))) ++j;
      add(Tok::kNumber, j);
    } else if (c == '#' || c == ':') {
      while (j < text.size() && IsIdentChar(text[j])) ++j;
      add(c == '#' ? Tok::kName : Tok::kValue, j);
    } else if (c == '<') {
      if (j < text.size() && text[j] == '>') {
        add(Tok::kNe, j + 1);
      } else if (j < text.size() && text[j] == '=') {
        add(Tok::kLe, j + 1);
      } else {
        add(Tok::kLt, j);
      }
    } else if (c == '>') {
      if (j < text.size() && text[j] == '=') {
        add(Tok::kGe, j + 1);
      } else {
        add(Tok::kGt, j);
      }
    } else if (c == '=') {
      add(Tok::kEq, j);
    } else if (c == '(') {
      add(Tok::kLParen, j);
    } else if (c == ')') {
      add(Tok::kRParen, j);
    } else if (c == '[') {
      add(Tok::kLBracket, j);
    } else if (c == ']') {
      add(Tok::kRBracket, j);
    } else if (c == ',') {
      add(Tok::kComma, j);
    } else if (c == '.') {
      add(Tok::kDot, j);
    } else {
      // One character, whole: a UTF-8 lead byte takes its continuation bytes along.
      if (static_cast<unsigned char>(c) >= 0xC0) {
        while (j < text.size() && (static_cast<unsigned char>(text[j]) & 0xC0) == 0x80) ++j;
      }
      add(Tok::kInvalid, j);
    }
  }
  out.push_back({Tok::kEof, text.size(), text.size()});
  return out;
}

// ---------------------------------------------------------------------------------------------
// The tree

enum class Cmp { kEq, kNe, kLt, kLe, kGt, kGe };

std::string_view CmpText(Cmp op) {
  switch (op) {
    case Cmp::kEq: return "=";
    case Cmp::kNe: return "<>";
    case Cmp::kLt: return "<";
    case Cmp::kLe: return "<=";
    case Cmp::kGt: return ">";
    case Cmp::kGe: return ">=";
  }
  return "?";
}

enum class Fn { kAttributeExists, kAttributeNotExists, kAttributeType, kBeginsWith, kContains, kSize };

struct FnInfo {
  std::string_view name;
  Fn fn;
  size_t operands;
};
// Function names are case-sensitive (the guide says so).
constexpr std::array<FnInfo, 6> kFunctions = {{
    {"attribute_exists", Fn::kAttributeExists, 1},
    {"attribute_not_exists", Fn::kAttributeNotExists, 1},
    {"attribute_type", Fn::kAttributeType, 2},
    {"begins_with", Fn::kBeginsWith, 2},
    {"contains", Fn::kContains, 2},
    {"size", Fn::kSize, 1},
}};

const FnInfo* FindFunction(std::string_view name) {
  for (const FnInfo& f : kFunctions) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

struct Node {
  enum class Kind { kPath, kValue, kFunction, kCompare, kBetween, kIn, kAnd, kOr, kNot };
  Kind kind;
  Path path;                    // kPath, placeholders resolved
  bool defined = true;          // kValue: false when the placeholder is not defined
  // kValue: the placeholder's value, shared by every reference to it (never copied per
  // reference: a large value used many times costs its size once).
  std::shared_ptr<const AttributeValue> shared_value;
  std::optional<Decimal> number;  // kValue of type N, parsed once
  const FnInfo* fn = nullptr;   // kFunction (null for an unknown name)
  std::string fn_name;          // kFunction as written
  Cmp op = Cmp::kEq;            // kCompare
  std::vector<std::unique_ptr<Node>> args;
  // Parse only: the node is a parenthesized group ("((x))" is redundant), and where the
  // tokens that made it end (an operand where a condition is due is a syntax error there).
  bool wrapped = false;
  size_t end_token = 0;
  size_t op_token = 0;

  const AttributeValue& value() const {
    static const AttributeValue* const kNone = new AttributeValue();
    return shared_value != nullptr ? *shared_value : *kNone;
  }

  bool IsOperand() const {
    return kind == Kind::kPath || kind == Kind::kValue || kind == Kind::kFunction;
  }
};

std::string PathText(const Path& path) {
  std::string out = "[";
  for (size_t i = 0; i < path.size(); ++i) {
    if (i > 0) out += ", ";
    out += path[i].index >= 0 ? Cat("[", path[i].index, "]") : path[i].name;
  }
  return out + "]";
}

// The first pair (i, j), i < j, in order of j then i, of `paths` that overlap (one a prefix of
// the other) or, with `overlap` false, conflict (the first step where they differ is a name in
// one and a list index in the other). One walk of a trie of the paths' steps, so that many
// paths sharing long names cost their length, not its square.
std::optional<std::pair<size_t, size_t>> FirstClash(const std::vector<Path>& paths,
                                                   bool overlap) {
  constexpr size_t kNone = std::numeric_limits<size_t>::max();
  struct Node {
    std::map<std::pair<int64_t, std::string_view>, size_t> children;  // step -> node
    size_t ends = kNone;     // the first path that ends here
    size_t through = kNone;  // the first path that reaches here (ends here or goes on)
    size_t by_name = kNone;  // the first that goes on by a name step
    size_t by_index = kNone;  // ... by a list index step
  };
  std::vector<Node> nodes(1);
  for (size_t j = 0; j < paths.size(); ++j) {
    size_t at = 0;
    size_t first = kNone;  // the first earlier path that clashes with j
    bool walking = true;   // j's steps so far are all in the trie
    for (const PathStep& step : paths[j]) {
      const bool is_index = step.index >= 0;
      if (walking) {
        if (overlap) {
          first = std::min(first, nodes[at].ends);
        } else {
          first = std::min(first, is_index ? nodes[at].by_name : nodes[at].by_index);
        }
      }
      const auto key = std::make_pair(step.index, std::string_view(step.name));
      size_t next;
      if (auto child = nodes[at].children.find(key); child != nodes[at].children.end()) {
        next = child->second;
      } else {
        walking = false;
        next = nodes.size();
        nodes[at].children.emplace(key, next);
        nodes.emplace_back();
      }
      size_t& went = is_index ? nodes[at].by_index : nodes[at].by_name;
      went = std::min(went, j);
      nodes[at].through = std::min(nodes[at].through, j);
      at = next;
    }
    if (walking && overlap) first = std::min({first, nodes[at].ends, nodes[at].through});
    nodes[at].ends = std::min(nodes[at].ends, j);
    nodes[at].through = std::min(nodes[at].through, j);
    if (first != kNone) return std::make_pair(first, j);
  }
  return std::nullopt;
}

bool SamePath(const Path& a, const Path& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].index != b[i].index || a[i].name != b[i].name) return false;
  }
  return true;
}

// "{N:5}", "{S:a}": how DynamoDB prints a value in the BETWEEN messages.
std::string ValueText(const AttributeValue& v) {
  switch (v.type()) {
    case AttrType::kS:
    case AttrType::kN:
      return Cat("{", AttrTypeName(v.type()), ":", v.scalar(), "}");
    case AttrType::kB:
      return Cat("{B:", Base64Encode(v.scalar()), "}");
    case AttrType::kBool:
      return Cat("{BOOL:", v.boolean() ? "true" : "false", "}");
    case AttrType::kNull:
      return "{NULL:true}";
    default:
      return Cat("{", AttrTypeName(v.type()), ":...}");
  }
}

// <0, 0, >0 for two values of one orderable type (N, S, B); nullopt for anything else.
std::optional<int> Order(const AttributeValue& a, const AttributeValue& b, const Decimal* a_num,
                         const Decimal* b_num) {
  if (a.type() != b.type()) return std::nullopt;
  switch (a.type()) {
    case AttrType::kS:
    case AttrType::kB:
      // std::string compares as unsigned char: bytes, unsigned, as DynamoDB orders them.
      return a.scalar().compare(b.scalar());
    case AttrType::kN: {
      std::optional<Decimal> pa, pb;
      if (a_num == nullptr) {
        absl::StatusOr<Decimal> d = ParseDecimal(a.scalar());
        if (!d.ok()) return std::nullopt;
        pa = *std::move(d);
        a_num = &*pa;
      }
      if (b_num == nullptr) {
        absl::StatusOr<Decimal> d = ParseDecimal(b.scalar());
        if (!d.ok()) return std::nullopt;
        pb = *std::move(d);
        b_num = &*pb;
      }
      return CompareDecimal(*a_num, *b_num);
    }
    default:
      return std::nullopt;
  }
}

// ---------------------------------------------------------------------------------------------
// Evaluation


const AttributeValue* Resolve(const Item& item, const Path& path) {
  if (path.empty() || path[0].index >= 0) return nullptr;
  auto it = item.find(path[0].name);
  if (it == item.end()) return nullptr;
  const AttributeValue* v = &it->second;
  for (size_t i = 1; i < path.size(); ++i) {
    const PathStep& s = path[i];
    if (s.index >= 0) {
      if (v->type() != AttrType::kL || static_cast<uint64_t>(s.index) >= v->list().size()) return nullptr;
      v = &v->list()[s.index];
    } else {
      if (v->type() != AttrType::kM) return nullptr;
      auto m = v->map().find(s.name);
      if (m == v->map().end()) return nullptr;
      v = &m->second;
    }
  }
  return v;
}

// An operand's value on `item`: null when a path does not resolve or size() has no size.
// `scratch` holds a size() result; `number` is set when the value is a parsed constant N.
struct Evaluated {
  const AttributeValue* value = nullptr;
  const Decimal* number = nullptr;
};

Evaluated EvalOperand(const Node& n, const Item& item, AttributeValue* scratch, Decimal* scratch_num) {
  switch (n.kind) {
    case Node::Kind::kPath:
      return {Resolve(item, n.path), nullptr};
    case Node::Kind::kValue:
      return {&n.value(), n.number ? &*n.number : nullptr};
    case Node::Kind::kFunction: {
      if (n.fn == nullptr || n.fn->fn != Fn::kSize || n.args.empty()) return {};
      AttributeValue inner_scratch;
      Decimal inner_num;
      Evaluated arg = EvalOperand(*n.args[0], item, &inner_scratch, &inner_num);
      if (arg.value == nullptr) return {};
      uint64_t size = 0;
      switch (arg.value->type()) {
        case AttrType::kS:
        case AttrType::kB:
          size = arg.value->scalar().size();  // S: UTF-8 bytes, B: bytes
          break;
        case AttrType::kSS:
        case AttrType::kNS:
        case AttrType::kBS:
          size = arg.value->set().size();
          break;
        case AttrType::kL:
          size = arg.value->list().size();
          break;
        case AttrType::kM:
          size = arg.value->map().size();
          break;
        default:
          return {};  // N, BOOL, NULL have no size: the comparison is false
      }
      absl::StatusOr<AttributeValue> v = AttributeValue::Number(std::to_string(size));
      absl::StatusOr<Decimal> d = ParseDecimal(std::to_string(size));
      if (!v.ok() || !d.ok()) return {};
      *scratch = *std::move(v);
      *scratch_num = *std::move(d);
      return {scratch, scratch_num};
    }
    default:
      return {};
  }
}

bool Contains(const AttributeValue& haystack, const AttributeValue& needle) {
  switch (haystack.type()) {
    case AttrType::kS:
    case AttrType::kB:
      return needle.type() == haystack.type() &&
             haystack.scalar().find(needle.scalar()) != std::string::npos;
    case AttrType::kSS:
    case AttrType::kNS:
    case AttrType::kBS: {
      const AttrType member = haystack.type() == AttrType::kSS   ? AttrType::kS
                              : haystack.type() == AttrType::kNS ? AttrType::kN
                                                                 : AttrType::kB;
      // Members are sorted and unique; NS members are canonical, as N scalars are.
      return needle.type() == member &&
             std::binary_search(haystack.set().begin(), haystack.set().end(), needle.scalar());
    }
    case AttrType::kL:
      return std::any_of(haystack.list().begin(), haystack.list().end(),
                         [&](const AttributeValue& e) { return e == needle; });
    default:
      return false;
  }
}

bool EvalCondition(const Node& n, const Item& item) {
  switch (n.kind) {
    case Node::Kind::kAnd:
      return EvalCondition(*n.args[0], item) && EvalCondition(*n.args[1], item);
    case Node::Kind::kOr:
      return EvalCondition(*n.args[0], item) || EvalCondition(*n.args[1], item);
    case Node::Kind::kNot:
      return !EvalCondition(*n.args[0], item);
    case Node::Kind::kCompare: {
      AttributeValue s1, s2;
      Decimal d1, d2;
      const Evaluated a = EvalOperand(*n.args[0], item, &s1, &d1);
      const Evaluated b = EvalOperand(*n.args[1], item, &s2, &d2);
      if (n.op == Cmp::kNe) {
        // A missing attribute is not equal to anything: "a <> :v" holds for an item without
        // a, as DynamoDB evaluates it (a conditional put on a new item passes "v <> :old") and
        // moto too.
        return a.value == nullptr || b.value == nullptr || !(*a.value == *b.value);
      }
      if (a.value == nullptr || b.value == nullptr) return false;
      if (n.op == Cmp::kEq) return *a.value == *b.value;
      const std::optional<int> c = Order(*a.value, *b.value, a.number, b.number);
      if (!c) return false;  // different types, or a type without order (BOOL, sets, ...)
      switch (n.op) {
        case Cmp::kLt: return *c < 0;
        case Cmp::kLe: return *c <= 0;
        case Cmp::kGt: return *c > 0;
        case Cmp::kGe: return *c >= 0;
        default: return false;
      }
    }
    case Node::Kind::kBetween: {
      AttributeValue s[3];
      Decimal d[3];
      Evaluated v[3];
      for (int i = 0; i < 3; ++i) {
        v[i] = EvalOperand(*n.args[i], item, &s[i], &d[i]);
        if (v[i].value == nullptr) return false;
      }
      const std::optional<int> lo = Order(*v[1].value, *v[0].value, v[1].number, v[0].number);
      const std::optional<int> hi = Order(*v[0].value, *v[2].value, v[0].number, v[2].number);
      return lo && hi && *lo <= 0 && *hi <= 0;
    }
    case Node::Kind::kIn: {
      AttributeValue s0;
      Decimal d0;
      const Evaluated a = EvalOperand(*n.args[0], item, &s0, &d0);
      if (a.value == nullptr) return false;
      for (size_t i = 1; i < n.args.size(); ++i) {
        AttributeValue s;
        Decimal d;
        const Evaluated b = EvalOperand(*n.args[i], item, &s, &d);
        if (b.value != nullptr && *a.value == *b.value) return true;
      }
      return false;
    }
    case Node::Kind::kFunction: {
      if (n.fn == nullptr) return false;
      switch (n.fn->fn) {
        case Fn::kAttributeExists:
          return Resolve(item, n.args[0]->path) != nullptr;
        case Fn::kAttributeNotExists:
          return Resolve(item, n.args[0]->path) == nullptr;
        case Fn::kAttributeType: {
          AttributeValue s1, s2;
          Decimal d1, d2;
          const Evaluated a = EvalOperand(*n.args[0], item, &s1, &d1);
          const Evaluated t = EvalOperand(*n.args[1], item, &s2, &d2);
          return a.value != nullptr && t.value != nullptr && t.value->type() == AttrType::kS &&
                 AttrTypeName(a.value->type()) == t.value->scalar();
        }
        case Fn::kBeginsWith: {
          AttributeValue s1, s2;
          Decimal d1, d2;
          const Evaluated a = EvalOperand(*n.args[0], item, &s1, &d1);
          const Evaluated p = EvalOperand(*n.args[1], item, &s2, &d2);
          if (a.value == nullptr || p.value == nullptr || a.value->type() != p.value->type()) return false;
          if (a.value->type() != AttrType::kS && a.value->type() != AttrType::kB) return false;
          return a.value->scalar().compare(0, p.value->scalar().size(), p.value->scalar()) == 0 &&
                 a.value->scalar().size() >= p.value->scalar().size();
        }
        case Fn::kContains: {
          AttributeValue s1, s2;
          Decimal d1, d2;
          const Evaluated a = EvalOperand(*n.args[0], item, &s1, &d1);
          const Evaluated b = EvalOperand(*n.args[1], item, &s2, &d2);
          return a.value != nullptr && b.value != nullptr && Contains(*a.value, *b.value);
        }
        case Fn::kSize:
          return false;  // a parse error as a condition; never evaluated
      }
      return false;
    }
    default:
      return false;
  }
}

class ParsedCondition final : public Condition {
 public:
  explicit ParsedCondition(std::unique_ptr<Node> root) : root_(std::move(root)) {}
  bool Matches(const Item& item) const override { return EvalCondition(*root_, item); }
  std::vector<std::string> TopLevelNames() const override {
    std::vector<std::string> out;
    std::set<std::string_view> seen;
    CollectNames(*root_, &seen, &out);
    return out;
  }

 private:
  static void CollectNames(const Node& n, std::set<std::string_view>* seen,
                           std::vector<std::string>* out) {
    if (n.kind == Node::Kind::kPath) {
      if (!n.path.empty() && n.path[0].index < 0 && seen->insert(n.path[0].name).second) {
        out->push_back(n.path[0].name);
      }
      return;
    }
    for (const auto& a : n.args) CollectNames(*a, seen, out);
  }

  std::unique_ptr<Node> root_;
};

// ---------------------------------------------------------------------------------------------
// The parser

class Parser {
 public:
  Parser(std::string_view text, std::string_view param, Placeholders* placeholders)
      : text_(text), param_(param), placeholders_(placeholders), all_(Lex(text)) {
    for (size_t i = 0; i < all_.size(); ++i) {
      if (all_[i].type != Tok::kSpace) sig_.push_back(i);
    }
  }

  // The whole text as one condition, or the error (already prefixed).
  absl::StatusOr<std::unique_ptr<Node>> ParseConditionText() {
    if (absl::Status s = CheckText(); !s.ok()) return s;
    std::unique_ptr<Node> root = ParseOr(0);
    if (root != nullptr) {
      if (Peek() != Tok::kEof) {
        SyntaxError(pos_);
      } else {
        RequireCondition(*root);
      }
    }
    if (absl::Status s = Result(); !s.ok()) return s;
    return root;
  }

  absl::StatusOr<std::vector<Path>> ParseProjectionText() {
    if (absl::Status s = CheckText(); !s.ok()) return s;
    std::vector<Path> paths;
    while (true) {
      const Tok t = Peek();
      if (t != Tok::kIdent && t != Tok::kName) {
        SyntaxError(pos_);
        break;
      }
      std::unique_ptr<Node> p = ParsePath(/*in_condition=*/false);
      if (p == nullptr) break;
      paths.push_back(std::move(p->path));
      if (Peek() == Tok::kComma) {
        ++pos_;
        continue;
      }
      if (Peek() != Tok::kEof) SyntaxError(pos_);
      break;
    }
    if (limit_) return Invalid(*limit_);
    if (syntax_) return Invalid(*syntax_);
    if (first_[kReserved]) return Invalid(*first_[kReserved]);
    if (sub_[kNameVal]) return Invalid(*sub_[kNameVal]);
    // Two paths where one is a prefix of the other overlap; two that disagree on a step's
    // kind (a name against a list index) where they first differ conflict. The first pair in
    // order (by the later path, then the earlier) is named; any overlap before any conflict.
    std::optional<std::string> overlap, conflict;
    if (std::optional<std::pair<size_t, size_t>> pair = FirstClash(paths, /*overlap=*/true)) {
      overlap = Cat(
          "Two document paths overlap with each other; must remove or rewrite one of these "
          "paths; path one: ", PathText(paths[pair->first]), ", path two: ",
          PathText(paths[pair->second]));
    } else if ((pair = FirstClash(paths, /*overlap=*/false))) {
      conflict = Cat(
          "Two document paths conflict with each other; must remove or rewrite one of these "
          "paths; path one: ", PathText(paths[pair->first]), ", path two: ",
          PathText(paths[pair->second]));
    }
    if (overlap) return Invalid(*overlap);
    if (conflict) return Invalid(*conflict);
    return paths;
  }

  absl::Status Invalid(std::string_view message) const {
    return absl::InvalidArgumentError(Cat("Invalid ", param_, ": ", message));
  }

 private:
  // First-wins error slots, in DynamoDB's order of precedence.
  enum Slot { kParens, kUnknownFunction, kMisused, kReserved, kCondition, kSlots };
  // What makes a condition wrong, first-wins each; the first condition to complete with any of
  // them set fixes kCondition.
  enum Sub { kNameVal, kOperandCount, kDistinct, kFunctionType, kSubs };

  absl::Status CheckText() {
    if (text_.empty()) return Invalid("The expression can not be empty;");
    if (text_.size() > kMaxExpressionBytes) {
      return Invalid(Cat(
          "Expression size has exceeded the maximum allowed size; expression size: ", text_.size()));
    }
    return absl::OkStatus();
  }

  absl::Status Result() const {
    if (limit_) return Invalid(*limit_);
    if (syntax_) return Invalid(*syntax_);
    for (int s = 0; s < kSlots; ++s) {
      if (first_[s]) return Invalid(*first_[s]);
    }
    return absl::OkStatus();
  }

  Tok Peek(size_t ahead = 0) const {
    const size_t i = pos_ + ahead;
    return i < sig_.size() ? all_[sig_[i]].type : Tok::kEof;
  }
  std::string_view TokText(size_t sig_index) const {
    const Token& t = all_[sig_[std::min(sig_index, sig_.size() - 1)]];
    return text_.substr(t.begin, t.end - t.begin);
  }
  bool PeekKeyword(std::string_view word) const {
    return Peek() == Tok::kIdent && EqualsIgnoreCase(TokText(pos_), word);
  }
  bool IsKeyword(size_t sig_index) const {
    if (all_[sig_[sig_index]].type != Tok::kIdent) return false;
    const std::string_view w = TokText(sig_index);
    for (std::string_view k : {"AND", "OR", "NOT", "BETWEEN", "IN"}) {
      if (EqualsIgnoreCase(w, k)) return true;
    }
    return false;
  }

  // `Syntax error; token: "<tok>", near: "<near>"`: near spans from the token before the
  // offending one to the token after it, with the whitespace between, as DynamoDB quotes it.
  void SyntaxError(size_t sig_index) {
    if (syntax_) return;
    sig_index = std::min(sig_index, sig_.size() - 1);
    const Token& t = all_[sig_[sig_index]];
    const size_t begin = sig_index > 0 ? all_[sig_[sig_index - 1]].begin : 0;
    size_t end = text_.size();
    if (t.type != Tok::kEof && sig_index + 1 < sig_.size()) end = all_[sig_[sig_index + 1]].end;
    const std::string token =
        t.type == Tok::kEof ? "<EOF>" : std::string(text_.substr(t.begin, t.end - t.begin));
    syntax_ = Cat("Syntax error; token: \"", token, "\", near: \"",
                           text_.substr(begin, end - begin), "\"");
  }
  bool Failed() const { return syntax_.has_value() || limit_.has_value(); }

  void Record(Slot s, std::string message) {
    if (!first_[s]) first_[s] = std::move(message);
  }
  void RecordSub(Sub s, std::string message) {
    if (!sub_[s]) sub_[s] = std::move(message);
  }
  void ConditionDone() {
    if (first_[kCondition]) return;
    for (int s = 0; s < kSubs; ++s) {
      if (sub_[s]) {
        first_[kCondition] = sub_[s];
        return;
      }
    }
  }
  // One more reference substitutes `bytes`: false (and the limit's error) past the request's
  // kMaxSubstitutedBytes.
  bool Substitute(uint64_t bytes) {
    placeholders_->substituted_bytes += bytes;
    if (placeholders_->substituted_bytes > kMaxSubstitutedBytes && !limit_) {
      limit_ = Cat("The expression attribute names and values substituted in the request's "
                   "expressions exceed ", kMaxSubstitutedBytes,
                   " bytes (DynamoDB's limit on the size of all substitution variables; each "
                   "reference counts)");
    }
    return !limit_;
  }

  bool CountOperator() {
    if (++operators_ > kMaxOperators && !limit_) {
      limit_ = Cat("The expression contains more than ", kMaxOperators,
                            " operators and functions");
    }
    return !limit_;
  }

  // A condition is due: an operand there is a syntax error where it ends, except size(),
  // which DynamoDB reports as a function used the wrong way.
  void RequireCondition(const Node& n) {
    if (!n.IsOperand()) return;
    if (n.kind == Node::Kind::kFunction) {
      if (n.fn != nullptr && n.fn->fn == Fn::kSize) {
        Record(kMisused, "The function is not allowed to be used this way in an expression; function: size");
      }
      return;  // other functions are conditions
    }
    SyntaxError(n.end_token);
  }
  // An operand is due: a function other than size() there is misused.
  void CheckOperand(const Node& n) {
    if (n.kind == Node::Kind::kFunction && n.fn != nullptr && n.fn->fn != Fn::kSize) {
      Record(kMisused, Cat("The function is not allowed to be used this way in an expression; function: ",
                                    n.fn_name));
    }
  }
  // An operand is due and a condition stands there: a syntax error at its operator.
  bool RequireOperand(const Node& n) {
    if (n.IsOperand()) {
      CheckOperand(n);
      return true;
    }
    SyntaxError(n.op_token);
    return false;
  }

  std::unique_ptr<Node> Binary(Node::Kind kind, std::unique_ptr<Node> a, std::unique_ptr<Node> b) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->end_token = b->end_token;
    n->args.push_back(std::move(a));
    n->args.push_back(std::move(b));
    return n;
  }

  std::unique_ptr<Node> ParseOr(int depth) {
    std::unique_ptr<Node> left = ParseAnd(depth);
    while (left != nullptr && PeekKeyword("OR")) {
      const size_t op = pos_++;
      if (!CountOperator()) return nullptr;
      RequireCondition(*left);
      std::unique_ptr<Node> right = ParseAnd(depth);
      if (right == nullptr || Failed()) return nullptr;
      RequireCondition(*right);
      left = Binary(Node::Kind::kOr, std::move(left), std::move(right));
      left->op_token = op;
    }
    return Failed() ? nullptr : std::move(left);
  }

  std::unique_ptr<Node> ParseAnd(int depth) {
    std::unique_ptr<Node> left = ParseNot(depth);
    while (left != nullptr && PeekKeyword("AND")) {
      const size_t op = pos_++;
      if (!CountOperator()) return nullptr;
      RequireCondition(*left);
      std::unique_ptr<Node> right = ParseNot(depth);
      if (right == nullptr || Failed()) return nullptr;
      RequireCondition(*right);
      left = Binary(Node::Kind::kAnd, std::move(left), std::move(right));
      left->op_token = op;
    }
    return Failed() ? nullptr : std::move(left);
  }

  std::unique_ptr<Node> ParseNot(int depth) {
    if (!PeekKeyword("NOT")) return ParseComparison(depth);
    const size_t op = pos_++;
    if (!CountOperator()) return nullptr;
    std::unique_ptr<Node> inner = ParseComparison(depth);
    if (inner == nullptr || Failed()) return nullptr;
    RequireCondition(*inner);
    auto n = std::make_unique<Node>();
    n->kind = Node::Kind::kNot;
    n->op_token = op;
    n->end_token = inner->end_token;
    n->args.push_back(std::move(inner));
    return Failed() ? nullptr : std::move(n);
  }

  std::optional<Cmp> PeekComparator() const {
    switch (Peek()) {
      case Tok::kEq: return Cmp::kEq;
      case Tok::kNe: return Cmp::kNe;
      case Tok::kLt: return Cmp::kLt;
      case Tok::kLe: return Cmp::kLe;
      case Tok::kGt: return Cmp::kGt;
      case Tok::kGe: return Cmp::kGe;
      default: return std::nullopt;
    }
  }

  std::unique_ptr<Node> ParseComparison(int depth) {
    std::unique_ptr<Node> left = ParsePrimary(depth);
    if (left == nullptr || Failed()) return nullptr;
    const size_t op = pos_;
    auto n = std::make_unique<Node>();
    n->op_token = op;
    if (std::optional<Cmp> cmp = PeekComparator()) {
      if (!left->IsOperand()) {
        SyntaxError(op);
        return nullptr;
      }
      ++pos_;
      if (!CountOperator()) return nullptr;
      std::unique_ptr<Node> right = ParsePrimary(depth);
      if (right == nullptr || Failed() || !RequireOperand(*left) || !RequireOperand(*right)) return nullptr;
      n->kind = Node::Kind::kCompare;
      n->op = *cmp;
      if (left->kind == Node::Kind::kPath && right->kind == Node::Kind::kPath &&
          SamePath(left->path, right->path)) {
        RecordSub(kDistinct, Cat("The first operand must be distinct from the remaining operands for "
                                          "this operator or function; operator: ", CmpText(*cmp),
                                          ", first operand: ", PathText(left->path)));
      }
      n->end_token = right->end_token;
      n->args.push_back(std::move(left));
      n->args.push_back(std::move(right));
    } else if (PeekKeyword("BETWEEN")) {
      if (!left->IsOperand()) {
        SyntaxError(op);
        return nullptr;
      }
      ++pos_;
      if (!CountOperator()) return nullptr;
      std::unique_ptr<Node> lo = ParsePrimary(depth);
      if (lo == nullptr || Failed()) return nullptr;
      if (!PeekKeyword("AND")) {
        SyntaxError(pos_);
        return nullptr;
      }
      ++pos_;
      std::unique_ptr<Node> hi = ParsePrimary(depth);
      if (hi == nullptr || Failed() || !RequireOperand(*left) || !RequireOperand(*lo) ||
          !RequireOperand(*hi)) {
        return nullptr;
      }
      CheckBetweenBounds(*lo, *hi);
      n->kind = Node::Kind::kBetween;
      n->end_token = hi->end_token;
      n->args.push_back(std::move(left));
      n->args.push_back(std::move(lo));
      n->args.push_back(std::move(hi));
    } else if (PeekKeyword("IN")) {
      if (!left->IsOperand()) {
        SyntaxError(op);
        return nullptr;
      }
      ++pos_;
      if (!CountOperator()) return nullptr;
      if (Peek() != Tok::kLParen) {
        SyntaxError(pos_);
        return nullptr;
      }
      ++pos_;
      if (!RequireOperand(*left)) return nullptr;
      n->kind = Node::Kind::kIn;
      n->args.push_back(std::move(left));
      while (true) {
        std::unique_ptr<Node> v = ParsePrimary(depth);
        if (v == nullptr || Failed() || !RequireOperand(*v)) return nullptr;
        n->args.push_back(std::move(v));
        if (Peek() == Tok::kComma) {
          ++pos_;
          continue;
        }
        if (Peek() != Tok::kRParen) {
          SyntaxError(pos_);
          return nullptr;
        }
        ++pos_;
        break;
      }
      if (n->args.size() - 1 > kMaxInOperands) {
        limit_ = Cat("The IN operator is provided with too many operands; number of operands: ",
                              n->args.size() - 1);
        return nullptr;
      }
      n->end_token = pos_;
    } else {
      // A function alone is a condition (or size() misused); anything else is an operand the
      // caller rejects where it ends.
      if (left->kind == Node::Kind::kFunction && !left->wrapped) ConditionDone();
      return left;
    }
    ConditionDone();
    return n;
  }

  std::unique_ptr<Node> ParsePrimary(int depth) {
    const size_t start = pos_;
    switch (Peek()) {
      case Tok::kLParen: {
        if (depth >= kMaxNesting) {
          limit_ = Cat("The expression nests parentheses more than ", kMaxNesting, " deep");
          return nullptr;
        }
        ++pos_;
        std::unique_ptr<Node> inner = ParseOr(depth + 1);
        if (inner == nullptr || Failed()) return nullptr;
        if (Peek() != Tok::kRParen) {
          SyntaxError(pos_);
          return nullptr;
        }
        ++pos_;
        if (inner->wrapped) Record(kParens, "The expression has redundant parentheses;");
        inner->wrapped = true;
        inner->end_token = pos_;
        return inner;
      }
      case Tok::kValue: {
        ++pos_;
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kValue;
        n->end_token = pos_;
        const std::string_view name = TokText(start);
        const ValueMap* values = placeholders_->values;
        auto it = values != nullptr ? values->find(name) : ValueMap::const_iterator();
        if (values == nullptr || it == values->end()) {
          n->defined = false;
          RecordSub(kNameVal, Cat("An expression attribute value used in expression is not defined; "
                                           "attribute value: ", name));
        } else {
          placeholders_->used_values.insert(std::string(name));
          auto [cached, added] = values_.try_emplace(name);
          if (added) {
            cached->second.value = std::make_shared<const AttributeValue>(it->second);
            cached->second.size = AttributeValueSize(it->second);
            if (it->second.type() == AttrType::kN) {
              absl::StatusOr<Decimal> d = ParseDecimal(it->second.scalar());
              if (d.ok()) cached->second.number = *std::move(d);
            }
          }
          if (!Substitute(cached->second.size)) return nullptr;
          n->shared_value = cached->second.value;
          n->number = cached->second.number;
        }
        return n;
      }
      case Tok::kIdent:
        if (IsKeyword(pos_)) {
          SyntaxError(pos_);
          return nullptr;
        }
        if (Peek(1) == Tok::kLParen) return ParseFunction(depth);
        return ParsePath(/*in_condition=*/true);
      case Tok::kName:
        return ParsePath(/*in_condition=*/true);
      default:
        SyntaxError(pos_);
        return nullptr;
    }
  }

  std::unique_ptr<Node> ParseFunction(int depth) {
    auto n = std::make_unique<Node>();
    n->kind = Node::Kind::kFunction;
    n->fn_name = std::string(TokText(pos_));
    n->op_token = pos_;
    n->fn = FindFunction(n->fn_name);
    pos_ += 2;  // the name and '('
    if (!CountOperator()) return nullptr;
    if (depth >= kMaxNesting) {
      limit_ = Cat("The expression nests parentheses more than ", kMaxNesting, " deep");
      return nullptr;
    }
    while (true) {
      std::unique_ptr<Node> arg = ParsePrimary(depth + 1);
      if (arg == nullptr || Failed()) return nullptr;
      if (!arg->IsOperand()) {
        SyntaxError(arg->op_token);
        return nullptr;
      }
      n->args.push_back(std::move(arg));
      if (Peek() == Tok::kComma) {
        ++pos_;
        continue;
      }
      if (Peek() != Tok::kRParen) {
        SyntaxError(pos_);
        return nullptr;
      }
      ++pos_;
      break;
    }
    n->end_token = pos_;
    for (const auto& a : n->args) CheckOperand(*a);
    CheckFunction(*n);
    return n;
  }

  // The type an operand has whatever the item: a constant's, N for size(); nullopt for paths.
  static std::optional<AttrType> StaticType(const Node& n) {
    if (n.kind == Node::Kind::kValue && n.defined) return n.value().type();
    if (n.kind == Node::Kind::kFunction && n.fn != nullptr) {
      switch (n.fn->fn) {
        case Fn::kSize: return AttrType::kN;
        case Fn::kAttributeExists:
        case Fn::kAttributeNotExists: return std::nullopt;
        default: return AttrType::kBool;
      }
    }
    return std::nullopt;
  }

  void CheckFunction(const Node& n) {
    if (n.fn == nullptr) {
      Record(kUnknownFunction, Cat("Invalid function name; function: ", n.fn_name));
      return;
    }
    if (n.args.size() != n.fn->operands) {
      RecordSub(kOperandCount, Cat("Incorrect number of operands for operator or function; "
                                            "operator or function: ", n.fn_name,
                                            ", number of operands: ", n.args.size()));
      return;
    }
    if (n.args.size() == 2 && n.args[0]->kind == Node::Kind::kPath &&
        n.args[1]->kind == Node::Kind::kPath && SamePath(n.args[0]->path, n.args[1]->path)) {
      RecordSub(kDistinct, Cat("The first operand must be distinct from the remaining operands for "
                                        "this operator or function; operator: ", n.fn_name,
                                        ", first operand: ", PathText(n.args[0]->path)));
    }
    auto wrong_type = [&](std::string_view type) {
      RecordSub(kFunctionType, Cat("Incorrect operand type for operator or function; operator or "
                                            "function: ", n.fn_name, ", operand type: ", type));
    };
    switch (n.fn->fn) {
      case Fn::kAttributeExists:
      case Fn::kAttributeNotExists:
        if (n.args[0]->kind != Node::Kind::kPath) {
          RecordSub(kFunctionType, Cat("Operator or function requires a document path; operator or "
                                                "function: ", n.fn_name));
        }
        return;
      case Fn::kBeginsWith:
        for (const auto& a : n.args) {
          const std::optional<AttrType> t = StaticType(*a);
          if (t && *t != AttrType::kS && *t != AttrType::kB) {
            wrong_type(AttrTypeName(*t));
            return;
          }
        }
        return;
      case Fn::kAttributeType: {
        const std::optional<AttrType> t = StaticType(*n.args[1]);
        if (!t || *t != AttrType::kS) {
          wrong_type(t ? AttrTypeName(*t) : "{NS,SS,L,BS,N,M,B,BOOL,NULL,S}");
          return;
        }
        AttrType parsed;
        if (!ParseAttrType(n.args[1]->value().scalar(), &parsed)) {
          RecordSub(kFunctionType, Cat("Invalid attribute type name found; type: ",
                                                n.args[1]->value().scalar(),
                                                ", valid types: {B,NULL,SS,BOOL,L,BS,N,NS,S,M}"));
        }
        return;
      }
      case Fn::kSize: {
        const std::optional<AttrType> t = StaticType(*n.args[0]);
        if (t && (*t == AttrType::kN || *t == AttrType::kBool || *t == AttrType::kNull)) {
          wrong_type(AttrTypeName(*t));
        }
        return;
      }
      case Fn::kContains:
        return;
    }
  }

  void CheckBetweenBounds(const Node& lo, const Node& hi) {
    if (lo.kind != Node::Kind::kValue || hi.kind != Node::Kind::kValue || !lo.defined || !hi.defined) return;
    const std::string bounds = Cat("lower bound operand: AttributeValue: ", ValueText(lo.value()),
                                            ", upper bound operand: AttributeValue: ", ValueText(hi.value()));
    if (lo.value().type() != hi.value().type()) {
      RecordSub(kFunctionType, Cat("The BETWEEN operator requires same data type for lower and upper "
                                            "bounds; ", bounds));
      return;
    }
    const std::optional<int> c = Order(lo.value(), hi.value(), lo.number ? &*lo.number : nullptr,
                                       hi.number ? &*hi.number : nullptr);
    if (c && *c > 0) {
      RecordSub(kFunctionType, Cat("The BETWEEN operator requires upper bound to be greater than or "
                                            "equal to lower bound; ", bounds));
    }
  }

  // A document path from the current token (a name or #name). In a projection, keywords are
  // names like any other (and reserved words).
  std::unique_ptr<Node> ParsePath(bool in_condition) {
    auto n = std::make_unique<Node>();
    n->kind = Node::Kind::kPath;
    auto element = [&]() -> bool {
      const Tok t = Peek();
      if (t == Tok::kIdent && !(in_condition && IsKeyword(pos_))) {
        const std::string_view name = TokText(pos_);
        if (IsReservedWord(name)) {
          Record(kReserved, Cat("Attribute name is a reserved keyword; reserved keyword: ", name));
        }
        n->path.push_back({std::string(name), -1});
      } else if (t == Tok::kName) {
        const std::string_view ph = TokText(pos_);
        const NameMap* names = placeholders_->names;
        auto it = names != nullptr ? names->find(ph) : NameMap::const_iterator();
        if (names == nullptr || it == names->end()) {
          RecordSub(kNameVal, Cat("An expression attribute name used in the document path is not "
                                           "defined; attribute name: ", ph));
          n->path.push_back({std::string(ph), -1});
        } else {
          placeholders_->used_names.insert(std::string(ph));
          if (!Substitute(it->second.size())) return false;
          n->path.push_back({it->second, -1});
        }
      } else {
        SyntaxError(pos_);
        return false;
      }
      ++pos_;
      return true;
    };
    if (!element()) return nullptr;
    while (true) {
      if (Peek() == Tok::kDot) {
        ++pos_;
        if (!element()) return nullptr;
      } else if (Peek() == Tok::kLBracket) {
        ++pos_;
        if (Peek() != Tok::kNumber) {
          SyntaxError(pos_);
          return nullptr;
        }
        const std::string_view digits = TokText(pos_);
        int64_t index = 0;
        for (char c : digits) {
          index = index * 10 + (c - '0');
          if (index > INT32_MAX) break;
        }
        if (index > INT32_MAX) {
          SyntaxError(pos_);
          return nullptr;
        }
        ++pos_;
        if (Peek() != Tok::kRBracket) {
          SyntaxError(pos_);
          return nullptr;
        }
        ++pos_;
        n->path.push_back({"", index});
      } else {
        break;
      }
    }
    n->end_token = pos_;
    return n;
  }

  std::string_view text_;
  std::string_view param_;
  Placeholders* placeholders_;
  std::vector<Token> all_;
  std::vector<size_t> sig_;  // indexes in all_ of the tokens that are not whitespace (and EOF)
  size_t pos_ = 0;           // index in sig_
  int operators_ = 0;
  std::optional<std::string> syntax_;
  std::optional<std::string> limit_;
  std::array<std::optional<std::string>, kSlots> first_;
  std::array<std::optional<std::string>, kSubs> sub_;
  // Each value placeholder's value, copied once for all its references.
  struct CachedValue {
    std::shared_ptr<const AttributeValue> value;
    std::optional<Decimal> number;
    uint64_t size = 0;
  };
  std::map<std::string_view, CachedValue> values_;
};

// ---------------------------------------------------------------------------------------------
// Key conditions: a condition tree reduced to one or two key terms, with DynamoDB's messages.

class KeyConditionBuilder {
 public:
  absl::Status Walk(const Node& n) {
    using K = Node::Kind;
    switch (n.kind) {
      case K::kOr: return Invalid("OR");
      case K::kNot: return Invalid("NOT");
      case K::kIn: return Invalid("IN");
      case K::kCompare:
        if (n.op == Cmp::kNe) return Invalid("<>");
        break;
      case K::kFunction:
        if (n.fn->fn == Fn::kSize) return Nested();
        if (n.fn->fn != Fn::kBeginsWith) return Invalid(n.fn_name);
        break;
      default:
        break;
    }
    if (n.kind == K::kBetween && n.args[0]->kind != K::kPath) {
      return absl::InvalidArgumentError(
          "Invalid condition in KeyConditionExpression: BETWEEN operator must have the key attribute as its first operand");
    }
    if (n.kind == K::kFunction && n.args[0]->kind != K::kPath) {
      return absl::InvalidArgumentError(Cat(
          "Invalid condition in KeyConditionExpression: ", n.fn_name,
          " operator must have the key attribute as its first operand"));
    }
    const Node* key = nullptr;
    size_t key_index = 0;
    for (size_t i = 0; i < n.args.size(); ++i) {
      const Node& a = *n.args[i];
      if (a.kind == K::kPath) {
        if (key != nullptr) {
          return absl::InvalidArgumentError(
              "Invalid condition in KeyConditionExpression: Multiple attribute names used in one condition");
        }
        if (a.path.size() > 1) {
          return absl::InvalidArgumentError("KeyConditionExpressions cannot have conditions on nested attributes");
        }
        key = &a;
        key_index = i;
      } else if (a.kind != K::kValue) {
        if (absl::Status s = Walk(a); !s.ok()) return s;
      }
    }
    if (n.kind == K::kAnd) return absl::OkStatus();
    if (key == nullptr) {
      return absl::InvalidArgumentError("Invalid condition in KeyConditionExpression: No key attribute specified");
    }
    const std::string& name = key->path[0].name;
    for (const KeyCondition::Term& t : out_.terms) {
      if (t.name == name) {
        return absl::InvalidArgumentError("KeyConditionExpressions must only contain one condition per key");
      }
    }
    KeyCondition::Term term;
    term.name = name;
    using Op = KeyCondition::SortOp;
    if (n.kind == K::kCompare) {
      // ":v < k" is "k > :v".
      const bool swapped = key_index != 0;
      switch (n.op) {
        case Cmp::kEq: term.op = Op::kEq; break;
        case Cmp::kLt: term.op = swapped ? Op::kGt : Op::kLt; break;
        case Cmp::kLe: term.op = swapped ? Op::kGe : Op::kLe; break;
        case Cmp::kGt: term.op = swapped ? Op::kLt : Op::kGt; break;
        case Cmp::kGe: term.op = swapped ? Op::kLe : Op::kGe; break;
        case Cmp::kNe: break;  // rejected above
      }
      term.value = n.args[swapped ? 0 : 1]->value();
    } else if (n.kind == K::kBetween) {
      term.op = Op::kBetween;
      term.value = n.args[1]->value();
      term.value2 = n.args[2]->value();
    } else {
      term.op = Op::kBeginsWith;
      term.value = n.args[1]->value();
    }
    out_.terms.push_back(std::move(term));
    return absl::OkStatus();
  }

  KeyCondition Take() { return std::move(out_); }

 private:
  static absl::Status Invalid(std::string_view op) {
    return absl::InvalidArgumentError(Cat("Invalid operator used in KeyConditionExpression: ", op));
  }
  static absl::Status Nested() {
    return absl::InvalidArgumentError("KeyConditionExpressions cannot contain nested operations");
  }

  KeyCondition out_;
};


std::optional<AttributeValue> ApplyProjection(const AttributeValue& v, const ProjectionNode& t) {
  if (t.whole) return v;
  if (v.type() == AttrType::kM && !t.names.empty()) {
    Item out;
    for (const auto& [name, sub] : t.names) {
      auto it = v.map().find(name);
      if (it == v.map().end()) continue;
      if (std::optional<AttributeValue> p = ApplyProjection(it->second, sub)) out.emplace(name, *std::move(p));
    }
    if (out.empty()) return std::nullopt;
    return AttributeValue::Map(std::move(out));
  }
  if (v.type() == AttrType::kL && !t.indexes.empty()) {
    std::vector<AttributeValue> out;
    for (const auto& [index, sub] : t.indexes) {
      if (static_cast<uint64_t>(index) >= v.list().size()) break;
      if (std::optional<AttributeValue> p = ApplyProjection(v.list()[index], sub)) out.push_back(*std::move(p));
    }
    if (out.empty()) return std::nullopt;
    return AttributeValue::List(std::move(out));
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<KeyCondition> ParseKeyCondition(std::string_view text, Placeholders* placeholders) {
  Parser parser(text, "KeyConditionExpression", placeholders);
  absl::StatusOr<std::unique_ptr<Node>> root = parser.ParseConditionText();
  if (!root.ok()) return root.status();
  KeyConditionBuilder builder;
  if (absl::Status s = builder.Walk(**root); !s.ok()) return s;
  KeyCondition out = builder.Take();
  if (out.terms.empty() || out.terms.size() > 2) {
    return absl::InvalidArgumentError("Conditions can be of length 1 or 2 only");
  }
  return out;
}

absl::StatusOr<std::unique_ptr<const Condition>> ParseCondition(std::string_view text,
                                                                Placeholders* placeholders) {
  Parser parser(text, "FilterExpression", placeholders);
  absl::StatusOr<std::unique_ptr<Node>> root = parser.ParseConditionText();
  if (!root.ok()) return root.status();
  return std::unique_ptr<const Condition>(std::make_unique<ParsedCondition>(*std::move(root)));
}

absl::StatusOr<std::vector<Path>> ParseProjection(std::string_view text, Placeholders* placeholders) {
  Parser parser(text, "ProjectionExpression", placeholders);
  return parser.ParseProjectionText();
}

Item Project(const Item& item, const std::vector<Path>& paths) { return Projection(paths).Apply(item); }

Projection::Projection(const std::vector<Path>& paths) {
  auto root = std::make_shared<ProjectionNode>();
  for (const Path& path : paths) {
    if (path.empty() || path[0].index >= 0) continue;
    ProjectionNode* t = root.get();
    for (const PathStep& s : path) {
      t = s.index >= 0 ? &t->indexes[s.index] : &t->names[s.name];
      if (t->whole) break;
    }
    t->whole = true;
  }
  root_ = std::move(root);
}

Item Projection::Apply(const Item& item) const {
  Item out;
  // The smaller side drives: an item's few attributes against many projected names, or few
  // names against a wide item.
  if (item.size() < root_->names.size()) {
    for (const auto& [name, value] : item) {
      auto sub = root_->names.find(name);
      if (sub == root_->names.end()) continue;
      if (std::optional<AttributeValue> p = ApplyProjection(value, sub->second)) out.emplace(name, *std::move(p));
    }
    return out;
  }
  for (const auto& [name, sub] : root_->names) {
    auto it = item.find(name);
    if (it == item.end()) continue;
    if (std::optional<AttributeValue> p = ApplyProjection(it->second, sub)) out.emplace(name, *std::move(p));
  }
  return out;
}

}  // namespace cdcview::dynamodb
