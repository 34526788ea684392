#include "engine/block_manager.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace kestrel {

uint64_t hash_block_tokens(uint64_t parent_hash, std::span<const int> token_ids) {
  static_assert(sizeof(int) == 4);
  // Small fixed buffer for the usual block sizes; the hash is over the same bytes either way.
  constexpr size_t kInline = 8 + 4 * 64;
  unsigned char inline_buf[kInline];
  std::vector<unsigned char> heap_buf;
  const size_t size = 8 + 4 * token_ids.size();
  unsigned char* buf = inline_buf;
  if (size > kInline) {
    heap_buf.resize(size);
    buf = heap_buf.data();
  }
  std::memcpy(buf, &parent_hash, 8);
  std::memcpy(buf + 8, token_ids.data(), 4 * token_ids.size());
  return XXH3_64bits(buf, size);
}

BlockManager::BlockManager(int num_blocks, int block_size, bool enable_prefix_caching,
                           BlockHashFn hash_fn)
    : block_size_(block_size),
      enable_prefix_caching_(enable_prefix_caching),
      hash_fn_(std::move(hash_fn)),
      blocks_(std::max(num_blocks, 0)),
      free_queue_(std::max(num_blocks, 0)) {
  KS_CHECK(num_blocks >= 1, "num_kv_blocks must be >= 1, got {}", num_blocks);
  KS_CHECK(block_size >= 1, "block_size must be >= 1, got {}", block_size);
}

std::span<const int> BlockManager::block_tokens(const Sequence& seq, int logical_block) const {
  return std::span<const int>(seq.token_ids)
      .subspan(size_t(logical_block) * block_size_, block_size_);
}

int BlockManager::find_block(uint64_t hash, uint64_t parent_prefix_id,
                             std::span<const int> tokens) const {
  auto it = cached_.find(hash);
  if (it == cached_.end()) return -1;
  for (int b : it->second) {
    const Block& blk = blocks_[b];
    if (blk.parent_prefix_id == parent_prefix_id &&
        std::equal(tokens.begin(), tokens.end(), blk.token_ids.begin(), blk.token_ids.end())) {
      return b;
    }
  }
  return -1;
}

PrefixMatch BlockManager::find_cached_prefix(const Sequence& seq) const {
  PrefixMatch match;
  if (!enable_prefix_caching_) return match;
  match.num_query_tokens = seq.num_tokens();
  const int max_blocks = (seq.num_tokens() - 1) / block_size_;
  BlockKey parent;
  for (int i = 0; i < max_blocks; ++i) {
    const std::span<const int> tokens = block_tokens(seq, i);
    const uint64_t hash = hash_fn_(parent.hash, tokens);
    const int b = find_block(hash, parent.prefix_id, tokens);
    if (b < 0) break;
    parent = BlockKey{hash, blocks_[b].prefix_id};
    match.blocks.push_back(b);
    match.keys.push_back(parent);
  }
  return match;
}

PrefixMatch BlockManager::share_prefix(const Sequence& source, const Sequence& seq) const {
  PrefixMatch match;
  const int limit =
      std::min({source.num_computed_tokens / block_size_, (seq.num_tokens() - 1) / block_size_,
                static_cast<int>(source.block_table.size())});
  const std::vector<BlockKey>* chain = nullptr;
  if (enable_prefix_caching_) {
    auto it = chains_.find(source.seq_id);
    if (it == chains_.end()) return match;
    chain = &it->second;
  }
  for (int i = 0; i < limit; ++i) {
    if (chain != nullptr && i >= static_cast<int>(chain->size())) break;
    const std::span<const int> a = block_tokens(source, i);
    const std::span<const int> b = block_tokens(seq, i);
    if (!std::equal(a.begin(), a.end(), b.begin(), b.end())) break;
    match.blocks.push_back(source.block_table[i]);
    if (chain != nullptr) match.keys.push_back((*chain)[i]);
  }
  return match;
}

bool BlockManager::can_allocate(const Sequence& seq, const PrefixMatch& match,
                                int num_new_tokens) const {
  KS_ASSERT(seq.block_table.empty());
  const int num_matched = static_cast<int>(match.blocks.size());
  const int covered = num_matched * block_size_ + num_new_tokens;
  const int num_fresh = (covered + block_size_ - 1) / block_size_ - num_matched;
  // A matched block that nobody references is taken out of the free queue too.
  const int num_revived = static_cast<int>(std::count_if(
      match.blocks.begin(), match.blocks.end(), [&](int b) { return blocks_[b].ref_count == 0; }));
  return num_fresh + num_revived <= num_free_blocks();
}

