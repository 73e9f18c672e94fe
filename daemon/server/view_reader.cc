#include "daemon/server/view_reader.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/server/proto_convert.h"
#include "index_builders/item_codec.h"
#include "index_builders/key_codec.h"

namespace cdcview {
namespace {

constexpr char kTokenVersion = 1;

uint32_t Fnv1a32(std::string_view data) {
  uint32_t h = 2166136261u;
  for (unsigned char c : data) {
    h ^= c;
    h *= 16777619u;
  }
  return h;
}

std::string_view ProjectionName(ProjectionKind kind) {
  switch (kind) {
    case ProjectionKind::kKeysOnly: return "KEYS_ONLY";
    case ProjectionKind::kInclude: return "INCLUDE";
    case ProjectionKind::kAll: return "ALL";
  }
  return "ALL";
}

void KeySchemaOf(const KeySpec& key, v1::KeySchema* out) {
  if (key.kind == KeySpec::Kind::kAttribute) {
    out->set_attribute(key.attribute);
  } else {
    out->set_template_(key.template_text);
  }
  out->set_type(std::string(AttrTypeName(key.value_type())));
}

// The smallest key greater than every key whose leading components are exactly `encoded`
// (complete components). Not PrefixSuccessor: S and B escape a NUL byte as 00 FF, so the
// encoding of "ab" (.. 'b' 00) is a byte prefix of that of "ab\0x" (.. 'b' 00 FF ..). After a
// complete component comes the next component's type tag (01..03), never FF.
std::string AfterComponents(std::string_view encoded) {
  std::string key(encoded);
  key.push_back('\xFF');
  return key;
}

// Decodes a view entry into the response: the projected item and its view keys.
absl::Status EmitEntry(const ViewSpec& view, std::string_view key, std::string_view value,
                       v1::ViewEntry* out) {
  auto pk = DecodeKeyComponent(&key);
  if (!pk.ok()) return pk.status();
  ToProto(*pk, out->mutable_partition_key());
  if (view.has_sort_key()) {
    auto sk = DecodeKeyComponent(&key);
    if (!sk.ok()) return sk.status();
    ToProto(*sk, out->mutable_sort_key());
  }
  auto item = DecodeItem(value);
  if (!item.ok()) return item.status();
  ToProto(*item, out->mutable_item());
  return absl::OkStatus();
}

absl::StatusOr<AttributeValue> KeyValue(const v1::AttributeValue& proto, AttrType want,
                                        const std::string& field, const char* what,
                                        const ViewSpec& view) {
  if (proto.value_case() == v1::AttributeValue::VALUE_NOT_SET) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is required"));
  }
  auto value = FromProto(proto, field);
  if (!value.ok()) return value.status();
  if (value->type() != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": view ", view.name, " has a ", std::string(AttrTypeName(want)), " ", what,
        ", got ", std::string(AttrTypeName(value->type()))));
  }
  return value;
}

// Entries in [lower, upper) ("" upper: no bound), forward or backward, after the token's key.
template <typename Response>
absl::Status Walk(const Txn& txn, MDB_dbi dbi, const ViewSpec& view, std::string_view fingerprint,
                  std::string lower, std::string upper, bool backward, uint32_t limit,
                  const std::string& resume_after, Response* out) {
  if (!resume_after.empty()) {
    if (backward) {
      if (upper.empty() || resume_after < upper) upper = resume_after;
    } else {
      std::string after = resume_after;
      after.push_back('\0');  // the smallest key greater than resume_after
      lower = std::max(lower, after);
    }
  }
  auto below_upper = [&](std::string_view k) { return upper.empty() || k < upper; };
  auto cursor = txn.OpenCursor(dbi);
  bool ok;
  if (!backward) {
    ok = cursor->Seek(lower) && below_upper(cursor->key());
  } else {
    ok = upper.empty() ? cursor->SeekLast()
                       : (cursor->Seek(upper) ? cursor->Prev() : cursor->SeekLast());
    ok = ok && cursor->key() >= lower;
  }
  std::string last;
  uint32_t n = 0;
  while (ok && n < limit) {
    if (absl::Status s = EmitEntry(view, cursor->key(), cursor->value(), out->add_entries()); !s.ok()) {
      return s;
    }
    last.assign(cursor->key());
    ++n;
    ok = backward ? cursor->Prev() && cursor->key() >= lower
                  : cursor->Next() && below_upper(cursor->key());
  }
  if (ok) out->set_next_page_token(EncodePageToken(fingerprint, backward, last));
  return absl::OkStatus();
}

}  // namespace

