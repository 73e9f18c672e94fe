// cdcview: the command-line client. One JSON object per item per line on stdout; errors on
// stderr with the gRPC code, exit status 1 (2 for bad flags).
#include <grpcpp/grpcpp.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <optional>

#include "CLI/CLI.hpp"
#include "cdcview/v1/admin_service.grpc.pb.h"
#include "cdcview/v1/view_service.grpc.pb.h"
#include "daemon/cli/advisor.h"
#include "daemon/cli/connection.h"
#include "daemon/cli/json_output.h"

namespace cdcview {
namespace {

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::OK: return "OK";
    case grpc::CANCELLED: return "CANCELLED";
    case grpc::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::NOT_FOUND: return "NOT_FOUND";
    case grpc::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::ABORTED: return "ABORTED";
    case grpc::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::INTERNAL: return "INTERNAL";
    case grpc::UNAUTHENTICATED: return "UNAUTHENTICATED";
    case grpc::PERMISSION_DENIED: return "PERMISSION_DENIED";
    default: return "ERROR";
  }
}

int Fail(const grpc::Status& s, const ConnectionFlags& connection) {
  std::cerr << "cdcview: " << CodeName(s.error_code()) << ": " << s.error_message()
            << ConnectionHint(s.error_code(), s.error_message(), connection) << "\n";
  return 1;
}

// Turns command-line text into a value of the view's key type (S as is, N as number text,
// B from base64 is not supported on the command line: pass it as S of the base64).
v1::AttributeValue Typed(const std::string& text, const std::string& type) {
  v1::AttributeValue v;
  if (type == "N") {
    v.set_n(text);
  } else {
    v.set_s(text);
  }
  return v;
}

// Watch positions, page tokens and position tokens are bytes; the CLI shows them as hex so
// that they can be passed back (--from, --page-token, --min-position).
std::string Hex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

std::optional<std::string> Unhex(const std::string& text) {
  auto digit = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                          : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  if (text.size() % 2 != 0) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < text.size(); i += 2) {
    int hi = digit(text[i]), lo = digit(text[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<char>(hi * 16 + lo));
  }
  return out;
}

struct Options {
  ConnectionFlags connection;
  std::string view, pk, table;
  std::optional<std::string> eq, lt, le, gt, ge, begins_with;
  std::vector<std::string> between;
  std::vector<std::string> keys;
  uint32_t limit = 0;
  bool reverse = false, all_pages = false, ddb_json = false;
  AdviseOptions advise;
  std::string aggregate, group_type = "S";
  std::optional<std::string> group, prefix;
  std::optional<std::string> watch_key, watch_from;
  bool snapshot = false;
  // Every read: resume a page, read-your-writes, a freshness bound, show the applied position.
  std::optional<std::string> page_token, min_position;
  double max_staleness = 0;
  bool print_position = false;
  double timeout_seconds = 30;
  bool timeout_given = false;  // --timeout on the command line (backup has no deadline without)
  std::string backup_to;
};

// A context with the client's deadline for one call (--timeout). The server stops a
// read-your-writes wait a little before it, so a wait that runs out comes back with the
// server's explanation ("applied up to X, waiting for Y"), not as the client's bare deadline.
std::unique_ptr<grpc::ClientContext> Context(const Options& o) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::duration_cast<std::chrono::system_clock::duration>(
                        std::chrono::duration<double>(o.timeout_seconds)));
  return ctx;
}

// --page-token and --min-position as bytes; false (after saying why, exit status 2) when one
// is not hex.
bool Unhexed(const std::optional<std::string>& hex, const char* flag, const char* what,
             std::string* out) {
  if (!hex) return true;
  std::optional<std::string> bytes = Unhex(*hex);
  if (!bytes) {
    std::cerr << "cdcview: " << flag << " " << *hex << ": expected the hex " << what
              << " printed by cdcview\n";
    return false;
  }
  *out = std::move(*bytes);
  return true;
}

// Fills a read request's consistency from --min-position and --max-staleness; false for a
// --min-position that is not hex.
bool SetConsistency(const Options& o, v1::ReadConsistency* consistency) {
  std::string token;
  if (!Unhexed(o.min_position, "--min-position", "applied position", &token)) return false;
  consistency->set_min_position(token);
  consistency->set_max_staleness_seconds(o.max_staleness);
  return true;
}

