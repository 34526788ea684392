#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace kestrel {
namespace {

// GPT-2's pattern, which ByteLevel applies when use_regex is true.
constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

PreTokenizer::Behavior parse_behavior(const std::string& name) {
  using B = PreTokenizer::Behavior;
  if (name == "Removed") return B::kRemoved;
  if (name == "Isolated") return B::kIsolated;
  if (name == "MergedWithPrevious") return B::kMergedWithPrevious;
  if (name == "MergedWithNext") return B::kMergedWithNext;
  if (name == "Contiguous") return B::kContiguous;
  throw_error("unknown Split behavior \"{}\"", name);
}

bool flag(const nlohmann::json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? fallback : it->get<bool>();
}

}  // namespace

// "prepend_scheme", or for files written before it existed, "add_prefix_space" (true:
// always). Shared with the Metaspace decoder.
PreTokenizer::PrependScheme parse_prepend_scheme(const nlohmann::json& j) {
  using P = PreTokenizer::PrependScheme;
  auto it = j.find("prepend_scheme");
  if (it == j.end() || it->is_null())
    return flag(j, "add_prefix_space", true) ? P::kAlways : P::kNever;
  const std::string scheme = it->get<std::string>();
  if (scheme == "always") return P::kAlways;
  if (scheme == "first") return P::kFirst;
  if (scheme == "never") return P::kNever;
  throw_error("unknown Metaspace prepend_scheme \"{}\"", scheme);
}

namespace {

void parse_into(const nlohmann::json& j, std::vector<PreTokenizer::Step>& steps) {
  if (j.is_null()) return;
  KS_CHECK(j.is_object() && j.contains("type"), "pre_tokenizer must be an object with a \"type\"");
  const std::string type = j.at("type").get<std::string>();
  if (type == "Sequence") {
    for (const auto& p : j.at("pretokenizers")) parse_into(p, steps);
    return;
  }
  PreTokenizer::Step step;
  if (type == "Split") {
    const auto& pattern = j.at("pattern");
    if (pattern.contains("Regex")) {
      step.regex = std::make_shared<const Regex>(pattern.at("Regex").get<std::string>());
    } else if (pattern.contains("String")) {
      step.regex = std::make_shared<const Regex>(pattern.at("String").get<std::string>(), true);
    } else {
      throw_error("Split pattern must have \"Regex\" or \"String\"");
    }
    step.behavior = parse_behavior(j.at("behavior").get<std::string>());
    step.invert = flag(j, "invert", false);
  } else if (type == "ByteLevel") {
    step.type = PreTokenizer::Type::kByteLevel;
    step.add_prefix_space = flag(j, "add_prefix_space", true);
    if (flag(j, "use_regex", true)) step.regex = std::make_shared<const Regex>(kGpt2Pattern);
  } else if (type == "Metaspace") {
    step.type = PreTokenizer::Type::kMetaspace;
    step.replacement = j.at("replacement").get<std::string>();
    size_t one = 0;
    KS_CHECK(!step.replacement.empty() &&
                 (utf8::decode(step.replacement, one), one) == step.replacement.size(),
             "Metaspace replacement must be one character");
    step.split = flag(j, "split", true);
    step.prepend_scheme = parse_prepend_scheme(j);
  } else {
    throw_error(
        "unsupported pre_tokenizer type \"{}\" (supported: Split, ByteLevel, Metaspace, "
        "Sequence, null)",
        type);
  }
  steps.push_back(std::move(step));
}

}  // namespace

std::vector<std::pair<size_t, size_t>> PreTokenizer::split_words(const Step& s,
                                                                 std::string_view text) {
  struct Part {
    size_t begin, end;
    bool is_match;
  };
  std::vector<Part> parts;
  size_t prev = 0;
  s.regex->find_all(text, [&](size_t b, size_t e) {
    if (b > prev) parts.push_back({prev, b, false});
    parts.push_back({b, e, true});
    prev = e;
  });
  if (prev < text.size()) parts.push_back({prev, text.size(), false});
  if (s.invert) {
    for (Part& p : parts) p.is_match = !p.is_match;
  }
  // Merge as HF's SplitDelimiterBehavior does.
  std::vector<std::pair<size_t, size_t>> words;
  bool previous_match = false;
  switch (s.behavior) {
    case Behavior::kRemoved:
      for (const Part& p : parts) {
        if (!p.is_match) words.emplace_back(p.begin, p.end);
      }
      break;
    case Behavior::kIsolated:
      for (const Part& p : parts) words.emplace_back(p.begin, p.end);
      break;
    case Behavior::kMergedWithPrevious:
      for (const Part& p : parts) {
        if (p.is_match && !previous_match && !words.empty()) {
          words.back().second = p.end;
        } else {
          words.emplace_back(p.begin, p.end);
        }
        previous_match = p.is_match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->is_match && !previous_match && !words.empty()) {
          words.back().first = it->begin;
        } else {
          words.emplace_back(it->begin, it->end);
        }
        previous_match = it->is_match;
      }
      std::reverse(words.begin(), words.end());
      break;
    case Behavior::kContiguous:
      for (const Part& p : parts) {
        if (p.is_match == previous_match && !words.empty()) {
          words.back().second = p.end;
        } else {
          words.emplace_back(p.begin, p.end);
        }
        previous_match = p.is_match;
      }
      break;
  }
  return words;
}

PreTokenizer PreTokenizer::from_json(const nlohmann::json& j) {
  PreTokenizer pre;
  parse_into(j, pre.steps_);
  for (size_t i = 0; i < pre.steps_.size(); ++i) {
    if (pre.steps_[i].type != Type::kByteLevel) continue;
    // Words stay raw bytes here (the byte-to-character spelling happens inside BPE), which is
    // only the same as HF when nothing after ByteLevel looks at the characters.
    KS_CHECK(i + 1 == pre.steps_.size(),
             "ByteLevel must be the last pre-tokenizer (found step {} of {})", i + 1,
             pre.steps_.size());
    pre.byte_level_ = true;
  }
  return pre;
}

}  // namespace kestrel
