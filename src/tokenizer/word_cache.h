// Memo of BPE results per word (pre-token). Most words of real text repeat, so after a
// short warm-up encoding is mostly a hash lookup per word.
//
// Thread safety: all methods may be called concurrently. The map is split into shards, each
// behind its own mutex, so threads encoding different text rarely wait on each other.
// Bounded: once a shard is full, new words are computed but no longer stored (as HF's cache).
#pragma once

#include <array>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/string_map.h"

namespace kestrel {

class WordCache {
 public:
  // Words longer than this are not cached (they are rare and would crowd out common ones).
  static constexpr size_t kMaxWordBytes = 256;

  explicit WordCache(size_t capacity) : shard_capacity_(capacity / kShards + 1) {}

  // Appends the cached ids of `word` to `out` and returns true, or returns false.
  bool get(std::string_view word, std::vector<int>& out) const {
    if (word.size() > kMaxWordBytes) return false;
    const Shard& shard = shard_of(word);
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.map.find(word);
    if (it == shard.map.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }

  void put(std::string_view word, const int* ids, size_t n) {
    if (word.size() > kMaxWordBytes) return;
    Shard& shard = shard_of(word);
    std::lock_guard<std::mutex> lock(shard.mu);
    if (shard.map.size() >= shard_capacity_) return;
    shard.map.emplace(std::string(word), std::vector<int>(ids, ids + n));
  }

 private:
  static constexpr size_t kShards = 32;
  struct Shard {
    mutable std::mutex mu;
    StringMap<std::vector<int>> map;
  };

  const Shard& shard_of(std::string_view word) const {
    // The map uses the low bits of the same hash; take the shard from the high bits.
    return shards_[(StringHash{}(word) >> 40) % kShards];
  }
  Shard& shard_of(std::string_view word) { return shards_[(StringHash{}(word) >> 40) % kShards]; }

  std::array<Shard, kShards> shards_;
  size_t shard_capacity_;
};

}  // namespace kestrel
