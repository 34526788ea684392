// EngineHandle: one kestrel::LLM as the Python module holds it.
//
// The Python layer runs generation step by step (a session, batch_session.h or
// stream_session.h, drives LLM::step() and its requests' streams) so that Python gets
// control back between steps:
// Ctrl-C lands there, streams yield there, and the GIL is free while a step runs. One
// session at a time owns the engine (claim()): the outputs of a step belong to whoever
// added the requests, and two sessions stepping one engine would steal each other's.
//
// Thread safety: every use of llm() after construction happens under mutex(), which the
// sessions take with the GIL released; claim()/release() are atomic.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "kestrel/llm.h"
#include "structured/grammar_compiler.h"

namespace kestrel::python {

class EngineHandle {
 public:
  // Throws kestrel::Error as the LLM constructor does.
  EngineHandle(const std::string& model_dir, const EngineConfig& config)
      : llm_(model_dir, config) {}

  LLM& llm() { return llm_; }
  std::mutex& mutex() { return mutex_; }

  // Takes the engine for one session. Throws kestrel::Error when another session holds it
  // (an unfinished stream, or generate() on another thread).
  void claim();
  void release() { busy_.store(false); }

  // Compiles structured-output requests over this model's vocabulary (thread-safe); null
  // when the model has no tokenizer. Made at the first call, as the server's is at start:
  // a script that never asks for structured outputs does not pay for the vocabulary trie.
  structured::GrammarCompiler* grammars();

 private:
  LLM llm_;
  std::mutex mutex_;
  std::atomic<bool> busy_{false};
  std::once_flag grammars_once_;
  std::unique_ptr<structured::GrammarCompiler> grammars_;
};

}  // namespace kestrel::python
