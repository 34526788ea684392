#include "engine_handle.h"

#include <stdexcept>

#include "structured/vocab_trie.h"

namespace kestrel::python {

void EngineHandle::claim() {
  // Not a kestrel::Error: the Python layer maps those to ValueError (a bad request), and
  // this is a misuse of the object, a RuntimeError.
  if (busy_.exchange(true)) {
    throw std::runtime_error(
        "this LLM is already generating (an unfinished stream, or a call on another thread); "
        "finish or close() the stream first");
  }
}

structured::GrammarCompiler* EngineHandle::grammars() {
  std::call_once(grammars_once_, [this] {
    if (const Tokenizer* t = llm_.tokenizer()) {
      grammars_ = std::make_unique<structured::GrammarCompiler>(
          std::make_shared<const structured::VocabTrie>(
              structured::VocabTrie::from_tokenizer(*t, llm_.vocab_size())));
    }
  });
  return grammars_.get();
}

}  // namespace kestrel::python
