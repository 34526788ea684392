#include "structured/dfa_minimize.h"

#include <cstddef>
#include <map>
#include <utility>

namespace kestrel::structured {
namespace {

// A partition of the states: block b holds elems[first[b], end[b]), its states marked by the
// current splitter first.
struct Partition {
  std::vector<int32_t> elems, pos, block_of;
  std::vector<int32_t> first, end, marked;

  int32_t add_block(int32_t lo, int32_t hi) {
    first.push_back(lo);
    end.push_back(hi);
    marked.push_back(0);
    return static_cast<int32_t>(first.size()) - 1;
  }

  // Moves s to the marked front of its block; `touched` gets the block at its first mark.
  void mark(int32_t s, std::vector<int32_t>& touched) {
    const int32_t b = block_of[s];
    if (marked[b] == 0) touched.push_back(b);
    const int32_t at = first[b] + marked[b]++;
    const int32_t p = pos[s], other = elems[at];
    elems[at] = s;
    elems[p] = other;
    pos[other] = p;
    pos[s] = at;
  }

  // Splits b into its marked and unmarked states; the smaller part becomes a new block,
  // returned (-1: all of b was marked, nothing to split). Relabelling only the smaller part
  // is what keeps the whole refinement at O(n log n) relabellings.
  int32_t split(int32_t b) {
    const int32_t m = marked[b], size = end[b] - first[b];
    marked[b] = 0;
    if (m == size) return -1;
    int32_t nb;
    if (m <= size - m) {
      nb = add_block(first[b], first[b] + m);
      first[b] += m;
    } else {
      nb = add_block(first[b] + m, end[b]);
      end[b] = first[b] + m;
    }
    for (int32_t i = first[nb]; i < end[nb]; ++i) block_of[elems[i]] = nb;
    return nb;
  }
};

}  // namespace

DfaTable minimize(const DfaTable& dfa) {
  const int32_t n = dfa.num_states();
  const int nc = dfa.num_classes;
  auto target = [&](int32_t s, int c) { return dfa.next[size_t(s) * nc + c]; };

  // Start from states alike in accepting and in which classes lead nowhere. That settles
  // every split the dead state would make, so it never has to be a splitter itself (its
  // predecessors are most of the table).
  Partition p;
  p.elems.resize(n);
  p.pos.resize(n);
  p.block_of.resize(n);
  {
    std::map<std::vector<uint8_t>, std::vector<int32_t>> groups;
    std::vector<uint8_t> sig(nc + 1);
    for (int32_t s = 0; s < n; ++s) {
      sig[0] = dfa.accepting[s];
      for (int c = 0; c < nc; ++c) sig[c + 1] = target(s, c) < 0;
      groups[sig].push_back(s);
    }
    int32_t at = 0;
    for (const auto& [_, states] : groups) {
      const int32_t b = p.add_block(at, at + static_cast<int32_t>(states.size()));
      for (int32_t s : states) {
        p.elems[at] = s;
        p.pos[s] = at++;
        p.block_of[s] = b;
      }
    }
  }

  // Predecessors of each state, with the class that leads there.
  std::vector<int32_t> pred_begin(size_t(n) + 1, 0);
  for (int32_t s = 0; s < n; ++s) {
    for (int c = 0; c < nc; ++c) {
      if (target(s, c) >= 0) ++pred_begin[target(s, c) + 1];
    }
  }
  for (int32_t t = 0; t < n; ++t) pred_begin[t + 1] += pred_begin[t];
  std::vector<int32_t> pred_state(pred_begin[n]), pred_class(pred_begin[n]);
  {
    std::vector<int32_t> fill(pred_begin.begin(), pred_begin.end() - 1);
    for (int32_t s = 0; s < n; ++s) {
      for (int c = 0; c < nc; ++c) {
        const int32_t t = target(s, c);
        if (t < 0) continue;
        pred_state[fill[t]] = s;
        pred_class[fill[t]++] = c;
      }
    }
  }

  // Hopcroft: refine by every block once, and by the smaller half of every block split
  // afterwards (the larger half's split follows from the parent's and the smaller's).
  std::vector<int32_t> work;
  for (int32_t b = 0; b < static_cast<int32_t>(p.first.size()); ++b) work.push_back(b);
  std::vector<std::vector<int32_t>> by_class(nc);
  std::vector<int32_t> classes, touched;
  while (!work.empty()) {
    const int32_t splitter = work.back();
    work.pop_back();
    for (int32_t i = p.first[splitter]; i < p.end[splitter]; ++i) {
      const int32_t t = p.elems[i];
      for (int32_t k = pred_begin[t]; k < pred_begin[t + 1]; ++k) {
        std::vector<int32_t>& into = by_class[pred_class[k]];
        if (into.empty()) classes.push_back(pred_class[k]);
        into.push_back(pred_state[k]);
      }
    }
    for (int32_t c : classes) {
      for (int32_t s : by_class[c]) p.mark(s, touched);
      for (int32_t b : touched) {
        const int32_t nb = p.split(b);
        if (nb >= 0) work.push_back(nb);
      }
      touched.clear();
      by_class[c].clear();
    }
    classes.clear();
  }

  // One state per block, numbered breadth-first from the start's block.
  std::vector<int32_t> id(p.first.size(), -1), order{p.block_of[0]};
  id[p.block_of[0]] = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const int32_t rep = p.elems[p.first[order[i]]];
    for (int c = 0; c < nc; ++c) {
      const int32_t t = target(rep, c);
      if (t >= 0 && id[p.block_of[t]] < 0) {
        id[p.block_of[t]] = static_cast<int32_t>(order.size());
        order.push_back(p.block_of[t]);
      }
    }
  }
  DfaTable out;
  out.num_classes = nc;
  out.accepting.resize(order.size());
  out.next.assign(order.size() * nc, -1);
  for (size_t i = 0; i < order.size(); ++i) {
    const int32_t rep = p.elems[p.first[order[i]]];
    out.accepting[i] = dfa.accepting[rep];
    for (int c = 0; c < nc; ++c) {
      const int32_t t = target(rep, c);
      out.next[i * nc + c] = t < 0 ? -1 : id[p.block_of[t]];
    }
  }
  return out;
}

}  // namespace kestrel::structured
