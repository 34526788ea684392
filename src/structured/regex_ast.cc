#include "structured/regex_ast.h"

#include <algorithm>

#include "core/error.h"

namespace kestrel::structured {
namespace {

constexpr uint32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;

}  // namespace

std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> ranges) {
  std::vector<CodeRange> split;
  for (auto [lo, hi] : ranges) {
    hi = std::min(hi, kMaxCodePoint);
    if (lo > hi) continue;
    if (lo < kSurrogateLo && hi >= kSurrogateLo) {
      split.emplace_back(lo, kSurrogateLo - 1);
      lo = kSurrogateLo;
    }
    if (lo >= kSurrogateLo && lo <= kSurrogateHi) lo = kSurrogateHi + 1;
    if (lo <= hi) split.emplace_back(lo, hi);
  }
  std::sort(split.begin(), split.end());
  std::vector<CodeRange> out;
  for (const CodeRange& r : split) {
    if (!out.empty() && r.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

std::vector<CodeRange> complement_ranges(const std::vector<CodeRange>& ranges) {
  const std::vector<CodeRange> sorted = normalize_ranges(ranges);
  std::vector<CodeRange> out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : sorted) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return normalize_ranges(std::move(out));
}

std::vector<CodeRange> subtract_ranges(const std::vector<CodeRange>& ranges,
                                       const std::vector<CodeRange>& remove) {
  // a \ b = complement(complement(a) | b)
  std::vector<CodeRange> both = complement_ranges(ranges);
  both.insert(both.end(), remove.begin(), remove.end());
  return complement_ranges(both);
}

RegexNode empty_node() { return RegexNode{}; }

RegexNode class_of(std::vector<CodeRange> ranges) {
  RegexNode n;
  n.ranges = normalize_ranges(std::move(ranges));
  n.kind = n.ranges.empty() ? RegexNode::Kind::kAlt : RegexNode::Kind::kClass;
  return n;
}

RegexNode literal(std::string_view utf8) {
  KS_CHECK(utf8.size() <= kMaxPatternTextBytes,
           "structured output: a literal of {} bytes, more than the {} a pattern may be made of",
           utf8.size(), kMaxPatternTextBytes);
  std::vector<RegexNode> parts;
  for (size_t i = 0; i < utf8.size();) {
    const auto b = static_cast<unsigned char>(utf8[i]);
    const int len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    KS_CHECK(i + len <= utf8.size(), "literal: truncated UTF-8");
    uint32_t cp = len == 1 ? b : b & (0x7F >> len);
    for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(utf8[i + k]) & 0x3F);
    parts.push_back(class_of({{cp, cp}}));
    i += len;
  }
  return concat(std::move(parts));
}

RegexNode concat(std::vector<RegexNode> parts) {
  std::erase_if(parts, [](const RegexNode& n) { return n.kind == RegexNode::Kind::kEmpty; });
  if (parts.size() == 1) return std::move(parts[0]);
  if (parts.empty()) return empty_node();
  RegexNode n;
  n.kind = RegexNode::Kind::kConcat;
  n.children = std::move(parts);
  return n;
}

RegexNode alt(std::vector<RegexNode> options) {
  if (options.size() == 1) return std::move(options[0]);
  RegexNode n;
  n.kind = RegexNode::Kind::kAlt;
  n.children = std::move(options);
  return n;
}

RegexNode repeat(RegexNode node, int min, int max) {
  KS_CHECK(min >= 0 && (max < 0 || max >= min), "bad repetition {{{},{}}}", min, max);
  if (min == 1 && max == 1) return node;
  RegexNode n;
  n.kind = RegexNode::Kind::kRepeat;
  n.min = min;
  n.max = max;
  n.children.push_back(std::move(node));
  return n;
}

RegexNode separated(RegexNode item, RegexNode separator, int min, int max) {
  KS_CHECK(min >= 0 && (max < 0 || max >= min), "bad repetition {{{},{}}}", min, max);
  if (max == 0) return empty_node();
  if (separator.kind == RegexNode::Kind::kEmpty) return repeat(std::move(item), min, max);
  RegexNode n;
  n.kind = RegexNode::Kind::kRepeat;
  n.min = min;
  n.max = max;
  n.children.push_back(std::move(item));
  n.children.push_back(std::move(separator));
  return n;
}

RegexNode without_code_points(const RegexNode& node, const std::vector<CodeRange>& remove) {
  if (node.kind == RegexNode::Kind::kClass) return class_of(subtract_ranges(node.ranges, remove));
  RegexNode out = node;
  for (RegexNode& child : out.children) child = without_code_points(child, remove);
  return out;
}

size_t node_count(const RegexNode& node) {
  size_t n = 1;
  for (const RegexNode& c : node.children) n += node_count(c);
  return n;
}

}  // namespace kestrel::structured
