// The BPE `model` of a tokenizer.json: vocab, merges (either "a b" strings or ["a", "b"]
// pairs), ignore_merges, byte_fallback, unk_token / fuse_unk. dropout must be null or 0 and
// continuing_subword_prefix / end_of_word_suffix empty; anything else fails at load.
//
// Merging follows HF exactly: repeatedly apply the merge of lowest rank, leftmost first. The
// rank lookup is an open-addressing hash map keyed by the pair of ids; short words use a
// linear scan, long ones a heap over a linked list. Results are memoised per word.
//
// Thread safety: immutable after construction except the word cache, which is internally
// locked; encode_word() may run concurrently.
#pragma once

#include <array>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/string_map.h"

namespace kestrel {

class WordCache;

// id pair -> (rank, merged id), open addressing with linear probing.
class MergeMap {
 public:
  void reserve(size_t n);
  // Later duplicates overwrite earlier ones, as in HF (a HashMap built from the list).
  void insert(int a, int b, uint32_t rank, int merged);
  // Returns false when (a, b) is not a merge.
  bool find(int a, int b, uint32_t& rank, int& merged) const {
    if (mask_ == 0) return false;
    const uint64_t key = pack(a, b);
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      if (keys_[i] == key) {
        rank = static_cast<uint32_t>(values_[i] >> 32);
        merged = static_cast<int>(values_[i] & 0xFFFFFFFFu);
        return true;
      }
      if (keys_[i] == kEmpty) return false;
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  static uint64_t pack(int a, int b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  size_t slot(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift_; }
  void grow();

  std::vector<uint64_t> keys_;
  std::vector<uint64_t> values_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
};

class BpeModel {
 public:
  // `model` is the "model" object of tokenizer.json; its vocab and merges come separately
  // (see tokenizer_json.h). `byte_level`: words given to encode_word() are raw bytes that the
  // ByteLevel pre-tokenizer spells with GPT-2's alphabet before BPE sees them.
  static BpeModel from_json(const nlohmann::json& model,
                            std::vector<std::pair<std::string, int64_t>> vocab,
                            const std::vector<std::pair<std::string, std::string>>& merges,
                            bool byte_level);

  BpeModel();
  BpeModel(BpeModel&&) noexcept;
  BpeModel& operator=(BpeModel&&) noexcept;
  ~BpeModel();

  // Appends the ids of one word to `out`.
  void encode_word(std::string_view word, std::vector<int>& out) const;

  std::optional<int> token_to_id(std::string_view token) const;
  // The vocabulary string of `id`, or nullptr when the vocabulary has no such id.
  const std::string* token_of(int id) const;
  // Largest id in the vocabulary (-1 when empty).
  int max_id() const { return static_cast<int>(id_to_token_.size()) - 1; }
  size_t num_merges() const { return merges_.size(); }

 private:
  void initial_symbols(std::string_view word, std::vector<int>& symbols) const;
  void merge(std::vector<int>& symbols) const;
  void merge_long(std::vector<int>& symbols) const;

  StringMap<int> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  MergeMap merges_;
  bool byte_level_ = false;
  bool byte_fast_ = false;           // every byte's character is in the vocab
  std::array<int, 256> byte_ids_{};  // byte -> id of its character (byte_fast_ only)
  StringMap<int> bytes_vocab_;       // raw bytes -> id, for ignore_merges
  bool ignore_merges_ = false;
  bool byte_fallback_ = false;
  std::array<int, 256> fallback_ids_{};  // byte -> id of "<0xNN>" or -1 (byte_fallback_ only)
  bool fuse_unk_ = false;
  int unk_id_ = -1;
  std::unique_ptr<WordCache> cache_;
};

}  // namespace kestrel
