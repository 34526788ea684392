// Internal: the loaded state behind a Tokenizer. Built once by tokenizer_load.cc, then only
// read (tokenizer.cc).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/string_map.h"

namespace kestrel {

struct SpecialToken {
  std::string text;  // "" when the config does not name one
  std::optional<int> id;
};

struct TokenizerImpl {
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  BpeModel model;
  Decoder decoder;

  std::vector<AddedToken> added;    // file order
  StringMap<int> added_by_content;  // content -> id
  std::vector<int> added_index;     // id -> index into `added`, or -1 (size vocab_size)
  AddedTokenMatcher raw_matcher;    // normalized=false tokens, matched on the input
  AddedTokenMatcher norm_matcher;   // normalized=true tokens, matched after normalization

  // Post-processor for a single sequence with add_special_tokens: prefix + ids + suffix.
  std::vector<int> prefix;
  std::vector<int> suffix;

  // Decoder::token_bytes of every id, concatenated: id's bytes are
  // bytes[offsets[id], offsets[id + 1]). known[id] is false for holes in the id space.
  std::string bytes;
  std::vector<uint32_t> offsets;
  std::vector<bool> known;
  int vocab_size = 0;

  SpecialToken bos, eos, pad, unk;
  std::string chat_template;
  std::map<std::string, std::string> chat_templates;
};

}  // namespace kestrel
