#include "tests/bench/workload.h"

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/store/stored_item.h"
#include "index_builders/item_codec.h"

namespace cdcview::bench {
namespace {

constexpr uint64_t kVotesPerDay = 20'000;  // ~5,000 per GSI1 shard partition
constexpr int kVoteShards = 4;
constexpr int64_t kStartSeconds = 1740787200;  // 2025-03-01T00:00:00Z, as gen_sample.py
constexpr int64_t kSpanSeconds = 30 * 86400;  // event times spread over 30 days

constexpr const char* kFirstNames[] = {"alice", "bruno", "carla", "dmitri", "elena", "farid",
                                       "greta", "hiro",  "ines",  "jonas",  "kemal", "lucia"};
constexpr const char* kClasses[] = {"algebra", "biology",   "chemistry", "drawing",
                                    "economics", "french",  "geography", "history",
                                    "latin",   "music",     "physics",   "statistics"};
struct Place {
  const char* country;
  const char* state;
  const char* city;
};
constexpr Place kPlaces[] = {
    {"US", "WA", "Seattle"},  {"US", "WA", "Spokane"},  {"US", "CA", "Oakland"},
    {"US", "CA", "San Diego"}, {"US", "NY", "Buffalo"}, {"US", "TX", "Austin"},
    {"CA", "ON", "Toronto"},  {"CA", "ON", "Ottawa"},   {"CA", "BC", "Vancouver"},
    {"DE", "BY", "Munich"},   {"DE", "BE", "Berlin"},   {"FR", "IDF", "Paris"},
    {"GB", "ENG", "Leeds"},   {"JP", "13", "Tokyo"}};
constexpr const char* kBoards[] = {"arcade", "puzzle"};
constexpr const char* kChoices[] = {"A", "B", "C"};
constexpr const char* kOrderStatus[] = {"PENDING", "SHIPPED", "DELIVERED", "CANCELLED"};

enum class Kind : uint8_t { kVote, kUser, kOrder, kEnrollment, kStore, kPlayer };
// Insert weights in percent, in Kind order (votes dominate, as in the sample stream).
constexpr int kInsertWeights[] = {35, 10, 25, 12, 6, 12};

// A live item in compact form; MakeItem expands it. Keeping Items for ~500k live items would
// cost gigabytes, and expanding is deterministic.
struct LiveItem {
  Kind kind;
  uint8_t state = 0;  // order status index
  uint32_t variant = 0;  // vote choice, user email version, store place, enrollment day
  uint64_t id = 0;       // per-kind insert counter
  uint64_t owner = 0;    // order: the user counter whose PK it shares
  int64_t created = 0;   // seconds since the epoch
  int64_t amount = 0;    // order total or player score, in hundredths
};

// splitmix64's finalizer: a bijection, so distinct counters give distinct ids.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
std::string Hex(uint64_t x) { return absl::StrFormat("%016x", x); }

std::string Day(int64_t days_since_start) {
  using namespace std::chrono;
  year_month_day ymd{sys_days{year{2025} / March / 1} + days{days_since_start}};
  return absl::StrFormat("%04d-%02d-%02d", int(ymd.year()), unsigned(ymd.month()),
                         unsigned(ymd.day()));
}
std::string Iso(int64_t seconds) {
  int64_t rel = seconds - kStartSeconds;
  int64_t in_day = rel % 86400;
  return absl::StrFormat("%sT%02d:%02d:%02dZ", Day(rel / 86400), in_day / 3600, in_day / 60 % 60,
                         in_day % 60);
}

AttributeValue S(std::string s) { return AttributeValue::String(std::move(s)); }
// `hundredths` as a DynamoDB number (canonicalized by AttributeValue::Number).
AttributeValue N(int64_t hundredths) {
  std::string text = absl::StrFormat("%s%d.%02d", hundredths < 0 ? "-" : "",
                                     std::llabs(hundredths) / 100, std::llabs(hundredths) % 100);
  return *AttributeValue::Number(text);
}

std::string VoteUser(uint64_t id) { return "v" + Hex(Mix(id % kVotesPerDay)); }
std::string UserId(uint64_t id) { return Hex(Mix(id ^ 0x5555)); }

Item MakeItem(const LiveItem& it) {
  Item item;
  auto set = [&](const char* name, AttributeValue v) { item.emplace(name, std::move(v)); };
  switch (it.kind) {
    case Kind::kVote: {
      std::string user = VoteUser(it.id);
      int64_t day = static_cast<int64_t>(it.id / kVotesPerDay);
      std::string day_text = Day(day);
      int shard = static_cast<int>(Mix(it.id % kVotesPerDay + 7 * day) % kVoteShards);
      set("PK", S("VOTE#" + user));
      set("SK", S(day_text));
      set("type", S("vote"));
      set("GSI1PK", S(absl::StrCat("DAY#", day_text, "#", shard)));
      set("GSI1SK", S(user));
      set("choice", S(kChoices[it.variant % 3]));
      break;
    }
    case Kind::kUser: {
      std::string uid = UserId(it.id);
      std::string first = kFirstNames[it.id % 12];
      std::string email = it.variant == 0
                              ? absl::StrCat(first, ".", uid, "@example.com")
                              : absl::StrCat(first, ".", uid, ".", it.variant, "@mail.example.org");
      set("PK", S("USER#" + uid));
      set("SK", S("PROFILE"));
      set("type", S("user"));
      set("name", S(absl::StrCat(first, " ", uid.substr(0, 6))));
      set("email", S(email));
      set("GSI1PK", S("EMAIL#" + email));
      set("GSI1SK", S("USER#" + uid));
      break;
    }
    case Kind::kOrder: {
      std::string created_at = Iso(it.created);
      const char* status = kOrderStatus[it.state];
      set("PK", S("USER#" + UserId(it.owner)));
      set("SK", S(absl::StrFormat("ORDER#o%010d", it.id)));
      set("type", S("order"));
      set("status", S(status));
      set("created_at", S(created_at));
      set("total", N(it.amount));
      if (it.state < 2) set("open_since", S(created_at));  // PENDING or SHIPPED: open
      set("GSI1PK", S(absl::StrCat("STATUS#", status)));
      set("GSI1SK", S(created_at));
      break;
    }
    case Kind::kEnrollment:
      set("PK", S(absl::StrCat("STUDENT#", kFirstNames[it.id / 12 % 12], it.id / 144)));
      set("SK", S(absl::StrCat("CLASS#", kClasses[it.id % 12])));
      set("type", S("enrollment"));
      set("enrolled_on", S(Day(it.variant % 30)));
      break;
    case Kind::kStore: {
      const Place& p = kPlaces[it.variant % std::size(kPlaces)];
      set("PK", S(absl::StrFormat("STORE#s%08d", it.id)));
      set("SK", S("LOCATION"));
      set("type", S("store"));
      set("country", S(p.country));
      set("state", S(p.state));
      set("city", S(p.city));
      break;
    }
    case Kind::kPlayer:
      set("PK", S(absl::StrFormat("PLAYER#p%07d", it.id / 2)));
      set("SK", S(absl::StrCat("BOARD#", kBoards[it.id % 2])));
      set("type", S("player"));
      set("board", S(kBoards[it.id % 2]));
      set("score", N(it.amount));
      break;
  }
  return item;
}

Item KeysOf(const Item& item) {
  Item keys;
  keys.emplace("PK", item.at("PK"));
  keys.emplace("SK", item.at("SK"));
  return keys;
}

class Generator {
 public:
  Generator(const WorkloadOptions& options, const ViewBuilder* builder, WriteLog* log)
      : options_(options), rng_(options.seed), builder_(builder), log_(log) {}

