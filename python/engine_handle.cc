#include "engine_handle.h"

#include <stdexcept>

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

}  // namespace kestrel::python
