#include "structured/ebnf_grammar.h"

#include <fmt/format.h>

#include <cctype>
#include <map>
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

bool refers_to(const GrammarExpr& e, int rule) {
  if (e.kind == K::kRef) return e.rule == rule;
  for (const GrammarExpr& c : e.children) {
    if (refers_to(c, rule)) return true;
  }
  return false;
}

// A rule that refers to itself only at its ends (`ws ::= ([ \t\n] ws)?`, `list ::= item
// ("," list)?`) is regular: with its body written as `a_1 X | ... | b_1 | ...`, X is
// (a_1 | ...)* (b_1 | ...) (Arden's rule). Fills `tails` with the a's and `ends` with the
// b's of `e`, whose own end is the rule's end; false where the rule occurs anywhere else
// (then it is recursion that nests, and expanded to a depth).
bool split_tail(const GrammarExpr& e, int rule, std::vector<GrammarExpr>& tails,
                std::vector<GrammarExpr>& ends) {
  if (!refers_to(e, rule)) {
    ends.push_back(e);
    return true;
  }
  switch (e.kind) {
    case K::kRef:
      tails.push_back(seq_of({}));
      return true;
    case K::kAlt:
      for (const GrammarExpr& c : e.children) {
        if (!split_tail(c, rule, tails, ends)) return false;
      }
      return true;
    case K::kSeq: {
      for (size_t i = 0; i + 1 < e.children.size(); ++i) {
        if (refers_to(e.children[i], rule)) return false;
      }
      std::vector<GrammarExpr> t, b;
      if (!split_tail(e.children.back(), rule, t, b)) return false;
      const std::vector<GrammarExpr> head(e.children.begin(), e.children.end() - 1);
      auto after_head = [&](GrammarExpr last) {
        std::vector<GrammarExpr> items = head;
        items.push_back(std::move(last));
        return seq_of(std::move(items));
      };
      for (GrammarExpr& x : t) tails.push_back(after_head(std::move(x)));
      for (GrammarExpr& x : b) ends.push_back(after_head(std::move(x)));
      return true;
    }
    case K::kRepeat:
      if (e.min != 0 || e.max != 1) return false;
      ends.push_back(seq_of({}));
      return split_tail(e.children[0], rule, tails, ends);
    case K::kTerminal:
      return false;
  }
  return false;
}

// Expands references below the nesting limit, counting the nodes made.
class Expander {
 public:
  Expander(const GrammarRules& rules, int nesting)
      : rules_(rules), nesting_(nesting), active_(rules.bodies.size(), 0) {
    for (size_t r = 0; r < rules.bodies.size(); ++r) {
      TailForm f;
      if (refers_to(rules.bodies[r], static_cast<int>(r)) &&
          split_tail(rules.bodies[r], static_cast<int>(r), f.tails, f.ends)) {
        tail_forms_.emplace(static_cast<int>(r), std::move(f));
      }
    }
  }

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
          "smaller rules",
          kMaxPatternNodes));
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
        const bool inner_lexical = lexical || rules_.lexical[e.rule];
        const auto tail = tail_forms_.find(e.rule);
        RegexNode body = tail == tail_forms_.end() ? expand(rules_.bodies[e.rule], inner_lexical)
                                                   : expand_tail_form(tail->second, inner_lexical);
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

  struct TailForm {
    std::vector<GrammarExpr> tails, ends;
  };

  // (a_1 | ...)* (b_1 | ...), ignored text between the a's and before the b where it goes.
  RegexNode expand_tail_form(const TailForm& f, bool lexical) {
    const bool spaced = !lexical && ignored_;
    std::vector<RegexNode> tails, ends;
    for (const GrammarExpr& t : f.tails) tails.push_back(expand(t, lexical));
    for (const GrammarExpr& b : f.ends) ends.push_back(expand(b, lexical));
    RegexNode tail = alt(std::move(tails));
    if (spaced) tail = concat({std::move(tail), ignored()});
    return concat({repeat(std::move(tail), 0, -1), alt(std::move(ends))});
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
  std::map<int, TailForm> tail_forms_;  // by rule: those recursive at their ends only
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
