#include "index_builders/heavy_hitters.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

// Counts this thread's heap allocations while `counting` is set (the writer's hot path must
// not allocate per event once its summaries are full).
namespace {
thread_local bool counting = false;
thread_local size_t allocations = 0;
}  // namespace

// GCC cannot see that this operator new allocates with malloc and warns at inlined deletes.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

void* operator new(size_t size) {
  if (counting) ++allocations;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
// Replaced too, or the nothrow form (std::stable_sort's buffer) would come from another
// allocator than the delete below (ASan reports the mismatch).
void* operator new(size_t size, const std::nothrow_t&) noexcept {
  if (counting) ++allocations;
  return std::malloc(size == 0 ? 1 : size);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace cdcview {
namespace {

using Row = std::tuple<std::string, uint64_t, uint64_t>;  // key, count, error

std::vector<Row> Rows(const std::vector<HeavyHitter>& hs) {
  std::vector<Row> out;
  for (const HeavyHitter& h : hs) out.emplace_back(h.key, h.count, h.error);
  return out;
}

TEST(SpaceSavingTest, NewKeyTakesOverTheSmallestCounterAndInheritsItsCountAsError) {
  SpaceSaving s(3);
  for (const char* k : {"a", "a", "a", "b", "b", "c"}) s.Add(k);
  EXPECT_EQ(s.MinCount(), 1u);
  s.Add("d");  // replaces c (1): d counts 2 with error 1
  EXPECT_EQ(Rows(s.Top(10)), (std::vector<Row>{{"a", 3, 0}, {"b", 2, 0}, {"d", 2, 1}}));
  EXPECT_EQ(s.Find("c"), nullptr);
  EXPECT_EQ(s.MinCount(), 2u);
  EXPECT_EQ(s.total(), 7u);
  EXPECT_EQ(Rows(s.Top(1)), (std::vector<Row>{{"a", 3, 0}}));
}

TEST(SpaceSavingTest, WeightedAddsAndMinCountBeforeFull) {
  SpaceSaving s(4);
  s.Add("x", 5);
  s.Add("y", 2);
  EXPECT_EQ(s.MinCount(), 0u);  // free counters: an absent key had no write at all
  s.Add("y", 4);
  EXPECT_EQ(Rows(s.Top(10)), (std::vector<Row>{{"y", 6, 0}, {"x", 5, 0}}));
  s.Clear();
  EXPECT_EQ(s.total(), 0u);
  EXPECT_TRUE(s.Top(10).empty());
}

// The guarantees, checked against exact counts on a skewed stream: every reported count is
// an overestimate by at most its error; every key above total/capacity is reported; errors
// never exceed total/capacity.
TEST(SpaceSavingTest, ErrorBoundHoldsOnASkewedStream) {
  std::mt19937 rng(42);
  std::geometric_distribution<int> dist(0.3);
  constexpr size_t kCapacity = 16;
  SpaceSaving s(kCapacity);
  std::map<std::string, uint64_t> exact;
  for (int i = 0; i < 20000; ++i) {
    std::string key = "k" + std::to_string(dist(rng));
    ++exact[key];
    s.Add(key);
  }
  ASSERT_EQ(s.total(), 20000u);
  std::vector<HeavyHitter> top = s.Top(kCapacity);
  ASSERT_EQ(top.size(), kCapacity);
  std::map<std::string, const HeavyHitter*> reported;
  for (const HeavyHitter& h : top) {
    reported[h.key] = &h;
    EXPECT_LE(h.count - h.error, exact[h.key]) << h.key;
    EXPECT_GE(h.count, exact[h.key]) << h.key;
    EXPECT_LE(h.error, s.total() / kCapacity) << h.key;
  }
  size_t heavy = 0;
  for (const auto& [key, count] : exact) {
    if (count > s.total() / kCapacity) {
      ++heavy;
      EXPECT_TRUE(reported.count(key)) << key << " (" << count << " writes) is missing";
    }
  }
  EXPECT_GE(heavy, 5u);  // the stream is skewed enough for the check above to mean something
  EXPECT_EQ(top[0].key, "k0");
}

TEST(WindowedHeavyHittersTest, TwoAlternatingWindowsOfAMinute) {
  WindowedHeavyHitters w(4, 60000);
  w.Add("a", 10, 1000);
  w.Add("b", 5, 1000);
  HeavyHittersReport r = w.Report(10, 31000);
  EXPECT_EQ(Rows(r.keys), (std::vector<Row>{{"a", 10, 0}, {"b", 5, 0}}));
  EXPECT_EQ(r.total, 15u);
  EXPECT_DOUBLE_EQ(r.span_seconds, 30.0);  // since the first write

  w.Add("a", 2, 61000);  // the second window
  w.Add("c", 4, 61000);
  r = w.Report(10, 91000);
  EXPECT_EQ(Rows(r.keys), (std::vector<Row>{{"a", 12, 0}, {"b", 5, 0}, {"c", 4, 0}}));
  EXPECT_EQ(r.total, 21u);
  EXPECT_DOUBLE_EQ(r.span_seconds, 90.0);
  EXPECT_EQ(Rows(w.Report(1, 91000).keys), (std::vector<Row>{{"a", 12, 0}}));

  // Third window, nothing written yet: the first window is gone, the second is the previous.
  r = w.Report(10, 125000);
  EXPECT_EQ(Rows(r.keys), (std::vector<Row>{{"c", 4, 0}, {"a", 2, 0}}));
  EXPECT_EQ(r.total, 6u);
  EXPECT_DOUBLE_EQ(r.span_seconds, 65.0);

  // Idle for more than a window: nothing recent.
  r = w.Report(10, 200000);
  EXPECT_TRUE(r.keys.empty());
  EXPECT_EQ(r.total, 0u);
  EXPECT_DOUBLE_EQ(r.span_seconds, 20.0);
  w.Add("d", 1, 200000);
  EXPECT_EQ(Rows(w.Report(10, 200500).keys), (std::vector<Row>{{"d", 1, 0}}));
  EXPECT_DOUBLE_EQ(w.Report(10, 200500).span_seconds, 20.5);
}

// A snapshot reports what the summary reported when it was taken, at any later time, however
// the summary changes after; across a window change too (the previous window's copy is shared
// only until the windows move).
TEST(WindowedHeavyHittersTest, ASnapshotReportsAsTheSummaryDidWhenTaken) {
  auto same = [](const HeavyHittersReport& a, const HeavyHittersReport& b) {
    EXPECT_EQ(Rows(a.keys), Rows(b.keys));
    EXPECT_EQ(a.total, b.total);
    EXPECT_EQ(a.unlisted_max, b.unlisted_max);
    EXPECT_DOUBLE_EQ(a.span_seconds, b.span_seconds);
  };
  WindowedHeavyHitters w(2, 60000);
  std::shared_ptr<const HeavyHittersSnapshot> empty = w.Snapshot();
  w.Add("a", 5, 1000);
  w.Add("b", 3, 1000);
  w.Add("c", 1, 2000);  // takes over b's counter
  std::shared_ptr<const HeavyHittersSnapshot> first = w.Snapshot();
  const HeavyHittersReport first_report = w.Report(10, 30000);
  w.Add("a", 2, 61000);  // the second window
  std::shared_ptr<const HeavyHittersSnapshot> second = w.Snapshot();
  const HeavyHittersReport second_report = w.Report(10, 90000);
  w.Add("d", 7, 62000);
  std::shared_ptr<const HeavyHittersSnapshot> third = w.Snapshot();
  w.Add("e", 1, 121000);  // the third window: the second becomes the previous one
  std::shared_ptr<const HeavyHittersSnapshot> fourth = w.Snapshot();

  EXPECT_TRUE(empty->Report(10, 30000).keys.empty());
  EXPECT_EQ(empty->Report(10, 30000).total, 0u);
  same(first->Report(10, 30000), first_report);
  EXPECT_EQ(Rows(first_report.keys), (std::vector<Row>{{"a", 5, 0}, {"c", 4, 3}}));
  same(second->Report(10, 90000), second_report);
  EXPECT_EQ(Rows(second_report.keys), (std::vector<Row>{{"a", 7, 0}, {"c", 4, 3}}));
  same(third->Report(10, 90000),
       HeavyHittersReport{{{"d", 11, 4}, {"a", 7, 0}, {"c", 6, 5}}, 18, 89.0, 6});
  for (int64_t now : {121500, 130000, 185000, 250000}) {
    SCOPED_TRACE(now);
    same(fourth->Report(10, now), w.Report(10, now));
    same(fourth->Report(1, now), w.Report(1, now));
  }
  EXPECT_EQ(Rows(fourth->Report(10, 121500).keys),
            (std::vector<Row>{{"d", 7, 0}, {"e", 3, 2}, {"a", 2, 0}}));
}

TEST(WindowedHeavyHittersTest, AKeyMissingInOneWindowCountsThatWindowsMinimumAsError) {
  WindowedHeavyHitters w(2, 60000);
  w.Add("a", 5, 0);
  w.Add("b", 3, 0);  // first window full: min 3
  w.Add("a", 1, 60000);
  w.Add("c", 1, 60000);  // second window full: min 1
  HeavyHittersReport r = w.Report(10, 90000);
  EXPECT_EQ(Rows(r.keys), (std::vector<Row>{{"a", 6, 0}, {"b", 4, 1}, {"c", 4, 3}}));
  EXPECT_EQ(r.total, 10u);
}

TEST(SpaceSavingTest, ANewKeyOfAFullSummaryReusesTheEvictedCounter) {
  SpaceSaving s(4);
  // Keys longer than any short-string buffer, so a copy of one would allocate.
  auto key = [](int i) { return "partition-key-of-some-length-" + std::to_string(1000 + i); };
  std::vector<std::string> keys;
  for (int i = 0; i < 100; ++i) keys.push_back(key(i));
  for (int i = 0; i < 4; ++i) s.Add(keys[i]);
  counting = true;
  allocations = 0;
  for (int i = 4; i < 100; ++i) s.Add(keys[i]);  // each evicts the smallest counter
  counting = false;
  EXPECT_EQ(allocations, 0u);
  EXPECT_EQ(s.size(), 4u);
  EXPECT_EQ(s.total(), 100u);
  ASSERT_NE(s.Find(keys[99]), nullptr);
  EXPECT_EQ(s.Find(keys[98])->count, 25u);  // counts 1..24 rotate over four counters
  EXPECT_EQ(s.Find(keys[3]), nullptr);
}

TEST(WindowedHeavyHittersTest, NoWritesReportNoRateRatherThanNaN) {
  WindowedHeavyHitters w(2, 60000);
  HeavyHittersReport r = w.Report(10, 5000);
  EXPECT_EQ(r.span_seconds, 0.0);
  EXPECT_EQ(r.PerSecond(r.total), 0.0);
  w.Add("a", 3, 10000);
  EXPECT_DOUBLE_EQ(w.Report(10, 16000).PerSecond(3), 0.5);
}

TEST(WindowedHeavyHittersTest, UnlistedMaxBoundsEveryKeyLeftOut) {
  WindowedHeavyHitters w(2, 60000);
  w.Add("a", 5, 0);
  EXPECT_EQ(w.Report(10, 1000).unlisted_max, 0u);  // a summary not yet full misses nothing
  w.Add("b", 3, 0);  // first window full: min 3
  w.Add("a", 1, 60000);
  w.Add("c", 1, 60000);  // second window full: min 1
  // A key in neither window may have had 3 + 1 writes.
  EXPECT_EQ(w.Report(10, 90000).unlisted_max, 4u);
  // Keys cut by the limit: the first one cut ({b, 4} or {c, 4}) bounds the rest too.
  HeavyHittersReport one = w.Report(1, 90000);
  EXPECT_EQ(Rows(one.keys), (std::vector<Row>{{"a", 6, 0}}));
  EXPECT_EQ(one.unlisted_max, 4u);
  w.Add("d", 9, 60000);
  HeavyHittersReport cut = w.Report(1, 90000);
  EXPECT_EQ(Rows(cut.keys), (std::vector<Row>{{"d", 13, 4}}));  // took over a (1): 10 +- 1, + 3
  EXPECT_EQ(cut.unlisted_max, 6u);  // a, 6
}

TEST(WindowedHeavyHittersTest, ReportRightAfterTheFirstWriteCoversAtLeastOneSecond) {
  WindowedHeavyHitters w(2, 60000);
  EXPECT_TRUE(w.Report(10, 5).keys.empty());
  w.Add("a", 3, 10);
  EXPECT_DOUBLE_EQ(w.Report(10, 10).span_seconds, 1.0);
}

}  // namespace
}  // namespace cdcview
