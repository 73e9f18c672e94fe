// apply_bench: the writer's throughput, and the raw LMDB ceiling for the same writes.
//
// 1. Generates the workload (tests/bench/workload.h) in memory, untimed. The views are the
//    issue's six of examples/cdcview.yaml unless --views says otherwise.
// 2. Applies it in batches into a fresh store as cdcviewd's writer does, batch N+1 prepared
//    on a second thread while batch N commits (Applier::ApplyBatches; --no-pipeline: one
//    thread, Applier::ApplyBatch): events/s, CPU, index writes per event, final store size.
// 3. Replays the same LMDB writes (same databases, keys, values, batch boundaries and env
//    flags, the change log's blocks included) with bare LMDB cursor calls into a fresh
//    environment: the ceiling the applier could reach if decoding images, diffing and
//    encoding cost nothing (see RunRawLmdb).
// 4. Replays the same writes through a fresh HotKeyTracker, batch by batch as the writer does:
//    the hot-key tracking's share of the apply time, and the events/s the applier would reach
//    without it.
// 5. Applies the same workload again into a fresh store that also maintains the config's
//    aggregates (examples/cdcview.yaml: VotesPerDay, OrderTotals): the cost of aggregate
//    maintenance per event, as events/s, µs per event and the ratio to step 2.
// Prints figures beside their targets; asserts nothing. Progress goes to stderr.
#include <lmdb.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "daemon/state/hot_keys.h"
#include "daemon/store/change_log.h"
#include "tests/bench/workload.h"

namespace cdcview::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// CPU seconds this thread, or the whole process, has used (user + system). On a shared
// machine the wall-clock rate moves with the neighbours' load; events per CPU second compares
// runs fairly. The pipelined writer runs two threads, so its figure is the process's.
double CpuSeconds(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
}
double ThreadCpuSeconds() { return CpuSeconds(CLOCK_THREAD_CPUTIME_ID); }
double ProcessCpuSeconds() { return CpuSeconds(CLOCK_PROCESS_CPUTIME_ID); }

struct Flags {
  uint64_t events = 1'000'000;
  // What cdcviewd's writer commits per transaction when it is behind its sources, as it is
  // through this whole run: 8 x apply.batch_size, at most apply.queue_capacity (8 x 1024 and
  // 8192 by default; Applier's BacklogBatchSize). --batch 1024 gives a writer that keeps up.
  size_t batch = 8192;
  uint64_t seed = 20250301;
  std::string config = DefaultConfigPath();
  std::string tmp = std::filesystem::temp_directory_path().string();
  uint64_t map_mib = 2048;  // the store reserves its map on disk: on /dev/shm, in memory
  bool skip_raw = false;
  bool skip_aggregates = false;
  bool pipeline = true;  // the writer's two stages on two threads, as cdcviewd runs them
  std::string write_map = "config";  // on, off, or as the config says
  // The six views of examples/cdcview.yaml (it also has VotesByDay, write-sharded):
  // --views all takes every view of the config.
  std::string views = "GSI1,OpenOrders,ByMember,ByEntity,ByLocation,ByScore";
};

std::vector<std::string> ViewNames(const Flags& flags) {
  if (flags.views == "all") return {};
  return absl::StrSplit(flags.views, ',', absl::SkipEmpty());
}

struct ApplyResult {
  double seconds = 0;
  double cpu_seconds = 0;
  uint64_t applied = 0, skipped = 0, rejected = 0, dead_letters = 0;
  uint64_t index_writes = 0;
  uint64_t map_used_bytes = 0;
  uint64_t file_bytes = 0;
  uint64_t disk_bytes = 0;  // blocks allocated: with the write map the file is sparse
};

