#include "engine/free_block_queue.h"

#include "core/error.h"

namespace kestrel {

FreeBlockQueue::FreeBlockQueue(int num_blocks)
    : sentinel_(num_blocks),
      prev_(num_blocks + 1, num_blocks),
      next_(num_blocks + 1, num_blocks),
      in_queue_(num_blocks, false) {
  KS_ASSERT(num_blocks >= 0);
  for (int b = 0; b < num_blocks; ++b) push_back(b);
}

void FreeBlockQueue::link_after(int prev, int block) {
  const int next = next_[prev];
  prev_[block] = prev;
  next_[block] = next;
  next_[prev] = block;
  prev_[next] = block;
  in_queue_[block] = true;
  ++size_;
}

int FreeBlockQueue::pop_front() {
  KS_ASSERT(size_ > 0, "no free KV block");
  const int block = next_[sentinel_];
  remove(block);
  return block;
}

void FreeBlockQueue::push_back(int block) {
  KS_ASSERT(!in_queue_[block], "block {} freed twice", block);
  link_after(prev_[sentinel_], block);
}

void FreeBlockQueue::push_front(int block) {
  KS_ASSERT(!in_queue_[block], "block {} freed twice", block);
  link_after(sentinel_, block);
}

void FreeBlockQueue::remove(int block) {
  KS_ASSERT(in_queue_[block], "block {} is not free", block);
  next_[prev_[block]] = next_[block];
  prev_[next_[block]] = prev_[block];
  in_queue_[block] = false;
  --size_;
}

std::vector<int> FreeBlockQueue::to_vector() const {
  std::vector<int> out;
  out.reserve(size_);
  for (int b = next_[sentinel_]; b != sentinel_; b = next_[b]) out.push_back(b);
  return out;
}

}  // namespace kestrel