  Workload Run(const std::function<void(double)>& progress) {
    Workload w;
    w.records.reserve(options_.events);
    if (log_ != nullptr) log_->event_end.reserve(options_.events);
    const uint64_t step = std::max<uint64_t>(1, options_.events / 10);
    for (uint64_t i = 0; i < options_.events; ++i) {
      now_ = kStartSeconds + static_cast<int64_t>(i * kSpanSeconds / std::max<uint64_t>(1, options_.events));
      uint64_t roll = rng_() % 100;
      if (roll < 60 || live_.empty()) {
        Insert(i, &w);
      } else if (roll < 90) {
        Modify(i, &w);
      } else {
        Remove(i, &w);
      }
      if (progress && (i + 1) % step == 0) progress(double(i + 1) / double(options_.events));
    }
    CollectVotes(&w);
    return w;
  }

 private:
  Kind PickKind() {
    int r = static_cast<int>(rng_() % 100);
    for (size_t k = 0; k < std::size(kInsertWeights); ++k) {
      if (r < kInsertWeights[k]) return static_cast<Kind>(k);
      r -= kInsertWeights[k];
    }
    return Kind::kVote;
  }

  int64_t Score() {
    // Negative, zero, fractional and large scores, like gen_sample.py's random_score.
    switch (rng_() % 4) {
      case 0: return (static_cast<int64_t>(rng_() % 5051) - 50) * 100;
      case 1: return (static_cast<int64_t>(rng_() % 20401) - 400) * 25;
      case 2: return static_cast<int64_t>(rng_() % 99 + 1) * 100000;
      default: return static_cast<int64_t>(rng_() % 19999) - 9999;
    }
  }