// The daemon's writer: Applier::ApplyBatches, its two stages on two threads (batch N+1
// prepared while batch N commits), or with --pipeline off ApplyBatch on this thread alone.
absl::StatusOr<ApplyResult> RunApply(BenchStore& bench, std::vector<std::vector<SourceRecord>>* batches,
                                     bool pipeline) {
  ApplyResult r;
  const size_t tenth = std::max<size_t>(1, batches->size() / 10);
  auto start = Clock::now();
  const double cpu_start = ProcessCpuSeconds();
  if (pipeline) {
    size_t next = 0;
    absl::Status s = bench.applier().ApplyBatches(
        [&](std::vector<SourceRecord>* out) {
          if (next == batches->size()) return false;
          out->swap((*batches)[next++]);
          if (next % tenth == 0) ReportProgress("apply_bench", "apply", double(next) / batches->size());
          return true;
        },
        Applier::OnFailure::kStop);
    if (!s.ok()) return s;
  } else {
    for (size_t b = 0; b < batches->size(); ++b) {
      if (absl::Status s = bench.applier().ApplyBatch(&(*batches)[b]); !s.ok()) return s;
      if ((b + 1) % tenth == 0) ReportProgress("apply_bench", "apply", double(b + 1) / batches->size());
    }
  }
  r.seconds = Seconds(start);
  r.cpu_seconds = ProcessCpuSeconds() - cpu_start;
  for (size_t s = 0; s < bench.config().sources.size(); ++s) {
    SourceCounters c = bench.published().Counters(s);
    r.applied += c.applied;
    r.skipped += c.skipped;
    r.rejected += c.rejected;
  }
  r.dead_letters = bench.dead_letters();
  r.index_writes = bench.IndexWrites();
  r.map_used_bytes = bench.store().map_used_bytes();
  std::error_code ec;
  const std::string data = bench.config().storage.path + "/data.mdb";
  r.file_bytes = std::filesystem::file_size(data, ec);
  struct stat st;
  if (stat(data.c_str(), &st) == 0) r.disk_bytes = static_cast<uint64_t>(st.st_blocks) * 512;
  return r;
}

struct RawResult {
  double seconds = 0;
  double cpu_seconds = 0;
  uint64_t writes = 0;
  uint64_t change_blocks = 0;
  uint64_t map_used_bytes = 0;
};

absl::Status Check(int rc, const char* what) {
  if (rc == MDB_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("raw LMDB: ", what, ": ", mdb_strerror(rc)));
}

