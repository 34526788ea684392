// The `pre_tokenizer` of a tokenizer.json: cuts normalized text into words that BPE then
// encodes one by one. Supported: null, Sequence, Split (Regex or String pattern, every
// behavior, invert) and ByteLevel (add_prefix_space, use_regex; trim_offsets only affects
// offsets, which kestrel does not produce). Other types fail at load.
//
// ByteLevel's byte-to-character mapping is not done here: words stay raw bytes and the BPE
// model starts from per-byte token ids (see BpeModel). byte_level() says whether the
// mapping is part of the pipeline.
//
// Thread safety: immutable after construction; run() may be called concurrently.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/regex.h"

namespace kestrel {

class PreTokenizer {
 public:
  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

  struct Step {
    bool is_split = true;  // Split, else ByteLevel
    std::shared_ptr<const Regex> regex;
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // ByteLevel only
  };

  PreTokenizer() = default;

  // Parses the "pre_tokenizer" value; throws kestrel::Error naming an unsupported type.
  static PreTokenizer from_json(const nlohmann::json& j);

  bool byte_level() const { return byte_level_; }

  // Calls sink(word) for every word of `text`, in order; empty words are dropped. A word is a
  // view into `text` or into storage that lives until sink returns.
  template <typename Sink>
  void run(std::string_view text, Sink&& sink) const {
    run_from(0, text, sink);
  }

 private:
  template <typename Sink>
  void run_from(size_t step, std::string_view text, Sink& sink) const;
  template <typename Sink>
  void split_step(size_t step, std::string_view text, Sink& sink) const;
  template <typename Sink>
  void split_general(size_t step, std::string_view text, Sink& sink) const;
  // Words of `text` under a Split step with any behavior / invert, as [begin, end) offsets.
  static std::vector<std::pair<size_t, size_t>> split_words(const Step& step,
                                                            std::string_view text);

  std::vector<Step> steps_;
  bool byte_level_ = false;
};

template <typename Sink>
void PreTokenizer::run_from(size_t step, std::string_view text, Sink& sink) const {
  if (text.empty()) return;
  if (step == steps_.size()) {
    sink(text);
    return;
  }
  const Step& s = steps_[step];
  if (!s.is_split && s.add_prefix_space && text.front() != ' ') {
    std::string spaced = " ";
    spaced.append(text);
    split_step(step, spaced, sink);
    return;
  }
  split_step(step, text, sink);
}

template <typename Sink>
void PreTokenizer::split_step(size_t step, std::string_view text, Sink& sink) const {
  const Step& s = steps_[step];
  if (!s.regex) {  // ByteLevel without regex: the word passes through
    run_from(step + 1, text, sink);
    return;
  }
  if (s.behavior == Behavior::kIsolated && !s.invert) {
    // Hot path (Qwen2/3, Llama 3, GPT-2): every match and every gap is a word.
    size_t prev = 0;
    s.regex->find_all(text, [&](size_t b, size_t e) {
      if (b > prev) run_from(step + 1, text.substr(prev, b - prev), sink);
      run_from(step + 1, text.substr(b, e - b), sink);
      prev = e;
    });
    if (prev < text.size()) run_from(step + 1, text.substr(prev), sink);
    return;
  }
  split_general(step, text, sink);
}

template <typename Sink>
void PreTokenizer::split_general(size_t step, std::string_view text, Sink& sink) const {
  for (const auto& [begin, end] : split_words(steps_[step], text)) {
    run_from(step + 1, text.substr(begin, end - begin), sink);
  }
}

}  // namespace kestrel
