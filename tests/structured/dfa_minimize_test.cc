// minimize() against a hand-made case and against Moore's refinement (a different algorithm,
// written here) on random automata, with the languages compared string by string.
#include "structured/dfa_minimize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <vector>

namespace kestrel::structured {
namespace {

bool accepts(const DfaTable& d, const std::vector<int>& word) {
  int32_t s = 0;
  for (int c : word) {
    s = d.next[size_t(s) * d.num_classes + c];
    if (s < 0) return false;
  }
  return d.accepting[s] != 0;
}

// The number of states of the minimal DFA by Moore's refinement: split by the classes of
// the successors until nothing splits (the dead state, -1, is a class of its own).
int moore_count(const DfaTable& d) {
  const int n = d.num_states();
  std::vector<int> cls(n);
  for (int s = 0; s < n; ++s) cls[s] = d.accepting[s];
  int count = -1;
  for (;;) {
    std::map<std::vector<int>, int> ids;
    std::vector<int> next(n);
    for (int s = 0; s < n; ++s) {
      std::vector<int> sig{cls[s]};
      for (int c = 0; c < d.num_classes; ++c) {
        const int32_t t = d.next[size_t(s) * d.num_classes + c];
        sig.push_back(t < 0 ? -1 : cls[t]);
      }
      next[s] = ids.emplace(std::move(sig), static_cast<int>(ids.size())).first->second;
    }
    cls = std::move(next);
    if (static_cast<int>(ids.size()) == count) return count;
    count = static_cast<int>(ids.size());
  }
}

// A random automaton cut down to the states reachable from 0 that can reach an accepting
// state (what ByteDfa::build hands over); none if state 0 cannot.
std::optional<DfaTable> random_dfa(std::mt19937& rng, int n, int nc) {
  std::uniform_int_distribution<int> to(-n / 2, n - 1);  // about a third dead
  std::bernoulli_distribution acc(0.25);
  std::vector<int32_t> next(size_t(n) * nc);
  std::vector<uint8_t> accepting(n);
  for (auto& t : next) t = std::max(-1, to(rng));
  for (auto& a : accepting) a = acc(rng);
  std::vector<char> reach(n, 0), live(n, 0);
  std::function<void(int)> visit = [&](int s) {
    if (reach[s]) return;
    reach[s] = 1;
    for (int c = 0; c < nc; ++c) {
      if (next[size_t(s) * nc + c] >= 0) visit(next[size_t(s) * nc + c]);
    }
  };
  visit(0);
  for (int s = 0; s < n; ++s) live[s] = accepting[s];
  for (bool grew = true; grew;) {
    grew = false;
    for (int s = 0; s < n; ++s) {
      for (int c = 0; c < nc && !live[s]; ++c) {
        const int32_t t = next[size_t(s) * nc + c];
        if (t >= 0 && live[t]) live[s] = grew = true;
      }
    }
  }
  if (!live[0]) return std::nullopt;
  std::vector<int32_t> renum(n, -1);
  DfaTable d;
  d.num_classes = nc;
  for (int s = 0; s < n; ++s) {
    if (reach[s] && live[s]) {
      renum[s] = d.num_states();
      d.accepting.push_back(accepting[s]);
    }
  }
  d.next.assign(size_t(d.num_states()) * nc, -1);
  for (int s = 0; s < n; ++s) {
    if (renum[s] < 0) continue;
    for (int c = 0; c < nc; ++c) {
      const int32_t t = next[size_t(s) * nc + c];
      d.next[size_t(renum[s]) * nc + c] = t >= 0 ? renum[t] : -1;
    }
  }
  return d;
}

// (a|b)c over classes a=0, b=1, c=2 with the two branches kept apart: 5 states, 3 minimal.
TEST(DfaMinimize, MergesBranchesWithTheSameFuture) {
  DfaTable d;
  d.num_classes = 3;
  d.next = {1, 2, -1,  -1, -1, 3,  -1, -1, 4,  -1, -1, -1,  -1, -1, -1};
  d.accepting = {0, 0, 0, 1, 1};
  const DfaTable m = minimize(d);
  EXPECT_EQ(m.num_states(), 3);
  for (const std::vector<int>& w : std::vector<std::vector<int>>{{0, 2}, {1, 2}, {0}, {2}, {0, 2, 2}, {}}) {
    EXPECT_EQ(accepts(m, w), accepts(d, w));
  }
  EXPECT_EQ(m.next[0], m.next[1]);  // a and b lead to the one merged state
}

TEST(DfaMinimize, MatchesMooreAndKeepsTheLanguage) {
  std::mt19937 rng(20);
  int checked = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int n = 2 + trial % 40, nc = 1 + trial % 4;
    const std::optional<DfaTable> d = random_dfa(rng, n, nc);
    if (!d) continue;
    SCOPED_TRACE(testing::Message() << "trial " << trial << ", " << d->num_states() << " states");
    const DfaTable m = minimize(*d);
    ASSERT_EQ(m.num_states(), moore_count(*d));
    EXPECT_EQ(minimize(m).num_states(), m.num_states());
    // Every word of up to 6 classes.
    std::vector<int> word;
    std::function<void()> all = [&] {
      ASSERT_EQ(accepts(m, word), accepts(*d, word));
      if (word.size() == 6) return;
      for (int c = 0; c < nc; ++c) {
        word.push_back(c);
        all();
        word.pop_back();
      }
    };
    all();
    ++checked;
  }
  EXPECT_GT(checked, 200);
}

}  // namespace
}  // namespace kestrel::structured