void AppliedIn(const Txn& txn, MDB_dbi meta, v1::AppliedPosition* out) {
  ForEachPosition(txn, meta,
                  [&](std::string_view source, std::string_view partition, std::string_view at) {
                    auto* e = out->add_entries();
                    e->set_source(std::string(source));
                    e->set_partition(std::string(partition));
                    e->set_position(std::string(at));
                  });
}

std::string EncodePageToken(std::string_view fingerprint, bool backward, std::string_view last_key) {
  std::string t;
  t.push_back(kTokenVersion);
  t.push_back(backward ? 1 : 0);
  PutVarint(fingerprint.size(), &t);
  t.append(fingerprint);
  PutVarint(last_key.size(), &t);
  t.append(last_key);
  uint32_t check = Fnv1a32(t);
  for (int i = 0; i < 4; ++i) t.push_back(static_cast<char>(check >> (8 * i)));
  return t;
}

absl::StatusOr<std::string> DecodePageToken(std::string_view token, std::string_view fingerprint,
                                            bool backward) {
  auto malformed = [] {
    return absl::InvalidArgumentError(
        "page_token is malformed; pass next_page_token from the previous response unchanged");
  };
  if (token.size() < 2 + 4) return malformed();
  std::string_view body = token.substr(0, token.size() - 4);
  uint32_t check = 0;
  for (int i = 0; i < 4; ++i) check |= uint32_t(static_cast<unsigned char>(token[body.size() + i])) << (8 * i);
  if (check != Fnv1a32(body) || body[0] != kTokenVersion) return malformed();
  bool token_backward = body[1] == 1;
  body.remove_prefix(2);
  uint64_t n;
  if (!GetVarint(&body, &n) || n > body.size()) return malformed();
  std::string_view fp = body.substr(0, n);
  body.remove_prefix(n);
  if (!GetVarint(&body, &n) || n != body.size() || n == 0) return malformed();
  if (fp != fingerprint) {
    return absl::InvalidArgumentError(
        "page_token was issued for another definition of this view; start again without a token");
  }
  if (token_backward != backward) {
    return absl::InvalidArgumentError(
        "page_token was issued for the other direction; keep scan_backward as in the first request");
  }
  return std::string(body);
}

ViewReader::ViewReader(const Catalog& catalog, const Store& store, const Applier& applier,
                       std::vector<const ChangeSource*> sources, uint32_t max_page_size)
    : catalog_(catalog),
      store_(store),
      applier_(applier),
      sources_(std::move(sources)),
      max_page_size_(max_page_size) {}

absl::StatusOr<const ViewRef*> ViewReader::ReadyView(const std::string& name) const {
  const ViewRef* view = catalog_.FindView(name);
  if (view == nullptr) {
    std::vector<std::string> names;
    for (const ViewRef& v : catalog_.views()) names.push_back(v.spec->name);
    return absl::NotFoundError(absl::StrCat("view \"", name, "\" does not exist (views: ",
                                            absl::StrJoin(names, ", "), ")"));
  }
  double progress = 0;
  if (applier_.GetViewState(view->global, &progress) != ViewState::kReady) {
    return absl::UnavailableError(absl::StrCat("view ", name, " is being rebuilt (",
                                               static_cast<int>(progress * 100),
                                               "% done); retry when DescribeView says READY"));
  }
  return view;
}

