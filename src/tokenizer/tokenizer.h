// BPE tokenizer (byte-level, as Qwen and Llama 3, or SentencePiece-converted with byte
// fallback, as Llama 2, Mistral and Gemma) that loads a Hugging Face tokenizer.json and gives
// the same ids and text as HF `tokenizers` (Tokenizer.encode(text, add_special_tokens).ids
// and Tokenizer.decode(ids, skip_special_tokens)). Checked over
// tests/data/tokenizer/corpus.jsonl against HF on the Qwen3 and Llama 3 tokenizers and
// against Tokenizers.js on Mistral 7B's and Gemma 3's; see docs/tokenizer.md.
//
// Supported tokenizer.json components (anything else fails at load with a kestrel::Error
// naming it): model BPE; normalizer null / NFC / NFD / NFKC / NFKD / Prepend / Replace /
// Strip / Lowercase / Sequence; pre_tokenizer null / Split / ByteLevel / Metaspace /
// Sequence; decoder ByteLevel / Replace / ByteFallback / Fuse / Strip / Metaspace / Sequence
// (decoder.h); post_processor null / ByteLevel / TemplateProcessing / BertProcessing /
// RobertaProcessing / Sequence; added_tokens with all flags. `truncation` and `padding` are
// ignored: encode() never truncates or pads.
//
// Text is UTF-8. encode() throws kestrel::Error on input that is not valid UTF-8 (this
// includes encoded surrogates, overlong forms and truncated sequences): HF cannot take such
// input either (Python str -> Rust &str fails), and guessing would silently change a prompt.
// decode() always succeeds: ids that are not in the vocabulary are skipped (as HF does) and
// byte sequences that are not UTF-8 become U+FFFD, one per maximal ill-formed subpart.
//
// Thread safety: a Tokenizer is immutable once loaded (its BPE memo is internally locked);
// every const method may be called from many threads at once. Copies share the loaded data.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/decoder.h"

namespace kestrel {

struct TokenizerImpl;

class Tokenizer {
 public:
  // Loads a tokenizer.json. Throws kestrel::Error (naming the file) when it cannot be read,
  // is not JSON, or uses an unsupported component.
  static Tokenizer from_file(const std::string& tokenizer_json_path);
  // Same, from the JSON text itself.
  static Tokenizer from_json_string(std::string_view json_text);
  // Loads <model_dir>/tokenizer.json and, when present, <model_dir>/tokenizer_config.json
  // (bos/eos/pad/unk tokens, chat_template) and <model_dir>/chat_template.jinja (used when the
  // config has no chat_template).
  static Tokenizer from_dir(const std::string& model_dir);

  // Token ids of `text`. add_special_tokens applies the post-processor (Llama 3: prepend
  // <|begin_of_text|>). Special tokens written in the text are always recognised, as in HF.
  // Throws kestrel::Error when `text` is not valid UTF-8.
  std::vector<int> encode(std::string_view text, bool add_special_tokens = true) const;
  // Appends the ids to `out` (reuses its capacity).
  void encode_into(std::string_view text, bool add_special_tokens, std::vector<int>& out) const;

  // Text of `ids`. Unknown ids are skipped; skip_special_tokens drops added tokens marked
  // special. Never throws for bad input.
  std::string decode(std::span<const int> ids, bool skip_special_tokens = false) const;

  // The raw bytes that `id` contributes to decode() (possibly a fragment of a UTF-8
  // character); empty for an unknown id. For a SentencePiece-style decoder these are the
  // bytes the token adds in the middle of a text ("▁Hello" -> " Hello", "<0x0A>" -> "\n");
  // decode() may differ at the start (Llama 2's decoder strips the first space) and shows a
  // run of byte tokens that is not UTF-8 as one U+FFFD per byte.
  std::string_view token_bytes(int id) const;

  // The string the decoder receives for `id`: the added token's content or the vocabulary
  // string ("▁Hello", "<0x0A>", "<|im_end|>"); empty for an unknown id.
  std::string_view token_text(int id) const;
  // The decoder pipeline (the streaming detokenizer runs it token by token).
  const Decoder& decoder() const;

  // Added tokens first, then the BPE vocabulary (as HF).
  std::optional<int> token_to_id(std::string_view token) const;
  // Vocabulary string of `id` ("Ġhello", "<|im_end|>"). Throws kestrel::Error for an id
  // that is neither in the vocabulary nor an added token.
  std::string id_to_token(int id) const;
  // True when `id` is an added token or in the vocabulary.
  bool is_known(int id) const;

  // Largest id over the vocabulary and the added tokens, plus one.
  int vocab_size() const;
  // True for added tokens with "special": true.
  bool is_special(int id) const;
  const std::vector<AddedToken>& added_tokens() const;

  // From tokenizer_config.json (from_dir only; otherwise empty).
  std::optional<int> bos_token_id() const;
  std::optional<int> eos_token_id() const;
  std::optional<int> pad_token_id() const;
  std::optional<int> unk_token_id() const;
  // Token strings as the config names them ("" when absent); chat templates refer to them.
  const std::string& bos_token() const;
  const std::string& eos_token() const;
  const std::string& pad_token() const;
  const std::string& unk_token() const;
  // The chat template: the config's string, or the "default" entry when the config holds a
  // list of named templates ("" when there is none).
  const std::string& chat_template() const;
  // Every named template (a plain string template is stored under "default").
  const std::map<std::string, std::string>& chat_templates() const;

 private:
  explicit Tokenizer(std::shared_ptr<const TokenizerImpl> impl) : impl_(std::move(impl)) {}

  std::shared_ptr<const TokenizerImpl> impl_;
};

}  // namespace kestrel
