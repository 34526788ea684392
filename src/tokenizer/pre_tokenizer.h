// The `pre_tokenizer` of a tokenizer.json: cuts normalized text into words that BPE then
// encodes one by one. Supported: null, Sequence, Split (Regex or String pattern, every
// behavior, invert), ByteLevel (add_prefix_space, use_regex; trim_offsets only affects
// offsets, which kestrel does not produce) and Metaspace (replacement, prepend_scheme
// "always" / "first" / "never" or the older add_prefix_space, split). Other types fail at
// load naming themselves.
//
// Metaspace's "first" scheme prepends only to text that starts at offset 0 of the input
// given to encode() (HF: offsets_original().0 == 0): a piece after an added token gets
// nothing. run() is told whether its text starts there.
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

  enum class Type { kSplit, kByteLevel, kMetaspace };
  enum class PrependScheme { kAlways, kFirst, kNever };

  struct Step {
    Type type = Type::kSplit;
    std::shared_ptr<const Regex> regex;  // Split; ByteLevel with use_regex
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // ByteLevel only
    std::string replacement;        // Metaspace: one character, UTF-8
    PrependScheme prepend_scheme = PrependScheme::kAlways;
    bool split = true;  // Metaspace
  };

  PreTokenizer() = default;

  // Parses the "pre_tokenizer" value; throws kestrel::Error naming an unsupported type.
  static PreTokenizer from_json(const nlohmann::json& j);

  bool byte_level() const { return byte_level_; }

  // Calls sink(word) for every word of `text`, in order; empty words are dropped. A word is a
  // view into `text` or into storage that lives until sink returns. `at_start`: `text`
  // begins at offset 0 of the text given to encode().
  template <typename Sink>
  void run(std::string_view text, bool at_start, Sink&& sink) const {
    run_from(0, text, at_start, sink);
  }

 private:
  template <typename Sink>
  void run_from(size_t step, std::string_view text, bool at_start, Sink& sink) const;
  template <typename Sink>
  void split_step(size_t step, std::string_view text, bool at_start, Sink& sink) const;
  template <typename Sink>
  void split_general(size_t step, std::string_view text, bool at_start, Sink& sink) const;
  template <typename Sink>
  void metaspace_step(size_t step, std::string_view text, bool at_start, Sink& sink) const;
  // Words of `text` under a Split step with any behavior / invert, as [begin, end) offsets.
  static std::vector<std::pair<size_t, size_t>> split_words(const Step& step,
                                                            std::string_view text);

  std::vector<Step> steps_;
  bool byte_level_ = false;
};

// Reads a Metaspace object's prepend_scheme (or legacy add_prefix_space).
PreTokenizer::PrependScheme parse_prepend_scheme(const nlohmann::json& j);

template <typename Sink>
void PreTokenizer::run_from(size_t step, std::string_view text, bool at_start, Sink& sink) const {
  if (text.empty()) return;
  if (step == steps_.size()) {
    sink(text);
    return;
  }
  const Step& s = steps_[step];
  if (s.type == Type::kMetaspace) {
    metaspace_step(step, text, at_start, sink);
    return;
  }
  if (s.type == Type::kByteLevel && s.add_prefix_space && text.front() != ' ') {
    std::string spaced = " ";
    spaced.append(text);
    split_step(step, spaced, at_start, sink);
    return;
  }
  split_step(step, text, at_start, sink);
}

template <typename Sink>
void PreTokenizer::split_step(size_t step, std::string_view text, bool at_start, Sink& sink) const {
  const Step& s = steps_[step];
  if (!s.regex) {  // ByteLevel without regex: the word passes through
    run_from(step + 1, text, at_start, sink);
    return;
  }
  if (s.behavior == Behavior::kIsolated && !s.invert) {
    // Hot path (Qwen2/3, Llama 3, GPT-2): every match and every gap is a word.
    size_t prev = 0;
    s.regex->find_all(text, [&](size_t b, size_t e) {
      if (b > prev) run_from(step + 1, text.substr(prev, b - prev), at_start && prev == 0, sink);
      run_from(step + 1, text.substr(b, e - b), at_start && b == 0, sink);
      prev = e;
    });
    if (prev < text.size()) run_from(step + 1, text.substr(prev), at_start && prev == 0, sink);
    return;
  }
  split_general(step, text, at_start, sink);
}

template <typename Sink>
void PreTokenizer::split_general(size_t step, std::string_view text, bool at_start,
                                 Sink& sink) const {
  for (const auto& [begin, end] : split_words(steps_[step], text)) {
    run_from(step + 1, text.substr(begin, end - begin), at_start && begin == 0, sink);
  }
}

// HF's Metaspace: ' ' becomes the replacement, which is prepended (by the scheme) unless the
// text already starts with it; with split, each replacement starts a new word
// (MergedWithNext).
template <typename Sink>
void PreTokenizer::metaspace_step(size_t step, std::string_view text, bool at_start,
                                  Sink& sink) const {
  const Step& s = steps_[step];
  const std::string_view rep = s.replacement;
  std::string spaced;
  spaced.reserve(text.size() + 8);
  for (char c : text) {
    if (c == ' ') {
      spaced.append(rep);
    } else {
      spaced += c;
    }
  }
  const bool prepend = s.prepend_scheme == PrependScheme::kAlways ||
                       (s.prepend_scheme == PrependScheme::kFirst && at_start);
  if (prepend && !spaced.starts_with(rep)) spaced.insert(0, rep);
  const std::string_view all = spaced;
  if (!s.split) {
    run_from(step + 1, all, at_start, sink);
    return;
  }
  size_t begin = 0;
  for (size_t at = all.find(rep, 1); at != std::string_view::npos; at = all.find(rep, at + 1)) {
    run_from(step + 1, all.substr(begin, at - begin), at_start && begin == 0, sink);
    begin = at;
  }
  run_from(step + 1, all.substr(begin), at_start && begin == 0, sink);
}

}  // namespace kestrel