absl::StatusOr<v1::QueryResponse> ViewReader::Query(const v1::QueryRequest& request) const {
  auto view_or = ReadyView(request.view());
  if (!view_or.ok()) return view_or.status();
  const ViewRef& view = **view_or;
  const ViewSpec& spec = *view.spec;
  auto pk = KeyValue(request.partition_key(), spec.partition_type(), "partition_key",
                     "partition key", spec);
  if (!pk.ok()) return pk.status();
  std::string prefix;
  EncodeKeyComponent(*pk, &prefix);
  std::string lower = prefix, upper = AfterComponents(prefix);

  if (request.has_sort() && request.sort().op() != v1::SortCondition::OP_UNSPECIFIED) {
    const v1::SortCondition& cond = request.sort();
    if (!spec.has_sort_key()) {
      return absl::InvalidArgumentError(
          absl::StrCat("sort: view ", spec.name, " has no sort key; drop the sort condition"));
    }
    const AttrType sk_type = spec.sort_type();
    auto value = KeyValue(cond.value(), sk_type, "sort.value", "sort key", spec);
    if (!value.ok()) return value.status();
    std::string at = prefix;
    if (cond.op() == v1::SortCondition::BEGINS_WITH) {
      if (sk_type == AttrType::kN) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sort: begins_with needs an S or B sort key; view ", spec.name, " sorts by N"));
      }
      EncodeKeyPrefix(*value, &at);
    } else {
      EncodeKeyComponent(*value, &at);
    }
    switch (cond.op()) {
      case v1::SortCondition::EQ: lower = at; upper = AfterComponents(at); break;
      case v1::SortCondition::LT: upper = at; break;
      case v1::SortCondition::LE: upper = AfterComponents(at); break;
      case v1::SortCondition::GT: lower = AfterComponents(at); break;
      case v1::SortCondition::GE: lower = at; break;
      case v1::SortCondition::BEGINS_WITH: lower = at; upper = PrefixSuccessor(at); break;
      case v1::SortCondition::BETWEEN: {
        auto high = KeyValue(cond.value2(), sk_type, "sort.value2", "sort key", spec);
        if (!high.ok()) return high.status();
        std::string hi = prefix;
        EncodeKeyComponent(*high, &hi);
        if (hi < at) {
          return absl::InvalidArgumentError(
              "sort: BETWEEN bounds are in the wrong order; value must be <= value2");
        }
        lower = at;
        upper = AfterComponents(hi);
        break;
      }
      default:
        return absl::InvalidArgumentError(absl::StrCat("sort.op: unknown operator ", cond.op()));
    }
  }

  const std::string& fingerprint = view.fingerprint;
  std::string resume;
  if (!request.page_token().empty()) {
    auto last = DecodePageToken(request.page_token(), fingerprint, request.scan_backward());
    if (!last.ok()) return last.status();
    // Within enc(pk)'s range, not merely starting with its bytes (see AfterComponents).
    if (*last < prefix || *last >= AfterComponents(prefix)) {
      return absl::InvalidArgumentError(
          "page_token belongs to another partition key; start again without a token");
    }
    resume = std::move(*last);
  }
  uint32_t limit = request.limit() == 0 ? max_page_size_ : std::min(request.limit(), max_page_size_);

  auto txn = store_.BeginRead();
  if (!txn.ok()) return txn.status();
  v1::QueryResponse response;
  if (absl::Status s = Walk(**txn, store_.view(spec.name), spec, fingerprint, lower, upper,
                            request.scan_backward(), limit, resume, &response);
      !s.ok()) {
    return s;
  }
  AppliedIn(**txn, store_.meta(), response.mutable_applied());
  return response;
}

absl::StatusOr<v1::ScanResponse> ViewReader::Scan(const v1::ScanRequest& request) const {
  auto view_or = ReadyView(request.view());
  if (!view_or.ok()) return view_or.status();
  const ViewRef& view = **view_or;
  const std::string& fingerprint = view.fingerprint;
  std::string resume;
  if (!request.page_token().empty()) {
    auto last = DecodePageToken(request.page_token(), fingerprint, false);
    if (!last.ok()) return last.status();
    resume = std::move(*last);
  }
  uint32_t limit = request.limit() == 0 ? max_page_size_ : std::min(request.limit(), max_page_size_);
  auto txn = store_.BeginRead();
  if (!txn.ok()) return txn.status();
  v1::ScanResponse response;
  if (absl::Status s = Walk(**txn, store_.view(view.spec->name), *view.spec, fingerprint, "", "",
                            false, limit, resume, &response);
      !s.ok()) {
    return s;
  }
  AppliedIn(**txn, store_.meta(), response.mutable_applied());
  return response;
}

absl::StatusOr<v1::GetItemResponse> ViewReader::GetItem(const v1::GetItemRequest& request) const {
  int table = catalog_.FindTable(request.table());
  if (table < 0) {
    std::vector<std::string> names;
    for (const TableSpec& t : catalog_.config().tables) names.push_back(t.name);
    return absl::NotFoundError(absl::StrCat("table \"", request.table(), "\" does not exist (tables: ",
                                            absl::StrJoin(names, ", "), ")"));
  }
  auto key = FromProto(request.key(), "key");
  if (!key.ok()) return key.status();
  const ViewBuilder& builder = catalog_.builder(table);
  if (absl::Status s = builder.ValidateTableKey(*key); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("key: ", s.message()));
  }
  auto txn = store_.BeginRead();
  if (!txn.ok()) return txn.status();
  v1::GetItemResponse response;
  auto value = (*txn)->Get(store_.items(request.table()), builder.PrimaryKey(*key));
  if (!value.ok()) return value.status();
  if (*value) {
    auto stored = DecodeStoredItem(**value);
    if (!stored.ok()) return stored.status();
    if (!stored->tombstone) {
      auto item = DecodeItem(stored->image);
      if (!item.ok()) return item.status();
      ToProto(*item, response.mutable_item());
      response.set_found(true);
    }
  }
  AppliedIn(**txn, store_.meta(), response.mutable_applied());
  return response;
}