void PrintPosition(const Options& o, const v1::AppliedPosition& applied) {
  if (o.print_position) std::cerr << "cdcview: applied position " << Hex(applied.token()) << "\n";
}

// The hint after a truncated page: how to read on.
void MoreFollow(const char* what, const std::string& next_page_token) {
  std::cerr << "cdcview: more " << what << " follow; pass --all-pages to read them all, or "
            << "--page-token " << Hex(next_page_token) << " for the next page\n";
}

void PrintEntries(const google::protobuf::RepeatedPtrField<v1::ViewEntry>& entries, bool ddb) {
  for (const v1::ViewEntry& e : entries) std::cout << ItemToJson(e.item(), ddb) << "\n";
}

// Calls `call` page by page (every page with --all-pages), printing every entry.
template <typename Response, typename Request, typename Call>
int PrintPages(Request req, const Options& o, Call&& call) {
  if (!SetConsistency(o, req.mutable_consistency())) return 2;
  std::string token;
  if (!Unhexed(o.page_token, "--page-token", "page token", &token)) return 2;
  req.set_page_token(token);
  for (;;) {
    Response resp;
    if (grpc::Status s = call(req, &resp); !s.ok()) return Fail(s, o.connection);
    PrintEntries(resp.entries(), o.ddb_json);
    if (resp.next_page_token().empty() || !o.all_pages) PrintPosition(o, resp.applied());
    if (resp.next_page_token().empty()) return 0;
    if (!o.all_pages) {
      MoreFollow("items", resp.next_page_token());
      return 0;
    }
    req.set_page_token(resp.next_page_token());
  }
}

int RunQuery(v1::ViewService::Stub& stub, const Options& o) {
  v1::ViewDescription desc;
  v1::DescribeViewRequest dreq;
  dreq.set_view(o.view);
  if (grpc::Status s = stub.DescribeView(Context(o).get(), dreq, &desc); !s.ok()) return Fail(s, o.connection);
  v1::QueryRequest req;
  req.set_view(o.view);
  *req.mutable_partition_key() = Typed(o.pk, desc.partition_key().type());
  const std::string& sk_type = desc.sort_key().type();
  auto set = [&](v1::SortCondition::Op op, const std::string& v) {
    req.mutable_sort()->set_op(op);
    *req.mutable_sort()->mutable_value() = Typed(v, sk_type);
  };
  if (o.eq) set(v1::SortCondition::EQ, *o.eq);
  if (o.lt) set(v1::SortCondition::LT, *o.lt);
  if (o.le) set(v1::SortCondition::LE, *o.le);
  if (o.gt) set(v1::SortCondition::GT, *o.gt);
  if (o.ge) set(v1::SortCondition::GE, *o.ge);
  if (o.begins_with) set(v1::SortCondition::BEGINS_WITH, *o.begins_with);
  if (o.between.size() == 2) {
    set(v1::SortCondition::BETWEEN, o.between[0]);
    *req.mutable_sort()->mutable_value2() = Typed(o.between[1], sk_type);
  }
  req.set_limit(o.limit);
  req.set_scan_backward(o.reverse);
  return PrintPages<v1::QueryResponse>(req, o, [&](const v1::QueryRequest& r,
                                                    v1::QueryResponse* resp) {
    return stub.Query(Context(o).get(), r, resp);
  });
}

int RunScan(v1::ViewService::Stub& stub, const Options& o) {
  v1::ScanRequest req;
  req.set_view(o.view);
  req.set_limit(o.limit);
  return PrintPages<v1::ScanResponse>(req, o, [&](const v1::ScanRequest& r,
                                                  v1::ScanResponse* resp) {
    return stub.Scan(Context(o).get(), r, resp);
  });
}

