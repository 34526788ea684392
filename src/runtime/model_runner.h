// ModelRunner: owns the backend, the model weights and the KV cache, and runs one
// scheduled step (ModelExecutor) end to end: batch preparation, forward, sampling.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/model_executor.h"
#include "io/model_config.h"
#include "kestrel/engine_config.h"

namespace kestrel {

class CausalLM;

class ModelRunner : public ModelExecutor {
 public:
  // Loads the model onto the configured device and allocates the KV cache.
  // Throws kestrel::Error for bad model files, an unavailable device or too little memory.
  ModelRunner(const std::string& model_dir, const EngineConfig& config);
  ~ModelRunner() override;

  std::vector<SampledToken> execute(const ScheduledBatch& batch) override;

  const ModelConfig& model_config() const;
  Backend& backend() { return *backend_; }
  int num_kv_blocks() const { return num_kv_blocks_; }
  int block_size() const { return block_size_; }
  size_t kv_cache_bytes() const { return kv_cache_bytes_; }
  size_t weight_bytes() const;
  // EOS ids: generation_config.json's, else config.json's.
  const std::vector<int>& eos_token_ids() const { return eos_token_ids_; }

 private:
  int choose_num_kv_blocks(const EngineConfig& config) const;

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<CausalLM> model_;
  std::vector<LayerKvCache> kv_cache_;
  int block_size_ = 0;
  int num_kv_blocks_ = 0;
  size_t kv_cache_bytes_ = 0;
  std::vector<int> eos_token_ids_;
};

}  // namespace kestrel