// Replays `log` with bare LMDB calls: the ceiling for the applier's writes. Done as well as
// LMDB allows, so that the ceiling is one: a cursor per database kept for the transaction,
// each batch's view writes in key order (sorted before the clock starts), the change log's
// blocks appended (MDB_APPEND) and trimmed whole to `retain_changes`.
absl::StatusOr<RawResult> RunRawLmdb(const WriteLog& log, const TableSpec& table, size_t batch,
                                     uint64_t map_size, unsigned int env_flags,
                                     uint64_t retain_changes, const std::string& dir) {
  MDB_env* env = nullptr;
  if (absl::Status s = Check(mdb_env_create(&env), "mdb_env_create"); !s.ok()) return s;
  std::unique_ptr<MDB_env, void (*)(MDB_env*)> env_closer(env, mdb_env_close);
  mdb_env_set_maxdbs(env, 1024);
  mdb_env_set_maxreaders(env, 1022);
  mdb_env_set_mapsize(env, map_size);
  // The store's flags (daemon/store/store.cc).
  if (absl::Status s = Check(mdb_env_open(env, dir.c_str(), env_flags, 0644), "mdb_env_open");
      !s.ok()) {
    return s;
  }
  // dbis[0] items, dbis[1 + v] view v, as LoggedWrite::db; then meta and changes.
  std::vector<MDB_dbi> dbis(1 + table.views.size());
  MDB_dbi meta, changes;
  {
    MDB_txn* txn;
    if (absl::Status s = Check(mdb_txn_begin(env, nullptr, 0, &txn), "begin"); !s.ok()) return s;
    mdb_dbi_open(txn, "meta", MDB_CREATE, &meta);
    mdb_dbi_open(txn, "changes", MDB_CREATE, &changes);
    mdb_dbi_open(txn, ("items/" + table.name).c_str(), MDB_CREATE, &dbis[0]);
    for (size_t v = 0; v < table.views.size(); ++v) {
      mdb_dbi_open(txn, ("view/" + table.views[v].name).c_str(), MDB_CREATE, &dbis[1 + v]);
    }
    if (absl::Status s = Check(mdb_txn_commit(txn), "commit"); !s.ok()) return s;
  }

  // Untimed: each batch's writes in the applier's order (items by key, then the view writes by
  // database and key; stable, so writes of one key keep event order), with the event each
  // write belongs to.
  const size_t events = log.event_end.size();
  const size_t batches = (events + batch - 1) / batch;
  std::vector<uint32_t> order(log.writes.size()), event_of(log.writes.size());
  for (size_t e = 0, w = 0; e < events; ++e) {
    for (; w < log.event_end[e]; ++w) event_of[w] = static_cast<uint32_t>(e);
  }
  for (size_t b = 0; b < batches; ++b) {
    const uint64_t begin = b == 0 ? 0 : log.event_end[b * batch - 1];
    const uint64_t end = log.event_end[std::min(events, (b + 1) * batch) - 1];
    for (uint64_t w = begin; w < end; ++w) order[w] = static_cast<uint32_t>(w);
    std::stable_sort(order.begin() + begin, order.begin() + end, [&](uint32_t x, uint32_t y) {
      const LoggedWrite& a = log.writes[x];
      const LoggedWrite& c = log.writes[y];
      if ((a.db == 0) != (c.db == 0)) return a.db == 0;  // items first
      return a.db != c.db ? a.db < c.db : log.key(a) < log.key(c);
    });
  }

  RawResult r;
  const size_t tenth = std::max<size_t>(1, batches / 10);
  const std::string source = "sample";
  std::string pos_key = "pos/bench/", pos_value, block, old, position;
  std::deque<uint64_t> blocks;  // first sequence of each change block, oldest first
  uint64_t next_sequence = 1;
  auto start = Clock::now();
  const double cpu_start = ThreadCpuSeconds();
  uint64_t w = 0;
  for (size_t b = 0; b < batches; ++b) {
    MDB_txn* txn;
    if (absl::Status s = Check(mdb_txn_begin(env, nullptr, 0, &txn), "begin"); !s.ok()) return s;
    std::vector<MDB_cursor*> cursors(dbis.size());
    MDB_cursor* log_cursor;
    for (size_t d = 0; d < dbis.size(); ++d) mdb_cursor_open(txn, dbis[d], &cursors[d]);
    mdb_cursor_open(txn, changes, &log_cursor);
    auto fail = [&](int rc, const char* what) {
      mdb_txn_abort(txn);
      return Check(rc, what);
    };
    uint64_t block_first = next_sequence;
    auto write_block = [&](size_t size) {
      const std::string key = ChangeKey(block_first);
      MDB_val k{key.size(), const_cast<char*>(key.data())}, v{size, block.data()};
      const int rc = mdb_cursor_put(log_cursor, &k, &v, MDB_APPEND);
      blocks.push_back(block_first);
      ++r.change_blocks;
      block.erase(0, size);
      block_first = next_sequence - (block.empty() ? 0 : 1);
      return rc;
    };
    const size_t last_event = std::min(events, (b + 1) * batch) - 1;
    for (uint64_t end = log.event_end[last_event]; w < end; ++w) {
      const LoggedWrite& lw = log.writes[order[w]];
      std::string_view k = log.key(lw), v = log.value(lw);
      MDB_val key{k.size(), const_cast<char*>(k.data())};
      MDB_val val{v.size(), const_cast<char*>(v.data())};
      int rc;
      bool logged = lw.db != 0;
      if (lw.is_delete) {
        rc = mdb_cursor_get(cursors[lw.db], &key, &val, MDB_SET_KEY);
        if (rc == MDB_SUCCESS) {
          old.assign(static_cast<const char*>(val.mv_data), val.mv_size);
          v = old;
          rc = mdb_cursor_del(cursors[lw.db], 0);
        } else if (rc == MDB_NOTFOUND) {
          rc = MDB_SUCCESS;
          logged = false;
        }
      } else {
        rc = mdb_cursor_put(cursors[lw.db], &key, &val, 0);
      }
      if (rc != MDB_SUCCESS) return fail(rc, "put/del");
      if (logged) {
        position = std::to_string(event_of[order[w]] + 1);
        const size_t before = block.size();
        AppendChange(table.views[lw.db - 1].name, lw.is_delete ? ChangeOp::kDelete : ChangeOp::kPut,
                     k, v, source, "", position, &block);
        ++next_sequence;
        if (before > 0 && block.size() > kChangeBlockBytes) {
          if (int rc = write_block(before); rc != MDB_SUCCESS) return fail(rc, "change log append");
        }
      }
    }
    if (!block.empty()) {
      if (int rc = write_block(block.size()); rc != MDB_SUCCESS) return fail(rc, "change log append");
    }
    while (blocks.size() > 1 && next_sequence - blocks[1] >= retain_changes) {
      const std::string key = ChangeKey(blocks.front());
      MDB_val k{key.size(), const_cast<char*>(key.data())};
      if (int rc = mdb_del(txn, changes, &k, nullptr); rc != MDB_SUCCESS) return fail(rc, "trim");
      blocks.pop_front();
    }
    // The applier stores the batch's source position in the same transaction.
    pos_value = std::to_string(last_event + 1);
    MDB_val pk{pos_key.size(), pos_key.data()}, pv{pos_value.size(), pos_value.data()};
    if (int rc = mdb_put(txn, meta, &pk, &pv, 0); rc != MDB_SUCCESS) return fail(rc, "position put");
    if (absl::Status s = Check(mdb_txn_commit(txn), "commit"); !s.ok()) return s;
    r.writes += 1;
    if ((b + 1) % tenth == 0) ReportProgress("apply_bench", "raw LMDB", double(b + 1) / batches);
  }
  r.seconds = Seconds(start);
  r.cpu_seconds = ThreadCpuSeconds() - cpu_start;
  r.writes += w;
  MDB_envinfo info;
  MDB_stat st;
  mdb_env_info(env, &info);
  mdb_env_stat(env, &st);
  r.map_used_bytes = static_cast<uint64_t>(info.me_last_pgno + 1) * st.ms_psize;
  return r;
}

