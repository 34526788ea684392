#include "runtime/model_runner.h"

#include <algorithm>

#include "core/error.h"
#include "core/logging.h"
#include "model/causal_lm.h"
#include "runtime/batch_builder.h"
#include "sampling/sampler.h"

namespace kestrel {

namespace {

Tensor upload_i32(Backend& backend, const std::vector<int>& values, Shape shape) {
  Tensor host(const_cast<int*>(values.data()), DType::kI32, shape);
  return backend.upload(host, DType::kI32);
}

}  // namespace

ModelRunner::ModelRunner(const std::string& model_dir, const EngineConfig& config)
    : block_size_(config.block_size) {
  KS_CHECK(block_size_ > 0 && (block_size_ & (block_size_ - 1)) == 0,
           "block_size must be a power of two, got {}", block_size_);
  backend_ = make_backend(config.device, config.num_threads);
  model_ = CausalLM::load(model_dir, *backend_);
  const GenerationDefaults gen = load_generation_config(model_dir);
  eos_token_ids_ = gen.eos_token_ids.empty() ? model_->config().eos_token_ids : gen.eos_token_ids;

  num_kv_blocks_ = choose_num_kv_blocks(config);
  KvCacheSpec spec = model_->kv_cache_spec(num_kv_blocks_, block_size_);
  kv_cache_bytes_ = spec.bytes_per_block() * static_cast<size_t>(num_kv_blocks_);
  kv_cache_ = backend_->allocate_kv_cache(spec);
  KS_LOG_INFO("{} backend: weights {:.1f} MiB, KV cache {} blocks x {} tokens ({:.1f} MiB)",
              backend_->name(), weight_bytes() / 1048576.0, num_kv_blocks_, block_size_,
              kv_cache_bytes_ / 1048576.0);
}

ModelRunner::~ModelRunner() = default;

const ModelConfig& ModelRunner::model_config() const { return model_->config(); }

size_t ModelRunner::weight_bytes() const { return model_->weight_bytes(); }

int ModelRunner::choose_num_kv_blocks(const EngineConfig& config) const {
  if (config.num_kv_blocks > 0) return config.num_kv_blocks;
  const size_t per_block = model_->kv_cache_spec(1, block_size_).bytes_per_block();
  // The CPU backend has no device memory to profile: the cache gets a byte budget, but never
  // more blocks than max_num_seqs full-length sequences could use.
  const int max_len = config.max_model_len > 0 ? config.max_model_len
                                               : model_->config().max_position_embeddings;
  const int64_t useful = int64_t{config.max_num_seqs} * ((max_len + block_size_ - 1) / block_size_);
  const int64_t affordable = config.kv_cache_memory_bytes / static_cast<int64_t>(per_block);
  const int64_t blocks = std::min(useful, affordable);
  KS_CHECK(blocks >= 1, "kv_cache_memory_bytes {} is less than one KV block ({} bytes)",
           config.kv_cache_memory_bytes, per_block);
  return static_cast<int>(std::min<int64_t>(blocks, 1 << 30));
}

std::vector<SampledToken> ModelRunner::execute(const ScheduledBatch& batch) {
  if (batch.empty()) return {};
  const HostBatch hb = build_host_batch(batch, block_size_);
  const int num_tokens = static_cast<int>(hb.input_ids.size());
  const int num_seqs = static_cast<int>(batch.seqs.size());

  AttentionMetadata meta;
  meta.num_tokens = num_tokens;
  meta.num_seqs = num_seqs;
  meta.max_query_len = hb.max_query_len;
  meta.max_seq_len = hb.max_seq_len;
  meta.block_size = block_size_;
  meta.positions = upload_i32(*backend_, hb.positions, {num_tokens});
  meta.slot_mapping = upload_i32(*backend_, hb.slot_mapping, {num_tokens});
  meta.query_start_loc = upload_i32(*backend_, hb.query_start_loc, {num_seqs + 1});
  meta.seq_lens = upload_i32(*backend_, hb.seq_lens, {num_seqs});
  meta.block_tables = upload_i32(*backend_, hb.block_tables, {num_seqs, std::max(hb.max_blocks, 1)});
  const Tensor input_ids = upload_i32(*backend_, hb.input_ids, {num_tokens});

  if (hb.sample_rows.empty()) {
    // Nothing to sample (only prompt chunks): run the layers for their K/V writes.
    const std::vector<int> last_row{num_tokens - 1};
    model_->forward(input_ids, meta, kv_cache_, upload_i32(*backend_, last_row, {1}));
    return {};
  }
  const int num_rows = static_cast<int>(hb.sample_rows.size());
  const Tensor logits =
      model_->forward(input_ids, meta, kv_cache_, upload_i32(*backend_, hb.sample_rows, {num_rows}));
  const Tensor host_logits = backend_->to_host(logits);

  std::vector<SamplingRow> rows;
  rows.reserve(num_rows);
  for (int seq_index : hb.sample_seqs) {
    const Sequence& seq = *batch.seqs[seq_index].seq;
    SamplingRow row;
    row.params = seq.params.get();
    row.seed = seq.seed;
    row.position = seq.num_tokens();
    row.prompt_token_ids = seq.prompt_token_ids();
    row.output_token_ids = seq.output_token_ids();
    row.eos_token_ids = eos_token_ids_;
    rows.push_back(row);
  }
  return sample(host_logits.data_as<float>(), static_cast<int>(host_logits.dim(1)), rows);
}

}  // namespace kestrel
