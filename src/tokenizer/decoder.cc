#include "tokenizer/decoder.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace kestrel {
namespace {

using K = Decoder::Kind;

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The byte of a "<0xNN>" token, or -1. As HF: six bytes, the two in the middle parsed by
// Rust's u8::from_str_radix(_, 16), which takes either case and a leading '+'.
int fallback_byte(std::string_view t) {
  if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>') return -1;
  if (t[3] == '+') return hex_digit(t[4]);
  const int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

std::string replace_all(std::string_view in, const Decoder::Step& s) {
  std::string out;
  size_t prev = 0;
  auto on_match = [&](size_t b, size_t e) {
    out.append(in.substr(prev, b - prev)).append(s.content);
    prev = e;
  };
  if (s.regex) {
    s.regex->find_all(in, on_match);
  } else {
    for (size_t at = in.find(s.pattern); at != std::string_view::npos;
         at = in.find(s.pattern, prev)) {
      on_match(at, at + s.pattern.size());
    }
  }
  out.append(in.substr(prev));
  return out;
}

std::string strip_token(std::string_view token, const Decoder::Step& s) {
  const std::string_view c = s.content;
  size_t begin = 0, end = token.size();
  for (size_t n = 0; n < s.start && token.substr(begin).starts_with(c); ++n) begin += c.size();
  for (size_t n = 0; n < s.stop && end > begin && token.substr(begin, end - begin).ends_with(c);
       ++n) {
    end -= c.size();
  }
  return std::string(token.substr(begin, end - begin));
}

std::string metaspace_token(std::string_view token, const Decoder::Step& s, bool first) {
  std::string out;
  size_t prev = 0;
  for (size_t at = token.find(s.pattern); at != std::string_view::npos;
       at = token.find(s.pattern, prev)) {
    out.append(token.substr(prev, at - prev));
    if (!(first && s.drop_first)) out += ' ';
    prev = at + s.pattern.size();
  }
  out.append(token.substr(prev));
  return out;
}

std::string one_char(const nlohmann::json& j, const char* key) {
  const std::string c = j.at(key).get<std::string>();
  size_t pos = 0;
  KS_CHECK(!c.empty() && utf8::find_invalid(c) == std::string::npos &&
               (utf8::decode(c, pos), pos == c.size()),
           "decoder \"{}\" must be one character", key);
  return c;
}

void parse_into(const nlohmann::json& j, std::vector<Decoder::Step>& steps) {
  KS_CHECK(!j.is_null(), "no decoder (kestrel needs one)");
  KS_CHECK(j.is_object() && j.contains("type"), "decoder must be an object with a \"type\"");
  const std::string type = j.at("type").get<std::string>();
  if (type == "Sequence") {
    for (const auto& d : j.at("decoders")) parse_into(d, steps);
    return;
  }
  Decoder::Step step;
  if (type == "ByteLevel") {
    step.kind = K::kByteLevel;
  } else if (type == "Replace") {
    step.kind = K::kReplace;
    step.content = j.at("content").get<std::string>();
    const auto& pattern = j.at("pattern");
    if (pattern.contains("String")) {
      step.pattern = pattern.at("String").get<std::string>();
      KS_CHECK(!step.pattern.empty(), "Replace decoder with an empty pattern");
    } else {
      KS_CHECK(pattern.contains("Regex"), "Replace pattern must have \"String\" or \"Regex\"");
      step.regex = std::make_shared<const Regex>(pattern.at("Regex").get<std::string>());
    }
  } else if (type == "ByteFallback") {
    step.kind = K::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = K::kFuse;
  } else if (type == "Strip") {
    step.kind = K::kStrip;
    step.content = one_char(j, "content");
    step.start = j.at("start").get<size_t>();
    step.stop = j.at("stop").get<size_t>();
  } else if (type == "Metaspace") {
    step.kind = K::kMetaspace;
    step.pattern = one_char(j, "replacement");
    step.drop_first = parse_prepend_scheme(j) != PreTokenizer::PrependScheme::kNever;
  } else {
    throw_error(
        "unsupported decoder type \"{}\" (supported: ByteLevel, Replace, ByteFallback, Fuse, "
        "Strip, Metaspace, Sequence)",
        type);
  }
  steps.push_back(std::move(step));
}

}  // namespace

Decoder Decoder::from_json(const nlohmann::json& j) {
  Decoder d;
  parse_into(j, d.steps_);
  d.join_ = d.steps_.size();
  for (size_t i = 0; i < d.steps_.size(); ++i) {
    const Step& s = d.steps_[i];
    if (i > d.join_) {
      KS_CHECK(s.kind != K::kByteFallback && s.kind != K::kByteLevel && !s.regex,
               "decoder step {} ({}) after Fuse/ByteLevel is not supported", i + 1,
               s.kind == K::kByteFallback ? "ByteFallback"
               : s.kind == K::kByteLevel  ? "ByteLevel"
                                          : "Replace with a Regex");
    }
    if (d.join_ == d.steps_.size() && (s.kind == K::kFuse || s.kind == K::kByteLevel)) d.join_ = i;
  }
  return d;
}

bool Decoder::byte_level() const {
  if (steps_.empty()) return false;
  for (const Step& s : steps_) {
    if (s.kind != K::kByteLevel) return false;
  }
  return true;
}

std::string Decoder::decode(std::span<const std::string_view> tokens) const {
  DecodeStream stream(*this);
  std::string out;
  for (const std::string_view t : tokens) stream.push(t, out);
  stream.finish(out);
  return out;
}

std::string Decoder::token_bytes(std::string_view token) const {
  std::string t(token);
  for (size_t i = 0; i < join_; ++i) {
    const Step& s = steps_[i];
    switch (s.kind) {
      case K::kReplace:
        t = replace_all(t, s);
        break;
      case K::kByteFallback:
        if (const int b = fallback_byte(t); b >= 0) t.assign(1, static_cast<char>(b));
        break;
      case K::kStrip:
        t = strip_token(t, s);
        break;
      case K::kMetaspace:
        t = metaspace_token(t, s, false);
        break;
      default:
        break;
    }
  }
  if (join_ < steps_.size() && steps_[join_].kind == K::kByteLevel) return byte_level::decode(t);
  return t;
}

DecodeStream::DecodeStream(const Decoder& decoder)
    : decoder_(&decoder), state_(decoder.steps_.size()) {}

void DecodeStream::push(std::string_view token, std::string& out) {
  pushed_ = true;
  token_at(0, std::string(token), out);
}

void DecodeStream::finish(std::string& out) { flush_at(0, out); }

void DecodeStream::end_context() {
  if (!pushed_) return;
  const auto& steps = decoder_->steps_;
  for (size_t i = 0; i < steps.size(); ++i) {
    State& st = state_[i];
    switch (steps[i].kind) {
      case K::kByteFallback:
        st.carried = utf8::truncated_tail(st.buffer);
        st.buffer.erase(0, st.buffer.size() - st.carried);
        break;
      case K::kByteLevel:
        st.buffer.erase(0, st.buffer.size() - utf8::truncated_tail(st.buffer));
        break;
      case K::kMetaspace:
        st.count = std::max<size_t>(st.count, 1);
        break;
      case K::kStrip:
        st.started = true;
        if (i > decoder_->join_) st.buffer.clear();
        break;
      case K::kReplace:
        st.buffer.clear();
        break;
      case K::kFuse:
        break;
    }
  }
}

// Token-wise part of the chain (before the first join).
void DecodeStream::token_at(size_t i, std::string token, std::string& out) {
  const auto& steps = decoder_->steps_;
  if (i == steps.size()) {  // HF joins the tokens with ""
    out += token;
    return;
  }
  if (i > decoder_->join_) {
    text_at(i, token, out);
    return;
  }
  const Decoder::Step& s = steps[i];
  State& st = state_[i];
  switch (s.kind) {
    case K::kReplace:
      token_at(i + 1, replace_all(token, s), out);
      return;
    case K::kByteFallback:
      if (const int b = fallback_byte(token); b >= 0) {
        st.buffer += static_cast<char>(b);
        return;
      }
      close_run(i, out);
      token_at(i + 1, std::move(token), out);
      return;
    case K::kStrip:
      token_at(i + 1, strip_token(token, s), out);
      return;
    case K::kMetaspace:
      token_at(i + 1, metaspace_token(token, s, st.count++ == 0), out);
      return;
    case K::kFuse:
      text_at(i + 1, token, out);
      return;
    case K::kByteLevel: {
      st.buffer += byte_level::decode(token);
      const size_t ready = st.buffer.size() - utf8::truncated_tail(st.buffer);
      if (ready == 0) return;
      std::string text;
      utf8::append_lossy(text, std::string_view(st.buffer).substr(0, ready));
      st.buffer.erase(0, ready);
      text_at(i + 1, text, out);
      return;
    }
  }
}

void DecodeStream::close_run(size_t i, std::string& out) {
  State& st = state_[i];
  if (st.buffer.empty()) return;
  std::string run = std::move(st.buffer);
  const size_t carried = st.carried;
  st.buffer.clear();
  st.carried = 0;
  if (utf8::find_invalid(run) == std::string::npos) {
    token_at(i + 1, std::move(run), out);
    return;
  }
  for (size_t k = carried; k < run.size(); ++k)
    token_at(i + 1, std::string(utf8::kReplacement), out);
}

// The text-wise part (after the first join): `text` continues one growing text.
void DecodeStream::text_at(size_t i, std::string_view text, std::string& out) {
  const auto& steps = decoder_->steps_;
  if (i == steps.size()) {
    out.append(text);
    return;
  }
  if (text.empty()) return;
  const Decoder::Step& s = steps[i];
  State& st = state_[i];
  switch (s.kind) {
    case K::kFuse:
      text_at(i + 1, text, out);
      return;
    case K::kMetaspace:  // one token, the first
      text_at(i + 1, metaspace_token(text, s, true), out);
      return;
    case K::kStrip: {
      const std::string_view c = s.content;
      while (!st.started && !text.empty()) {
        if (st.count < s.start && text.starts_with(c)) {
          text.remove_prefix(c.size());
          ++st.count;
        } else {
          st.started = true;
        }
      }
      if (text.empty()) return;
      if (s.stop == 0) {
        text_at(i + 1, text, out);
        return;
      }
      // Hold back the trailing `content` characters that a final strip could remove.
      st.buffer.append(text);
      size_t end = st.buffer.size(), held = 0;
      while (held < s.stop && std::string_view(st.buffer).substr(0, end).ends_with(c)) {
        end -= c.size();
        ++held;
      }
      const std::string ready = st.buffer.substr(0, end);
      st.buffer.erase(0, end);
      text_at(i + 1, ready, out);
      return;
    }
    case K::kReplace: {  // String pattern (Regex is refused here at load)
      st.buffer.append(text);
      std::string done;
      size_t prev = 0;
      const std::string_view all = st.buffer;
      for (size_t at = all.find(s.pattern); at != std::string_view::npos;
           at = all.find(s.pattern, prev)) {
        done.append(all.substr(prev, at - prev)).append(s.content);
        prev = at + s.pattern.size();
      }
      // Keep the longest tail that could still begin a match.
      size_t keep = std::min(s.pattern.size() - 1, all.size() - prev);
      while (keep > 0 && !std::string_view(s.pattern).starts_with(all.substr(all.size() - keep))) {
        --keep;
      }
      done.append(all.substr(prev, all.size() - keep - prev));
      st.buffer.erase(0, all.size() - keep);
      text_at(i + 1, done, out);
      return;
    }
    default:
      return;  // refused at load
  }
}

void DecodeStream::flush_at(size_t i, std::string& out) {
  const auto& steps = decoder_->steps_;
  if (i == steps.size()) return;
  State& st = state_[i];
  switch (steps[i].kind) {
    case K::kByteFallback:
      if (i <= decoder_->join_) close_run(i, out);
      break;
    case K::kByteLevel:
      if (i <= decoder_->join_ && !st.buffer.empty()) {
        std::string text;
        utf8::append_lossy(text, st.buffer);
        st.buffer.clear();
        text_at(i + 1, text, out);
      }
      break;
    case K::kStrip:
      st.buffer.clear();  // the trailing characters a final strip removes
      break;
    case K::kReplace:
      if (i > decoder_->join_) {
        const std::string rest = std::move(st.buffer);
        st.buffer.clear();
        text_at(i + 1, rest, out);
      }
      break;
    default:
      break;
  }
  flush_at(i + 1, out);
}

}  // namespace kestrel
