// A deterministic automaton over bytes, built from a RegexNode (Thompson NFA, then the
// subset construction). States that cannot reach an accepting state are removed, so every
// live state has a way to finish: a transition either leads somewhere that can still
// accept, or is kDead. Bytes that no transition tells apart share one column of the table
// (a JSON schema's DFA has a few dozen such classes, not 256).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "structured/regex_ast.h"

namespace kestrel::structured {

// A pattern whose automaton would pass a size limit (a smaller pattern may fit: a grammar is
// tried again with less nesting).
class PatternTooLarge : public Error {
 public:
  using Error::Error;
};

class ByteDfa {
 public:
  static constexpr int32_t kDead = -1;
  // Throws kestrel::Error when the pattern matches nothing, and PatternTooLarge when the DFA
  // would need more than max_states states (the message gives the limit).
  static ByteDfa build(const RegexNode& pattern, int max_states = 50000);

  int32_t start() const { return 0; }
  int32_t next(int32_t state, uint8_t byte) const {
    return next_[size_t(state) * num_classes_ + class_of_[byte]];
  }
  bool accepting(int32_t state) const { return accepting_[state] != 0; }
  int num_states() const { return static_cast<int>(accepting_.size()); }
  // Groups of bytes that every transition treats alike (the table has one column each).
  int num_byte_classes() const { return num_classes_; }

 private:
  std::array<uint8_t, 256> class_of_{};
  int num_classes_ = 1;
  std::vector<int32_t> next_;  // [num_states * num_classes_]
  std::vector<uint8_t> accepting_;
};

}  // namespace kestrel::structured
