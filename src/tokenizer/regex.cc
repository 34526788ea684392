#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstdint>
#include <iterator>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace kestrel {
namespace {

// Unicode White_Space (what Oniguruma's \s matches), as the body of a character class.
constexpr std::string_view kWhiteSpace =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";
constexpr std::string_view kHexDigit = "0-9a-fA-F";

#include "tokenizer/unicode_fixups.inc"

// Per-thread match state. Match data sized for one pair works for every pattern since only
// the whole match is read. The JIT stack is larger than PCRE2's 32 KiB default so that
// pathological inputs (megabytes of whitespace) cannot exhaust it.
struct MatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  MatchState() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~MatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

std::string oniguruma_to_pcre2(std::string_view p, bool unicode_fixups) {
  std::string out;
  out.reserve(p.size() + 64);
  int class_depth = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      ++i;
      const bool in_class = class_depth > 0;
      // Outside a class the set needs its own brackets; inside one it is spliced in.
      auto set = [&](std::string_view body, bool negate) {
        if (!in_class) out += negate ? "[^" : "[";
        out.append(body);
        if (!in_class) out += ']';
      };
      if ((e == 'p' || e == 'P') && i + 1 < p.size()) {
        // \p{L} / \pL and \p{N} / \pN gain the letters and numbers of newer Unicode.
        std::string_view name;
        size_t end = i + 1;
        if (p[i + 1] == '{') {
          const size_t close = p.find('}', i + 2);
          if (close != std::string_view::npos) {
            name = p.substr(i + 2, close - i - 2);
            end = close;
          }
        } else {
          name = p.substr(i + 1, 1);
        }
        const std::string_view extra = name == "L"   ? kExtraLetters
                                       : name == "N" ? kExtraNumbers
                                                     : std::string_view();
        if (unicode_fixups && !extra.empty() && !(e == 'P' && in_class)) {
          if (!in_class) out += e == 'P' ? "[^" : "[";
          out += "\\p{";
          out.append(name);
          out += '}';
          out.append(extra);
          if (!in_class) out += ']';
          i = end;
          continue;
        }
        out += c;
        out += e;
        continue;
      }
      if (e == 's') {
        set(kWhiteSpace, false);
      } else if (e == 'S' && !in_class) {
        set(kWhiteSpace, true);
      } else if (e == 'h') {
        set(kHexDigit, false);
      } else if (e == 'H' && !in_class) {
        set(kHexDigit, true);
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[') {
      // "[:alpha:]" inside a class is a POSIX class, not a nested one; copy it whole.
      if (class_depth > 0 && i + 1 < p.size() && p[i + 1] == ':') {
        const size_t close = p.find(":]", i + 2);
        if (close != std::string_view::npos) {
          out.append(p.substr(i, close + 2 - i));
          i = close + 1;
          continue;
        }
      }
      ++class_depth;
      out += c;
      // A ']' (after an optional '^') right at the start of a class is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (c == ']' && class_depth > 0) --class_depth;
    out += c;
  }
  return out;
}

std::shared_ptr<void> Regex::compile(const std::string& translated, bool literal) const {
  // PCRE2_LITERAL refuses UCP (it has no classes to apply it to).
  const uint32_t options =
      literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE;
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()),
                                   translated.size(), options, &error, &offset, nullptr);
  KS_CHECK(code != nullptr, "bad pre-tokenizer regex /{}/: {} at offset {}", pattern_,
           pcre2_message(error), offset);
  // JIT is an optimisation: when it is unavailable pcre2_match() interprets the pattern.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return std::shared_ptr<void>(code, [](void* c) { pcre2_code_free(static_cast<pcre2_code*>(c)); });
}

Regex::Regex(const std::string& pattern, bool literal) : pattern_(pattern) {
  if (literal) {
    code_ = compile(pattern, true);
    return;
  }
  const std::string exact = oniguruma_to_pcre2(pattern, true);
  code_ = compile(exact, false);
  const std::string plain = oniguruma_to_pcre2(pattern, false);
  if (plain != exact) fast_code_ = compile(plain, false);
}

bool Regex::has_fixup_chars(std::string_view text) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t i = 0; i < text.size(); ++i) {
    // In the BMP the added code points start with E1 (U+1C89..) or EA (U+A7CB..); the rest
    // are 4-byte sequences. Everything else is skipped without decoding.
    const uint8_t b = p[i];
    if (b < 0xE1 || (b > 0xE1 && b != 0xEA && b < 0xF0)) continue;
    size_t pos = i;
    const char32_t cp = utf8::decode(text, pos);
    auto it = std::upper_bound(std::begin(kExtraRanges), std::end(kExtraRanges), cp,
                               [](char32_t c, const auto& r) { return c < r.first; });
    if (it != std::begin(kExtraRanges) && cp <= std::prev(it)->second) return true;
  }
  return false;
}

bool Regex::next_match(const void* code, std::string_view text, size_t from, size_t& begin,
                       size_t& end) const {
  if (from > text.size()) return false;
  MatchState& st = match_state();
  const int rc =
      pcre2_match(static_cast<const pcre2_code*>(code), reinterpret_cast<PCRE2_SPTR>(text.data()),
                  text.size(), from, PCRE2_NO_UTF_CHECK, st.data, st.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  KS_CHECK(rc >= 0, "tokenizer: regex /{}/ failed on a {}-byte input: {}", pattern_, text.size(),
           pcre2_message(rc));
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
  begin = ov[0];
  end = ov[1];
  return true;
}

size_t Regex::skip_char(std::string_view text, size_t pos) {
  ++pos;
  while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
  return pos;
}

}  // namespace kestrel
