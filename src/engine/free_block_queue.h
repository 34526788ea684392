// FreeBlockQueue: the KV blocks nobody references, in eviction order.
//
// A doubly-linked list threaded through two index arrays (no allocation after
// construction). The head is evicted first. Freed blocks that carry a prefix-cache entry go
// to the tail, so the least recently released cached block is the first one reused; a
// cached block that gets a hit while free is unlinked from the middle in O(1).
// Not thread-safe.
#pragma once

#include <vector>

namespace kestrel {

class FreeBlockQueue {
 public:
  // Starts with every block 0..num_blocks-1 free, in increasing order.
  explicit FreeBlockQueue(int num_blocks);

  int size() const { return size_; }
  bool empty() const { return size_ == 0; }
  bool contains(int block) const { return in_queue_[block]; }

  // REQUIRES: !empty(). Removes and returns the head.
  int pop_front();
  // REQUIRES: !contains(block).
  void push_back(int block);
  void push_front(int block);
  // REQUIRES: contains(block).
  void remove(int block);

  // The blocks from head to tail (for tests and debugging; O(size)).
  std::vector<int> to_vector() const;

 private:
  void link_after(int prev, int block);

  // Index num_blocks is the sentinel: next_[sentinel] is the head, prev_[sentinel] the tail.
  const int sentinel_;
  std::vector<int> prev_;
  std::vector<int> next_;
  std::vector<bool> in_queue_;
  int size_ = 0;
};

}  // namespace kestrel
