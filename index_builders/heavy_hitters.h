// Heavy hitters: the most frequent keys of a stream in bounded memory.
//
// SpaceSaving is Metwally, Agrawal and El Abbadi's Space-Saving summary: at most `capacity`
// counters; a key without a counter takes over the smallest one (count = that count + 1,
// error = that count). Every key's true count lies in [count - error, count], and any key
// whose true count exceeds total / capacity is guaranteed to hold a counter. The counters are
// an indexed min-heap, so an update is a hash lookup plus O(log capacity) swaps.
//
// WindowedHeavyHitters keeps two SpaceSaving summaries for alternating windows of a fixed
// length: the current one receives updates; when it is over it becomes the previous one and
// the older is dropped. A report merges both, so it covers between one and two windows of the
// most recent writes (less right after start). Time is passed in (milliseconds, any epoch),
// never read from a clock: this is part of the pure core.
//
// HeavyHittersSnapshot is an immutable copy of what a WindowedHeavyHitters report reads, so
// that reports can be built on other threads while the owner goes on updating the summary.
//
// Not thread-safe: SpaceSaving and WindowedHeavyHitters belong to one thread at a time (the
// owner serialises access). A HeavyHittersSnapshot is immutable once built: any thread may
// read one it holds a shared_ptr to.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace cdcview {

struct HeavyHitter {
  std::string key;
  uint64_t count = 0;  // an overestimate: the true count is in [count - error, count]
  uint64_t error = 0;
};

// The order of every heavy-hitter list: count descending, then key ascending (deterministic
// output for equal counts).
bool HeavierFirst(const HeavyHitter& a, const HeavyHitter& b);

class SpaceSaving {
 public:
  explicit SpaceSaving(size_t capacity);

  void Add(std::string_view key, uint64_t count = 1);
  // The `limit` largest counters, by count descending then key ascending.
  std::vector<HeavyHitter> Top(size_t limit) const;
  // The counter of `key`, or nullptr if it has none (its true count is then <= MinCount()).
  const HeavyHitter* Find(std::string_view key) const;
  // The smallest count held once every counter is in use, 0 before.
  uint64_t MinCount() const;
  uint64_t total() const { return total_; }
  // Every counter, in no particular order.
  const std::vector<HeavyHitter>& counters() const { return counters_; }
  size_t capacity() const { return capacity_; }
  size_t size() const { return counters_.size(); }
  void Clear();

 private:
  // An indexed min-heap: moving a counter within the heap updates two integers, not the
  // index's hash entries (which a sift did twice per level, per write).
  uint64_t CountAt(size_t heap_pos) const { return counters_[heap_[heap_pos]].count; }
  void Swap(size_t a, size_t b);
  void SiftDown(size_t i);

  size_t capacity_;
  uint64_t total_ = 0;
  std::vector<HeavyHitter> counters_;  // one per tracked key; a counter keeps its id
  std::vector<uint32_t> heap_;         // counter ids, a min-heap by count
  std::vector<uint32_t> slot_;         // counter id -> its position in heap_
  struct Hash {
    using is_transparent = void;  // find(string_view) without building a string
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, uint32_t, Hash, std::equal_to<>> index_;  // key -> counter id
};

struct HeavyHittersReport {
  std::vector<HeavyHitter> keys;  // merged over both windows, count descending
  uint64_t total = 0;             // every write in the covered span
  double span_seconds = 0;        // how much time the report covers; 0 before any write
  // The most writes a key that is not in `keys` may have had in the span: the windows'
  // MinCount() summed, or the count of the first key cut by `limit` if that is larger.
  // Sums over keys (a sharded view's logical key) add it for each member that is absent.
  uint64_t unlisted_max = 0;

  // count / span_seconds; 0 when the report covers no time (nothing written yet).
  double PerSecond(uint64_t count) const { return span_seconds > 0 ? count / span_seconds : 0.0; }
};

// The state of a WindowedHeavyHitters when it was taken (WindowedHeavyHitters::Snapshot).
class HeavyHittersSnapshot {
 public:
  // Exactly what WindowedHeavyHitters::Report(limit, now_ms) returned when the snapshot was
  // taken: `now_ms` may be later (the windows move on as the summary's own would).
  HeavyHittersReport Report(size_t limit, int64_t now_ms) const;

 private:
  friend class WindowedHeavyHitters;
  // One window's SpaceSaving, frozen: its counters (in no order), MinCount() and total().
  struct Window {
    std::vector<HeavyHitter> counters;
    uint64_t min_count = 0;
    uint64_t total = 0;
  };
  static std::shared_ptr<const Window> Freeze(const SpaceSaving& summary);

  int64_t window_ms_ = 1;
  int64_t current_start_ = -1;  // -1: nothing written
  int64_t first_ms_ = -1;
  std::shared_ptr<const Window> current_;
  std::shared_ptr<const Window> previous_;  // null when there is no previous window
};

class WindowedHeavyHitters {
 public:
  WindowedHeavyHitters(size_t capacity, int64_t window_ms);

  void Add(std::string_view key, uint64_t count, int64_t now_ms);
  // The `limit` heaviest keys over the previous and the current window as of `now_ms`. A key
  // one window misses counts that window's MinCount() (the most it can have had there), added
  // to both its count and its error, so count stays an overestimate and count - error an
  // underestimate.
  HeavyHittersReport Report(size_t limit, int64_t now_ms) const;
  // The state Report reads, as an immutable copy. The previous window's copy is shared by all
  // snapshots taken until the windows next move, so a snapshot copies the current window's
  // counters only (at most `capacity`).
  std::shared_ptr<const HeavyHittersSnapshot> Snapshot();
  int64_t window_ms() const { return window_ms_; }

 private:
  // Moves the windows forward so that `now_ms` falls in the current one.
  void Advance(int64_t now_ms);
  HeavyHittersSnapshot Frozen(std::shared_ptr<const HeavyHittersSnapshot::Window> previous) const;

  int64_t window_ms_;
  int64_t current_start_ = -1;  // -1 until the first Add
  int64_t first_ms_ = -1;       // the first Add: reports never cover time before it
  SpaceSaving current_;
  SpaceSaving previous_;
  bool has_previous_ = false;
  // previous_ frozen by Snapshot(), until the windows move; null before.
  std::shared_ptr<const HeavyHittersSnapshot::Window> frozen_previous_;
};

}  // namespace cdcview
