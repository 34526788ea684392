#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace kestrel {
namespace {

void parse_into(const nlohmann::json& j, std::vector<Normalizer::Form>& forms) {
  if (j.is_null()) return;
  KS_CHECK(j.is_object() && j.contains("type"), "normalizer must be an object with a \"type\"");
  const std::string type = j.at("type").get<std::string>();
  if (type == "Sequence") {
    for (const auto& n : j.at("normalizers")) parse_into(n, forms);
  } else if (type == "NFC") {
    forms.push_back(Normalizer::Form::kNFC);
  } else if (type == "NFD") {
    forms.push_back(Normalizer::Form::kNFD);
  } else if (type == "NFKC") {
    forms.push_back(Normalizer::Form::kNFKC);
  } else if (type == "NFKD") {
    forms.push_back(Normalizer::Form::kNFKD);
  } else {
    throw_error(
        "unsupported normalizer type \"{}\" (supported: NFC, NFD, NFKC, NFKD, Sequence, null)",
        type);
  }
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
bool unchanged(std::string_view text, Normalizer::Form form) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n && p[i] < 0x80) ++i;
  if (i == n) return true;
  if (form != Normalizer::Form::kNFC) return false;
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

utf8proc_option_t options_for(Normalizer::Form form) {
  const int base = UTF8PROC_STABLE;
  switch (form) {
    case Normalizer::Form::kNFC:
      return utf8proc_option_t(base | UTF8PROC_COMPOSE);
    case Normalizer::Form::kNFD:
      return utf8proc_option_t(base | UTF8PROC_DECOMPOSE);
    case Normalizer::Form::kNFKC:
      return utf8proc_option_t(base | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    case Normalizer::Form::kNFKD:
      return utf8proc_option_t(base | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  }
  return utf8proc_option_t(base);
}

}  // namespace

Normalizer Normalizer::from_json(const nlohmann::json& j) {
  std::vector<Form> forms;
  parse_into(j, forms);
  return Normalizer(std::move(forms));
}

std::string_view Normalizer::normalize(std::string_view text, std::string& scratch) const {
  std::string_view current = text;
  for (const Form form : forms_) {
    if (unchanged(current, form)) continue;
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t len =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(current.data()),
                     static_cast<utf8proc_ssize_t>(current.size()), &out, options_for(form));
    KS_CHECK(len >= 0, "tokenizer: Unicode normalization failed: {}", utf8proc_errmsg(len));
    scratch.assign(reinterpret_cast<const char*>(out), static_cast<size_t>(len));
    std::free(out);
    current = scratch;
  }
  return current;
}

}  // namespace kestrel
