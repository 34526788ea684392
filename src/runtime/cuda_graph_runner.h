// CudaGraphRunner: one captured graph per decode batch size (vLLM's cudagraph_capture_sizes),
// replayed for pure-decode steps padded up to the next captured size.
//
// Sizes: 1, 2, 4, 8, then every 8 up to 256, then every 16, up to the largest batch a
// decode step can have (min(max_num_seqs, max_num_batched_tokens)), which is always
// captured too. A graph replays the ops its record function issued at capture, on the
// addresses they used then: the caller keeps its inputs (StepInputs) and activations
// (CausalLM's workspace) at fixed addresses and refills them before each replay. No graph
// allocates memory (the workspace and the attention scratch exist before capture), so the
// graphs need no memory pool of their own.
//
// Not thread-safe; one per ModelRunner.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "backend/backend.h"

namespace kestrel {

class CudaGraphRunner {
 public:
  // The capture sizes for decode batches of up to max_batch sequences, ascending.
  static std::vector<int> capture_sizes(int max_batch);

  explicit CudaGraphRunner(int max_batch) : sizes_(capture_sizes(max_batch)) {}

  // For each size, largest first: warmup(size) runs the step eagerly (GEMM plans, scratch
  // buffers: everything that allocates happens here, not inside the capture), then the ops of
  // record(size) are captured. Throws what the backend throws; leaves no graph when the
  // backend has none (capture_graph returns nullptr), so replay() then always says false.
  void capture_all(Backend& backend, const std::function<void(int)>& warmup,
                   const std::function<void(int)>& record);

  // Smallest captured size >= num_seqs, 0 when none (too large, or no graphs).
  int padded_size(int num_seqs) const;
  // Replays the graph of `size` (a value padded_size returned).
  void replay(int size);

  const std::vector<int>& sizes() const { return sizes_; }
  int num_graphs() const { return static_cast<int>(graphs_.size()); }
  double capture_seconds() const { return capture_seconds_; }

 private:
  std::vector<int> sizes_;
  std::map<int, std::unique_ptr<Graph>> graphs_;
  double capture_seconds_ = 0.0;
};

}  // namespace kestrel
