#include "tokenizer/detokenizer.h"

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace kestrel {

Detokenizer::Detokenizer(Tokenizer tokenizer, DetokenizerOptions options,
                         std::span<const int> prompt_ids)
    : tokenizer_(std::move(tokenizer)), options_(std::move(options)) {
  for (const std::string& s : options_.stop) {
    KS_CHECK(!s.empty(), "detokenizer: empty stop string");
    KS_CHECK(utf8::find_invalid(s) == std::string::npos,
             "detokenizer: stop string is not valid UTF-8");
  }
  if (!tokenizer_.decoder().byte_level()) {
    stream_.emplace(tokenizer_.decoder());
    // Enough context to mark the start as passed and to see an unfinished character (at
    // most 3 byte tokens); its text is the prompt's, not ours.
    std::vector<int> context;
    for (size_t i = prompt_ids.size(); i-- > 0 && context.size() < 4;) {
      const int id = prompt_ids[i];
      if (!tokenizer_.is_known(id) || (options_.skip_special_tokens && tokenizer_.is_special(id)))
        continue;
      context.insert(context.begin(), id);
    }
    std::string discarded;
    for (const int id : context) stream_->push(tokenizer_.token_text(id), discarded);
    stream_->end_context();
    return;
  }
  // An unfinished character is at most 3 bytes; 4 bytes of context are enough to see it.
  std::string context;
  for (size_t i = prompt_ids.size(); i-- > 0 && context.size() < 4;) {
    const int id = prompt_ids[i];
    if (options_.skip_special_tokens && tokenizer_.is_special(id)) continue;
    context.insert(0, tokenizer_.token_bytes(id));
  }
  carried_ = utf8::truncated_tail(context);
  pending_ = context.substr(context.size() - carried_);
}

std::string Detokenizer::add_token(int id) {
  ++num_tokens_;
  if (stopped() || finished_) return "";
  if (options_.skip_special_tokens && tokenizer_.is_special(id)) return "";
  const size_t old_size = text_.size();
  if (stream_) {
    if (!tokenizer_.is_known(id)) return "";
    stream_->push(tokenizer_.token_text(id), text_);
  } else {
    const std::string_view bytes = tokenizer_.token_bytes(id);
    if (bytes.empty()) return "";
    pending_.append(bytes);
    drain_pending(false);
  }
  if (text_.size() > old_size && looks_for_stop()) check_stop(old_size);
  return release(stopped());
}

std::string Detokenizer::add_tokens(std::span<const int> ids) {
  std::string out;
  for (const int id : ids) out += add_token(id);
  return out;
}

std::string Detokenizer::update(std::span<const int> generated_ids) {
  if (generated_ids.size() <= num_tokens_) return "";
  return add_tokens(generated_ids.subspan(num_tokens_));
}

std::string Detokenizer::finish() {
  if (stopped() || finished_) return "";
  finished_ = true;
  const size_t old_size = text_.size();
  if (stream_) {
    stream_->finish(text_);
  } else {
    drain_pending(true);
  }
  if (text_.size() > old_size && looks_for_stop()) check_stop(old_size);
  return release(true);
}

void Detokenizer::drain_pending(bool final) {
  if (carried_ > 0) {
    const utf8::Seq seq = utf8::classify(pending_, 0);
    if (seq.status == utf8::SeqStatus::kTruncated && !final) return;  // still unfinished
    if (seq.status == utf8::SeqStatus::kValid) {
      carried_ = 0;  // completed: the character is output with the generated text
    } else {
      pending_.erase(0, carried_);  // never completed: the prompt's bytes are not ours
      carried_ = 0;
    }
  }
  const size_t keep = final ? 0 : utf8::truncated_tail(pending_);
  const size_t ready = pending_.size() - keep;
  if (ready == 0) return;
  const std::string_view bytes(pending_.data(), ready);
  if (utf8::find_invalid(bytes) == std::string::npos) {
    text_.append(bytes);
  } else {
    utf8::append_lossy(text_, bytes);
  }
  pending_.erase(0, ready);
}

void Detokenizer::check_stop(size_t old_size) {
  size_t best_pos = std::string::npos;
  for (size_t i = 0; i < options_.stop.size(); ++i) {
    const std::string& s = options_.stop[i];
    // A new match must end in the new text, so it starts at most len-1 bytes before it.
    const size_t from = old_size >= s.size() - 1 ? old_size - (s.size() - 1) : 0;
    const size_t pos = text_.find(s, from);
    if (pos != std::string::npos && pos < best_pos) {
      best_pos = pos;
      stop_index_ = i;
    }
  }
  if (best_pos == std::string::npos) return;
  const size_t end = options_.include_stop_str_in_output
                         ? best_pos + options_.stop[*stop_index_].size()
                         : best_pos;
  text_.resize(std::max(end, emitted_));
  pending_.clear();
}

size_t Detokenizer::held_back() const {
  if (options_.include_stop_str_in_output) return 0;
  // The longest tail of the unreleased text that is a proper prefix of a stop string.
  const std::string_view open = std::string_view(text_).substr(emitted_);
  size_t hold = 0;
  for (const std::string& s : options_.stop) {
    for (size_t k = std::min(s.size() - 1, open.size()); k > hold; --k) {
      if (open.substr(open.size() - k) == std::string_view(s).substr(0, k)) {
        hold = k;
        break;
      }
    }
  }
  return hold;
}

std::string Detokenizer::release(bool all) {
  const size_t upto = all ? text_.size() : text_.size() - held_back();
  if (upto <= emitted_) return "";
  std::string out = text_.substr(emitted_, upto - emitted_);
  emitted_ = upto;
  return out;
}

}  // namespace kestrel