v1::ViewDescription ViewReader::Describe(const ViewRef& view, const Txn& txn) const {
  const ViewSpec& spec = *view.spec;
  v1::ViewDescription d;
  d.set_name(spec.name);
  d.set_table(spec.table);
  double progress = 0;
  bool ready = applier_.GetViewState(view.global, &progress) == ViewState::kReady;
  d.set_state(ready ? v1::ViewDescription::READY : v1::ViewDescription::BUILDING);
  d.set_build_progress(ready ? 1.0 : progress);
  // A view is only as complete as its table's sources: one still reading a snapshot makes it
  // BACKFILLING (queries answer, from a partial table).
  for (size_t i = 0; ready && i < sources_.size(); ++i) {
    if (sources_[i] == nullptr || catalog_.TableOfSource(i) != view.table) continue;
    SourceHealth health = sources_[i]->Health();
    if (health.state == "backfilling") {
      d.set_state(v1::ViewDescription::BACKFILLING);
      d.set_build_progress(health.progress);
    }
  }
  MDB_dbi dbi = store_.view(spec.name);
  d.set_item_count(txn.Entries(dbi));
  d.set_bytes(txn.Bytes(dbi));
  d.set_index_writes_per_event(applier_.IndexWritesPerEvent(view.global));
  d.set_fingerprint(view.fingerprint);
  KeySchemaOf(spec.rules.front().partition_key, d.mutable_partition_key());
  if (spec.has_sort_key()) KeySchemaOf(*spec.rules.front().sort_key, d.mutable_sort_key());
  d.set_projection(std::string(ProjectionName(spec.projection.kind)));
  for (const std::string& a : spec.projection.include) d.add_include(a);
  d.set_rules(static_cast<uint32_t>(spec.rules.size()));
  d.set_inverted(spec.inverted);
  return d;
}

absl::StatusOr<v1::ViewDescription> ViewReader::DescribeView(const std::string& name) const {
  const ViewRef* view = catalog_.FindView(name);
  if (view == nullptr) return ReadyView(name).status();  // the NOT_FOUND message
  auto txn = store_.BeginRead();
  if (!txn.ok()) return txn.status();
  return Describe(*view, **txn);
}

absl::StatusOr<v1::ListViewsResponse> ViewReader::ListViews() const {
  v1::ListViewsResponse response;
  auto txn = store_.BeginRead();
  if (!txn.ok()) return txn.status();
  for (const ViewRef& view : catalog_.views()) *response.add_views() = Describe(view, **txn);
  return response;
}

v1::StatusResponse ViewReader::GetStatus() const {
  v1::StatusResponse response;
  auto txn = store_.BeginRead();
  if (txn.ok()) AppliedIn(**txn, store_.meta(), response.mutable_applied());
  const auto& sources = catalog_.config().sources;
  for (size_t i = 0; i < sources.size(); ++i) {
    v1::SourceStatus* s = response.add_sources();
    s->set_name(sources[i].name);
    s->set_table(sources[i].table);
    if (i < sources_.size() && sources_[i] != nullptr) {
      SourceHealth health = sources_[i]->Health();
      s->set_kind(std::string(sources_[i]->kind()));
      s->set_state(health.state);
      if (health.state == "backfilling") s->set_progress(health.progress);
      s->set_error(health.error);
    }
    if (const std::string writer_error = applier_.WriterError(i); !writer_error.empty()) {
      s->set_state("error");
      s->set_error(writer_error);
    }
    Applier::SourceCounters c = applier_.Counters(i);
    s->set_events_applied(c.applied);
    s->set_events_skipped(c.skipped);
    s->set_events_rejected(c.rejected);
    s->set_lag_seconds(c.lag_seconds);
    for (const auto& e : response.applied().entries()) {
      if (e.source() == sources[i].name) *s->add_positions() = e;
    }
  }
  response.set_lmdb_map_used_bytes(store_.map_used_bytes());
  response.set_lmdb_map_size_bytes(store_.map_size());
  return response;
}

}  // namespace cdcview