  void Insert(uint64_t i, Workload* w) {
    LiveItem it{PickKind()};
    it.id = counters_[static_cast<int>(it.kind)]++;
    it.created = now_;
    switch (it.kind) {
      case Kind::kVote: it.variant = static_cast<uint32_t>(rng_() % 3); break;
      case Kind::kOrder:
        it.owner = rng_() % std::max<uint64_t>(1, counters_[static_cast<int>(Kind::kUser)]);
        it.amount = static_cast<int64_t>(rng_() % 2 ? rng_() % 9800 + 199 : rng_() % 240000 + 10000);
        break;
      case Kind::kEnrollment: it.variant = static_cast<uint32_t>(rng_() % 30); break;
      case Kind::kStore: it.variant = static_cast<uint32_t>(rng_() % std::size(kPlaces)); break;
      case Kind::kPlayer: it.amount = Score(); break;
      case Kind::kUser: break;
    }
    Item item = MakeItem(it);
    live_.push_back(it);
    ++w->inserts;
    Emit(i, ChangeEvent::Kind::kInsert, nullptr, std::move(item), w);
  }

  void Modify(uint64_t i, Workload* w) {
    LiveItem& it = live_[rng_() % live_.size()];
    Item old_item = MakeItem(it);
    switch (it.kind) {
      case Kind::kVote: it.variant += 1 + static_cast<uint32_t>(rng_() % 2); break;  // new choice
      case Kind::kUser: ++it.variant; break;  // new email: GSI1 and ByEntity entries move
      case Kind::kOrder:
        if (it.state == 0) {
          it.state = 1;  // SHIPPED, still open
        } else if (it.state == 1) {
          it.state = rng_() % 20 == 0 ? 3 : 2;  // closed: open_since disappears
        } else {
          it.amount += 100;  // a closed order's total is corrected
        }
        break;
      case Kind::kEnrollment: ++it.variant; break;  // KEYS_ONLY view: no index write
      case Kind::kStore:  // moves to another place
        it.variant += 1 + static_cast<uint32_t>(rng_() % (std::size(kPlaces) - 1));
        break;
      case Kind::kPlayer: it.amount = Score(); break;
    }
    ++w->modifies;
    Emit(i, ChangeEvent::Kind::kModify, &old_item, MakeItem(it), w);
  }

  void Remove(uint64_t i, Workload* w) {
    size_t index = rng_() % live_.size();
    Item old_item = MakeItem(live_[index]);
    live_[index] = live_.back();
    live_.pop_back();
    ++w->removes;
    Emit(i, ChangeEvent::Kind::kRemove, &old_item, std::nullopt, w);
  }

