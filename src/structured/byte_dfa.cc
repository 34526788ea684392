#include "structured/byte_dfa.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "structured/dfa_minimize.h"
#include "structured/utf8_sequences.h"

namespace kestrel::structured {
namespace {

// Thompson NFA over bytes.
struct Nfa {
  struct Edge {
    uint8_t lo, hi;
    int to;
  };
  std::vector<std::vector<int>> eps;
  std::vector<std::vector<Edge>> edges;
  size_t limit = 0;

  int add() {
    if (eps.size() >= limit) {
      throw PatternTooLarge(fmt::format(
          "structured output: the pattern is too large (over {} automaton states)", limit));
    }
    eps.emplace_back();
    edges.emplace_back();
    return static_cast<int>(eps.size()) - 1;
  }

  // Adds the states that match `n` after `from`; returns the state reached at its end.
  int build(const RegexNode& n, int from) {
    using K = RegexNode::Kind;
    switch (n.kind) {
      case K::kEmpty:
        return from;
      case K::kClass: {
        const int end = add();
        for (const auto& [lo, hi] : n.ranges) {
          for (const Utf8Sequence& seq : utf8_sequences(lo, hi)) {
            int at = from;
            for (size_t k = 0; k < seq.size(); ++k) {
              const int to = k + 1 == seq.size() ? end : add();
              edges[at].push_back(Edge{seq[k].lo, seq[k].hi, to});
              at = to;
            }
          }
        }
        return end;
      }
      case K::kConcat:
        for (const RegexNode& c : n.children) from = build(c, from);
        return from;
      case K::kAlt: {
        const int end = add();
        for (const RegexNode& c : n.children) {
          const int s = add();
          eps[from].push_back(s);
          eps[build(c, s)].push_back(end);
        }
        return end;
      }
      case K::kRepeat: {
        const RegexNode& c = n.children[0];
        if (n.children.size() > 1) return build_separated(n, from);
        for (int i = 0; i < n.min; ++i) from = build(c, from);
        if (n.max < 0) {
          const int loop = add();
          eps[from].push_back(loop);
          eps[build(c, loop)].push_back(loop);
          return loop;
        }
        const int end = add();
        for (int i = n.min; i < n.max; ++i) {
          eps[from].push_back(end);
          from = build(c, from);
        }
        eps[from].push_back(end);
        return end;
      }
    }
    return from;
  }

  // separated(): item (sep item)*, min to max items. Unbounded, the items past the first
  // min - 1 are one copy of the item in a loop back through the separator.
  int build_separated(const RegexNode& n, int from) {
    const RegexNode& item = n.children[0];
    const RegexNode& sep = n.children[1];
    const int end = add();
    if (n.min == 0) eps[from].push_back(end);
    int at = from;
    const int copies = n.max < 0 ? std::max(n.min, 1) - 1 : n.max;
    for (int i = 1; i <= copies; ++i) {
      if (i > 1) at = build(sep, at);
      at = build(item, at);
      if (i >= n.min) eps[at].push_back(end);
    }
    if (n.max >= 0) return end;
    if (copies > 0) at = build(sep, at);
    const int loop = add();
    eps[at].push_back(loop);
    const int after = build(item, loop);
    eps[after].push_back(end);
    eps[build(sep, after)].push_back(loop);
    return end;
  }

