#include "runtime/cuda_graph_runner.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace kestrel {

std::vector<int> CudaGraphRunner::capture_sizes(int max_batch) {
  std::vector<int> sizes;
  for (int s : {1, 2, 4}) {
    if (s <= max_batch) sizes.push_back(s);
  }
  for (int s = 8; s <= std::min(max_batch, 256); s += 8) sizes.push_back(s);
  for (int s = 272; s <= max_batch; s += 16) sizes.push_back(s);
  if (max_batch >= 1 && (sizes.empty() || sizes.back() != max_batch)) sizes.push_back(max_batch);
  return sizes;
}

void CudaGraphRunner::capture_all(Backend& backend, const std::function<void(int)>& warmup,
                                  const std::function<void(int)>& record) {
  const auto t0 = std::chrono::steady_clock::now();
  graphs_.clear();
  // Largest first, as vLLM. A warm-up that grows the backend's attention scratch retires the
  // old buffer rather than freeing it, so graphs captured before stay valid.
  for (auto it = sizes_.rbegin(); it != sizes_.rend(); ++it) {
    const int size = *it;
    warmup(size);
    std::unique_ptr<Graph> g = backend.capture_graph([&] { record(size); });
    if (g == nullptr) {
      graphs_.clear();  // the backend has no graphs: run everything eagerly
      break;
    }
    graphs_[size] = std::move(g);
  }
  backend.synchronize();
  capture_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int CudaGraphRunner::padded_size(int num_seqs) const {
  if (graphs_.empty()) return 0;
  auto it = graphs_.lower_bound(num_seqs);
  return it == graphs_.end() ? 0 : it->first;
}

void CudaGraphRunner::replay(int size) {
  auto it = graphs_.find(size);
  KS_ASSERT(it != graphs_.end(), "no CUDA graph captured for batch size {}", size);
  it->second->replay();
}

}  // namespace kestrel
