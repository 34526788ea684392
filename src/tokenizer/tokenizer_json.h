// Reading tokenizer.json fast: a SAX pass that builds an nlohmann::json tree for everything
// except model.vocab and model.merges, which go straight into flat vectors. Those two hold
// ~300k strings in a Qwen or Llama file; not making a tree of them halves the load time.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kestrel {

struct TokenizerJson {
  // The document; model.vocab is an empty object and model.merges an empty array here.
  nlohmann::json root;
  std::vector<std::pair<std::string, int64_t>> vocab;     // in file order
  std::vector<std::pair<std::string, std::string>> merges;  // in file (rank) order
  bool has_vocab = false;
  bool has_merges = false;
};

// Parses tokenizer.json text. Throws kestrel::Error on malformed JSON (with the position),
// a vocab entry that is not a non-negative integer id, or a merge that is neither "a b" nor
// ["a", "b"].
TokenizerJson parse_tokenizer_json(std::string_view text);

}  // namespace kestrel
