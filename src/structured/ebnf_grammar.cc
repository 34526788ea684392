#include "structured/ebnf_grammar.h"

#include <fmt/format.h>

#include <cctype>
#include <optional>
#include <utility>

#include "core/error.h"
#include "structured/byte_dfa.h"

namespace kestrel::structured {
namespace {

using K = GrammarExpr::Kind;

// Lark when the first definition is `name:` (after ? or ! and a .priority), or a %directive
// comes first; comments of either notation are skipped to find it.
bool looks_like_lark(std::string_view t) {
  size_t p = 0;
  while (p < t.size()) {
    const char c = t[p];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++p;
    } else if (c == '#' || t.substr(p).starts_with("//")) {
      while (p < t.size() && t[p] != '\n') ++p;
    } else {
      break;
    }
  }
  if (p < t.size() && t[p] == '%') return true;
  if (p < t.size() && (t[p] == '?' || t[p] == '!')) ++p;
  const size_t name = p;
  while (p < t.size() && (std::isalnum(static_cast<unsigned char>(t[p])) || t[p] == '_')) ++p;
  if (p == name) return false;
  if (p < t.size() && t[p] == '.') {  // a terminal's priority
    ++p;
    while (p < t.size() && std::isdigit(static_cast<unsigned char>(t[p]))) ++p;
  }
  while (p < t.size() && (t[p] == ' ' || t[p] == '\t')) ++p;
  return p < t.size() && t[p] == ':' && !t.substr(p).starts_with("::=");
}

// Expands references below the nesting limit, counting the nodes made.
class Expander {
 public:
  Expander(const GrammarRules& rules, int nesting)
      : rules_(rules), nesting_(nesting), active_(rules.bodies.size(), 0) {}

  RegexNode root() {
    GrammarExpr ref;
    ref.kind = K::kRef;
    ref.rule = rules_.root;
    if (!rules_.ignored.empty()) {
      std::vector<RegexNode> options;
      for (const GrammarExpr& e : rules_.ignored) options.push_back(expand(e, /*lexical=*/true));
      ignored_ = repeat(alt(std::move(options)), 0, -1);
    }
    RegexNode body = expand(ref, /*lexical=*/false);
    if (!ignored_) return body;
    return concat({ignored(), std::move(body), ignored()});
  }

 private:
  void count(size_t nodes) {
    nodes_ += nodes;
    if (nodes_ > kMaxPatternNodes) {
      throw PatternTooLarge(fmt::format(
          "structured output: the grammar expands to more than {} parts; give it fewer or "
          "smaller rules", kMaxPatternNodes));
    }
  }

  // %ignore's text, between two tokens.
  RegexNode ignored() {
    count(node_count(*ignored_));
    return *ignored_;
  }

  // `lexical`: inside one token (a Lark terminal), where no ignored text goes.
  RegexNode expand(const GrammarExpr& e, bool lexical) {
    count(1);
    const bool spaced = !lexical && ignored_;
    switch (e.kind) {
      case K::kTerminal:
        count(node_count(e.terminal));
        return e.terminal;
      case K::kRef: {
        int& depth = active_[e.rule];
        if (depth >= nesting_) return alt({});  // deeper than the limit: matches nothing
        ++depth;
        RegexNode body = expand(rules_.bodies[e.rule], lexical || rules_.lexical[e.rule]);
        --depth;
        return body;
      }
      case K::kAlt: {
        std::vector<RegexNode> options;
        for (const GrammarExpr& c : e.children) options.push_back(expand(c, lexical));
        return alt(std::move(options));
      }
      case K::kRepeat: {
        RegexNode item = expand(e.children[0], lexical);
        if (spaced) return separated(std::move(item), ignored(), e.min, e.max);
        return repeat(std::move(item), e.min, e.max);
      }
      case K::kSeq:
        return expand_sequence(e.children, lexical);
    }
    return empty_node();
  }

  // `X (S X){m,n}` as separated(X, S, m + 1, n + 1): one copy of X where spelling it out
  // makes two, and so 2^depth copies of a nested list's items. Outside tokens, ignored text
  // goes between the parts.
  RegexNode expand_sequence(const std::vector<GrammarExpr>& items, bool lexical) {
    const bool spaced = !lexical && ignored_;
    std::vector<RegexNode> parts;
    for (size_t i = 0; i < items.size(); ++i) {
      if (spaced && !parts.empty()) parts.push_back(ignored());
      if (i + 1 < items.size()) {
        const GrammarExpr& next = items[i + 1];
        const GrammarExpr& body = next.kind == K::kRepeat ? next.children[0] : next;
        if (next.kind == K::kRepeat && body.kind == K::kSeq && body.children.size() >= 2 &&
            same_expr(body.children.back(), items[i])) {
          std::vector<RegexNode> sep;
          for (size_t k = 0; k + 1 < body.children.size(); ++k) {
            if (spaced) sep.push_back(ignored());
            sep.push_back(expand(body.children[k], lexical));
          }
          if (spaced) sep.push_back(ignored());
          parts.push_back(separated(expand(items[i], lexical), concat(std::move(sep)), next.min + 1,
                                    next.max < 0 ? -1 : next.max + 1));
          ++i;
          continue;
        }
      }
      parts.push_back(expand(items[i], lexical));
    }
    return concat(std::move(parts));
  }

  const GrammarRules& rules_;
  const int nesting_;
  std::vector<int> active_;
  std::optional<RegexNode> ignored_;
  size_t nodes_ = 0;
};

// Rules reachable from `e` (references followed), marked in `seen`.
void mark_reachable(const GrammarExpr& e, const GrammarRules& rules, std::vector<char>& seen) {
  if (e.kind == K::kRef) {
    if (seen[e.rule]) return;
    seen[e.rule] = 1;
    mark_reachable(rules.bodies[e.rule], rules, seen);
    return;
  }
  for (const GrammarExpr& c : e.children) mark_reachable(c, rules, seen);
}

}  // namespace

EbnfGrammar EbnfGrammar::parse(std::string_view text) {
  KS_CHECK(text.size() <= kMaxPatternTextBytes,
           "grammar: {} bytes, more than the {} a pattern may be made of", text.size(),
           kMaxPatternTextBytes);
  EbnfGrammar g;
  g.rules_ = looks_like_lark(text) ? parse_lark(text) : parse_gbnf(text);
  // A rule is recursive when it reaches itself; only those reachable from the root matter.
  const GrammarRules& rules = g.rules_;
  std::vector<char> from_root(rules.bodies.size(), 0);
  from_root[rules.root] = 1;
  mark_reachable(rules.bodies[rules.root], rules, from_root);
  for (size_t r = 0; r < rules.bodies.size() && !g.recursive_; ++r) {
    if (!from_root[r]) continue;
    std::vector<char> seen(rules.bodies.size(), 0);
    mark_reachable(rules.bodies[r], rules, seen);
    g.recursive_ = seen[r] != 0;
  }
  return g;
}

RegexNode EbnfGrammar::pattern(int nesting) const {
  KS_CHECK(nesting >= 1, "grammar nesting must be >= 1, got {}", nesting);
  return Expander(rules_, nesting).root();
}

}  // namespace kestrel::structured
