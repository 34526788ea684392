#include "engine/block_manager.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <memory>
#include <set>

#include "core/error.h"

namespace kestrel {
namespace {

using V = std::vector<int>;

std::unique_ptr<Sequence> make_seq(int64_t id, V tokens) {
  static auto params = std::make_shared<const SamplingParams>();
  return std::make_unique<Sequence>(id, fmt::format("r{}", id), 0, std::move(tokens), params, 7);
}

V iota_tokens(int n, int start) {
  V v(n);
  for (int i = 0; i < n; ++i) v[i] = start + i;
  return v;
}

V concat(V a, const V& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Allocates and "computes" the whole sequence, then publishes its full blocks.
void compute_all(BlockManager& bm, Sequence& seq) {
  const PrefixMatch m = bm.find_cached_prefix(seq);
  bm.allocate_prefix(seq, m);
  bm.allocate_for(seq, seq.num_tokens() - seq.num_computed_tokens);
  seq.num_computed_tokens = seq.num_tokens();
  bm.register_full_blocks(seq);
}

TEST(BlockManager, DefaultHashIsXxh3OverParentThenTokens) {
  const V tokens{5, 6, 70000};
  unsigned char bytes[8 + 12];
  const uint64_t parent = 0x1122334455667788ull;
  std::memcpy(bytes, &parent, 8);
  std::memcpy(bytes + 8, tokens.data(), 12);
  EXPECT_EQ(hash_block_tokens(parent, tokens), XXH3_64bits(bytes, sizeof(bytes)));
  EXPECT_NE(hash_block_tokens(parent, tokens), hash_block_tokens(parent + 1, tokens));
}

TEST(BlockManager, AllocatesToCoverTokensAndFreesEverything) {
  BlockManager bm(8, 4, true);
  auto seq = make_seq(1, iota_tokens(10, 1));
  EXPECT_EQ(bm.num_blocks_needed(*seq, 10), 3);  // ceil(10 / 4)
  bm.allocate_for(*seq, 10);
  ASSERT_EQ(seq->block_table.size(), 3u);
  EXPECT_EQ(std::set<int>(seq->block_table.begin(), seq->block_table.end()).size(), 3u);
  for (int b : seq->block_table) EXPECT_EQ(bm.ref_count(b), 1);
  EXPECT_EQ(bm.num_free_blocks(), 5);
  EXPECT_DOUBLE_EQ(bm.usage(), 3.0 / 8.0);

  seq->num_computed_tokens = 10;
  seq->token_ids.push_back(11);  // tokens 10 and 11 still fit block 2
  EXPECT_EQ(bm.num_blocks_needed(*seq, 1), 0);
  seq->num_computed_tokens = 12;
  seq->token_ids.push_back(12);
  seq->token_ids.push_back(13);
  EXPECT_EQ(bm.num_blocks_needed(*seq, 1), 1);  // token 12 opens block 3
  bm.allocate_for(*seq, 1);
  EXPECT_EQ(bm.num_free_blocks(), 4);

  bm.free(*seq);
  EXPECT_EQ(bm.num_free_blocks(), 8);
  EXPECT_TRUE(seq->block_table.empty());
  EXPECT_EQ(seq->num_computed_tokens, 0);
}

TEST(BlockManager, PrefixHitAcrossRequestsSharesBlocksWithRefCounts) {
  BlockManager bm(16, 4, true);
  const V prompt = iota_tokens(12, 100);
  auto a = make_seq(1, prompt);
  compute_all(bm, *a);
  EXPECT_EQ(bm.prefix_cache_stats().hits, 0);
  EXPECT_EQ(bm.prefix_cache_stats().queries, 12);

  auto b = make_seq(2, concat(prompt, {1, 2, 3, 4, 5}));
  const PrefixMatch m = bm.find_cached_prefix(*b);
  EXPECT_EQ(m.blocks, a->block_table);  // all 3 of A's blocks, in order
  ASSERT_TRUE(bm.can_allocate(*b, m, 5));
  bm.allocate_prefix(*b, m);
  EXPECT_EQ(b->num_computed_tokens, 12);
  EXPECT_EQ(b->num_cached_tokens, 12);
  for (int blk : a->block_table) EXPECT_EQ(bm.ref_count(blk), 2);
  EXPECT_EQ(bm.prefix_cache_stats().queries, 12 + 17);
  EXPECT_EQ(bm.prefix_cache_stats().hits, 12);
  EXPECT_NEAR(bm.prefix_cache_stats().hit_rate(), 12.0 / 29.0, 1e-12);

  // Only the first two blocks agree with C.
  auto c = make_seq(3, concat(iota_tokens(8, 100), {9, 9, 9, 9, 9}));
  EXPECT_EQ(bm.find_cached_prefix(*c).blocks,
            V(a->block_table.begin(), a->block_table.begin() + 2));

  // The same 12 tokens exactly: the block holding the last token is never a hit.
  auto d = make_seq(4, prompt);
  EXPECT_EQ(bm.find_cached_prefix(*d).blocks.size(), 2u);  // (12 - 1) / 4

  bm.free(*b);
  for (int blk : a->block_table) EXPECT_EQ(bm.ref_count(blk), 1);
}

TEST(BlockManager, OnlyFullComputedBlocksArePublished) {
  BlockManager bm(16, 4, true);
  auto a = make_seq(1, iota_tokens(10, 1));
  compute_all(bm, *a);  // blocks 0, 1 full; block 2 holds 2 tokens
  EXPECT_TRUE(bm.is_cached(a->block_table[0]));
  EXPECT_TRUE(bm.is_cached(a->block_table[1]));
  EXPECT_FALSE(bm.is_cached(a->block_table[2]));
  auto b = make_seq(2, iota_tokens(20, 1));  // extends A's 10 tokens
  EXPECT_EQ(bm.find_cached_prefix(*b).blocks.size(), 2u);

  // Allocated but not yet computed: not published.
  auto c = make_seq(3, iota_tokens(12, 500));
  bm.allocate_for(*c, 12);
  c->num_computed_tokens = 6;  // one chunk of the prompt done
  bm.register_full_blocks(*c);
  EXPECT_TRUE(bm.is_cached(c->block_table[0]));
  EXPECT_FALSE(bm.is_cached(c->block_table[1]));
  c->num_computed_tokens = 12;
  bm.register_full_blocks(*c);
  EXPECT_TRUE(bm.is_cached(c->block_table[1]));
  EXPECT_TRUE(bm.is_cached(c->block_table[2]));
}

TEST(BlockManager, ForcedHashCollisionsNeverGiveWrongBlocks) {
  // Every block hashes alike: only the token and parent checks stand between a lookup
  // and K/V computed for other tokens.
  BlockManager bm(32, 4, true, [](uint64_t, std::span<const int>) { return uint64_t{42}; });
  const V x{1, 2, 3, 4}, y{5, 6, 7, 8}, z{9, 10, 11, 12};
  auto c = make_seq(1, concat(z, y));  // [Z, Y] published first
  compute_all(bm, *c);
  auto a = make_seq(2, concat(x, y));  // [X, Y]
  compute_all(bm, *a);
  // A's block 0 differs from C's, so nothing of C may be reused; block 1 (Y) had a
  // different parent in C, so A computed its own.
  EXPECT_EQ(a->num_cached_tokens, 0);

  // D = [X, Y, ...]: Y must come from A (parent X), not from C (parent Z), although C's
  // Y block is found first under the shared hash.
  auto d = make_seq(3, concat(concat(x, y), {77}));
  EXPECT_EQ(bm.find_cached_prefix(*d).blocks, a->block_table);

  auto e = make_seq(4, concat(concat(V{13, 14, 15, 16}, y), {77}));
  EXPECT_TRUE(bm.find_cached_prefix(*e).blocks.empty());
  auto f = make_seq(5, concat(concat(x, V{5, 6, 7, 0}), {77}));
  EXPECT_EQ(bm.find_cached_prefix(*f).blocks, V{a->block_table[0]});
}

TEST(BlockManager, HitOnZeroRefCachedBlockRevivesIt) {
  BlockManager bm(6, 4, true);
  const V prompt = iota_tokens(8, 40);
  auto a = make_seq(1, prompt);
  compute_all(bm, *a);
  const V a_blocks = a->block_table;
  bm.free(*a);
  EXPECT_EQ(bm.num_free_blocks(), 6);
  EXPECT_TRUE(bm.is_cached(a_blocks[0]));
  EXPECT_EQ(bm.ref_count(a_blocks[0]), 0);

  auto b = make_seq(2, concat(prompt, {1}));
  const PrefixMatch m = bm.find_cached_prefix(*b);
  ASSERT_EQ(m.blocks, a_blocks);
  bm.allocate_prefix(*b, m);
  EXPECT_EQ(bm.num_free_blocks(), 4);
  EXPECT_EQ(bm.ref_count(a_blocks[0]), 1);
  EXPECT_FALSE(bm.free_queue().contains(a_blocks[0]));
  // Taking every remaining block must not evict the revived ones.
  auto c = make_seq(3, iota_tokens(16, 900));
  bm.allocate_for(*c, 16);
  EXPECT_EQ(bm.num_free_blocks(), 0);
  EXPECT_TRUE(bm.is_cached(a_blocks[0]));
  EXPECT_TRUE(bm.is_cached(a_blocks[1]));
  for (int blk : c->block_table) EXPECT_TRUE(blk != a_blocks[0] && blk != a_blocks[1]);
}

TEST(BlockManager, EvictsLeastRecentlyReleasedAndTailBlocksFirst) {
  BlockManager bm(4, 2, true);
  auto a = make_seq(1, V{1, 2, 3, 4});
  compute_all(bm, *a);
  EXPECT_EQ(a->block_table, (V{0, 1}));
  bm.free(*a);  // tail first: 1 then 0 go to the back
  EXPECT_EQ(bm.free_queue().to_vector(), (V{2, 3, 1, 0}));
  auto b = make_seq(2, V{5, 6, 7, 8});
  compute_all(bm, *b);
  EXPECT_EQ(b->block_table, (V{2, 3}));
  bm.free(*b);
  EXPECT_EQ(bm.free_queue().to_vector(), (V{1, 0, 3, 2}));

  // A fresh allocation evicts A's last block: A's first block and all of B stay hits.
  auto c = make_seq(3, V{9});
  bm.allocate_for(*c, 1);
  EXPECT_EQ(c->block_table, V{1});
  EXPECT_FALSE(bm.is_cached(1));
  EXPECT_EQ(bm.find_cached_prefix(*make_seq(4, V{1, 2, 3, 4, 0})).blocks, V{0});
  EXPECT_EQ(bm.find_cached_prefix(*make_seq(5, V{5, 6, 7, 8, 0})).blocks, (V{2, 3}));

  // A block without contents worth keeping goes to the head when released.
  bm.free(*c);
  EXPECT_EQ(bm.free_queue().to_vector(), (V{1, 0, 3, 2}));
  auto d = make_seq(6, V{9, 9, 9});
  bm.allocate_for(*d, 3);
  EXPECT_EQ(d->block_table, (V{1, 0}));
  EXPECT_FALSE(bm.is_cached(0));
  EXPECT_TRUE(bm.is_cached(2));
}

TEST(BlockManager, CanAllocateCountsRevivedBlocks) {
  BlockManager bm(3, 2, true);
  auto a = make_seq(1, V{1, 2, 3, 4});
  compute_all(bm, *a);
  bm.free(*a);  // 3 free, 2 of them cached
  auto b = make_seq(2, V{1, 2, 3, 4, 5, 6});
  const PrefixMatch m = bm.find_cached_prefix(*b);
  ASSERT_EQ(m.blocks.size(), 2u);
  EXPECT_TRUE(bm.can_allocate(*b, m, 2));  // 2 revived + 1 fresh
  auto c = make_seq(3, V{1, 2, 3, 4, 5, 6, 7, 8});
  const PrefixMatch mc = bm.find_cached_prefix(*c);
  ASSERT_EQ(mc.blocks.size(), 2u);
  EXPECT_FALSE(bm.can_allocate(*c, mc, 4));  // 2 revived + 2 fresh > 3
  EXPECT_TRUE(bm.can_allocate(*c, mc, 2));   // a chunk that fits
}

TEST(BlockManager, WithoutPrefixCachingNothingIsShared) {
  BlockManager bm(8, 4, false);
  const V prompt = iota_tokens(12, 3);
  auto a = make_seq(1, prompt);
  compute_all(bm, *a);
  EXPECT_FALSE(bm.is_cached(a->block_table[0]));
  auto b = make_seq(2, concat(prompt, {1}));
  EXPECT_TRUE(bm.find_cached_prefix(*b).blocks.empty());
  EXPECT_EQ(bm.prefix_cache_stats().queries, 0);
}

TEST(BlockManager, SamplesShareTheComputedPromptBlocks) {
  for (bool caching : {false, true}) {
    BlockManager bm(8, 4, caching);
    const V prompt = iota_tokens(10, 3);
    auto first = make_seq(1, prompt);
    compute_all(bm, *first);
    auto other = make_seq(2, prompt);
    const PrefixMatch m = bm.share_prefix(*first, *other);
    EXPECT_EQ(m.blocks, V(first->block_table.begin(), first->block_table.begin() + 2));
    bm.allocate_prefix(*other, m);
    EXPECT_EQ(other->num_computed_tokens, 8);
    EXPECT_EQ(bm.ref_count(first->block_table[0]), 2);
    EXPECT_EQ(bm.ref_count(first->block_table[2]), 1);  // the partial block stays private
    bm.allocate_for(*other, 2);
    EXPECT_NE(other->block_table[2], first->block_table[2]);
  }
}

TEST(BlockManager, RejectsBadSizes) {
  EXPECT_THROW(BlockManager(0, 16, true), Error);
  EXPECT_THROW(BlockManager(4, 0, true), Error);
}

}  // namespace
}  // namespace kestrel
