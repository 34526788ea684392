#include "engine/free_block_queue.h"

#include <gtest/gtest.h>

namespace kestrel {
namespace {

using V = std::vector<int>;

TEST(FreeBlockQueue, StartsWithAllBlocksInOrder) {
  FreeBlockQueue q(5);
  EXPECT_EQ(q.size(), 5);
  EXPECT_EQ(q.to_vector(), (V{0, 1, 2, 3, 4}));
  for (int b = 0; b < 5; ++b) EXPECT_TRUE(q.contains(b));
}

TEST(FreeBlockQueue, PopsHeadAndAppendsAtEitherEnd) {
  FreeBlockQueue q(4);
  EXPECT_EQ(q.pop_front(), 0);
  EXPECT_EQ(q.pop_front(), 1);
  EXPECT_FALSE(q.contains(0));
  q.push_back(0);   // 2 3 0
  q.push_front(1);  // 1 2 3 0
  EXPECT_EQ(q.to_vector(), (V{1, 2, 3, 0}));
  EXPECT_EQ(q.size(), 4);
}

TEST(FreeBlockQueue, RemovesFromTheMiddleHeadAndTail) {
  FreeBlockQueue q(5);
  q.remove(2);
  EXPECT_EQ(q.to_vector(), (V{0, 1, 3, 4}));
  q.remove(0);
  q.remove(4);
  EXPECT_EQ(q.to_vector(), (V{1, 3}));
  EXPECT_EQ(q.size(), 2);
  EXPECT_EQ(q.pop_front(), 1);
  EXPECT_EQ(q.pop_front(), 3);
  EXPECT_TRUE(q.empty());
  q.push_back(4);
  EXPECT_EQ(q.to_vector(), (V{4}));
}

}  // namespace
}  // namespace kestrel