// Feeds `log`'s writes to a HotKeyTracker in the applier's batches: view writes as the batch's
// mutations, item puts as its table keys. Only RecordBatch is timed (the applier builds its
// inputs anyway: the mutations for LMDB, the primary key for the items store).
double RunHotKeys(const WriteLog& log, const Catalog& catalog, size_t batch) {
  HotKeyTracker tracker(catalog);
  const size_t events = log.event_end.size();
  std::vector<IndexMutation> mutations;
  std::vector<std::pair<size_t, std::string>> table_keys;
  double seconds = 0;
  uint64_t w = 0;
  for (size_t first = 0; first < events; first += batch) {
    mutations.clear();
    table_keys.clear();
    size_t last_event = std::min(events, first + batch) - 1;
    for (uint64_t end = log.event_end[last_event]; w < end; ++w) {
      const LoggedWrite& lw = log.writes[w];
      std::string_view key = log.key(lw);
      if (lw.db == 0) {
        table_keys.emplace_back(0, key.substr(0, FirstKeyComponentSize(key)));
      } else {
        mutations.push_back({lw.is_delete ? IndexMutation::Op::kDelete : IndexMutation::Op::kPut,
                             catalog.GlobalView(0, lw.db - 1), std::string(key), ""});
      }
    }
    auto start = Clock::now();
    tracker.RecordBatch(mutations, table_keys, int64_t(first));  // a 1M-event run spans ~17 windows
    seconds += Seconds(start);
  }
  return seconds;
}

// Where the stores live matters more than anything else: every commit syncs the data file.
std::string DescribeFilesystem(const std::string& dir) {
  struct statfs fs;
  if (statfs(dir.c_str(), &fs) != 0) return "unknown filesystem";
  if (fs.f_type == TMPFS_MAGIC) return "tmpfs: fsync costs nothing, so this is the CPU-bound figure";
  return "a disk filesystem: every commit waits for fdatasync";
}

std::string Mib(uint64_t bytes) { return absl::StrFormat("%.1f MiB", double(bytes) / (1 << 20)); }
const char* Verdict(bool met) { return met ? "[met]" : "[below target]"; }

// Step 4: the same workload (same seed) with the config's aggregates maintained as well.
int RunWithAggregates(const Flags& flags, const std::string& dir, const ApplyResult& without) {
  std::optional<bool> write_map;  // as for the views-only run
  if (flags.write_map != "config") write_map = flags.write_map == "on";
  auto bench = BenchStore::Open(flags.config, dir + "/store-aggregates", flags.map_mib << 20,
                                /*aggregates=*/true, write_map, ViewNames(flags));
  if (!bench.ok()) {
    fprintf(stderr, "apply_bench: %s\n", std::string(bench.status().message()).c_str());
    return 1;
  }
  const TableSpec& table = (*bench)->config().tables.at(0);
  if (table.aggregates.empty()) {
    printf("aggregates: the config has none; skipped\n");
    return 0;
  }
  Workload workload = GenerateWorkload({flags.events, flags.seed, 0}, &(*bench)->catalog().builder(0),
                                       nullptr, [](double f) { ReportProgress("apply_bench", "generate", f); });
  auto batches = SplitIntoBatches(&workload.records, flags.batch);
  auto applied = RunApply(**bench, &batches, flags.pipeline);
  if (!applied.ok()) {
    fprintf(stderr, "apply_bench: apply with aggregates failed: %s\n",
            std::string(applied.status().message()).c_str());
    return 1;
  }
  std::vector<std::string> names;
  for (const AggregateSpec& a : table.aggregates) names.push_back(a.name);
  auto txn = (*bench)->store().BeginRead();
  uint64_t groups = 0;
  if (txn.ok()) {
    for (const AggregateSpec& a : table.aggregates) groups += (*txn)->Entries((*bench)->store().aggregate(a.name));
  }
  const double us_without = without.seconds * 1e6 / double(flags.events);
  const double us_with = applied->seconds * 1e6 / double(flags.events);
  printf("aggregates: %s (%zu aggregates, %llu physical groups at the end)\n",
         absl::StrJoin(names, ", ").c_str(), names.size(), (unsigned long long)groups);
  printf("  without : %.0f events/s = %.2f us per event\n", double(flags.events) / without.seconds,
         us_without);
  printf("  with    : %.0f events/s = %.2f us per event\n", double(flags.events) / applied->seconds,
         us_with);
  printf("  with / without = %.3f x the time per event (+%.2f us per event for the aggregates)\n",
         us_with / us_without, us_with - us_without);
  return 0;
}

