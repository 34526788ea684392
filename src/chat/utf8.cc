#include "chat/utf8.h"

#include <algorithm>

namespace kestrel::chat {

char32_t utf8_next(std::string_view s, size_t& pos) {
  unsigned char lead = static_cast<unsigned char>(s[pos]);
  int extra = lead < 0x80              ? 0
              : (lead & 0xE0) == 0xC0 ? 1
              : (lead & 0xF0) == 0xE0 ? 2
              : (lead & 0xF8) == 0xF0 ? 3
                                      : -1;
  if (extra <= 0 || pos + extra >= s.size()) {  // ASCII, stray or truncated byte
    ++pos;
    return lead;
  }
  char32_t cp = lead & (0x7F >> (extra + 1));
  for (int i = 1; i <= extra; ++i) {
    unsigned char cont = static_cast<unsigned char>(s[pos + i]);
    if ((cont & 0xC0) != 0x80) {
      ++pos;
      return lead;
    }
    cp = (cp << 6) | (cont & 0x3F);
  }
  pos += extra + 1;
  return cp;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (size_t pos = 0; pos < s.size(); ++n) utf8_next(s, pos);
  return n;
}

std::vector<size_t> utf8_offsets(std::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  for (size_t pos = 0; pos < s.size();) {
    offsets.push_back(pos);
    utf8_next(s, pos);
  }
  offsets.push_back(s.size());
  return offsets;
}

std::vector<std::string> utf8_chars(std::string_view s) {
  std::vector<std::string> chars;
  for (size_t pos = 0; pos < s.size();) {
    size_t start = pos;
    utf8_next(s, pos);
    chars.emplace_back(s.substr(start, pos - start));
  }
  return chars;
}

size_t utf8_index_of_byte(std::string_view s, size_t byte_pos) {
  return utf8_length(s.substr(0, byte_pos));
}

bool py_is_space(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool py_is_line_break(char32_t cp) {
  return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D ||
         cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

char32_t py_to_upper(char32_t cp) {
  if (cp >= 'a' && cp <= 'z') return cp - 32;
  if (cp < 0x80) return cp;
  if (cp == 0xB5) return 0x39C;
  if ((cp >= 0xE0 && cp <= 0xFE && cp != 0xF7)) return cp - 32;
  if (cp == 0xFF) return 0x178;
  if (cp >= 0x100 && cp <= 0x17F && cp != 0x130 && cp != 0x131 && cp != 0x138 && cp != 0x149 &&
      cp != 0x17F) {
    bool odd_lower = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E);
    if (odd_lower ? (cp % 2 == 0) : (cp % 2 == 1)) return cp - 1;
    return cp;
  }
  if (cp == 0x131) return 'I';
  if (cp == 0x17F) return 'S';
  if (cp >= 0x3B1 && cp <= 0x3C9 && cp != 0x3C2) return cp - 32;
  if (cp == 0x3C2) return 0x3A3;
  if (cp == 0x3AC) return 0x386;
  if (cp >= 0x3AD && cp <= 0x3AF) return cp - 37;
  if (cp == 0x3CC) return 0x38C;
  if (cp == 0x3CD || cp == 0x3CE) return cp - 63;
  if (cp >= 0x430 && cp <= 0x44F) return cp - 32;
  if (cp >= 0x450 && cp <= 0x45F) return cp - 80;
  return cp;
}

char32_t py_to_lower(char32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if (cp < 0x80) return cp;
  if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) return cp + 32;
  if (cp == 0x178) return 0xFF;
  if (cp >= 0x100 && cp <= 0x17F && cp != 0x130 && cp != 0x131 && cp != 0x138 && cp != 0x149 &&
      cp != 0x17F) {
    bool odd_lower = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E);
    if (odd_lower ? (cp % 2 == 1) : (cp % 2 == 0)) return cp + 1;
    return cp;
  }
  if (cp >= 0x391 && cp <= 0x3A9 && cp != 0x3A2) return cp + 32;
  if (cp == 0x386) return 0x3AC;
  if (cp >= 0x388 && cp <= 0x38A) return cp + 37;
  if (cp == 0x38C) return 0x3CC;
  if (cp == 0x38E || cp == 0x38F) return cp + 63;
  if (cp >= 0x410 && cp <= 0x42F) return cp + 32;
  if (cp >= 0x400 && cp <= 0x40F) return cp + 80;
  return cp;
}