  void Emit(uint64_t i, ChangeEvent::Kind kind, const Item* old_item, std::optional<Item> new_item,
            Workload* w) {
    ChangeEvent event;
    event.kind = kind;
    event.keys = KeysOf(new_item ? *new_item : *old_item);
    event.sequence_number = absl::StrFormat("1%020d", i * 7 + 1);
    event.creation_time_ms = now_ * 1000;
    if (log_ != nullptr) LogWrites(event, old_item, new_item ? &*new_item : nullptr);
    // The old image is left out: the applier diffs against its stored image, and keeping a
    // second Item per event would double the workload's memory.
    event.new_image = std::move(new_item);

    SourceRecord record;
    record.source = options_.source;
    record.next_position = std::to_string(i + 1);
    record.locator = absl::StrCat("event ", i);
    record.event = std::move(event);
    w->records.push_back(std::move(record));
  }

  // The writes the preparer works out for this event (Applier::PrepareEvent), in its order.
  void LogWrites(const ChangeEvent& event, const Item* old_item, const Item* new_item) {
    mutations_.clear();
    absl::Status s = builder_->Diff(old_item, new_item, &mutations_);
    if (!s.ok()) {
      fprintf(stderr, "workload: ViewBuilder::Diff failed: %s\n", std::string(s.message()).c_str());
      abort();
    }
    for (const IndexMutation& m : mutations_) {
      bool del = m.op == IndexMutation::Op::kDelete;
      Append(del, static_cast<uint8_t>(1 + m.view), m.key, m.value);
      ++(del ? log_->view_deletes : log_->view_puts);
    }
    std::string value = new_item ? EncodeStoredItem(false, event.sequence_number, EncodeItem(*new_item))
                                  : EncodeStoredItem(true, event.sequence_number, {});
    Append(false, 0, builder_->PrimaryKey(event.keys), value);
    ++log_->item_puts;
    log_->event_end.push_back(log_->writes.size());
  }

  void Append(bool del, uint8_t db, std::string_view key, std::string_view value) {
    LoggedWrite w{del, db, static_cast<uint32_t>(key.size()), static_cast<uint32_t>(value.size()),
                  log_->arena.size()};
    log_->arena.append(key).append(value);
    log_->writes.push_back(w);
  }

  void CollectVotes(Workload* w) {
    std::map<std::string, uint64_t> per_partition;
    for (const LiveItem& it : live_) {
      if (it.kind != Kind::kVote) continue;
      Item item = MakeItem(it);
      const std::string& partition = item.at("GSI1PK").scalar();
      ++per_partition[partition];
      w->live_votes.push_back({partition, item.at("GSI1SK").scalar()});
    }
    for (const auto& [partition, n] : per_partition) {
      if (n >= 100) w->big_vote_partitions.push_back(partition);
    }
  }

  WorkloadOptions options_;
  std::mt19937_64 rng_;
  const ViewBuilder* builder_;
  WriteLog* log_;
  std::vector<LiveItem> live_;
  uint64_t counters_[6] = {};
  int64_t now_ = kStartSeconds;
  std::vector<IndexMutation> mutations_;
};

}  // namespace

Workload GenerateWorkload(const WorkloadOptions& options, const ViewBuilder* builder,
                          WriteLog* log, const std::function<void(double)>& progress) {
  if (builder == nullptr) log = nullptr;
  return Generator(options, builder, log).Run(progress);
}

// ---- BenchStore

class BenchStore::CountingSink : public DeadLetterSink {
 public:
  absl::Status Write(const SourceRecord& record, const absl::Status& why) override {
    if (count_++ < 5) {
      fprintf(stderr, "bench: dead letter at %s: %s\n", record.locator.c_str(),
              std::string(why.message()).c_str());
    }
    return absl::OkStatus();
  }
  uint64_t count() const { return count_; }

