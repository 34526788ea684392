#include "tokenizer/bpe.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <queue>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/word_cache.h"

namespace kestrel {
namespace {

// Distinct words memoised; real text rarely has more in its working set.
constexpr size_t kCacheCapacity = 1 << 16;
// Words up to this many symbols merge with a linear scan; longer ones use a heap.
constexpr size_t kLinearMax = 64;
constexpr uint32_t kNoMerge = ~0u;

bool empty_or_null(const nlohmann::json& m, const char* key) {
  auto it = m.find(key);
  return it == m.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty());
}

}  // namespace

void MergeMap::reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap *= 2;
  keys_.assign(cap, kEmpty);
  values_.assign(cap, 0);
  mask_ = cap - 1;
  shift_ = 64 - __builtin_ctzll(cap);
  size_ = 0;
}

void MergeMap::grow() {
  std::vector<uint64_t> keys = std::move(keys_), values = std::move(values_);
  reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] == kEmpty) continue;
    insert(static_cast<int>(keys[i] >> 32), static_cast<int>(keys[i] & 0xFFFFFFFFu),
           static_cast<uint32_t>(values[i] >> 32), static_cast<int>(values[i] & 0xFFFFFFFFu));
  }
}

void MergeMap::insert(int a, int b, uint32_t rank, int merged) {
  if ((size_ + 1) * 2 > keys_.size()) grow();
  const uint64_t key = pack(a, b);
  const uint64_t value = (uint64_t(rank) << 32) | uint32_t(merged);
  for (size_t i = slot(key);; i = (i + 1) & mask_) {
    if (keys_[i] == key) {
      values_[i] = value;
      return;
    }
    if (keys_[i] == kEmpty) {
      keys_[i] = key;
      values_[i] = value;
      ++size_;
      return;
    }
  }
}

BpeModel::BpeModel() : cache_(std::make_unique<WordCache>(kCacheCapacity)) {}
BpeModel::BpeModel(BpeModel&&) noexcept = default;
BpeModel& BpeModel::operator=(BpeModel&&) noexcept = default;
BpeModel::~BpeModel() = default;

BpeModel BpeModel::from_json(const nlohmann::json& m,
                             std::vector<std::pair<std::string, int64_t>> vocab,
                             const std::vector<std::pair<std::string, std::string>>& merges,
                             bool byte_level) {
  KS_CHECK(m.is_object(), "\"model\" must be an object");
  if (m.contains("type")) {
    const std::string type = m.at("type").get<std::string>();
    KS_CHECK(type == "BPE", "unsupported model type \"{}\" (only BPE)", type);
  }
  auto dropout = m.find("dropout");
  KS_CHECK(dropout == m.end() || dropout->is_null() || dropout->get<double>() == 0.0,
           "BPE dropout is not supported");
  KS_CHECK(empty_or_null(m, "continuing_subword_prefix") && empty_or_null(m, "end_of_word_suffix"),
           "BPE continuing_subword_prefix / end_of_word_suffix are not supported");
  KS_CHECK(m.contains("vocab"), "BPE model has no \"vocab\"");
  KS_CHECK(m.contains("merges"), "BPE model has no \"merges\"");

  BpeModel bpe;
  bpe.byte_level_ = byte_level;
  bpe.vocab_.reserve(vocab.size());
  int max_id = -1;
  for (auto& [token, id] : vocab) {
    max_id = std::max(max_id, static_cast<int>(id));
    bpe.vocab_[std::move(token)] = static_cast<int>(id);
  }
  bpe.id_to_token_.resize(max_id + 1);
  bpe.has_id_.assign(max_id + 1, false);
  for (const auto& [token, id] : bpe.vocab_) {
    bpe.id_to_token_[id] = token;
    bpe.has_id_[id] = true;
  }

  bpe.merges_.reserve(merges.size());
  std::string joined;
  auto id_of = [&](std::string_view token, size_t rank) {
    auto it = bpe.vocab_.find(token);
    KS_CHECK(it != bpe.vocab_.end(), "merge #{} uses \"{}\", which is not in the vocab", rank,
             token);
    return it->second;
  };
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    joined.assign(a).append(b);
    const int left = id_of(a, rank), right = id_of(b, rank), merged = id_of(joined, rank);
    bpe.merges_.insert(left, right, static_cast<uint32_t>(rank), merged);
  }

  bpe.ignore_merges_ = m.value("ignore_merges", false);
  bpe.byte_fallback_ = m.value("byte_fallback", false);
  if (bpe.byte_fallback_) {
    for (int b = 0; b < 256; ++b) {
      auto it = bpe.vocab_.find(fmt::format("<0x{:02X}>", b));
      bpe.fallback_ids_[b] = it == bpe.vocab_.end() ? -1 : it->second;
    }
  }
  bpe.fuse_unk_ = m.value("fuse_unk", false);
  if (!empty_or_null(m, "unk_token")) {
    const std::string unk = m.at("unk_token").get<std::string>();
    auto it = bpe.vocab_.find(unk);
    KS_CHECK(it != bpe.vocab_.end(), "unk_token \"{}\" is not in the vocab", unk);
    bpe.unk_id_ = it->second;
  }

  if (byte_level) {
    bpe.byte_fast_ = true;
    for (int b = 0; b < 256; ++b) {
      auto it = bpe.vocab_.find(byte_level::char_of(static_cast<uint8_t>(b)));
      bpe.byte_fast_ = bpe.byte_fast_ && it != bpe.vocab_.end();
      bpe.byte_ids_[b] = it == bpe.vocab_.end() ? -1 : it->second;
    }
    if (bpe.byte_fast_ && bpe.ignore_merges_) {
      bpe.bytes_vocab_.reserve(bpe.vocab_.size());
      for (const auto& [token, id] : bpe.vocab_) {
        std::string bytes = byte_level::decode(token);
        // Only tokens spelled entirely in the byte alphabet can equal an encoded word.
        if (byte_level::encode(bytes) == token) bpe.bytes_vocab_.emplace(std::move(bytes), id);
      }
    }
  }
  return bpe;
}