int RunGet(v1::ViewService::Stub& stub, const Options& o) {
  v1::GetItemRequest req;
  req.set_table(o.table);
  if (!SetConsistency(o, req.mutable_consistency())) return 2;
  for (const std::string& k : o.keys) {
    // NAME=VALUE (S) or NAME:N=VALUE / NAME:S=VALUE
    size_t eq = k.find('=');
    if (eq == std::string::npos) {
      std::cerr << "cdcview: --key " << k << ": expected NAME=VALUE or NAME:N=VALUE\n";
      return 2;
    }
    std::string name = k.substr(0, eq), type = "S";
    if (size_t colon = name.find(':'); colon != std::string::npos) {
      type = name.substr(colon + 1);
      name = name.substr(0, colon);
    }
    (*req.mutable_key()->mutable_attributes())[name] = Typed(k.substr(eq + 1), type);
  }
  v1::GetItemResponse resp;
  if (grpc::Status s = stub.GetItem(Context(o).get(), req, &resp); !s.ok()) return Fail(s, o.connection);
  if (!resp.found()) {
    PrintPosition(o, resp.applied());
    std::cerr << "cdcview: no such item\n";
    return 1;
  }
  std::cout << ItemToJson(resp.item(), o.ddb_json) << "\n";
  PrintPosition(o, resp.applied());
  return 0;
}

// {"attribute":"GSI1PK","type":"S"} or {"template":"STATUS#{status}","type":"S"}: a template's
// text (a constant such as "OPEN" among them) is not an attribute name.
std::string KeyText(const v1::KeySchema& k) {
  return (k.attribute().empty() ? "\"template\":" + JsonString(k.template_())
                                : "\"attribute\":" + JsonString(k.attribute())) +
         ",\"type\":" + JsonString(k.type());
}

int RunViews(v1::ViewService::Stub& stub, const Options& o) {
  v1::ListViewsResponse resp;
  if (grpc::Status s = stub.ListViews(Context(o).get(), {}, &resp); !s.ok()) return Fail(s, o.connection);
  for (v1::ViewDescription& d : *resp.mutable_views()) {
    if (d.shard_count() > 0) {
      // ListViews leaves out the per-shard counts (a walk over each sharded view); ask for them.
      v1::DescribeViewRequest req;
      req.set_view(d.name());
      if (grpc::Status s = stub.DescribeView(Context(o).get(), req, &d); !s.ok()) return Fail(s, o.connection);
    }
    std::cout << "{\"name\":" << JsonString(d.name()) << ",\"table\":" << JsonString(d.table())
              << ",\"state\":" << JsonString(v1::ViewDescription::State_Name(d.state()))
              << ",\"items\":" << d.item_count() << ",\"bytes\":" << d.bytes()
              << ",\"index_writes_per_event\":" << d.index_writes_per_event()
              << ",\"partition_key\":{" << KeyText(d.partition_key()) << "}";
    if (!d.sort_key().type().empty()) std::cout << ",\"sort_key\":{" << KeyText(d.sort_key()) << "}";
    std::cout << ",\"projection\":" << JsonString(d.projection());
    if (d.skipped_key_type_mismatch() > 0) {
      std::cout << ",\"skipped\":{\"key_type_mismatch\":" << d.skipped_key_type_mismatch() << "}";
    }
    if (d.shard_count() > 0) {
      std::cout << ",\"shards\":{\"count\":" << d.shard_count()
                << ",\"suffix\":" << JsonString(d.shard_suffix()) << ",\"items\":[";
      for (int i = 0; i < d.shard_item_counts_size(); ++i) {
        std::cout << (i ? "," : "") << d.shard_item_counts(i);
      }
      std::cout << "],\"skew\":" << d.shard_skew() << "}";
    }
    std::cout << "}\n";
  }
  return 0;
}

// The manifest on stdout, where the backup is and its size on stderr.
int RunBackup(v1::AdminService::Stub& stub, const Options& o) {
  grpc::ClientContext plain;
  std::unique_ptr<grpc::ClientContext> timed = o.timeout_given ? Context(o) : nullptr;
  v1::BackupRequest req;
  req.set_directory(o.backup_to);
  v1::BackupResponse resp;
  if (grpc::Status s = stub.Backup(timed ? timed.get() : &plain, req, &resp); !s.ok()) {
    return Fail(s, o.connection);
  }
  std::cout << resp.manifest();
  std::cerr << "cdcview: backup in " << resp.directory() << " (data.mdb: " << resp.data_bytes()
            << " bytes)\n";
  return 0;
}