 private:
  uint64_t count_ = 0;
};

absl::StatusOr<std::unique_ptr<BenchStore>> BenchStore::Open(const std::string& config_path,
                                                             const std::string& dir,
                                                             uint64_t map_size, bool aggregates,
                                                             std::optional<bool> write_map,
                                                             const std::vector<std::string>& views) {
  std::unique_ptr<BenchStore> b(new BenchStore());
  auto config = LoadConfig(config_path);
  if (!config.ok()) return config.status();
  b->config_ = std::make_unique<Config>(std::move(*config));
  if (!views.empty()) {
    std::vector<ViewSpec>& all = b->config_->tables.at(0).views;
    std::vector<ViewSpec> kept;
    for (const std::string& name : views) {
      auto it = std::find_if(all.begin(), all.end(), [&](const ViewSpec& v) { return v.name == name; });
      if (it == all.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "view ", name, " is not in ", config_path, "'s table ", b->config_->tables[0].name));
      }
      kept.push_back(*it);
    }
    all = std::move(kept);
  }
  b->config_->storage.path = dir;
  b->config_->storage.map_size = map_size;
  b->config_->storage.max_map_size = std::max<uint64_t>(map_size * 4, 64ull << 30);
  if (!aggregates) {
    for (TableSpec& table : b->config_->tables) table.aggregates.clear();
  }
  if (write_map.has_value()) b->config_->storage.write_map = *write_map;
  auto store = Store::Open(b->config_->storage, b->config_->tables);
  if (!store.ok()) return store.status();
  b->store_ = std::move(*store);
  auto metrics = MetricsRegistry::Start("");
  if (!metrics.ok()) return metrics.status();
  b->metrics_ = std::move(*metrics);
  b->probe_ = std::make_unique<ApplyProbe>(*b->metrics_, *b->config_);
  b->catalog_ = std::make_unique<Catalog>(*b->config_, b->store_->max_key_size());
  b->sink_ = std::make_unique<CountingSink>();
  std::vector<DeadLetterSink*> sinks(b->config_->sources.size(), b->sink_.get());
  b->published_ = std::make_unique<PublishedState>(*b->catalog_);
  b->applier_ = std::make_unique<Applier>(*b->catalog_, b->store_.get(), b->probe_.get(), sinks,
                                          b->published_.get());
  if (absl::Status s = b->applier_->Recover(); !s.ok()) return s;
  if (absl::Status s = b->applier_->RebuildViews(); !s.ok()) return s;  // empty: instant
  return b;
}

BenchStore::~BenchStore() = default;

uint64_t BenchStore::dead_letters() const { return sink_->count(); }

uint64_t BenchStore::IndexWrites() const {
  uint64_t applied = 0;
  for (size_t s = 0; s < config_->sources.size(); ++s) applied += published_->Counters(s).applied;
  double writes = 0;
  for (const ViewRef& view : catalog_->views()) {
    writes += published_->IndexWritesPerEvent(view.global) * double(applied);
  }
  return static_cast<uint64_t>(std::llround(writes));
}

std::vector<std::vector<SourceRecord>> SplitIntoBatches(std::vector<SourceRecord>* records,
                                                        size_t batch_size) {
  std::vector<std::vector<SourceRecord>> batches;
  batches.reserve(records->size() / batch_size + 1);
  for (size_t i = 0; i < records->size(); i += batch_size) {
    size_t end = std::min(records->size(), i + batch_size);
    batches.emplace_back(std::make_move_iterator(records->begin() + i),
                         std::make_move_iterator(records->begin() + end));
  }
  records->clear();
  records->shrink_to_fit();
  return batches;
}

absl::StatusOr<std::string> MakeTempDir(const std::string& base, const std::string& prefix) {
  std::string templ = base + "/" + prefix + ".XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create a temporary directory under ", base, ": ", strerror(errno)));
  }
  return templ;
}

void RemoveTree(const std::string& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

void ReportProgress(std::string_view name, std::string_view label, double fraction) {
  fprintf(stderr, "[%.*s] %.*s %3.0f%%\n", int(name.size()), name.data(), int(label.size()),
          label.data(), fraction * 100);
}

std::string DefaultConfigPath() { return std::string(CDCVIEW_SOURCE_DIR) + "/examples/cdcview.yaml"; }

}  // namespace cdcview::bench