void BlockManager::allocate_prefix(Sequence& seq, const PrefixMatch& match) {
  KS_ASSERT(seq.block_table.empty(), "sequence {} already has blocks", seq.seq_id);
  for (int b : match.blocks) {
    if (blocks_[b].ref_count == 0) free_queue_.remove(b);
    ++blocks_[b].ref_count;
  }
  seq.block_table = match.blocks;
  seq.num_computed_tokens = static_cast<int>(match.blocks.size()) * block_size_;
  seq.num_cached_tokens = seq.num_computed_tokens;
  if (enable_prefix_caching_) {
    KS_ASSERT(match.keys.size() == match.blocks.size());
    chains_[seq.seq_id] = match.keys;
  }
  if (match.num_query_tokens > 0) {
    stats_.queries += match.num_query_tokens;
    stats_.hits += seq.num_cached_tokens;
  }
}

int BlockManager::num_blocks_needed(const Sequence& seq, int num_new_tokens) const {
  const int covered = seq.num_computed_tokens + num_new_tokens;
  const int needed = (covered + block_size_ - 1) / block_size_;
  return std::max(0, needed - static_cast<int>(seq.block_table.size()));
}

void BlockManager::evict(int block) {
  Block& blk = blocks_[block];
  auto it = cached_.find(blk.hash);
  KS_ASSERT(it != cached_.end());
  std::erase(it->second, block);
  if (it->second.empty()) cached_.erase(it);
  blk.prefix_id = 0;
  blk.parent_prefix_id = 0;
  blk.hash = 0;
  blk.token_ids.clear();
}

int BlockManager::take_free_block() {
  const int b = free_queue_.pop_front();
  KS_ASSERT(blocks_[b].ref_count == 0);
  if (blocks_[b].prefix_id != 0) evict(b);
  blocks_[b].ref_count = 1;
  return b;
}

void BlockManager::allocate_for(Sequence& seq, int num_new_tokens) {
  const int needed = num_blocks_needed(seq, num_new_tokens);
  KS_ASSERT(needed <= num_free_blocks(), "need {} blocks, {} free", needed, num_free_blocks());
  for (int i = 0; i < needed; ++i) seq.block_table.push_back(take_free_block());
}

void BlockManager::register_full_blocks(const Sequence& seq) {
  if (!enable_prefix_caching_) return;
  std::vector<BlockKey>& chain = chains_[seq.seq_id];
  const int num_full =
      std::min(seq.num_computed_tokens / block_size_, static_cast<int>(seq.block_table.size()));
  for (int i = static_cast<int>(chain.size()); i < num_full; ++i) {
    const BlockKey parent = i == 0 ? BlockKey{} : chain[i - 1];
    const std::span<const int> tokens = block_tokens(seq, i);
    const uint64_t hash = hash_fn_(parent.hash, tokens);
    // Another sequence may have published the same prefix meanwhile (computed in the same
    // step): keep that one and leave this block private.
    const int existing = find_block(hash, parent.prefix_id, tokens);
    if (existing >= 0) {
      chain.push_back(BlockKey{hash, blocks_[existing].prefix_id});
      continue;
    }
    Block& blk = blocks_[seq.block_table[i]];
    KS_ASSERT(blk.prefix_id == 0, "block {} published twice", seq.block_table[i]);
    blk.hash = hash;
    blk.prefix_id = next_prefix_id_++;
    blk.parent_prefix_id = parent.prefix_id;
    blk.token_ids.assign(tokens.begin(), tokens.end());
    cached_[hash].push_back(seq.block_table[i]);
    chain.push_back(BlockKey{hash, blk.prefix_id});
  }
}

void BlockManager::free(Sequence& seq) {
  for (auto it = seq.block_table.rbegin(); it != seq.block_table.rend(); ++it) {
    Block& blk = blocks_[*it];
    KS_ASSERT(blk.ref_count > 0, "block {} freed twice", *it);
    if (--blk.ref_count > 0) continue;
    if (blk.prefix_id != 0) {
      free_queue_.push_back(*it);
    } else {
      free_queue_.push_front(*it);
    }
  }
  seq.block_table.clear();
  seq.num_computed_tokens = 0;
  chains_.erase(seq.seq_id);
}

}  // namespace kestrel
