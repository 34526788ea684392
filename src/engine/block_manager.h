// BlockManager: the paged KV cache's bookkeeping (which physical block holds which tokens).
//
// The cache is num_blocks blocks of block_size token slots. A sequence's block_table maps
// its logical block i (tokens [i * block_size, (i + 1) * block_size)) to a physical block.
// Blocks are reference-counted; a block nobody references sits in the FreeBlockQueue.
//
// Prefix caching (vLLM v1's design). Once a FULL block's K/V has been computed it is
// published under a chained key: hash_i = H(hash_{i-1}, tokens of block i), hash_{-1} = 0.
// A later sequence whose leading blocks have the same tokens reuses those blocks instead of
// recomputing them. A hit is only taken after confirming (a) the block's stored token ids
// equal the sequence's and (b) the block's parent is the block matched one step earlier
// (each published block gets a unique prefix id; a block records its parent's). So a hash
// collision can never hand out K/V computed for other tokens. A published block whose
// reference count drops to zero keeps its contents and key and can still be hit; it is
// evicted (key dropped) only when the allocator pops it from the free queue, least
// recently released first. Free blocks without a key go to the head of the queue, so they
// are reused before any cached block.
//
// Hits are capped at (num_tokens - 1) / block_size blocks: at least one token is always
// computed (there must be logits to sample from), and a sequence never writes into a block
// it shares.
//
// Not thread-safe. Errors: misuse (freeing twice, allocating without room) is a bug and
// aborts via KS_ASSERT; callers check can_allocate() first.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/free_block_queue.h"
#include "engine/sequence.h"

namespace kestrel {

// Key of a full block given its parent's key and the block's token ids.
using BlockHashFn = std::function<uint64_t(uint64_t parent_hash, std::span<const int> token_ids)>;

// XXH3_64bits over (parent_hash as 8 little-endian bytes, the token ids as int32).
uint64_t hash_block_tokens(uint64_t parent_hash, std::span<const int> token_ids);

// Identity of one full block of a sequence: its chained hash and the unique id of the
// published block holding that prefix (0: none).
struct BlockKey {
  uint64_t hash = 0;
  uint64_t prefix_id = 0;
};

// Leading blocks a sequence can take over instead of computing them.
struct PrefixMatch {
  std::vector<int> blocks;     // physical blocks for logical blocks 0..size-1
  std::vector<BlockKey> keys;  // their keys (empty when prefix caching is off)
  int num_query_tokens = 0;    // > 0 when this came from a prefix-cache lookup (for stats)
};

struct PrefixCacheStats {
  int64_t queries = 0;  // tokens looked up (whole sequence length at each admission)
  int64_t hits = 0;     // tokens found
  double hit_rate() const { return queries == 0 ? 0.0 : double(hits) / double(queries); }
};

class BlockManager {
 public:
  // REQUIRES: num_blocks >= 1, block_size >= 1 (Error otherwise).
  BlockManager(int num_blocks, int block_size, bool enable_prefix_caching,
               BlockHashFn hash_fn = hash_block_tokens);

  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  int block_size() const { return block_size_; }
  bool prefix_caching_enabled() const { return enable_prefix_caching_; }
  // Blocks with no reference (cached ones included: they can be evicted at will).
  int num_free_blocks() const { return free_queue_.size(); }
  // Fraction of blocks referenced by some sequence, in [0, 1].
  double usage() const { return 1.0 - double(num_free_blocks()) / double(num_blocks()); }
  const PrefixCacheStats& prefix_cache_stats() const { return stats_; }

  // --- Admission of a sequence with an empty block table ---

  // The longest run of leading full blocks of `seq` found in the cache, capped at
  // (num_tokens - 1) / block_size blocks. Empty when prefix caching is off.
  PrefixMatch find_cached_prefix(const Sequence& seq) const;
  // The leading blocks `seq` can share with `source`, a sequence with the same prompt whose
  // K/V is computed (n > 1 samples): the full computed blocks both have, under the same cap.
  PrefixMatch share_prefix(const Sequence& source, const Sequence& seq) const;
  // Whether the match plus blocks for num_new_tokens more tokens fit in the free blocks.
  bool can_allocate(const Sequence& seq, const PrefixMatch& match, int num_new_tokens) const;
  // REQUIRES: seq.block_table empty. Takes the matched blocks (reference + 1) and sets
  // seq.num_computed_tokens = seq.num_cached_tokens = matched blocks * block_size.
  void allocate_prefix(Sequence& seq, const PrefixMatch& match);

  // --- Growth ---

  // Blocks `seq` needs so its table covers tokens [0, num_computed_tokens + num_new_tokens).
  int num_blocks_needed(const Sequence& seq, int num_new_tokens) const;
  bool can_allocate(const Sequence& seq, int num_new_tokens) const {
    return num_blocks_needed(seq, num_new_tokens) <= num_free_blocks();
  }
  // REQUIRES: can_allocate(seq, num_new_tokens). Appends fresh blocks to seq.block_table.
  void allocate_for(Sequence& seq, int num_new_tokens);

  // Publishes the blocks of `seq` that are full and computed (by num_computed_tokens) and
  // not yet published. Call after each step that computed tokens. No-op without caching.
  void register_full_blocks(const Sequence& seq);

  // Drops the sequence's references, last block first (so its tail is evicted before its
  // head), clears its block table and sets num_computed_tokens = 0.
  void free(Sequence& seq);

  // Introspection for tests.
  int ref_count(int block) const { return blocks_[block].ref_count; }
  bool is_cached(int block) const { return blocks_[block].prefix_id != 0; }
  const FreeBlockQueue& free_queue() const { return free_queue_; }

 private:
  struct Block {
    int ref_count = 0;
    uint64_t hash = 0;
    uint64_t prefix_id = 0;         // 0: not published
    uint64_t parent_prefix_id = 0;  // prefix id of the block before it (0 for block 0)
    std::vector<int> token_ids;     // contents, kept to confirm hits
  };

  std::span<const int> block_tokens(const Sequence& seq, int logical_block) const;
  // The published block with this key, parent and contents, or -1.
  int find_block(uint64_t hash, uint64_t parent_prefix_id, std::span<const int> tokens) const;
  int take_free_block();
  void evict(int block);

  const int block_size_;
  const bool enable_prefix_caching_;
  const BlockHashFn hash_fn_;
  std::vector<Block> blocks_;
  FreeBlockQueue free_queue_;
  // hash -> published blocks with that hash (more than one only on collisions).
  std::unordered_map<uint64_t, std::vector<int>> cached_;
  // seq_id -> keys of its full blocks registered so far.
  std::unordered_map<int64_t, std::vector<BlockKey>> chains_;
  uint64_t next_prefix_id_ = 1;
  PrefixCacheStats stats_;
};

}  // namespace kestrel