bool py_is_cased(char32_t cp) {
  return py_to_upper(cp) != cp || py_to_lower(cp) != cp || cp == 0xDF || cp == 0x138 ||
         cp == 0x149;
}

bool py_is_printable(char32_t cp) {
  if (cp < 0x20 || cp == 0x7F) return false;
  if (cp < 0x7F) return true;
  if (cp <= 0xA0 || cp == 0xAD) return false;
  if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
      (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 || cp == 0xFEFF ||
      (cp >= 0xD800 && cp <= 0xF8FF) || (cp >= 0xFFF9 && cp <= 0xFFFB) || cp > 0x10FFFF) {
    return false;
  }
  return true;
}

namespace {

template <typename Fn>
std::string map_code_points(std::string_view s, Fn fn) {
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    size_t start = pos;
    char32_t cp = utf8_next(s, pos);
    char32_t mapped = fn(cp);
    if (mapped == cp) {
      out.append(s.substr(start, pos - start));  // keeps stray bytes intact
    } else {
      utf8_append(out, mapped);
    }
  }
  return out;
}

}  // namespace

std::string py_upper(std::string_view s) {
  std::string out;
  for (size_t pos = 0; pos < s.size();) {
    size_t start = pos;
    char32_t cp = utf8_next(s, pos);
    if (cp == 0xDF) {  // ß has no single upper-case code point
      out += "SS";
    } else if (char32_t up = py_to_upper(cp); up != cp) {
      utf8_append(out, up);
    } else {
      out.append(s.substr(start, pos - start));
    }
  }
  return out;
}

std::string py_lower(std::string_view s) { return map_code_points(s, py_to_lower); }

std::string py_title(std::string_view s) {
  bool previous_cased = false;
  return map_code_points(s, [&](char32_t cp) {
    char32_t out = previous_cased ? py_to_lower(cp) : py_to_upper(cp);
    previous_cased = py_is_cased(cp);
    return out;
  });
}

std::string py_capitalize(std::string_view s) {
  bool first = true;
  return map_code_points(s, [&](char32_t cp) {
    char32_t out = first ? py_to_upper(cp) : py_to_lower(cp);
    first = false;
    return out;
  });
}

std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::vector<char32_t> set;
  if (chars != nullptr) {
    for (size_t pos = 0; pos < chars->size();) set.push_back(utf8_next(*chars, pos));
  }
  auto strip_it = [&](char32_t cp) {
    return chars == nullptr ? py_is_space(cp) : std::find(set.begin(), set.end(), cp) != set.end();
  };
  std::vector<size_t> offsets = utf8_offsets(s);
  size_t n = offsets.size() - 1;
  size_t begin = 0, end = n;
  auto cp_at = [&](size_t i) {
    size_t pos = offsets[i];
    return utf8_next(s, pos);
  };
  if (left) {
    while (begin < end && strip_it(cp_at(begin))) ++begin;
  }
  if (right) {
    while (end > begin && strip_it(cp_at(end - 1))) --end;
  }
  return std::string(s.substr(offsets[begin], offsets[end] - offsets[begin]));
}

std::vector<std::string> py_splitlines(std::string_view s) {
  std::vector<std::string> lines;
  size_t line_start = 0;
  for (size_t pos = 0; pos < s.size();) {
    size_t start = pos;
    char32_t cp = utf8_next(s, pos);
    if (!py_is_line_break(cp)) continue;
    lines.emplace_back(s.substr(line_start, start - line_start));
    if (cp == '\r' && pos < s.size() && s[pos] == '\n') ++pos;
    line_start = pos;
  }
  if (line_start < s.size()) lines.emplace_back(s.substr(line_start));
  return lines;
}

}  // namespace kestrel::chat