  // Adds the states `set` reaches by epsilon moves. The marks are stamped with a number
  // per call, not cleared: clearing a vector of every NFA state on each of the subset
  // construction's calls made it quadratic in the pattern (40 free-form tools: 13 s).
  void close(std::vector<int>& set) {
    if (seen.size() != eps.size()) seen.assign(eps.size(), 0);
    ++stamp;
    std::vector<int> stack = set;
    for (int s : set) seen[s] = stamp;
    while (!stack.empty()) {
      const int s = stack.back();
      stack.pop_back();
      for (int t : eps[s]) {
        if (seen[t] != stamp) {
          seen[t] = stamp;
          set.push_back(t);
          stack.push_back(t);
        }
      }
    }
    std::sort(set.begin(), set.end());
  }
  std::vector<uint32_t> seen;
  uint32_t stamp = 0;
};

}  // namespace

ByteDfa ByteDfa::build(const RegexNode& pattern, int max_states) {
  Nfa nfa;
  nfa.limit = static_cast<size_t>(max_states) * 8;
  const int start = nfa.add();
  const int accept = nfa.build(pattern, start);

  // Byte classes: bytes no edge tells apart share a column of the transition table.
  ByteDfa dfa;
  std::vector<bool> cut(257, false);
  cut[0] = cut[256] = true;
  for (const auto& edges : nfa.edges) {
    for (const Nfa::Edge& e : edges) cut[e.lo] = cut[e.hi + 1] = true;
  }
  int k = -1;
  for (int b = 0; b < 256; ++b) {
    if (cut[b]) ++k;
    dfa.class_of_[b] = static_cast<uint8_t>(k);
  }
  dfa.num_classes_ = k + 1;
  const size_t nc = static_cast<size_t>(dfa.num_classes_);

  // Subset construction, one column per class. It makes states that minimize() then merges
  // (the same arguments after different tool names: a 1,180-state free-form object takes
  // ~3,300 per tool here), so it may go past the final limit, up to a bound on its memory.
  const size_t construction_limit = size_t(max_states) * 4;
  std::map<std::vector<int>, int32_t> ids;
  std::vector<std::vector<int>> sets;
  std::vector<int32_t> next;
  std::vector<uint8_t> accepting;
  auto intern = [&](std::vector<int> set) {
    auto [it, inserted] = ids.emplace(set, static_cast<int32_t>(sets.size()));
    if (inserted) {
      if (sets.size() >= construction_limit) {
        throw PatternTooLarge(fmt::format(
            "structured output: the pattern needs more than {} automaton states before they "
            "are merged ({} after); simplify it (fewer alternatives, smaller counts)",
            construction_limit, max_states));
      }
      accepting.push_back(std::binary_search(set.begin(), set.end(), accept) ? 1 : 0);
      sets.push_back(std::move(set));
    }
    return it->second;
  };
  std::vector<int> first{start};
  nfa.close(first);
  intern(std::move(first));
  std::vector<std::vector<int>> by_class(nc);
  for (size_t d = 0; d < sets.size(); ++d) {
    for (auto& v : by_class) v.clear();
    for (int s : sets[d]) {
      for (const Nfa::Edge& e : nfa.edges[s]) {
        for (int c = dfa.class_of_[e.lo]; c <= dfa.class_of_[e.hi]; ++c) by_class[c].push_back(e.to);
      }
    }
    next.resize((d + 1) * nc, kDead);
    for (size_t c = 0; c < nc; ++c) {
      if (by_class[c].empty()) continue;
      std::vector<int> target = by_class[c];
      std::sort(target.begin(), target.end());
      target.erase(std::unique(target.begin(), target.end()), target.end());
      nfa.close(target);
      const int32_t t = intern(std::move(target));
      next[d * nc + c] = t;  // `next` may have grown: index, never a saved reference
    }
  }
  const size_t n = sets.size();

  // Live states: those from which an accepting state is reachable.
  std::vector<std::vector<int32_t>> reverse(n);
  for (size_t d = 0; d < n; ++d) {
    for (size_t c = 0; c < nc; ++c) {
      const int32_t t = next[d * nc + c];
      if (t != kDead && (reverse[t].empty() || reverse[t].back() != int32_t(d))) reverse[t].push_back(int32_t(d));
    }
  }
  std::vector<char> live(n, 0);
  std::vector<int32_t> stack;
  for (size_t d = 0; d < n; ++d) {
    if (accepting[d]) {
      live[d] = 1;
      stack.push_back(int32_t(d));
    }
  }
  while (!stack.empty()) {
    const int32_t t = stack.back();
    stack.pop_back();
    for (int32_t s : reverse[t]) {
      if (!live[s]) {
        live[s] = 1;
        stack.push_back(s);
      }
    }
  }
  KS_CHECK(live[0], "structured output: the pattern matches no string");

  // Renumber the live states (the start stays 0), then merge the equivalent ones.
  std::vector<int32_t> renum(n, kDead);
  int32_t count = 0;
  for (size_t d = 0; d < n; ++d) {
    if (live[d]) renum[d] = count++;
  }
  DfaTable table;
  table.num_classes = dfa.num_classes_;
  table.next.assign(size_t(count) * nc, kDead);
  table.accepting.assign(count, 0);
  for (size_t d = 0; d < n; ++d) {
    if (!live[d]) continue;
    table.accepting[renum[d]] = accepting[d];
    for (size_t c = 0; c < nc; ++c) {
      const int32_t t = next[d * nc + c];
      table.next[size_t(renum[d]) * nc + c] = t == kDead ? kDead : renum[t];
    }
  }
  DfaTable minimal = minimize(table);
  if (minimal.num_states() > max_states) {
    throw PatternTooLarge(fmt::format(
        "structured output: the pattern needs {} automaton states, more than {}; simplify it "
        "(fewer alternatives, smaller counts)", minimal.num_states(), max_states));
  }
  dfa.next_ = std::move(minimal.next);
  dfa.accepting_ = std::move(minimal.accepting);
  return dfa;
}
}  // namespace kestrel::structured
