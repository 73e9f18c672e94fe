// The change log the writer keeps for Watch: one entry per view entry that changed, with the
// record that caused it, in the batch's transaction; trimmed to watch.retain_changes; its
// sequence numbers continue across a restart.
#include "daemon/store/change_log.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/apply/applier.h"
#include "daemon/apply/catalog.h"
#include "daemon/config/config.h"
#include "daemon/log/log.h"
#include "daemon/metrics/metrics.h"
#include "daemon/store/store.h"
#include "gtest/gtest.h"
#include "tests/fakes/fake_dead_letter_sink.h"
#include "tests/fakes/records.h"
#include "tests/fakes/temp_dir.h"

namespace cdcview {
namespace {

using test::At;
using test::N;
using test::S;

constexpr char kConfigYaml[] = R"(
sources:
  - name: sample
    table: App
    file: { path: unused-sample.ndjson }
  - name: second
    table: App
    file: { path: unused-second.ndjson }
watch: { retain_changes: RETAIN }
tables:
  - name: App
    key: { partition: PK, sort: SK }
    views:
      - name: GSI1
        partition_key: { attribute: GSI1PK, type: S }
        sort_key: { attribute: GSI1SK, type: S }
        projection: KEYS_ONLY
      - name: OpenOrders
        partition_key: { template: "OPEN" }
        sort_key: { attribute: open_since, type: S }
        projection: { include: [status, total] }
)";

Item Order(int n, bool open = true) {
  Item item = {{"PK", S(absl::StrCat("CUST#", n))}, {"SK", S("ORDER#1")},
               {"status", S(open ? "OPEN" : "SHIPPED")}, {"total", N(absl::StrCat(n))},
               {"GSI1PK", S(absl::StrCat("CUST#", n))}, {"GSI1SK", S("2024-05-01")}};
  if (open) item["open_since"] = S(absl::StrCat("2024-05-0", n));
  return item;
}

class ChangeLogTest : public ::testing::Test {
 protected:
  void SetUp() override { SetLogLevel(LogLevel::kWarning); }

  void Open(int retain) {
    std::string yaml = kConfigYaml;
    yaml.replace(yaml.find("RETAIN"), 6, std::to_string(retain));
    auto config = ParseConfig(yaml, "test.yaml");
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = *std::move(config);
    config_.storage.path = dir_.Sub("store");
    config_.storage.map_size = 16 << 20;
    auto store = Store::Open(config_.storage, config_.tables);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    catalog_ = std::make_unique<Catalog>(config_, store_->max_key_size());
    auto metrics = MetricsRegistry::Start("");
    ASSERT_TRUE(metrics.ok());
    metrics_ = *std::move(metrics);
    probe_ = std::make_unique<ApplyProbe>(*metrics_, config_);
    applier_ = std::make_unique<Applier>(*catalog_, store_.get(), probe_.get(),
                                         std::vector<DeadLetterSink*>{&sink_, &sink_});
    ASSERT_TRUE(applier_->Recover().ok());
    ASSERT_TRUE(applier_->RebuildViews().ok());
  }

  void Close() {
    applier_.reset();
    probe_.reset();
    metrics_.reset();
    catalog_.reset();
    store_.reset();
  }

  void Apply(std::vector<SourceRecord> batch) {
    absl::Status s = applier_->ApplyBatch(&batch);
    ASSERT_TRUE(s.ok()) << s;
  }

  const TableKeySpec& key() const { return config_.tables[0].key; }

  // "seq view op [entry] {value} <- source/partition@position" per logged change.
  std::vector<std::string> Log() const {
    std::vector<std::string> out;
    auto txn = store_->BeginRead();
    EXPECT_TRUE(txn.ok());
    auto cursor = (*txn)->OpenCursor(store_->changes());
    for (bool ok = cursor->SeekFirst(); ok; ok = cursor->Next()) {
      auto c = DecodeChange(cursor->key(), cursor->value());
      if (!c.ok()) {
        out.push_back(c.status().ToString());
        continue;
      }
      out.push_back(absl::StrCat(c->sequence, " ", std::string(c->view), " ",
                                 c->op == ChangeOp::kPut ? "PUT " : "DELETE ",
                                 test::DescribeEntry(c->key, c->value), " <- ",
                                 std::string(c->source), "/", std::string(c->partition), "@",
                                 std::string(c->position)));
    }
    return out;
  }

  std::string MetricLine(const std::string& name) const {
    std::string text = metrics_->Render();
    size_t at = text.find("\n" + name + " ");
    if (at == std::string::npos) return "<no " + name + ">";
    return text.substr(at + 1, text.find('\n', at + 1) - at - 1);
  }