std::optional<int> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::token_of(int id) const {
  if (id < 0 || id > max_id() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::encode_word(std::string_view word, std::vector<int>& out) const {
  if (word.empty() || cache_->get(word, out)) return;
  if (ignore_merges_) {
    // A word that is itself a token is taken whole, whatever the merges would do.
    if (byte_fast_) {
      auto it = bytes_vocab_.find(word);
      if (it != bytes_vocab_.end()) {
        out.push_back(it->second);
        cache_->put(word, &it->second, 1);
        return;
      }
    } else {
      const std::string spelled = byte_level_ ? byte_level::encode(word) : std::string(word);
      auto it = vocab_.find(spelled);
      if (it != vocab_.end()) {
        out.push_back(it->second);
        cache_->put(word, &it->second, 1);
        return;
      }
    }
  }
  thread_local std::vector<int> symbols;
  symbols.clear();
  initial_symbols(word, symbols);
  merge(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
  cache_->put(word, symbols.data(), symbols.size());
}

void BpeModel::initial_symbols(std::string_view word, std::vector<int>& symbols) const {
  if (byte_fast_) {
    for (char c : word) symbols.push_back(byte_ids_[static_cast<uint8_t>(c)]);
    return;
  }
  std::string buffer;
  if (byte_level_) buffer = byte_level::encode(word);
  const std::string_view spelled = byte_level_ ? std::string_view(buffer) : word;
  bool pending_unk = false;
  size_t pos = 0;
  while (pos < spelled.size()) {
    const size_t begin = pos;
    const auto lead = static_cast<unsigned char>(spelled[pos]);
    pos += lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    const std::string_view ch = spelled.substr(begin, pos - begin);
    if (auto it = vocab_.find(ch); it != vocab_.end()) {
      if (pending_unk) symbols.push_back(unk_id_);
      pending_unk = false;
      symbols.push_back(it->second);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : ch) all = all && fallback_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        // As HF: the byte tokens go in at once and an unknown run before them stays pending
        // (it is emitted after them, at the next known character or the end of the word).
        for (char c : ch) symbols.push_back(fallback_ids_[static_cast<uint8_t>(c)]);
        continue;
      }
    }
    if (unk_id_ < 0) continue;  // no unk token: HF drops the character
    if (pending_unk && !fuse_unk_) symbols.push_back(unk_id_);
    pending_unk = true;
  }
  if (pending_unk) symbols.push_back(unk_id_);
}

void BpeModel::merge(std::vector<int>& s) const {
  size_t n = s.size();
  if (n < 2) return;
  if (n > kLinearMax) {
    merge_long(s);
    return;
  }
  // ranks[i] / merged[i] describe the pair (s[i], s[i+1]).
  uint32_t ranks[kLinearMax];
  int merged[kLinearMax];
  auto look = [&](size_t i) {
    if (!merges_.find(s[i], s[i + 1], ranks[i], merged[i])) ranks[i] = kNoMerge;
  };
  for (size_t i = 0; i + 1 < n; ++i) look(i);
  while (n > 1) {
    uint32_t best = kNoMerge;
    size_t at = 0;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (ranks[i] < best) {
        best = ranks[i];
        at = i;
      }
    }
    if (best == kNoMerge) break;
    s[at] = merged[at];
    for (size_t j = at + 1; j + 1 < n; ++j) {
      s[j] = s[j + 1];
      ranks[j] = ranks[j + 1];
      merged[j] = merged[j + 1];
    }
    --n;
    if (at + 1 < n) look(at);
    if (at > 0) look(at - 1);
  }
  s.resize(n);
}

void BpeModel::merge_long(std::vector<int>& s) const {
  const int n = static_cast<int>(s.size());
  struct Symbol {
    int id, prev, next;
    bool alive;
  };
  struct Entry {
    uint32_t rank;
    int pos;
    int merged;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Symbol> sym(n);
  for (int i = 0; i < n; ++i) sym[i] = {s[i], i - 1, i + 1 < n ? i + 1 : -1, true};
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  auto push = [&](int pos) {
    const int next = sym[pos].next;
    uint32_t rank;
    int merged;
    if (next >= 0 && merges_.find(sym[pos].id, sym[next].id, rank, merged)) {
      queue.push({rank, pos, merged});
    }
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!queue.empty()) {
    const Entry top = queue.top();
    queue.pop();
    Symbol& cur = sym[top.pos];
    if (!cur.alive || cur.next < 0) continue;
    uint32_t rank;
    int merged;
    // Entries go stale when a neighbour merged first; the pair decides, as in HF.
    if (!merges_.find(cur.id, sym[cur.next].id, rank, merged) || merged != top.merged) continue;
    Symbol& right = sym[cur.next];
    cur.id = merged;
    right.alive = false;
    cur.next = right.next;
    if (cur.next >= 0) sym[cur.next].prev = top.pos;
    if (cur.prev >= 0) push(cur.prev);
    push(top.pos);
  }
  s.clear();
  for (int i = 0; i >= 0; i = sym[i].next) s.push_back(sym[i].id);
}

}  // namespace kestrel
