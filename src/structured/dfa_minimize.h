// The minimal DFA of a ByteDfa's table (Hopcroft's partition refinement). The subset
// construction keeps states apart that differ only in how they got there (the argument
// automata of several tools after their names, a list's first item and its later ones),
// and every state costs the table a row and, once reached, the grammar a mask.
#pragma once

#include <cstdint>
#include <vector>

namespace kestrel::structured {

struct DfaTable {
  int num_classes = 0;
  std::vector<int32_t> next;       // [states * num_classes]; -1: no transition (dead)
  std::vector<uint8_t> accepting;  // [states]
  int num_states() const { return static_cast<int>(accepting.size()); }
};

// The DFA with the fewest states that accepts what `dfa` accepts, its start state 0 and
// the others numbered in breadth-first order from it. REQUIRES: every state of `dfa` is
// reachable from state 0 and can reach an accepting state (ByteDfa::build's dead-state
// removal gives both), so that the missing transitions are the only dead state.
DfaTable minimize(const DfaTable& dfa);

}  // namespace kestrel::structured