  test::TempDir dir_;
  FakeDeadLetterSink sink_;
  Config config_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<MetricsRegistry> metrics_;
  std::unique_ptr<ApplyProbe> probe_;
  std::unique_ptr<Applier> applier_;
};

TEST_F(ChangeLogTest, EveryEntryChangeIsLoggedWithTheRecordThatCausedIt) {
  Open(100);
  Apply({test::Insert(key(), Order(1), At("40:2").Partition("p0")),
         test::Insert(key(), Order(2), At("7").Source(1).Partition("p1"))});
  // The order ships: its OpenOrders entry leaves (logged with its last value), GSI1's
  // KEYS_ONLY entry is unchanged (nothing logged).
  Apply({test::Modify(key(), Order(1, false), At("80:3").Partition("p0"))});
  // A no-op MODIFY changes no entry and logs nothing.
  Apply({test::Modify(key(), Order(2), At("8").Source(1).Partition("p1"))});
  EXPECT_EQ(Log(), (std::vector<std::string>{
      "1 GSI1 PUT [S:CUST#1 | S:2024-05-01 | S:CUST#1 | S:ORDER#1] {GSI1PK=S:CUST#1, "
      "GSI1SK=S:2024-05-01, PK=S:CUST#1, SK=S:ORDER#1} <- sample/p0@40:2",
      "2 GSI1 PUT [S:CUST#2 | S:2024-05-01 | S:CUST#2 | S:ORDER#1] {GSI1PK=S:CUST#2, "
      "GSI1SK=S:2024-05-01, PK=S:CUST#2, SK=S:ORDER#1} <- second/p1@7",
      "3 OpenOrders PUT [S:OPEN | S:2024-05-01 | S:CUST#1 | S:ORDER#1] {PK=S:CUST#1, "
      "SK=S:ORDER#1, open_since=S:2024-05-01, status=S:OPEN, total=N:1} <- sample/p0@40:2",
      "4 OpenOrders PUT [S:OPEN | S:2024-05-02 | S:CUST#2 | S:ORDER#1] {PK=S:CUST#2, "
      "SK=S:ORDER#1, open_since=S:2024-05-02, status=S:OPEN, total=N:2} <- second/p1@7",
      "5 OpenOrders DELETE [S:OPEN | S:2024-05-01 | S:CUST#1 | S:ORDER#1] {PK=S:CUST#1, "
      "SK=S:ORDER#1, open_since=S:2024-05-01, status=S:OPEN, total=N:1} <- sample/p0@80:3",
  }));
  EXPECT_EQ(MetricLine("cdcview_change_log_entries"), "cdcview_change_log_entries 5");
}

TEST_F(ChangeLogTest, TrimmedToTheNewestRetainChangesInTheSameTransaction) {
  Open(3);
  for (int n = 1; n <= 4; ++n) {
    Apply({test::Insert(key(), Order(n), At(absl::StrCat(n)))});  // 2 changes each
  }
  std::vector<std::string> log = Log();
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[0].substr(0, 12), "6 OpenOrders");  // order 3's OpenOrders entry
  EXPECT_EQ(log[1].substr(0, 6), "7 GSI1");
  EXPECT_EQ(log[2].substr(0, 12), "8 OpenOrders");
  EXPECT_EQ(MetricLine("cdcview_change_log_entries"), "cdcview_change_log_entries 3");

  // One batch with more changes than retained keeps its newest ones only.
  Apply({test::Insert(key(), Order(5), At("5")), test::Insert(key(), Order(6), At("6"))});
  log = Log();
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[0].substr(0, 7), "10 GSI1");
  EXPECT_EQ(log[2].substr(0, 13), "12 OpenOrders");
}

TEST_F(ChangeLogTest, SequenceNumbersContinueAfterARestart) {
  Open(2);
  Apply({test::Insert(key(), Order(1), At("1")), test::Insert(key(), Order(2), At("2"))});
  ASSERT_EQ(Log().size(), 2u);
  EXPECT_EQ(Log()[0].substr(0, 2), "3 ");
  Close();
  Open(2);
  EXPECT_EQ(MetricLine("cdcview_change_log_entries"), "cdcview_change_log_entries 2");
  Apply({test::Modify(key(), Order(2, false), At("3"))});  // OpenOrders delete only
  std::vector<std::string> log = Log();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0].substr(0, 12), "4 OpenOrders");
  EXPECT_EQ(log[1].substr(0, 19), "5 OpenOrders DELETE");
}

TEST(ChangeLogCodecTest, DamagedEntriesAreDataLoss) {
  std::string value = EncodeChange("V", ChangeOp::kPut, "k", "v", "s", "p", "1");
  auto ok = DecodeChange(ChangeKey(258), value);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->sequence, 258u);
  EXPECT_EQ(ChangeKey(258), std::string("\0\0\0\0\0\0\x01\x02", 8));
  EXPECT_EQ(DecodeChange(ChangeKey(1), value.substr(0, value.size() - 1)).status(),
            absl::DataLossError("change log entry is damaged (truncated field)"));
  EXPECT_EQ(DecodeChange("short", value).status(),
            absl::DataLossError("change log entry is damaged (bad key or op byte)"));
}

}  // namespace
}  // namespace cdcview