int RunStatus(v1::ViewService::Stub& stub, const Options& o) {
  v1::StatusResponse resp;
  if (grpc::Status s = stub.GetStatus(Context(o).get(), {}, &resp); !s.ok()) return Fail(s, o.connection);
  for (const v1::SourceStatus& s : resp.sources()) {
    std::cout << "{\"source\":" << JsonString(s.name()) << ",\"kind\":" << JsonString(s.kind())
              << ",\"table\":" << JsonString(s.table()) << ",\"state\":" << JsonString(s.state())
              << ",\"applied\":" << s.events_applied() << ",\"skipped\":" << s.events_skipped()
              << ",\"rejected\":" << s.events_rejected() << ",\"lag_seconds\":";
    // Infinite while the lag is not known (starting, backfilling, in error): JSON has no
    // infinity.
    if (std::isfinite(s.lag_seconds())) {
      std::cout << s.lag_seconds();
    } else {
      std::cout << "null";
    }
    if (!s.error().empty()) std::cout << ",\"error\":" << JsonString(s.error());
    std::cout << ",\"positions\":{";
    for (int i = 0; i < s.positions_size(); ++i) {
      std::cout << (i ? "," : "") << JsonString(s.positions(i).partition()) << ":"
                << JsonString(s.positions(i).position());
    }
    std::cout << "}}\n";
  }
  return 0;
}

// Per view (--view, or every view): GetHotKeys and DescribeView, then the advisor's rule.
int RunAdvise(v1::ViewService::Stub& stub, const Options& o) {
  std::vector<v1::ViewDescription> views;
  if (o.view.empty()) {
    v1::ListViewsResponse all;
    if (grpc::Status s = stub.ListViews(Context(o).get(), {}, &all); !s.ok()) return Fail(s, o.connection);
    views.assign(all.views().begin(), all.views().end());
  } else {
    v1::DescribeViewRequest req;
    req.set_view(o.view);
    views.emplace_back();
    if (grpc::Status s = stub.DescribeView(Context(o).get(), req, &views.back()); !s.ok()) {
      return Fail(s, o.connection);
    }
  }
  for (const v1::ViewDescription& view : views) {
    v1::GetHotKeysRequest req;
    req.set_view(view.name());
    req.set_limit(o.limit == 0 ? 10 : o.limit);
    v1::HotKeysResponse hot;
    if (grpc::Status s = stub.GetHotKeys(Context(o).get(), req, &hot); !s.ok()) return Fail(s, o.connection);
    HotKeysSpan span = HotKeysSpan::kRecent;
    if (hot.keys().empty()) {  // nothing written lately: what the whole run says
      req.set_whole_run(true);
      if (grpc::Status s = stub.GetHotKeys(Context(o).get(), req, &hot); !s.ok()) return Fail(s, o.connection);
      span = HotKeysSpan::kWholeRun;
    }
    std::cout << AdviseView(view, hot, o.advise, span);
  }
  return 0;
}

// {"count":3,"sum(total)":12.5,"min(total)":null}: unset measures (no numeric values) are null.
template <typename Measures>
std::string MeasuresJson(const Measures& measures, bool ddb) {
  std::string out = "{";
  for (int i = 0; i < measures.size(); ++i) {
    const v1::MeasureValue& m = measures.Get(i);
    out += (i ? "," : "") + JsonString(m.name()) + ":" +
           (m.has_value() ? ValueToJson(m.value(), ddb) : std::string("null"));
  }
  return out + "}";
}

