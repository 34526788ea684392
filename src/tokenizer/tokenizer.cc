#include "tokenizer/tokenizer.h"

#include "core/error.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace kestrel {
namespace {

// Normalizes plain text, cuts out normalized added tokens, pre-tokenizes and runs BPE.
// at_start: `text` begins at offset 0 of the input.
void encode_plain(const TokenizerImpl& t, std::string_view text, bool at_start,
                  std::vector<int>& out) {
  std::string scratch;
  const std::string_view normalized = t.normalizer.normalize(text, scratch);
  auto bpe = [&](std::string_view piece, bool first) {
    t.pre_tokenizer.run(piece, first,
                        [&](std::string_view word) { t.model.encode_word(word, out); });
  };
  if (t.norm_matcher.empty()) {
    bpe(normalized, at_start);
    return;
  }
  std::vector<Segment> segments;
  t.norm_matcher.split(normalized, segments);
  for (const Segment& s : segments) {
    if (s.id >= 0) {
      out.push_back(s.id);
    } else {
      bpe(normalized.substr(s.begin, s.end - s.begin), at_start && s.begin == 0);
    }
  }
}

}  // namespace

std::vector<int> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int> ids;
  ids.reserve(text.size() / 3 + 4);
  encode_into(text, add_special_tokens, ids);
  return ids;
}

void Tokenizer::encode_into(std::string_view text, bool add_special_tokens,
                            std::vector<int>& out) const {
  const TokenizerImpl& t = *impl_;
  const size_t bad = utf8::find_invalid(text);
  KS_CHECK(bad == std::string_view::npos,
           "tokenizer: input is not valid UTF-8 (ill-formed byte 0x{:02X} at offset {} of {})",
           static_cast<unsigned char>(text[bad]), bad, text.size());
  if (add_special_tokens) out.insert(out.end(), t.prefix.begin(), t.prefix.end());
  if (t.raw_matcher.empty()) {
    encode_plain(t, text, true, out);
  } else {
    std::vector<Segment> segments;
    t.raw_matcher.split(text, segments);
    for (const Segment& s : segments) {
      if (s.id >= 0) {
        out.push_back(s.id);
      } else {
        encode_plain(t, text.substr(s.begin, s.end - s.begin), s.begin == 0, out);
      }
    }
  }
  if (add_special_tokens) out.insert(out.end(), t.suffix.begin(), t.suffix.end());
}

std::string Tokenizer::decode(std::span<const int> ids, bool skip_special_tokens) const {
  if (!impl_->decoder.byte_level()) {
    std::vector<std::string_view> tokens;
    tokens.reserve(ids.size());
    for (const int id : ids) {
      if (!is_known(id) || (skip_special_tokens && is_special(id))) continue;
      tokens.push_back(token_text(id));
    }
    return impl_->decoder.decode(tokens);
  }
  std::string raw;
  raw.reserve(ids.size() * 4);
  for (const int id : ids) {
    if (skip_special_tokens && is_special(id)) continue;
    raw.append(token_bytes(id));
  }
  if (utf8::find_invalid(raw) == std::string::npos) return raw;
  std::string text;
  utf8::append_lossy(text, raw);
  return text;
}

std::string_view Tokenizer::token_bytes(int id) const {
  const TokenizerImpl& t = *impl_;
  if (!is_known(id)) return {};
  return std::string_view(t.bytes).substr(t.offsets[id], t.offsets[id + 1] - t.offsets[id]);
}

std::string_view Tokenizer::token_text(int id) const {
  const TokenizerImpl& t = *impl_;
  if (!is_known(id)) return {};
  if (t.added_index[id] >= 0) return t.added[t.added_index[id]].content;
  return *t.model.token_of(id);
}

const Decoder& Tokenizer::decoder() const { return impl_->decoder; }

std::optional<int> Tokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->added_by_content.find(token);
  if (it != impl_->added_by_content.end()) return it->second;
  return impl_->model.token_to_id(token);
}

std::string Tokenizer::id_to_token(int id) const {
  const TokenizerImpl& t = *impl_;
  if (id >= 0 && id < t.vocab_size && t.added_index[id] >= 0)
    return t.added[t.added_index[id]].content;
  const std::string* token = t.model.token_of(id);
  KS_CHECK(token != nullptr, "tokenizer: token id {} is not in the vocabulary (size {})", id,
           t.vocab_size);
  return *token;
}

bool Tokenizer::is_known(int id) const {
  return id >= 0 && id < impl_->vocab_size && impl_->known[id];
}

int Tokenizer::vocab_size() const { return impl_->vocab_size; }

bool Tokenizer::is_special(int id) const {
  const TokenizerImpl& t = *impl_;
  return id >= 0 && id < t.vocab_size && t.added_index[id] >= 0 &&
         t.added[t.added_index[id]].special;
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }

std::optional<int> Tokenizer::bos_token_id() const { return impl_->bos.id; }
std::optional<int> Tokenizer::eos_token_id() const { return impl_->eos.id; }
std::optional<int> Tokenizer::pad_token_id() const { return impl_->pad.id; }
std::optional<int> Tokenizer::unk_token_id() const { return impl_->unk.id; }
const std::string& Tokenizer::bos_token() const { return impl_->bos.text; }
const std::string& Tokenizer::eos_token() const { return impl_->eos.text; }
const std::string& Tokenizer::pad_token() const { return impl_->pad.text; }
const std::string& Tokenizer::unk_token() const { return impl_->unk.text; }
const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }
const std::map<std::string, std::string>& Tokenizer::chat_templates() const {
  return impl_->chat_templates;
}

}  // namespace kestrel
