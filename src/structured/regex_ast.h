// The pattern tree that every structured-output form compiles to (regex text, JSON schema,
// choice lists): code-point classes combined by concatenation, alternation and counted
// repetition. byte_dfa.h turns it into a DFA over UTF-8 bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace kestrel::structured {

// Inclusive code-point range.
using CodeRange = std::pair<uint32_t, uint32_t>;
constexpr uint32_t kMaxCodePoint = 0x10FFFF;

struct RegexNode {
  enum class Kind : uint8_t { kEmpty, kClass, kConcat, kAlt, kRepeat };
  Kind kind = Kind::kEmpty;
  std::vector<CodeRange> ranges;    // kClass: sorted, disjoint, not adjacent; never empty
  // kConcat, kAlt: any number; kRepeat: the repeated node, then optionally a separator
  // matched between repetitions (separated()).
  std::vector<RegexNode> children;
  int min = 0;                      // kRepeat
  int max = -1;                     // kRepeat: -1 = unbounded
};

// Sorted, merged copy of `ranges` (surrogates D800-DFFF removed: UTF-8 cannot hold them).
std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> ranges);
// Every code point (surrogates excepted) not in `ranges`.
std::vector<CodeRange> complement_ranges(const std::vector<CodeRange>& ranges);
// `ranges` without the code points of `remove`.
std::vector<CodeRange> subtract_ranges(const std::vector<CodeRange>& ranges,
                                       const std::vector<CodeRange>& remove);

// Builders. A class whose ranges come out empty matches nothing: class_of returns an empty
// alternation then (a node no string matches).
RegexNode empty_node();
RegexNode class_of(std::vector<CodeRange> ranges);
RegexNode literal(std::string_view utf8);  // REQUIRES: valid UTF-8
RegexNode concat(std::vector<RegexNode> parts);
RegexNode alt(std::vector<RegexNode> options);
RegexNode repeat(RegexNode node, int min, int max);
inline RegexNode optional(RegexNode node) { return repeat(std::move(node), 0, 1); }
// `item (separator item)*` with between min and max items (max -1: unbounded; min 0 also
// matches the empty string): a JSON list's shape. Unlike the concatenation spelled out, the
// automaton holds one copy of `item` for the unbounded part, where the spelled-out form
// holds two (the first item, the later ones) that the DFA tells apart; with free-form JSON,
// lists inside lists, that doubling compounded at every level of nesting.
RegexNode separated(RegexNode item, RegexNode separator, int min, int max);

// Nodes in the tree (the node itself included).
size_t node_count(const RegexNode& node);
// Largest pattern tree a request may make: byte_dfa.h's NFA takes at most 400,000 states, and
// a tree much larger than that cannot compile, so builders stop here (before the memory of a
// runaway expansion is spent).
constexpr size_t kMaxPatternNodes = 500000;
// Longest text a pattern may be read from: a regex, a grammar, one literal, or the literals of
// one list (choices, an enum) together. Each character makes at least one node, and text far
// shorter than this already makes more automaton than fits; refusing longer text before it is
// read keeps a request's memory near its size (an 8 MB regex took 1.5 GB and 3 s to refuse).
constexpr size_t kMaxPatternTextBytes = size_t{256} << 10;

// A copy of `node` whose classes lose the code points of `remove` (pattern inside a JSON
// string: no quote, backslash or control characters, so that no escape is needed).
RegexNode without_code_points(const RegexNode& node, const std::vector<CodeRange>& remove);

}  // namespace kestrel::structured