std::string GroupJson(const v1::AggregateGroup& g, bool ddb) {
  std::string out = "{\"aggregate\":" + JsonString(g.aggregate()) + ",\"group\":" +
                    ValueToJson(g.group(), ddb) + ",\"members\":" + std::to_string(g.members()) +
                    ",\"measures\":" + MeasuresJson(g.measures(), ddb);
  if (g.shards_size() > 0) {
    out += ",\"shards\":[";
    for (int i = 0; i < g.shards_size(); ++i) {
      const v1::AggregateGroup::Shard& shard = g.shards(i);
      out += std::string(i ? "," : "") + "{\"group\":" + ValueToJson(shard.group(), ddb) +
             ",\"members\":" + std::to_string(shard.members()) +
             ",\"measures\":" + MeasuresJson(shard.measures(), ddb) + "}";
    }
    out += "]";
  }
  return out + "}";
}

// One group (GROUP given) or every group, one JSON object per line.
int RunAggregate(v1::ViewService::Stub& stub, const Options& o) {
  if (o.group) {
    v1::GetAggregateRequest req;
    req.set_aggregate(o.aggregate);
    *req.mutable_group() = Typed(*o.group, o.group_type);
    if (!SetConsistency(o, req.mutable_consistency())) return 2;
    v1::AggregateGroup resp;
    if (grpc::Status s = stub.GetAggregate(Context(o).get(), req, &resp); !s.ok()) return Fail(s, o.connection);
    std::cout << GroupJson(resp, o.ddb_json) << "\n";
    PrintPosition(o, resp.applied());
    return 0;
  }
  v1::ListAggregatesRequest req;
  req.set_aggregate(o.aggregate);
  if (o.prefix) *req.mutable_prefix() = Typed(*o.prefix, "S");
  req.set_limit(o.limit);
  if (!SetConsistency(o, req.mutable_consistency())) return 2;
  std::string token;
  if (!Unhexed(o.page_token, "--page-token", "page token", &token)) return 2;
  req.set_page_token(token);
  for (;;) {
    v1::ListAggregatesResponse resp;
    if (grpc::Status s = stub.ListAggregates(Context(o).get(), req, &resp); !s.ok()) return Fail(s, o.connection);
    for (const v1::AggregateGroup& g : resp.groups()) std::cout << GroupJson(g, o.ddb_json) << "\n";
    if (resp.next_page_token().empty() || !o.all_pages) PrintPosition(o, resp.applied());
    if (resp.next_page_token().empty()) return 0;
    if (!o.all_pages) {
      MoreFollow("groups", resp.next_page_token());
      return 0;
    }
    req.set_page_token(resp.next_page_token());
  }
}

// One JSON line per event, flushed at once so a pipe sees each change when it happens.
int RunWatch(v1::ViewService::Stub& stub, const Options& o) {
  v1::WatchRequest req;
  req.set_view(o.view);
  req.set_snapshot(o.snapshot);
  if (o.watch_key) {
    v1::ViewDescription desc;
    v1::DescribeViewRequest dreq;
    dreq.set_view(o.view);
    if (grpc::Status s = stub.DescribeView(Context(o).get(), dreq, &desc); !s.ok()) return Fail(s, o.connection);
    *req.mutable_partition_key() = Typed(*o.watch_key, desc.partition_key().type());
  }
  if (o.watch_from) {
    std::optional<std::string> from = Unhex(*o.watch_from);
    if (!from) {
      std::cerr << "cdcview: --from " << *o.watch_from
                << ": expected the hex \"position\" of an event printed by cdcview watch\n";
      return 2;
    }
    req.set_from_position(*from);
  }
  grpc::ClientContext ctx;  // no deadline: a watch runs until it is stopped
  std::unique_ptr<grpc::ClientReader<v1::WatchEvent>> reader = stub.Watch(&ctx, req);
  v1::WatchEvent e;
  while (reader->Read(&e)) {
    std::string position = JsonString(Hex(e.position()));
    switch (e.event_case()) {
      case v1::WatchEvent::kSnapshotEntry:
        std::cout << "{\"snapshot\":" << ItemToJson(e.snapshot_entry().item(), o.ddb_json) << "}";
        break;
      case v1::WatchEvent::kSnapshotDone:
        std::cout << "{\"snapshot_done\":true,\"position\":" << position << "}";
        break;
      case v1::WatchEvent::kFellBehind:
        std::cout << "{\"fell_behind\":true,\"position\":" << position << "}";
        break;
      case v1::WatchEvent::kChange: {
        const v1::EntryChange& c = e.change();
        std::cout << "{\"op\":" << JsonString(v1::EntryChange::Op_Name(c.op()))
                  << ",\"item\":" << ItemToJson(c.entry().item(), o.ddb_json)
                  << ",\"cause\":{\"source\":" << JsonString(c.cause().source())
                  << ",\"partition\":" << JsonString(c.cause().partition())
                  << ",\"position\":" << JsonString(c.cause().position())
                  << "},\"position\":" << position << "}";
        break;
      }
      default:
        continue;
    }
    std::cout << std::endl;
  }
  grpc::Status s = reader->Finish();
  return s.ok() ? 0 : Fail(s, o.connection);
}

}  // namespace
}  // namespace cdcview

