#include "index_builders/heavy_hitters.h"

#include <algorithm>
#include <cstdlib>
#include <map>

namespace cdcview {

bool HeavierFirst(const HeavyHitter& a, const HeavyHitter& b) {
  return a.count != b.count ? a.count > b.count : a.key < b.key;
}

SpaceSaving::SpaceSaving(size_t capacity) : capacity_(capacity) {
  if (capacity_ == 0) std::abort();  // a summary with no counter cannot report anything
  counters_.reserve(capacity_);
  heap_.reserve(capacity_);
  slot_.reserve(capacity_);
  index_.reserve(capacity_ * 2);
}

void SpaceSaving::Clear() {
  total_ = 0;
  counters_.clear();
  heap_.clear();
  slot_.clear();
  index_.clear();
}

void SpaceSaving::Swap(size_t a, size_t b) {
  std::swap(heap_[a], heap_[b]);
  slot_[heap_[a]] = static_cast<uint32_t>(a);
  slot_[heap_[b]] = static_cast<uint32_t>(b);
}

void SpaceSaving::SiftDown(size_t i) {
  const size_t n = heap_.size();
  for (;;) {
    size_t smallest = i;
    const size_t l = 2 * i + 1, r = l + 1;
    if (l < n && CountAt(l) < CountAt(smallest)) smallest = l;
    if (r < n && CountAt(r) < CountAt(smallest)) smallest = r;
    if (smallest == i) return;
    Swap(i, smallest);
    i = smallest;
  }
}

void SpaceSaving::Add(std::string_view key, uint64_t count) {
  total_ += count;
  if (auto it = index_.find(key); it != index_.end()) {
    counters_[it->second].count += count;
    SiftDown(slot_[it->second]);  // counts only grow: the node can only move down a min-heap
    return;
  }
  if (counters_.size() < capacity_) {
    // Appended with the largest possible position; sifting up keeps the min-heap.
    const auto id = static_cast<uint32_t>(counters_.size());
    counters_.push_back({std::string(key), count, 0});
    index_.emplace(counters_.back().key, id);
    heap_.push_back(id);
    slot_.push_back(static_cast<uint32_t>(heap_.size() - 1));
    size_t i = heap_.size() - 1;
    while (i > 0) {
      size_t parent = (i - 1) / 2;
      if (CountAt(parent) <= CountAt(i)) break;
      Swap(i, parent);
      i = parent;
    }
    return;
  }
  // The new key takes over the smallest counter: it may have been that key's all along. The
  // evicted key's hash node and both strings are reused (assign keeps their capacity), so
  // once the summary is full a new key allocates nothing unless it is longer than the old.
  HeavyHitter& root = counters_[heap_[0]];
  auto node = index_.extract(root.key);
  node.key().assign(key);
  index_.insert(std::move(node));  // still mapped to the root's counter
  root.error = root.count;
  root.count += count;
  root.key.assign(key);
  SiftDown(0);
}

std::vector<HeavyHitter> SpaceSaving::Top(size_t limit) const {
  std::vector<HeavyHitter> out = counters_;
  std::sort(out.begin(), out.end(), HeavierFirst);
  if (out.size() > limit) out.resize(limit);
  return out;
}

const HeavyHitter* SpaceSaving::Find(std::string_view key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &counters_[it->second];
}

uint64_t SpaceSaving::MinCount() const {
  return counters_.size() < capacity_ || heap_.empty() ? 0 : CountAt(0);
}

WindowedHeavyHitters::WindowedHeavyHitters(size_t capacity, int64_t window_ms)
    : window_ms_(window_ms), current_(capacity), previous_(capacity) {
  if (window_ms_ <= 0) std::abort();
}

void WindowedHeavyHitters::Advance(int64_t now_ms) {
  const int64_t start = now_ms - now_ms % window_ms_;  // windows are aligned to the epoch
  if (current_start_ < 0) {
    current_start_ = start;
    first_ms_ = now_ms;
    return;
  }
  if (start <= current_start_) return;  // still the current window (or a clock step back)
  frozen_previous_.reset();
  if (start == current_start_ + window_ms_) {
    std::swap(previous_, current_);
    has_previous_ = true;
  } else {
    previous_.Clear();  // idle for more than a window: nothing recent is left
    has_previous_ = false;
  }
  current_.Clear();
  current_start_ = start;
}

void WindowedHeavyHitters::Add(std::string_view key, uint64_t count, int64_t now_ms) {
  Advance(now_ms);
  current_.Add(key, count);
}

HeavyHittersReport WindowedHeavyHitters::Report(size_t limit, int64_t now_ms) const {
  return Frozen(has_previous_ ? HeavyHittersSnapshot::Freeze(previous_) : nullptr)
      .Report(limit, now_ms);
}

std::shared_ptr<const HeavyHittersSnapshot> WindowedHeavyHitters::Snapshot() {
  if (has_previous_ && frozen_previous_ == nullptr) {
    frozen_previous_ = HeavyHittersSnapshot::Freeze(previous_);
  }
  return std::make_shared<const HeavyHittersSnapshot>(
      Frozen(has_previous_ ? frozen_previous_ : nullptr));
}

HeavyHittersSnapshot WindowedHeavyHitters::Frozen(
    std::shared_ptr<const HeavyHittersSnapshot::Window> previous) const {
  HeavyHittersSnapshot snapshot;
  snapshot.window_ms_ = window_ms_;
  snapshot.current_start_ = current_start_;
  snapshot.first_ms_ = first_ms_;
  snapshot.current_ = HeavyHittersSnapshot::Freeze(current_);
  snapshot.previous_ = std::move(previous);
  return snapshot;
}

std::shared_ptr<const HeavyHittersSnapshot::Window> HeavyHittersSnapshot::Freeze(
    const SpaceSaving& summary) {
  auto window = std::make_shared<Window>();
  window->counters = summary.counters();
  window->min_count = summary.MinCount();
  window->total = summary.total();
  return window;
}

HeavyHittersReport HeavyHittersSnapshot::Report(size_t limit, int64_t now_ms) const {
  HeavyHittersReport report;
  if (current_start_ < 0) return report;
  const int64_t start = now_ms - now_ms % window_ms_;
  // As of now_ms, which of the stored windows are still the current and previous ones.
  const Window* cur = nullptr;
  const Window* prev = nullptr;
  int64_t covered_from = start;
  if (start <= current_start_) {
    cur = current_.get();
    if (previous_ != nullptr) {
      prev = previous_.get();
      covered_from = current_start_ - window_ms_;
    } else {
      covered_from = current_start_;
    }
  } else if (start == current_start_ + window_ms_) {
    prev = current_.get();  // the current window ended; nothing written in the new one yet
    covered_from = current_start_;
  }
  covered_from = std::max(covered_from, first_ms_);
  report.span_seconds = std::max<int64_t>(now_ms - covered_from, 1000) / 1000.0;

  struct Merged {
    HeavyHitter sum;
    bool in_cur = false;
    bool in_prev = false;
  };
  std::map<std::string, Merged, std::less<>> merged;
  auto add = [&merged](const Window* window, bool Merged::*seen) {
    if (window == nullptr) return;
    for (const HeavyHitter& h : window->counters) {
      Merged& m = merged[h.key];
      m.sum.count += h.count;
      m.sum.error += h.error;
      m.*seen = true;
    }
  };
  add(cur, &Merged::in_cur);
  add(prev, &Merged::in_prev);
  // A key one window has no counter for counts what that window may have held for it
  // without one: its MinCount().
  auto absent = [](const Window* window, bool seen, HeavyHitter& sum) {
    if (window == nullptr || seen) return;
    sum.count += window->min_count;
    sum.error += window->min_count;
  };
  for (auto& [key, m] : merged) {
    absent(cur, m.in_cur, m.sum);
    absent(prev, m.in_prev, m.sum);
    m.sum.key = key;
    report.keys.push_back(std::move(m.sum));
  }
  std::sort(report.keys.begin(), report.keys.end(), HeavierFirst);
  report.unlisted_max = (cur ? cur->min_count : 0) + (prev ? prev->min_count : 0);
  if (report.keys.size() > limit) {
    report.unlisted_max = std::max(report.unlisted_max, report.keys[limit].count);
    report.keys.resize(limit);
  }
  report.total = (cur ? cur->total : 0) + (prev ? prev->total : 0);
  return report;
}

}  // namespace cdcview
