#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace kestrel {
namespace {

std::string_view pattern_of(const nlohmann::json& j, Normalizer::Step& step) {
  const auto& pattern = j.at("pattern");
  if (pattern.contains("String")) {
    step.literal = pattern.at("String").get<std::string>();
    return step.literal;
  }
  KS_CHECK(pattern.contains("Regex"), "Replace pattern must have \"String\" or \"Regex\"");
  step.regex = std::make_shared<const Regex>(pattern.at("Regex").get<std::string>());
  return step.regex->pattern();
}

void parse_into(const nlohmann::json& j, std::vector<Normalizer::Step>& steps) {
  using K = Normalizer::Kind;
  if (j.is_null()) return;
  KS_CHECK(j.is_object() && j.contains("type"), "normalizer must be an object with a \"type\"");
  const std::string type = j.at("type").get<std::string>();
  if (type == "Sequence") {
    for (const auto& n : j.at("normalizers")) parse_into(n, steps);
    return;
  }
  Normalizer::Step step;
  if (type == "NFC") {
    step.kind = K::kNFC;
  } else if (type == "NFD") {
    step.kind = K::kNFD;
  } else if (type == "NFKC") {
    step.kind = K::kNFKC;
  } else if (type == "NFKD") {
    step.kind = K::kNFKD;
  } else if (type == "Prepend") {
    step.kind = K::kPrepend;
    step.text = j.at("prepend").get<std::string>();
  } else if (type == "Replace") {
    step.kind = K::kReplace;
    step.text = j.at("content").get<std::string>();
    KS_CHECK(!pattern_of(j, step).empty(), "Replace normalizer with an empty pattern");
  } else if (type == "Strip") {
    step.kind = K::kStrip;
    step.left = j.value("strip_left", j.value("left", false));
    step.right = j.value("strip_right", j.value("right", false));
  } else if (type == "Lowercase") {
    step.kind = K::kLowercase;
  } else {
    throw_error(
        "unsupported normalizer type \"{}\" (supported: NFC, NFD, NFKC, NFKD, Prepend, Replace, "
        "Strip, Lowercase, Sequence, null)",
        type);
  }
  steps.push_back(std::move(step));
}

// Code points that can make NFC change a text: a non-zero combining class, a canonical
// decomposition that does not compose back to the code point itself, or the chance to be the
// second half of a canonical composition (which NFC would merge with the character before).
// A text with none of them is already NFC, which spares the utf8proc call for almost all
// real text (CJK, Cyrillic, emoji, accented Latin included).
class NfcUnsafe {
 public:
  NfcUnsafe() : bits_((kMaxCodePoint + 64) / 64, 0) {
    utf8proc_int32_t buf[32];
    for (utf8proc_int32_t cp = 0; cp <= kMaxCodePoint; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      const utf8proc_property_t* p = utf8proc_get_property(cp);
      if (p->combining_class != 0) set(cp);
      const bool canonical = p->decomp_type == 0 && p->decomp_seqindex != UINT16_MAX;
      if (!canonical) continue;
      const utf8proc_ssize_t n = utf8proc_decompose_char(cp, buf, 32, UTF8PROC_DECOMPOSE, nullptr);
      for (utf8proc_ssize_t i = 1; i < n; ++i) set(buf[i]);  // possible second halves
      std::string one;
      utf8::append(one, static_cast<char32_t>(cp));
      utf8proc_uint8_t* nfc = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(one.c_str()));
      if (nfc == nullptr || one != reinterpret_cast<const char*>(nfc)) set(cp);
      std::free(nfc);
    }
    // Hangul vowel and trailing jamo compose algorithmically with the preceding syllable.
    for (char32_t cp = 0x1161; cp <= 0x1175; ++cp) set(cp);
    for (char32_t cp = 0x11A8; cp <= 0x11C2; ++cp) set(cp);
  }
  bool operator()(char32_t cp) const { return (bits_[cp >> 6] >> (cp & 63)) & 1; }

 private:
  static constexpr utf8proc_int32_t kMaxCodePoint = 0x10FFFF;
  void set(char32_t cp) { bits_[cp >> 6] |= uint64_t(1) << (cp & 63); }
  std::vector<uint64_t> bits_;
};