int main(int argc, char** argv) {
  using namespace cdcview;
  // The CLI prints every failed call's status with a hint; gRPC's own log lines (a failed
  // handshake, each retry) would repeat it. GRPC_VERBOSITY set by the user still wins.
  setenv("GRPC_VERBOSITY", "NONE", /*overwrite=*/0);
  Options o;
  CLI::App cli{"cdcview: query the views of a running cdcviewd"};
  cli.require_subcommand(1);
  // Subcommands inherit this: --addr and --ddb-json may also follow the subcommand.
  cli.fallthrough();
  cli.add_option("--addr", o.connection.addr, "cdcviewd gRPC address host:port")->capture_default_str();
  cli.add_option("--tls-ca", o.connection.tls_ca,
                 "connect with TLS, verifying the server with this CA certificate (PEM)");
  cli.add_option("--cert", o.connection.cert,
                 "client certificate (PEM) for servers that require one (mTLS); needs --key");
  cli.add_option("--key", o.connection.key, "the client certificate's private key (PEM)");
  cli.add_option("--token-file", o.connection.token_file,
                 "send the bearer token in this file (\"authorization: Bearer <token>\") on "
                 "every call; needs TLS");
  cli.add_option("--server-name", o.connection.server_name,
                 "the name to expect in the server's certificate (default: --addr's host)");
  cli.add_flag("--ddb-json", o.ddb_json, "print DynamoDB JSON ({\"S\": ...}) instead of plain JSON");
  CLI::Option* timeout = cli.add_option("--timeout", o.timeout_seconds,
                                        "seconds each call may take (a --min-position wait "
                                        "included; a backup has no deadline without it)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  // The options every read subcommand takes.
  auto read_options = [&o](CLI::App* read, bool pages) {
    if (pages) read->add_option("--page-token", o.page_token, "resume at this page (the hex token of a truncated page)");
    read->add_option("--min-position", o.min_position,
                     "first wait until this applied position (hex, from --print-position) is applied");
    read->add_option("--max-staleness", o.max_staleness,
                     "refuse an answer from a view more than this many seconds behind (0: no bound)")
        ->check(CLI::NonNegativeNumber);
    read->add_flag("--print-position", o.print_position,
                   "print the applied position of the answer on stderr (for --min-position)");
  };

  CLI::App* query = cli.add_subcommand("query", "items of one partition of a view, in sort-key order");
  query->add_option("--view", o.view, "view name")->required();
  query->add_option("--pk", o.pk, "partition key value")->required();
  auto* cond = query->add_option_group("sort condition", "at most one sort-key condition");
  cond->add_option("--eq", o.eq, "sort key = V");
  cond->add_option("--lt", o.lt, "sort key < V");
  cond->add_option("--le", o.le, "sort key <= V");
  cond->add_option("--gt", o.gt, "sort key > V");
  cond->add_option("--ge", o.ge, "sort key >= V");
  cond->add_option("--between", o.between, "A <= sort key <= B")->expected(2);
  cond->add_option("--begins-with", o.begins_with, "sort key begins with P");
  cond->require_option(0, 1);
  query->add_option("--limit", o.limit, "items per page (0: the server's page size)");
  query->add_flag("--reverse", o.reverse, "descending sort-key order");
  query->add_flag("--all-pages", o.all_pages, "follow page tokens to the end");
  read_options(query, true);

  CLI::App* scan = cli.add_subcommand("scan", "every entry of a view, in key order");
  scan->add_option("--view", o.view, "view name")->required();
  scan->add_option("--limit", o.limit, "items per page");
  scan->add_flag("--all-pages", o.all_pages, "follow page tokens to the end");
  read_options(scan, true);

  CLI::App* get = cli.add_subcommand("get", "one item of a table by primary key");
  get->add_option("--table", o.table, "table name")->required();
  get->add_option("--key", o.keys, "key attribute NAME=VALUE (S) or NAME:N=VALUE; repeat for the sort key")->required();
  read_options(get, false);

  CLI::App* views = cli.add_subcommand("views", "the views, their state and sizes");
  CLI::App* status = cli.add_subcommand("status", "sources, positions and lag");
  CLI::App* advise = cli.add_subcommand(
      "advise", "per view: keys that deserve write sharding, sharded keys that do not");
  advise->add_option("--view", o.view, "one view (default: every view)");
  advise->add_option("--target-writes-per-shard", o.advise.target_writes_per_shard,
                     "writes/s one partition key sustains (DynamoDB: 1000)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  advise->add_option("--limit", o.limit, "hot keys considered per view (default 10)");

  CLI::App* aggregate = cli.add_subcommand("aggregate", "one group of an aggregate, or all its groups in key order");
  aggregate->add_option("name", o.aggregate, "aggregate name")->required();
  aggregate->add_option("group", o.group, "the logical group key (shard suffix stripped); omit to list groups");
  aggregate->add_option("--group-type", o.group_type, "type of GROUP: S or N")
      ->check(CLI::IsMember({"S", "N"}))->capture_default_str();
  aggregate->add_option("--prefix", o.prefix, "list only groups starting with this (S groups)");
  aggregate->add_option("--limit", o.limit, "groups per page (0: the server's page size)");
  aggregate->add_flag("--all-pages", o.all_pages, "follow page tokens to the end");
  read_options(aggregate, true);

  CLI::App* watch = cli.add_subcommand("watch", "a view's entry changes as they are applied");
  watch->add_option("view", o.view, "view name")->required();
  watch->add_option("--key", o.watch_key, "only this partition key");
  watch->add_flag("--snapshot", o.snapshot, "first print the current entries");
  watch->add_option("--from", o.watch_from, "resume after this event position (hex)");

  CLI::App* backup = cli.add_subcommand(
      "backup", "an online copy of the store in a new directory inside the daemon's "
                "storage.backup_dir; prints its manifest (positions, view fingerprints)");
  backup->add_option("--to", o.backup_to, "the backup's directory, on the daemon's machine "
                                          "(relative to storage.backup_dir, or inside it)")
      ->required();

  try {
    cli.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return cli.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return cli.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "cdcview: " << e.what() << " (see cdcview --help)\n";
    return 2;
  }
  o.timeout_given = timeout->count() > 0;
  absl::StatusOr<ConnectionSecrets> secrets = LoadConnectionSecrets(o.connection);
  if (!secrets.ok()) {
    std::cerr << "cdcview: " << secrets.status().message();
    // After `get` and `watch`, --key is the item's key: the client's key goes before them.
    if (!o.connection.cert.empty() && o.connection.key.empty() && (get->parsed() || watch->parsed())) {
      std::cerr << "; give it before the subcommand (after it, --key is the item's key)";
    }
    std::cerr << "\n";
    return 2;
  }
  auto channel = OpenChannel(o.connection, *secrets);
  if (backup->parsed()) {
    auto admin = v1::AdminService::NewStub(channel);
    return RunBackup(*admin, o);
  }
  auto stub = v1::ViewService::NewStub(channel);
  if (query->parsed()) return RunQuery(*stub, o);
  if (scan->parsed()) return RunScan(*stub, o);
  if (get->parsed()) return RunGet(*stub, o);
  if (views->parsed()) return RunViews(*stub, o);
  if (status->parsed()) return RunStatus(*stub, o);
  if (advise->parsed()) return RunAdvise(*stub, o);
  if (aggregate->parsed()) return RunAggregate(*stub, o);
  if (watch->parsed()) return RunWatch(*stub, o);
  return 2;
}
