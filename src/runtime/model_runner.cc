#include "runtime/model_runner.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "core/error.h"
#include "core/logging.h"
#include "io/safetensors.h"
#include "model/causal_lm.h"
#include "parallel/communicator.h"
#include "parallel/gloo_communicator.h"
#include "parallel/process_group.h"
#include "runtime/cuda_graph_runner.h"
#include "runtime/constraint_masks.h"
#include "runtime/device_sampling_batch.h"
#include "runtime/engine_limits.h"
#include "runtime/kv_cache_sizing.h"
#include "runtime/kv_scales.h"
#include "runtime/step_inputs.h"
#include "runtime/tp_protocol.h"
#include "sampling/logprobs.h"
#include "sampling/sampler.h"
#if KESTREL_WITH_CUDA
#include "backend/cuda/collectives/nccl_communicator.h"
#endif

namespace kestrel {

namespace {

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Backend bytes the weights will take (the check before loading them): every tensor of
// the files in the compute dtype, a tied lm_head once, plus the F32 RoPE table.
size_t estimate_weight_bytes(const std::string& model_dir, const ModelConfig& c, DType dtype) {
  const WeightStore store = WeightStore::open(model_dir);
  size_t n = 0;
  for (const std::string& name : store.names()) {
    if (c.tie_word_embeddings && name == "lm_head.weight") continue;
    n += static_cast<size_t>(store.get(name).shape.numel()) * dtype_size(dtype);
  }
  return n + static_cast<size_t>(c.max_position_embeddings) * c.head_dim * sizeof(float);
}

// Every sequence computes one token and samples it: the steps the graphs cover.
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Every sequence computes one token and samples it (each sequence has at least one token,
// so T == B means one each).
bool is_pure_decode(const HostBatch& hb) {
  return hb.input_ids.size() == hb.seq_lens.size() && hb.sample_rows.size() == hb.seq_lens.size();
}

}  // namespace

bool tp_always_requested() {
  const char* v = std::getenv("KESTREL_TP_ALWAYS");
  return v != nullptr && std::string(v) == "1";
}

namespace {

std::unique_ptr<Communicator> make_device_communicator(Backend& backend, Communicator& host) {
#if KESTREL_WITH_CUDA
  if (backend.device() == Device::kCuda) return make_nccl_communicator(backend, host);
#endif
  throw_error("{} backend: no tensor communicator for this device", backend.name());
}

}  // namespace

ModelRunner::ModelRunner(const std::string& model_dir, const EngineConfig& config,
                         const TensorParallelRank* tp)
    : kv_fp8_(kv_cache_is_fp8(config.kv_cache_dtype)),
      block_size_(config.block_size),
      max_num_batched_tokens_(config.max_num_batched_tokens),
      max_num_seqs_(config.max_num_seqs) {
  KS_CHECK(block_size_ > 0 && (block_size_ & (block_size_ - 1)) == 0,
           "block_size must be a power of two, got {}", block_size_);
  KS_CHECK(max_num_batched_tokens_ > 0 && max_num_seqs_ > 0,
           "max_num_batched_tokens ({}) and max_num_seqs ({}) must be positive",
           max_num_batched_tokens_, max_num_seqs_);
  backend_ = make_backend(config.device, config.num_threads, tp ? tp->device_index : 0);
  if (tp != nullptr) {
    host_comm_ = make_gloo_communicator(*tp->group);
    // CPU ranks reduce through gloo itself; GPU ranks through NCCL on the backend's stream.
    if (backend_->device() == Device::kCpu) {
      model_comm_ = host_comm_.get();
    } else {
      comm_ = make_device_communicator(*backend_, *host_comm_);
      model_comm_ = comm_.get();
    }
  } else if (tp_always_requested() && backend_->device() == Device::kCuda) {
    host_comm_ = std::make_unique<LocalCommunicator>();
    comm_ = make_device_communicator(*backend_, *host_comm_);
    model_comm_ = comm_.get();
  }
  const int world_size = model_comm_ ? model_comm_->world_size() : 1;
  const ModelConfig model_config = load_model_config(model_dir);
  KS_CHECK(config.max_model_len >= 0, "max_model_len must be >= 0 (0: the model's), got {}",
           config.max_model_len);
  KS_CHECK(config.num_kv_blocks >= 0, "num_kv_blocks must be >= 0 (0: sized from memory), got {}",
           config.num_kv_blocks);
  max_model_len_ =
      config.max_model_len > 0 ? config.max_model_len : model_config.max_position_embeddings;
  KS_CHECK(max_model_len_ > 0, "max_model_len must be positive, got {}", max_model_len_);
  // Sliding-window attention is not implemented. Up to the window every query sees its whole
  // context either way, so sequences stop there (vLLM's --disable-sliding-window).
  if (const int window = model_config.sliding_window; window > 0 && max_model_len_ > window) {
    KS_CHECK(config.max_model_len <= 0,
             "max_model_len {} exceeds the model's sliding_window of {} tokens: sliding-window "
             "attention is not implemented, so sequences are limited to the window",
             config.max_model_len, window);
    KS_LOG_WARN("the model attends through a sliding window of {} tokens, which is not "
                "implemented: max_model_len is {} instead of {}",
                window, window, max_model_len_);
    max_model_len_ = window;
  }
  // Before the buffers are sized by it (a block table of 2^31 tokens overflows an int).
  KS_CHECK(max_model_len_ <= model_config.max_position_embeddings,
           "max_model_len {} exceeds the model's max_position_embeddings {}", max_model_len_,
           model_config.max_position_embeddings);

  // Only a device backend reports memory; the CPU sizes its cache from a byte budget.
  const bool on_device = backend_->memory_info().total > 0;
  if (on_device) {
    const MemoryInfo m = backend_->memory_info();
    // A rank holds about 1/N of every tensor (norms are replicated, but they are tiny).
    check_weights_fit(
        m.total, m.free,
        estimate_weight_bytes(model_dir, model_config, backend_->compute_dtype()) / world_size,
        config.gpu_memory_utilization);
  }
  model_ = CausalLM::load(model_dir, *backend_, model_comm_);
  generation_ = load_generation_config(model_dir);
  eos_token_ids_ = generation_.eos_token_ids.empty() ? model_->config().eos_token_ids
                                                     : generation_.eos_token_ids;

  // Before any graph is captured: the graphs' embedding reads the feedback buffer.
  token_feedback_ = backend_->supports_sampling() && backend_->enable_token_feedback(max_num_seqs_);
  if (const char* env = std::getenv("KESTREL_DEFER_SAMPLING"); env != nullptr && *env != '\0') {
    defer_sampling_ = std::string_view(env) != "0";
  }
  set_up_vocab_sampling();

  // What the profile adds is measured from here (the pool's idle memory handed back first).
  if (on_device) backend_->reset_peak_memory();
  const size_t free_after_weights = on_device ? backend_->memory_info().free : 0;
  inputs_ = std::make_unique<StepInputs>(*backend_, max_num_batched_tokens_, max_num_seqs_,
                                         ceil_div(max_model_len_, block_size_));
  // The CPU grows its workspace on demand; a device reserves the largest step now, so that
  // the profile sees it and graphs get fixed addresses.
  if (on_device) model_->reserve_workspace(max_num_batched_tokens_, max_num_seqs_);

  if (config.num_kv_blocks > 0) {
    num_kv_blocks_ = config.num_kv_blocks;
  } else if (on_device) {
    num_kv_blocks_ = size_kv_cache(config, free_after_weights);
  } else {
    num_kv_blocks_ = kv_blocks_for_host_budget(
        config.kv_cache_memory_bytes, model_->kv_cache_spec(1, block_size_, kv_fp8_).bytes_per_block(),
        max_num_seqs_, max_model_len_, block_size_);
  }
  // Every rank's cache holds the same blocks (one block table for all), so each takes the
  // count the tightest rank can afford.
  if (model_comm_ != nullptr) {
    num_kv_blocks_ = static_cast<int>(model_comm_->all_reduce_min_host(num_kv_blocks_));
  }
  const KvCacheSpec spec = model_->kv_cache_spec(num_kv_blocks_, block_size_, kv_fp8_);
  kv_cache_bytes_ = spec.bytes_per_block() * static_cast<size_t>(num_kv_blocks_);
  kv_cache_ = allocate_kv_cache(spec);
  KS_LOG_INFO("{} backend: weights {:.1f} MiB, KV cache {} blocks x {} tokens ({:.1f} MiB, {})",
              backend_->name(), weight_bytes() / 1048576.0, num_kv_blocks_, block_size_,
              kv_cache_bytes_ / 1048576.0, dtype_name(spec.dtype));
  // Before the warm-up and the graphs: both read the scales, and the store must never run
  // with the placeholder scales of 1.
  if (kv_fp8_) set_up_kv_scales(model_dir);
  if (on_device) warm_up_prompt_sizes();
  if (on_device && !config.enforce_eager) capture_graphs();
}

ModelRunner::~ModelRunner() = default;

void ModelRunner::set_up_vocab_sampling() {
  if (model_comm_ == nullptr || model_comm_->world_size() == 1) return;
  const char* env = std::getenv("KESTREL_TP_VOCAB_SAMPLING");
  const bool can = backend_->supports_vocab_parallel_sampling() && token_feedback_ &&
                   model_->shard_plan().vocab_per_rank % ShardPlan::kVocabAlign == 0 &&
                   !(env != nullptr && std::string(env) == "0");
  // Every rank must take the same collectives: the group uses it only where all can.
  vocab_sampling_ = model_comm_->all_reduce_min_host(can ? 1 : 0) == 1;
  model_->set_vocab_parallel_logits(vocab_sampling_);
  if (vocab_sampling_) {
    KS_LOG_INFO("tensor parallelism: plain rows are sampled from each rank's vocab shard "
                "({} ids a rank)", model_->shard_plan().vocab_per_rank);
  }
}

void ModelRunner::join_sampling(const HostBatch& hb, const Tensor& logits) {
  if (hb.sample_rows.empty()) return;
  if (!hb.row_sampling.empty()) {
    KS_CHECK(vocab_sampling_, "rank 0 asked for vocab-parallel sampling, which this rank lacks");
    const SamplingBatch batch = decode_row_sampling(hb.row_sampling);
    backend_->launch_sample_vocab_parallel(logits, batch, model_->config().vocab_size,
                                           *model_comm_, false);
    return;
  }
  if (vocab_sampling_) model_->gather_logits(logits);
  share_sampled_tokens();
}

const ModelConfig& ModelRunner::model_config() const { return model_->config(); }

size_t ModelRunner::weight_bytes() const { return model_->weight_bytes(); }

int ModelRunner::size_kv_cache(const EngineConfig& config, size_t free_after_weights) {
  profile_run();
  const MemoryInfo m = backend_->memory_info();
  DeviceMemoryProfile p;
  p.total = m.total;
  p.free_after_profile = m.free;
  p.weight_bytes = weight_bytes();
  p.activation_bytes = free_after_weights > m.free ? free_after_weights - m.free : 0;
  const KvCacheSize s =
      size_kv_cache_for_device(p, config.gpu_memory_utilization,
                               model_->kv_cache_spec(1, block_size_, kv_fp8_).bytes_per_block(),
                               block_size_, max_model_len_);
  KS_LOG_INFO("KV cache from a profile of {} tokens: {} (pool peak {})", max_num_batched_tokens_,
              s.summary, format_gib(static_cast<double>(m.peak_bytes)));
  stats_.activation_bytes = p.activation_bytes;
  stats_.kv_max_concurrency = s.max_concurrency;
  return s.num_blocks;
}

// B prompts of T tokens in all (as even as can be, none longer than max_model_len), each
// sampled at its last token, writing no KV (slots -1) and reading block 0.
HostBatch ModelRunner::prompt_batch(int B, int T) const {
  const int vocab = model_->config().vocab_size;
  HostBatch hb;
  hb.query_start_loc.push_back(0);
  for (int b = 0; b < B; ++b) {
    const int len = T / B + (b < T % B ? 1 : 0);
    for (int i = 0; i < len; ++i) {
      hb.input_ids.push_back((b * 131 + i * 7 + 1) % vocab);
      hb.positions.push_back(i);
      hb.slot_mapping.push_back(-1);
    }
    hb.query_start_loc.push_back(static_cast<int>(hb.input_ids.size()));
    hb.seq_lens.push_back(len);
    hb.sample_rows.push_back(static_cast<int>(hb.input_ids.size()) - 1);
    hb.sample_seqs.push_back(b);
    hb.max_query_len = hb.max_seq_len = std::max(hb.max_seq_len, len);
  }
  hb.max_blocks = ceil_div(hb.max_seq_len, block_size_);
  hb.block_tables.assign(static_cast<size_t>(B) * hb.max_blocks, 0);
  return hb;
}

// One forward at the largest step: max_num_batched_tokens tokens over max_num_seqs prompts
// (no longer than max_model_len each), every prompt sampled, against a one-block cache that
// nothing writes (slots -1) and every key reads. Peaks are what matter, not the values.
void ModelRunner::profile_run() {
  const int B = std::min(max_num_seqs_, max_num_batched_tokens_);
  const int T =
      static_cast<int>(std::min<int64_t>(max_num_batched_tokens_, int64_t{B} * max_model_len_));
  const HostBatch hb = prompt_batch(B, T);
  const StepShape shape{T, B, B, hb.max_blocks};
  inputs_->upload(hb, shape);
  std::vector<LayerKvCache> one_block =
      allocate_kv_cache(model_->kv_cache_spec(1, block_size_, kv_fp8_));
  const Tensor logits =
      model_->forward(inputs_->input_ids(shape),
                      inputs_->metadata(shape, hb.max_query_len, hb.max_seq_len, block_size_),
                      one_block, inputs_->sample_rows(shape));
  if (backend_->supports_sampling()) {
    SamplingBatch sb;
    sb.num_rows = B;
    sb.temperature.assign(B, 1.0f);
    sb.top_k.assign(B, -1);
    sb.top_p.assign(B, 0.95f);
    sb.min_p.assign(B, 0.0f);
    sb.repetition_penalty.assign(B, 1.0f);
    sb.presence_penalty.assign(B, 0.0f);
    sb.frequency_penalty.assign(B, 0.0f);
    sb.num_logprobs.assign(B, -1);
    for (int b = 0; b < B; ++b) {
      sb.seed.push_back(static_cast<uint64_t>(b));
      sb.position.push_back(hb.seq_lens[b]);
    }
    sb.prompt_offsets.assign(B + 1, 0);
    sb.output_offsets.assign(B + 1, 0);
    sb.masked_offsets.assign(B + 1, 0);
    backend_->sample(logits, sb);
  }
  backend_->synchronize();
}

// A backend that does not store fp8 yet must not be handed kernels that would treat its
// cache as fp8 (or fp8 as its own): refused before any forward runs on it.
std::vector<LayerKvCache> ModelRunner::allocate_kv_cache(const KvCacheSpec& spec) {
  std::vector<LayerKvCache> kv = backend_->allocate_kv_cache(spec);
  KS_CHECK(!kv.empty() && kv[0].k.dtype() == spec.dtype,
           "the {} backend does not store a KV cache of {} (kv_cache_dtype {})", backend_->name(),
           dtype_name(spec.dtype), kv_fp8_ ? "fp8" : "auto");
  return kv;
}

// The checkpoint's scales when it has them, else a calibration prompt's (kv_scales.h): one
// sequence of deterministic ids (prompt_batch's) written to blocks 0.. of the cache, in
// chunks of the step budget, so that the scales do not depend on it. The blocks are free
// (the engine has not started), and without a prefix hash nobody reuses what they hold.
void ModelRunner::set_up_kv_scales(const std::string& model_dir) {
  const auto t0 = Clock::now();
  std::optional<KvScales> scales =
      checkpoint_kv_scales(WeightStore::open(model_dir), model_->config(), model_->shard_plan());
  std::string source = "the checkpoint";
  if (!scales) {
    const int T = std::min({kKvCalibrationTokens, max_model_len_, num_kv_blocks_ * block_size_});
    const HostBatch prompt = prompt_batch(1, T);
    scales = calibrate_kv_scales(*backend_, kv_cache_, [&] {
      for (int begin = 0; begin < T; begin += max_num_batched_tokens_) {
        const int end = std::min(T, begin + max_num_batched_tokens_);
        HostBatch hb;
        hb.input_ids.assign(prompt.input_ids.begin() + begin, prompt.input_ids.begin() + end);
        for (int p = begin; p < end; ++p) hb.positions.push_back(p);
        hb.slot_mapping = hb.positions;  // blocks 0, 1, .. in order: slot = position
        hb.query_start_loc = {0, end - begin};
        hb.seq_lens = {end};
        hb.max_blocks = ceil_div(end, block_size_);
        for (int b = 0; b < hb.max_blocks; ++b) hb.block_tables.push_back(b);
        hb.max_query_len = end - begin;
        hb.max_seq_len = end;
        hb.sample_rows = {end - begin - 1};
        hb.sample_seqs = {0};
        const StepShape shape{end - begin, 1, 1, hb.max_blocks};
        inputs_->upload(hb, shape);
        forward(shape, hb.max_query_len, hb.max_seq_len);
      }
    });
    source = fmt::format("a calibration prompt of {} tokens", T);
  }
  set_kv_scales(*backend_, kv_cache_, *scales);
  backend_->synchronize();
  KS_LOG_INFO("fp8 KV cache scales from {}: {} ({:.2f} s)", source, describe_kv_scales(*scales),
              seconds_since(t0));
}

int64_t ModelRunner::kv_cache_clamped() {
  if (broadcast_ != nullptr) broadcast_->kv_clamped();
  const int world = host_comm_ ? host_comm_->world_size() : 1;
  const int rank = host_comm_ ? host_comm_->rank() : 0;
  // Ranks beyond the KV heads hold replicas (ShardPlan): the first of each head's ranks counts.
  const int kv_heads = model_->config().num_key_value_heads;
  const int replicas = world > kv_heads ? world / kv_heads : 1;
  const int64_t mine = kv_fp8_ && rank % replicas == 0 ? kv_clamped_total(*backend_, kv_cache_) : 0;
  int64_t total = 0;
  for (int r = 0; r < world; ++r) {
    int64_t v = mine;
    if (world > 1) host_comm_->broadcast_host(&v, sizeof(v), r);
    total += v;
  }
  return total;
}

// The first step of a size nobody ran before paid ~10 ms of host time on the H100 (a
// 512-token prompt: 12.1 ms to its first token cold, 2.6 ms warm; docs/performance.md):
// cuBLASLt loads the kernels its heuristic picks for new shapes on first use (GemmRunner's
// buckets map every prompt length onto these sizes' kernels). One eager prompt of each power-of-two size up to the step
// budget loads them at start-up instead of in a user's first request. Every rank of a
// tensor-parallel group runs the same sizes (the forwards hold collectives).
void ModelRunner::warm_up_prompt_sizes() {
  const auto t0 = Clock::now();
  const int max_t = static_cast<int>(std::min<int64_t>(max_num_batched_tokens_, max_model_len_));
  int sizes = 0;
  for (int T = std::min(16, max_t);; T = std::min(2 * T, max_t)) {
    const HostBatch hb = prompt_batch(1, T);
    inputs_->upload(hb, StepShape{T, 1, 1, hb.max_blocks});
    forward(StepShape{T, 1, 1, hb.max_blocks}, hb.max_query_len, hb.max_seq_len);
    ++sizes;
    if (T == max_t) break;
  }
  backend_->synchronize();
  KS_LOG_INFO("warmed up {} prompt sizes (up to {} tokens) in {:.2f} s", sizes, max_t,
              seconds_since(t0));
}

StepShape ModelRunner::graph_shape(int size) const {
  return StepShape{size, size, size, ceil_div(max_model_len_, block_size_)};
}

Tensor ModelRunner::forward(const StepShape& shape, int max_query_len, int max_seq_len) {
  return model_->forward(inputs_->input_ids(shape),
                         inputs_->metadata(shape, max_query_len, max_seq_len, block_size_),
                         kv_cache_, inputs_->sample_rows(shape));
}

void ModelRunner::capture_graphs() {
  graphs_ = std::make_unique<CudaGraphRunner>(std::min(max_num_seqs_, max_num_batched_tokens_));
  // Graphs are planned for the longest context (max_seq_len = max_model_len): the attention
  // sizes its key split from each sequence's own length, so the plan suits every step.
  try {
    graphs_->capture_all(
        *backend_,
        [&](int size) {
          inputs_->upload_padding(graph_shape(size));
          forward(graph_shape(size), 1, max_model_len_);
        },
        [&](int size) {
          Tensor logits = forward(graph_shape(size), 1, max_model_len_);
          // Every size writes rows 0.. of the same workspace logits.
          if (!graph_logits_.defined() || logits.dim(0) > graph_logits_.dim(0)) graph_logits_ = logits;
        });
  } catch (const Error& e) {
    // A rank that falls back alone would run different collectives from the others.
    if (model_comm_ != nullptr && model_comm_->world_size() > 1) throw;
    // Serving eagerly beats not serving; the log says why it is slow.
    KS_LOG_ERROR("CUDA graph capture failed, every step runs eagerly: {}", e.what());
    graphs_.reset();
    backend_->synchronize();
    return;
  }
  stats_.num_graphs = graphs_->num_graphs();
  stats_.graph_capture_seconds = graphs_->capture_seconds();
  if (graphs_->num_graphs() == 0) {
    graphs_.reset();
    KS_LOG_INFO("{} backend has no graphs: every step runs eagerly", backend_->name());
    return;
  }
  const std::vector<int>& sizes = graphs_->sizes();
  KS_LOG_INFO("CUDA graphs: {} decode batch sizes ({}..{}) captured in {:.2f} s",
              sizes.size(), sizes.front(), sizes.back(), stats_.graph_capture_seconds);
}

std::vector<SampledToken> ModelRunner::execute(const ScheduledBatch& batch) {
  KS_ASSERT(launched_.empty(), "execute() while {} launched steps are not collected",
            launched_.size());
  launch(batch);
  return collect();
}

int ModelRunner::settled_token(int id) const {
  if (!is_pending_token(id)) return id;
  KS_ASSERT(pending_row(id) < static_cast<int>(last_tokens_.size()),
            "pending token of row {}: the last launch sampled {} rows", pending_row(id),
            last_tokens_.size());
  return last_tokens_[pending_row(id)];
}

void ModelRunner::launch(const ScheduledBatch& batch) { start_step(batch, false); }

void ModelRunner::launch_forward(const ScheduledBatch& batch) { start_step(batch, true); }

void ModelRunner::launch_sampling(const ScheduledBatch& batch) {
  KS_ASSERT(deferred_.has_value(), "launch_sampling() without a launch_forward() before it");
  Deferred d = std::move(*deferred_);
  deferred_.reset();
  const int vocab = model_->config().vocab_size;
  SamplingBatch sampling;
  const bool device_sampling = !d.hb.sample_rows.empty() && backend_->supports_sampling();
  if (device_sampling) {
    const auto t0 = Clock::now();
    sampling = make_sampling_batch(batch, d.hb.sample_seqs, eos_token_ids_, vocab, RowView::kLaunched);
    backend_->stage_sample(sampling, vocab);
    stats_.prepare_seconds += seconds_since(t0);
  }
  finish_step(batch, d.hb, d.logits, sampling, false, RowView::kLaunched);
}

void ModelRunner::start_step(const ScheduledBatch& batch, bool defer_sampling) {
  KS_ASSERT(launched_.size() < 2, "a third step launched before the first was collected");
  KS_ASSERT(!deferred_.has_value(), "a step launched before the last one's sampling");
  if (batch.empty()) {
    KS_ASSERT(!defer_sampling, "launch_forward() of an empty batch");
    launched_.emplace_back();
    return;
  }
  auto t0 = Clock::now();
  HostBatch hb = build_host_batch(batch, block_size_);
  if (!token_feedback_) {
    for (int& id : hb.input_ids) id = settled_token(id);
  }
  const int num_rows = static_cast<int>(hb.sample_rows.size());
  // The device sampler's parameters go up before the forward, hidden behind it.
  const bool device_sampling = num_rows > 0 && backend_->supports_sampling() && !defer_sampling;
  const int vocab = model_->config().vocab_size;
  SamplingBatch sampling;
  // Every rank samples its own vocab shard when every row allows it (the workers learn the
  // rows from the step message); otherwise rank 0 samples the gathered logits. A deferred
  // step's rows are not known yet: it gathers.
  bool vocab_parallel = false;
  if (device_sampling) {
    sampling = make_sampling_batch(batch, hb.sample_seqs, eos_token_ids_, vocab);
    // Penalties count the output ids, the one in flight too (samples_pending_tokens()).
    if (!token_feedback_) {
      for (int& id : sampling.output_tokens) id = settled_token(id);
    }
    vocab_parallel = vocab_sampling_ && shardable(sampling, vocab);
    if (vocab_parallel) hb.row_sampling = encode_row_sampling(sampling);
    backend_->stage_sample(sampling, vocab);
  }
  stats_.prepare_seconds += seconds_since(t0);
  Tensor logits = run_forward(hb);
  // Gathered right after the forward, where the other ranks gather (join_sampling).
  if (vocab_sampling_ && !vocab_parallel && num_rows > 0) logits = model_->gather_logits(logits);
  if (defer_sampling) {
    deferred_ = Deferred{std::move(hb), logits};
    return;
  }
  finish_step(batch, hb, logits, sampling, vocab_parallel, RowView::kAtLaunch);
}

void ModelRunner::finish_step(const ScheduledBatch& batch, const HostBatch& hb, const Tensor& logits,
                              const SamplingBatch& sampling, bool vocab_parallel, RowView view) {
  auto t0 = Clock::now();
  const int num_rows = static_cast<int>(hb.sample_rows.size());
  const bool device_sampling = num_rows > 0 && backend_->supports_sampling();
  const int vocab = model_->config().vocab_size;
  Launched l;
  // Only prompt chunks (no rows): the layers ran for their K/V writes; nothing to sample.
  if (vocab_parallel) {
    backend_->launch_sample_vocab_parallel(logits, sampling, vocab, *model_comm_, true);
    ++stats_.vocab_parallel_steps;
    l.on_device = true;
  } else if (device_sampling) {
    backend_->launch_sample(logits, sampling);
    share_sampled_tokens();
    l.on_device = true;
  }
  stats_.launch_seconds += seconds_since(t0);
  if (num_rows > 0 && !l.on_device) {
    t0 = Clock::now();
    l.tokens = sample_on_host(logits, batch, hb, view);
    stats_.sample_seconds += seconds_since(t0);
  }
  if (!token_feedback_) {
    last_tokens_.clear();
    for (const SampledToken& t : l.tokens) last_tokens_.push_back(t.token_id);
  }
  // After the sampler has its logits (the device sampler's kernels are ahead on the stream):
  // the prompt rows' logits reuse that buffer.
  if (!hb.prompt_rows.empty()) fill_prompt_logprobs(batch, hb);
  launched_.push_back(std::move(l));
}

void ModelRunner::run_prompt_logits(
    const HostBatch& hb, const std::function<void(size_t first, const Tensor& logits)>& use) {
  const size_t num_rows = hb.prompt_rows.size();
  const size_t slice = static_cast<size_t>(max_num_seqs_);
  for (size_t first = 0; first < num_rows; first += slice) {
    const size_t count = std::min(slice, num_rows - first);
    Tensor rows = Tensor::host(DType::kI32, {static_cast<int64_t>(count)});
    std::copy_n(hb.prompt_rows.begin() + static_cast<ptrdiff_t>(first), count,
                rows.data_as<int32_t>());
    const Tensor logits = model_->row_logits(backend_->upload(rows, DType::kI32));
    if (use) use(first, logits);
  }
}

void ModelRunner::fill_prompt_logprobs(const ScheduledBatch& batch, const HostBatch& hb) {
  const int vocab = model_->config().vocab_size;
  run_prompt_logits(hb, [&](size_t first, const Tensor& logits) {
    const int64_t count = logits.dim(0);
    auto seq_of = [&](int64_t r) -> Sequence& {
      return *batch.seqs[hb.prompt_seqs[first + static_cast<size_t>(r)]].seq;
    };
    auto pos_of = [&](int64_t r) { return hb.positions[hb.prompt_rows[first + static_cast<size_t>(r)]]; };
    std::vector<TokenLogprobs> entries(static_cast<size_t>(count));
    if (backend_->supports_sampling()) {
      // Where the logits are (the device sampler's logprobs): only the entries come back.
      // One call for the slice at its largest num_top; each row keeps its own.
      std::vector<int> tokens(static_cast<size_t>(count));
      int num_top = 0;
      for (int64_t r = 0; r < count; ++r) {
        tokens[r] = seq_of(r).token_ids[pos_of(r) + 1];
        num_top = std::max(num_top, *seq_of(r).params->prompt_logprobs);
      }
      entries = backend_->token_logprobs(logits, tokens, num_top);
      for (int64_t r = 0; r < count; ++r) {
        const auto own = static_cast<size_t>(*seq_of(r).params->prompt_logprobs);
        if (entries[r].top.size() > own) entries[r].top.resize(own);
      }
    } else {
      const float* host = logits_on_host(logits);
      // A row is ~1 ms of host work at Qwen3's vocabulary (four passes over 152k logits):
      // the rows go to every core, the step waiting for them (not for small work, where
      // starting the threads costs more).
      std::vector<std::string> errors(static_cast<size_t>(count));
#pragma omp parallel for schedule(dynamic, 4) if (count * vocab >= (int64_t{1} << 21))
      for (int64_t r = 0; r < count; ++r) {
        const Sequence& seq = seq_of(r);
        const std::span<const float> row(host + r * vocab, static_cast<size_t>(vocab));
        try {  // nothing may leave an OpenMP loop
          entries[r] = compute_logprobs(row, seq.token_ids[pos_of(r) + 1], *seq.params->prompt_logprobs);
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      }
      for (int64_t r = 0; r < count; ++r) {
        KS_CHECK(errors[r].empty(), "seq {}: prompt logprob of position {}: {}", seq_of(r).seq_id,
                 pos_of(r), errors[r]);
      }
    }
    for (int64_t r = 0; r < count; ++r) {
      Sequence& seq = seq_of(r);
      // build_host_batch asks only for the entries after those the sequence holds, in order.
      KS_ASSERT(pos_of(r) == static_cast<int>(seq.prompt_logprobs.size()),
                "seq {}: prompt logprob of position {} after {} entries", seq.seq_id, pos_of(r),
                seq.prompt_logprobs.size());
      seq.prompt_logprobs.push_back(std::move(entries[r]));
    }
  });
}

Tensor ModelRunner::run_forward(const HostBatch& hb) {
  auto t0 = Clock::now();
  if (broadcast_ != nullptr) broadcast_->forward(hb);
  const int num_tokens = static_cast<int>(hb.input_ids.size());
  const int num_seqs = static_cast<int>(hb.seq_lens.size());
  const int num_rows = static_cast<int>(hb.sample_rows.size());
  // Prompt rows read the final hidden states an eager forward leaves in the workspace, which
  // must hold a slice of them (no growth on a GPU: it is reserved at its largest there).
  const bool prompt_rows = !hb.prompt_rows.empty();
  const int graph_size =
      graphs_ && !prompt_rows && is_pure_decode(hb) ? graphs_->padded_size(num_seqs) : 0;
  if (prompt_rows) {
    model_->reserve_workspace(num_tokens, std::min<int64_t>(
                                              static_cast<int64_t>(hb.prompt_rows.size()),
                                              max_num_seqs_));
  }
  Tensor logits;
  if (graph_size > 0) {
    inputs_->upload(hb, graph_shape(graph_size));
    stats_.prepare_seconds += seconds_since(t0);
    t0 = Clock::now();
    graphs_->replay(graph_size);
    logits = graph_logits_.slice(0, num_seqs);  // row i: sequence i (all decode, all sampled)
    ++stats_.graph_steps;
  } else {
    const StepShape shape{num_tokens, num_seqs, std::max(num_rows, 1), std::max(hb.max_blocks, 1)};
    inputs_->upload(hb, shape);
    stats_.prepare_seconds += seconds_since(t0);
    t0 = Clock::now();
    logits = forward(shape, hb.max_query_len, hb.max_seq_len);
    ++stats_.eager_steps;
  }
  stats_.launch_seconds += seconds_since(t0);
  return logits;
}

void ModelRunner::share_sampled_tokens() {
  if (model_comm_ == nullptr || !token_feedback_) return;
  Tensor feedback = backend_->token_feedback_buffer();
  model_comm_->broadcast(feedback, 0);
}

std::vector<SampledToken> ModelRunner::collect() {
  KS_ASSERT(!launched_.empty(), "collect() with no step launched");
  Launched l = std::move(launched_.front());
  launched_.pop_front();
  if (!l.on_device) return std::move(l.tokens);
  const auto t0 = Clock::now();
  std::vector<SampledToken> tokens = backend_->collect_sample();
  stats_.sample_seconds += seconds_since(t0);
  return tokens;
}

void ModelRunner::discard() {
  launched_.clear();
  deferred_.reset();
  last_tokens_.clear();
  backend_->discard_samples();
  backend_->synchronize();
}

double ModelRunner::time_decode_forward(int batch, int context_len, int iters) {
  KS_CHECK(batch >= 1 && batch <= std::min(max_num_seqs_, max_num_batched_tokens_),
           "time_decode_forward: batch {} outside [1, {}]", batch,
           std::min(max_num_seqs_, max_num_batched_tokens_));
  KS_CHECK(context_len >= 1 && context_len <= max_model_len_,
           "time_decode_forward: context {} outside [1, {}]", context_len, max_model_len_);
  KS_CHECK(iters >= 1, "time_decode_forward: iters must be >= 1, got {}", iters);
  if (broadcast_ != nullptr) broadcast_->time_decode(batch, context_len, iters);
  const int blocks = ceil_div(context_len, block_size_);
  HostBatch hb;
  hb.query_start_loc.push_back(0);
  for (int b = 0; b < batch; ++b) {
    hb.input_ids.push_back((b * 7919 + 13) % model_->config().vocab_size);
    hb.positions.push_back(context_len - 1);
    hb.slot_mapping.push_back(-1);
    hb.query_start_loc.push_back(b + 1);
    hb.seq_lens.push_back(context_len);
    hb.sample_rows.push_back(b);
    hb.sample_seqs.push_back(b);
    // Distinct blocks per sequence (as far as the cache goes), so reads are not all L2 hits.
    for (int j = 0; j < blocks; ++j) {
      hb.block_tables.push_back(static_cast<int>((int64_t{b} * blocks + j) % num_kv_blocks_));
    }
  }
  hb.max_blocks = blocks;
  hb.max_query_len = 1;
  hb.max_seq_len = context_len;
  const int graph_size = graphs_ ? graphs_->padded_size(batch) : 0;
  const StepShape shape = graph_size > 0 ? graph_shape(graph_size) : StepShape{batch, batch, batch, blocks};
  inputs_->upload(hb, shape);
  auto run_once = [&] {
    if (graph_size > 0) {
      graphs_->replay(graph_size);
    } else {
      forward(shape, 1, context_len);
    }
  };
  run_once();  // warm
  backend_->synchronize();
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) run_once();
  backend_->synchronize();
  return seconds_since(t0) / iters;
}

const float* ModelRunner::logits_on_host(const Tensor& logits) {
  if (logits.device() == Device::kCpu) return logits.data_as<float>();
  if (!host_logits_.defined()) {
    host_logits_ = Tensor::host(DType::kF32, {max_num_seqs_, model_->config().vocab_size});
  }
  Tensor rows = host_logits_.slice(0, logits.dim(0));
  backend_->copy_to_host(logits, rows);
  return rows.data_as<float>();
}

std::vector<SampledToken> ModelRunner::sample_on_host(const Tensor& logits,
                                                      const ScheduledBatch& batch,
                                                      const HostBatch& hb, RowView view) {
  const int vocab = model_->config().vocab_size;
  const int num_rows = static_cast<int>(hb.sample_rows.size());
  const float* host = logits_on_host(logits);
  // Structured outputs: the masks of the constrained rows, all made before any row points in.
  std::vector<uint32_t> masks;
  std::vector<int> mask_of(num_rows, -1);
  for (int r = 0; r < num_rows; ++r) {
    const Sequence& seq = *batch.seqs[hb.sample_seqs[r]].seq;
    const RowTokens tokens = row_tokens(seq, view);
    if (!tokens.constrained) continue;
    mask_of[r] = static_cast<int>(masks.size());
    append_allowed_mask(seq, eos_token_ids_, vocab, masks, tokens.own_pending);
  }
  std::vector<SamplingRow> rows;
  rows.reserve(num_rows);
  // Output ids ending in a pending token, with that token in its place (penalties count it).
  std::vector<std::vector<int>> settled_outputs(num_rows);
  for (int seq_index : hb.sample_seqs) {
    const Sequence& seq = *batch.seqs[seq_index].seq;
    const RowTokens tokens = row_tokens(seq, view);
    SamplingRow row;
    row.params = seq.params.get();
    row.seed = seq.seed;
    row.position = tokens.position;
    row.prompt_token_ids = seq.prompt_token_ids();
    row.output_token_ids = tokens.output;
    if (seq.num_pending_tokens > tokens.own_pending) {
      std::vector<int>& ids = settled_outputs[rows.size()];
      ids.assign(row.output_token_ids.begin(), row.output_token_ids.end());
      for (int& id : ids) id = settled_token(id);
      row.output_token_ids = ids;
    }
    row.eos_token_ids = eos_token_ids_;
    if (const int m = mask_of[rows.size()]; m >= 0) row.allowed = {masks.data() + m, size_t(mask_words(vocab))};
    rows.push_back(row);
  }
  return kestrel::sample(host, vocab, rows);
}

}  // namespace kestrel