// True when `text` is certainly unchanged by `form`. ASCII is invariant under all four forms.
bool unchanged(std::string_view text, Normalizer::Kind form) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n && p[i] < 0x80) ++i;
  if (i == n) return true;
  if (form != Normalizer::Kind::kNFC) return false;
  static const NfcUnsafe unsafe;
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    if (unsafe(utf8::decode(text, i))) return false;
  }
  return true;
}

utf8proc_option_t options_for(Normalizer::Kind form) {
  const int base = UTF8PROC_STABLE;
  switch (form) {
    case Normalizer::Kind::kNFC:
      return utf8proc_option_t(base | UTF8PROC_COMPOSE);
    case Normalizer::Kind::kNFD:
      return utf8proc_option_t(base | UTF8PROC_DECOMPOSE);
    case Normalizer::Kind::kNFKC:
      return utf8proc_option_t(base | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    case Normalizer::Kind::kNFKD:
      return utf8proc_option_t(base | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
    default:
      break;
  }
  return utf8proc_option_t(base);
}

// Unicode White_Space (Rust's char::is_whitespace).
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Writes the result of the non-Unicode-form step `s` on `in` to `out`; false when `in` stays
// as it is (out untouched).
bool apply(const Normalizer::Step& s, std::string_view in, std::string& out) {
  using K = Normalizer::Kind;
  switch (s.kind) {
    case K::kPrepend:
      if (in.empty() || s.text.empty()) return false;
      out.assign(s.text).append(in);
      return true;
    case K::kReplace: {
      bool any = false;
      size_t prev = 0;
      auto on_match = [&](size_t b, size_t e) {
        if (!any) out.clear();
        any = true;
        out.append(in.substr(prev, b - prev)).append(s.text);
        prev = e;
      };
      if (s.regex) {
        s.regex->find_all(in, on_match);
      } else {
        for (size_t at = in.find(s.literal); at != std::string_view::npos;
             at = in.find(s.literal, prev)) {
          on_match(at, at + s.literal.size());
        }
      }
      if (any) out.append(in.substr(prev));
      return any;
    }
    case K::kStrip: {
      size_t begin = 0, end = in.size();
      if (s.left) {
        while (begin < end) {
          size_t next = begin;
          if (!is_white_space(utf8::decode(in, next))) break;
          begin = next;
        }
      }
      if (s.right) {
        while (end > begin) {
          size_t start = end - 1;
          while (start > begin && (static_cast<unsigned char>(in[start]) & 0xC0) == 0x80) --start;
          size_t next = start;
          if (!is_white_space(utf8::decode(in, next))) break;
          end = start;
        }
      }
      if (begin == 0 && end == in.size()) return false;
      out.assign(in.substr(begin, end - begin));
      return true;
    }
    case K::kLowercase: {
      size_t i = 0;
      while (i < in.size() && !(in[i] >= 'A' && in[i] <= 'Z') &&
             static_cast<unsigned char>(in[i]) < 0x80) {
        ++i;
      }
      if (i == in.size()) return false;
      out.assign(in.substr(0, i));
      while (i < in.size()) {
        const char32_t c = utf8::decode(in, i);
        if (c == 0x130) {  // the one unconditional multi-character lowercase mapping
          out += 'i';
          utf8::append(out, 0x307);
        } else {
          utf8::append(out, static_cast<char32_t>(utf8proc_tolower(static_cast<int32_t>(c))));
        }
      }
      return true;
    }
    default:
      return false;
  }
}

}  // namespace

Normalizer Normalizer::from_json(const nlohmann::json& j) {
  std::vector<Step> steps;
  parse_into(j, steps);
  return Normalizer(std::move(steps));
}

std::string_view Normalizer::normalize(std::string_view text, std::string& scratch) const {
  std::string_view current = text;
  std::string other;
  for (const Step& step : steps_) {
    if (step.kind > Kind::kNFKD) {
      // `current` may view `scratch`: write elsewhere, then swap.
      if (apply(step, current, other)) {
        scratch.swap(other);
        current = scratch;
      }
      continue;
    }
    if (unchanged(current, step.kind)) continue;
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t len =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(current.data()),
                     static_cast<utf8proc_ssize_t>(current.size()), &out, options_for(step.kind));
    KS_CHECK(len >= 0, "tokenizer: Unicode normalization failed: {}", utf8proc_errmsg(len));
    scratch.assign(reinterpret_cast<const char*>(out), static_cast<size_t>(len));
    std::free(out);
    current = scratch;
  }
  return current;
}

}  // namespace kestrel
