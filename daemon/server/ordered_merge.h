// OrderedMerge: the k-way merge of sources that are each already in a view's order, by one
// byte-string key per current element: ascending, or descending for a backward read. A
// sharded view's logical-key query merges its shards' cursors with it (view_reader.cc); a
// cluster member merges the members' pages with it (cluster_queries.cc), so both put entries
// in exactly the same order.
//
// A template over the source type, which gives `std::string_view order_key() const` for its
// current element. Not thread-safe; holds pointers to the sources, which must outlive it.
#pragma once

#include <algorithm>
#include <string_view>
#include <vector>

namespace cdcview {

template <typename Source>
class OrderedMerge {
 public:
  // `sources`: those with a current element.
  OrderedMerge(std::vector<Source*> sources, bool backward)
      : heap_(std::move(sources)), after_in_order_{backward} {
    std::make_heap(heap_.begin(), heap_.end(), after_in_order_);
  }

  bool empty() const { return heap_.empty(); }

  // Takes out the source whose current element comes first. Put it back with Return once it
  // has moved to its next element, or leave it out when it has none.
  Source* Take() {
    std::pop_heap(heap_.begin(), heap_.end(), after_in_order_);
    Source* top = heap_.back();
    heap_.pop_back();
    return top;
  }
  void Return(Source* source) {
    heap_.push_back(source);
    std::push_heap(heap_.begin(), heap_.end(), after_in_order_);
  }

 private:
  // std::*_heap keeps the greatest element on top: forward wants the smallest key.
  struct AfterInOrder {
    bool backward;
    bool operator()(const Source* a, const Source* b) const {
      return backward ? a->order_key() < b->order_key() : a->order_key() > b->order_key();
    }
  };

  std::vector<Source*> heap_;
  AfterInOrder after_in_order_;
};

}  // namespace cdcview
