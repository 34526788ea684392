#include "tokenizer/utf8.h"

#include <cstdint>

namespace kestrel::utf8 {

Seq classify(std::string_view s, size_t pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  const uint8_t b0 = p[pos];
  if (b0 < 0x80) return {SeqStatus::kValid, 1};
  // The range allowed for the second byte depends on the lead byte (Unicode Table 3-7); it is
  // what rules out overlongs, surrogates and code points above U+10FFFF.
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {SeqStatus::kInvalid, 1};
  }
  for (size_t k = 1; k <= need; ++k) {
    if (pos + k >= n) return {SeqStatus::kTruncated, k};
    const uint8_t b = p[pos + k];
    if (b < lo || b > hi) return {SeqStatus::kInvalid, k};
    lo = 0x80;
    hi = 0xBF;
  }
  return {SeqStatus::kValid, need + 1};
}

size_t find_invalid(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    // ASCII runs dominate real text; skip them eight bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      __builtin_memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const Seq seq = classify(s, i);
    if (seq.status != SeqStatus::kValid) return i;
    i += seq.length;
  }
  return std::string_view::npos;
}

char32_t decode(std::string_view s, size_t& pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + pos;
  const uint8_t b0 = p[0];
  if (b0 < 0x80) {
    pos += 1;
    return b0;
  }
  if (b0 < 0xE0) {
    pos += 2;
    return (char32_t(b0 & 0x1F) << 6) | (p[1] & 0x3F);
  }
  if (b0 < 0xF0) {
    pos += 3;
    return (char32_t(b0 & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
  }
  pos += 4;
  return (char32_t(b0 & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) |
         (char32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

void append_lossy(std::string& out, std::string_view bytes) {
  size_t i = 0;
  size_t run = 0;  // start of the current run of valid bytes
  while (i < bytes.size()) {
    const Seq seq = classify(bytes, i);
    if (seq.status == SeqStatus::kValid) {
      i += seq.length;
      continue;
    }
    out.append(bytes.substr(run, i - run));
    out.append(kReplacement);
    i += seq.length;
    run = i;
  }
  out.append(bytes.substr(run));
}

size_t truncated_tail(std::string_view s) {
  const size_t n = s.size();
  const size_t first = n > 3 ? n - 3 : 0;
  for (size_t i = first; i < n; ++i) {
    const auto b = static_cast<uint8_t>(s[i]);
    if (b < 0xC2 || b > 0xF4) continue;  // only a lead byte can start a truncated sequence
    const Seq seq = classify(s, i);
    if (seq.status == SeqStatus::kTruncated) return n - i;
  }
  return 0;
}

}  // namespace kestrel::utf8
