// AsyncSession: the engine on a thread of its own (server::EngineLoop, the server's loop)
// for the asyncio layer (kestrel.AsyncLLM). Requests come from any thread; the updates of
// every request go to one queue, tagged with the caller's key, which one Python thread
// drains (wait(), GIL released) and hands to the event loop. So any number of coroutines
// share the engine's batches, as the server's clients do.
//
// The session claims the engine for its life: LLM.generate()/stream() on the same engine
// are refused meanwhile (EngineHandle::claim).
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "engine_handle.h"
#include "kestrel/sampling_params.h"
#include "server/engine_loop.h"
#include "server/metrics.h"

namespace kestrel::python {

class AsyncSession {
 public:
  // Claims the engine (throws kestrel::Error when a generate() or stream holds it) and
  // starts the engine thread.
  explicit AsyncSession(std::shared_ptr<EngineHandle> engine);
  ~AsyncSession();  // shutdown()
  AsyncSession(const AsyncSession&) = delete;
  AsyncSession& operator=(const AsyncSession&) = delete;

  // Queues a request under `key` (unique among the running ones; a non-negative int).
  // Params and prompt are checked here (kestrel::Error, nothing queued); what only the
  // engine can refuse comes back as an update with `error` set.
  void add(int key, std::vector<int> prompt, SamplingParams params);
  // Aborts the request: no more updates for it. Unknown or finished keys are ignored.
  void abort(int key);
  // Updates of any request, waiting up to timeout_ms for the first.
  std::vector<server::RequestUpdate> wait(int timeout_ms);
  // Aborts every request and stops the engine thread; the engine is free again.
  // Idempotent; add() afterwards throws.
  void shutdown();

 private:
  std::shared_ptr<EngineHandle> engine_;
  server::ServerMetrics metrics_;
  std::shared_ptr<server::UpdateQueue> updates_ = std::make_shared<server::UpdateQueue>();
  std::mutex mu_;
  std::unique_ptr<server::EngineLoop> loop_;  // null once shut down
};

}  // namespace kestrel::python