int Run(const Flags& flags) {
  auto dir = MakeTempDir(flags.tmp, "cdcview-apply-bench");
  if (!dir.ok()) {
    fprintf(stderr, "apply_bench: %s\n", std::string(dir.status().message()).c_str());
    return 1;
  }
  const std::string store_dir = *dir + "/store", raw_dir = *dir + "/raw";
  std::filesystem::create_directories(raw_dir);
  const uint64_t map_size = flags.map_mib << 20;
  int rc = 0;
  {
    std::optional<bool> write_map;
    if (flags.write_map != "config") write_map = flags.write_map == "on";
    auto bench = BenchStore::Open(flags.config, store_dir, map_size, /*aggregates=*/false,
                                  write_map, ViewNames(flags));
    if (!bench.ok()) {
      fprintf(stderr, "apply_bench: %s\n", std::string(bench.status().message()).c_str());
      RemoveTree(*dir);
      return 1;
    }
    const TableSpec& table = (*bench)->config().tables.at(0);

    auto gen_start = Clock::now();
    WriteLog log;
    Workload workload = GenerateWorkload(
        {flags.events, flags.seed, 0}, &(*bench)->catalog().builder(0), flags.skip_raw ? nullptr : &log,
        [](double f) { ReportProgress("apply_bench", "generate", f); });
    auto batches = SplitIntoBatches(&workload.records, flags.batch);
    double gen_seconds = Seconds(gen_start);

    auto applied = RunApply(**bench, &batches, flags.pipeline);
    batches.clear();
    batches.shrink_to_fit();
    if (!applied.ok()) {
      fprintf(stderr, "apply_bench: apply failed: %s\n", std::string(applied.status().message()).c_str());
      RemoveTree(*dir);
      return 1;
    }
    const ApplyResult& a = *applied;
    const double eps = double(flags.events) / a.seconds;
    printf("== apply_bench: %llu events, batches of %zu, seed %llu, table %s (%zu views) ==\n",
           (unsigned long long)flags.events, flags.batch, (unsigned long long)flags.seed,
           table.name.c_str(), table.views.size());
    printf("stores   : under %s (%s); write map %s\n", flags.tmp.c_str(),
           DescribeFilesystem(*dir).c_str(), (*bench)->config().storage.write_map ? "on" : "off");
    printf("workload : %llu inserts, %llu modifies, %llu removes; generated in %.1f s (untimed)\n",
           (unsigned long long)workload.inserts, (unsigned long long)workload.modifies,
           (unsigned long long)workload.removes, gen_seconds);
    printf("apply    : %llu events in %.2f s = %.0f events/s   target >= 100000 events/s %s\n",
           (unsigned long long)flags.events, a.seconds, eps, Verdict(eps >= 100000));
    printf("           %s; CPU: %.2f s = %.0f events per CPU second (the figure to compare on "
           "a busy machine)\n",
           flags.pipeline ? "two stages on two threads" : "one thread (--no-pipeline)",
           a.cpu_seconds, double(flags.events) / a.cpu_seconds);
    printf("           applied %llu, skipped %llu, rejected %llu, dead letters %llu\n",
           (unsigned long long)a.applied, (unsigned long long)a.skipped,
           (unsigned long long)a.rejected, (unsigned long long)a.dead_letters);
    printf("           index writes (view puts+deletes) %llu = %.3f per event\n",
           (unsigned long long)a.index_writes, double(a.index_writes) / double(flags.events));
    printf("           store: %s of the map used, data.mdb %s long, %s allocated\n",
           Mib(a.map_used_bytes).c_str(), Mib(a.file_bytes).c_str(), Mib(a.disk_bytes).c_str());
    if (!flags.skip_raw) {
      if (log.view_puts + log.view_deletes != a.index_writes) {
        printf("           NOTE: the write log has %llu view writes, the applier counted %llu\n",
               (unsigned long long)(log.view_puts + log.view_deletes),
               (unsigned long long)a.index_writes);
      }
      auto raw = RunRawLmdb(log, table, flags.batch, map_size,
                            StoreEnvFlags((*bench)->config().storage),
                            (*bench)->config().watch.retain_changes, raw_dir);
      if (!raw.ok()) {
        fprintf(stderr, "apply_bench: %s\n", std::string(raw.status().message()).c_str());
        rc = 1;
      } else {
        const double ratio = raw->seconds / a.seconds;
        printf("raw LMDB : %llu writes (%llu view puts, %llu view deletes, %llu item puts, "
               "%zu position puts) + %llu change-log blocks in %.2f s = %.0f writes/s = %.0f "
               "events/s; %s used\n",
               (unsigned long long)raw->writes, (unsigned long long)log.view_puts,
               (unsigned long long)log.view_deletes, (unsigned long long)log.item_puts,
               (flags.events + flags.batch - 1) / flags.batch,
               (unsigned long long)raw->change_blocks, raw->seconds,
               double(raw->writes) / raw->seconds, double(flags.events) / raw->seconds,
               Mib(raw->map_used_bytes).c_str());
        printf("           CPU: %.2f s = %.0f events per CPU second\n", raw->cpu_seconds,
               double(flags.events) / raw->cpu_seconds);
        printf("apply / raw LMDB = %.0f%% (raw seconds / apply seconds for the same writes)   "
               "target >= 50%% %s\n",
               ratio * 100, Verdict(ratio >= 0.5));
        printf("apply / raw LMDB in CPU seconds = %.0f%%\n",
               raw->cpu_seconds / a.cpu_seconds * 100);
      }
      const double hot = RunHotKeys(log, (*bench)->catalog(), flags.batch);
      printf("hot keys : HotKeyTracker::RecordBatch over the same writes in %.3f s = %.1f%% of the "
             "apply time; apply without it %.0f events/s (with / without = %.3f)\n",
             hot, 100 * hot / a.seconds, double(flags.events) / (a.seconds - hot),
             (a.seconds - hot) / a.seconds);

    }
    if (rc == 0 && !flags.skip_aggregates) rc = RunWithAggregates(flags, *dir, a);
  }
  RemoveTree(*dir);
  return rc;
}

}  // namespace
}  // namespace cdcview::bench

int main(int argc, char** argv) {
  cdcview::bench::Flags flags;
  CLI::App app{"apply_bench: Applier::ApplyBatch throughput against the raw LMDB ceiling"};
  app.add_option("--events", flags.events, "events to generate and apply")->check(CLI::PositiveNumber);
  app.add_option("--batch", flags.batch, "events per ApplyBatch (one write transaction)")
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", flags.seed, "workload seed");
  app.add_option("--config", flags.config, "cdcview config whose first table is App");
  app.add_option("--tmp", flags.tmp, "where to create the temporary stores");
  app.add_option("--map-mib", flags.map_mib, "initial LMDB map size in MiB")->check(CLI::PositiveNumber);
  app.add_option("--write-map", flags.write_map,
                 "MDB_WRITEMAP for both stores: on, off, or config (storage.write_map)")
      ->check(CLI::IsMember({"on", "off", "config"}));
  app.add_option("--views", flags.views,
                 "comma-separated views of the config's first table to maintain, or all");
  app.add_flag("--skip-raw", flags.skip_raw, "skip the raw LMDB replay (for profiling the applier)");
  app.add_flag("--skip-aggregates", flags.skip_aggregates,
               "skip the second run that also maintains the config's aggregates");
  app.add_flag("--pipeline,!--no-pipeline", flags.pipeline,
               "apply with the writer's two stages on two threads, as cdcviewd does (default), "
               "or on one thread (Applier::ApplyBatch)");
  CLI11_PARSE(app, argc, argv);
  // As cdcviewd does (Application::Start): no debug lock-order graph behind every absl::Mutex.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return cdcview::bench::Run(flags);
}
