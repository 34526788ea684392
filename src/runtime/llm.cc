#include "kestrel/llm.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <unordered_map>

#include "chat/chat_template.h"
#include "core/error.h"
#include "core/logging.h"
#include "engine/llm_engine.h"
#include "io/model_config.h"
#include "parallel/communicator.h"
#include "parallel/local_workers.h"
#include "runtime/engine_limits.h"
#include "runtime/model_runner.h"
#include "runtime/progress_bar.h"
#include "runtime/request_state.h"
#include "runtime/tp_executor.h"
#include "runtime/tp_worker.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {

struct LLM::Impl {
  EngineConfig config;
  // One of the two: rank 0 of a tensor-parallel group, or a runner of its own.
  std::unique_ptr<TensorParallelExecutor> tensor_parallel;
  std::unique_ptr<ModelRunner> own_runner;
  ModelRunner* runner = nullptr;
  ModelExecutor* executor = nullptr;
  std::unique_ptr<LLMEngine> engine;
  std::unique_ptr<Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;  // parsed at load
  std::string chat_template_error;            // why it could not be parsed
  std::string chat_template_source;           // EngineConfig::chat_template's, or the model's
  uint64_t next_request = 0;
  // Requests whose streams still expect outputs.
  std::unordered_map<std::string, std::shared_ptr<RequestState>> live;
  // fp8 cache: its clamp count as last read, steps since then, whether a warning went out.
  int64_t kv_clamped = 0;
  int64_t steps_since_clamp_check = 0;
  bool clamp_warned = false;

  // Reads the fp8 cache's clamp count and warns the first time it is not zero. The read
  // waits for the device, so step() does it only every kClampCheckSteps steps and when the
  // engine has gone idle (nothing in flight to wait for), never per step: servers and
  // benchmarks call stats() after every step.
  static constexpr int64_t kClampCheckSteps = 1024;
  int64_t check_kv_clamps() {
    steps_since_clamp_check = 0;
    kv_clamped = runner->kv_cache_clamped();
    if (kv_clamped > 0 && !clamp_warned) {
      clamp_warned = true;
      KS_LOG_WARN(
          "fp8 KV cache: {} values exceeded 448 x their scale and were stored as +-448 x scale "
          "(LLMStats::kv_cache_clamped counts them; docs/kv_cache.md)",
          kv_clamped);
    }
    return kv_clamped;
  }
};

LLM::LLM(const std::string& model_dir, const EngineConfig& config) : impl_(new Impl) {
  impl_->config = config;
  KS_CHECK(config.tensor_parallel_size >= 1, "tensor_parallel_size must be >= 1, got {}",
           config.tensor_parallel_size);
  std::optional<RankInfo> role;
  if (!config.tp_rendezvous.empty()) {
    role = launched_rank_from_env(config.tp_rendezvous);
    KS_CHECK(role.has_value(),
             "--tp-rendezvous is for ranks a launcher starts (mpirun, srun: their rank variables, "
             "or KESTREL_TP_RANK/KESTREL_TP_WORLD_SIZE), and none is set");
    KS_CHECK(role->world_size == config.tensor_parallel_size,
             "the launcher started {} processes for tensor_parallel_size {}", role->world_size,
             config.tensor_parallel_size);
    // Every process of a launcher runs the same program; ranks >= 1 serve rank 0's steps
    // and end here.
    if (role->rank != 0) std::exit(run_tensor_parallel_worker(*role));
  }
  if (config.tensor_parallel_size > 1 || tp_always_requested()) {
    impl_->tensor_parallel = std::make_unique<TensorParallelExecutor>(model_dir, config, role);
    impl_->runner = &impl_->tensor_parallel->runner();
    impl_->executor = impl_->tensor_parallel.get();
  } else {
    impl_->own_runner = std::make_unique<ModelRunner>(model_dir, config);
    impl_->runner = impl_->own_runner.get();
    impl_->executor = impl_->runner;
  }
  std::vector<int> eos = impl_->runner->eos_token_ids();
  if (std::filesystem::exists(std::filesystem::path(model_dir) / "tokenizer.json")) {
    impl_->tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_dir(model_dir));
    if (eos.empty() && impl_->tokenizer->eos_token_id()) eos.push_back(*impl_->tokenizer->eos_token_id());
    // A broken template of the model's fails chat requests, not the whole model.
    impl_->chat_template_source = impl_->tokenizer->chat_template();
    if (!impl_->chat_template_source.empty() && config.chat_template.empty()) {
      try {
        impl_->chat_template = ChatTemplate::parse(impl_->chat_template_source);
      } catch (const Error& e) {
        impl_->chat_template_error = e.what();
      }
    }
  }
  // One given by the caller must work: it fails here, naming itself.
  if (!config.chat_template.empty()) {
    impl_->chat_template_source = kestrel::chat_template_source(config.chat_template);
    try {
      impl_->chat_template = ChatTemplate::parse(impl_->chat_template_source);
    } catch (const Error& e) {
      throw_error("the chat template given ({}) does not parse: {}",
                  config.chat_template.size() > 80 ? "inline" : config.chat_template, e.what());
    }
  }
  // An id the model cannot produce never ends a sequence: say so once, at load, rather than
  // leave every request to run to max_tokens unexplained.
  const int vocab = impl_->runner->model_config().vocab_size;
  for (int id : eos) {
    if (id < 0 || id >= vocab) {
      KS_LOG_WARN("EOS token id {} (config.json or generation_config.json) is outside the "
                  "vocabulary [0, {}): it can never be sampled, so it will not end a sequence",
                  id, vocab);
    }
  }
  impl_->engine = std::make_unique<LLMEngine>(resolve_engine_limits(config, *impl_->runner, eos),
                                              *impl_->executor);
}

LLM::~LLM() {
  for (auto& [id, state] : impl_->live) state->llm = nullptr;
}

RequestStream LLM::add_request(std::vector<int> prompt, SamplingParams params,
                               std::string request_id) {
  Impl& im = *impl_;
  params.validate(vocab_size());  // before the processor sizes itself by n
  if (request_id.empty()) request_id = "req-" + std::to_string(im.next_request++);
  KS_CHECK(!im.live.contains(request_id), "request id '{}' is already in use", request_id);
  auto state = std::make_shared<RequestState>(
      request_id, this, OutputProcessor(im.tokenizer.get(), params, prompt));
  params.output_kind = state->processor.engine_output_kind();
  im.engine->add_request(std::move(request_id), std::move(prompt), std::move(params));
  im.live.emplace(state->id, state);
  return RequestStream(std::move(state));
}

bool LLM::step() {
  Impl& im = *impl_;
  if (!im.engine->has_unfinished()) return false;
  for (RequestOutput& out : im.engine->step()) {
    auto it = im.live.find(out.request_id);
    if (it == im.live.end()) continue;  // aborted meanwhile
    RequestState& state = *it->second;
    OutputProcessor::Result r = state.processor.process(std::move(out));
    for (int sample : r.stopped) im.engine->abort_sample(state.id, sample);
    if (r.output) state.outputs.push_back(std::move(*r.output));
    if (state.processor.finished()) {
      state.finished = true;
      im.live.erase(it);
    }
  }
  if (im.runner->kv_cache_fp8() && (++im.steps_since_clamp_check >= Impl::kClampCheckSteps ||
                                    !im.engine->has_unfinished())) {
    im.check_kv_clamps();
  }
  return true;
}

bool LLM::has_unfinished() const { return !impl_->live.empty(); }

void LLM::abort(RequestState& state) {
  impl_->engine->abort_request(state.id);
  impl_->live.erase(state.id);
  state.finished = true;
}

std::vector<RequestOutput> LLM::generate(const std::vector<std::vector<int>>& prompts,
                                         const std::vector<SamplingParams>& params,
                                         bool progress) {
  KS_CHECK(params.size() == 1 || params.size() == prompts.size(),
           "generate: {} sampling params for {} prompts (give one, or one per prompt)",
           params.size(), prompts.size());
  // Destroyed on the way out, the streams of requests still queued abort them.
  std::vector<RequestStream> streams;
  streams.reserve(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplingParams p = params.size() == 1 ? params[0] : params[i];
    p.output_kind = OutputKind::kFinalOnly;
    try {
      streams.push_back(add_request(prompts[i], std::move(p)));
    } catch (const Error& e) {
      throw_error("prompt {}: {}", i, e.what());
    }
  }
  std::vector<RequestOutput> results(prompts.size());
  std::vector<size_t> pending(prompts.size());
  for (size_t i = 0; i < pending.size(); ++i) pending[i] = i;
  ProgressBar bar(prompts.size(), progress);
  while (!pending.empty()) {
    const EngineStats before = impl_->engine->stats();
    const auto t0 = std::chrono::steady_clock::now();
    step();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const EngineStats after = impl_->engine->stats();
    std::erase_if(pending, [&](size_t i) {
      for (RequestOutput& out : streams[i].take()) results[i] = std::move(out);  // the final one
      return streams[i].finished();
    });
    const double computed = double(after.total_computed_tokens - before.total_computed_tokens);
    const double sampled = double(after.total_generation_tokens - before.total_generation_tokens);
    bar.update(prompts.size() - pending.size(), dt > 0 ? (computed - sampled) / dt : 0,
               dt > 0 ? sampled / dt : 0);
  }
  return results;
}

std::vector<RequestOutput> LLM::generate(const std::vector<std::vector<int>>& prompts,
                                         const SamplingParams& params, bool progress) {
  return generate(prompts, std::vector<SamplingParams>{params}, progress);
}

std::vector<RequestOutput> LLM::generate(const std::vector<std::string>& prompts,
                                         const SamplingParams& params, bool progress) {
  KS_CHECK(impl_->tokenizer != nullptr,
           "text prompts need tokenizer.json in the model directory; pass token ids instead");
  std::vector<std::vector<int>> ids;
  ids.reserve(prompts.size());
  for (const std::string& p : prompts) ids.push_back(impl_->tokenizer->encode(p, true));
  return generate(ids, params, progress);
}

RequestOutput LLM::generate_streaming(const std::vector<int>& prompt, const SamplingParams& params,
                                      const std::function<void(const std::string&)>& on_text) {
  KS_CHECK(impl_->tokenizer != nullptr, "streaming text needs tokenizer.json in the model directory");
  KS_CHECK(params.n == 1, "generate_streaming: n must be 1, got {}", params.n);
  KS_CHECK(params.detokenize, "generate_streaming: streaming text needs detokenize");
  SamplingParams cumulative = params;  // the text grows; each new piece is its new end
  cumulative.output_kind = OutputKind::kCumulative;
  RequestStream stream = add_request(prompt, std::move(cumulative));
  RequestOutput last;
  size_t emitted = 0;
  while (std::optional<RequestOutput> out = stream.next()) {
    const std::string& text = out->outputs.at(0).text;
    if (text.size() > emitted) on_text(text.substr(emitted));
    emitted = text.size();
    last = std::move(*out);
  }
  return last;
}

std::string LLM::apply_chat_template(const nlohmann::ordered_json& messages,
                                     bool add_generation_prompt,
                                     const nlohmann::ordered_json& extra,
                                     bool continue_final_message,
                                     const std::string& chat_template) const {
  KS_CHECK(!(continue_final_message && add_generation_prompt),
           "continue_final_message and add_generation_prompt cannot both be true (one continues "
           "the last message, the other starts a new one)");
  if (chat_template.empty()) {
    KS_CHECK(impl_->chat_template_error.empty(), "the model's chat template does not parse: {}",
             impl_->chat_template_error);
    KS_CHECK(impl_->chat_template.has_value(),
             "the model has no chat template (tokenizer_config.json chat_template)");
  }
  KS_CHECK(impl_->tokenizer != nullptr, "the model has no tokenizer");
  nlohmann::ordered_json vars = extra;
  if (!vars.contains("bos_token")) vars["bos_token"] = impl_->tokenizer->bos_token();
  if (!vars.contains("eos_token")) vars["eos_token"] = impl_->tokenizer->eos_token();
  check_chat_messages(messages);
  const nlohmann::ordered_json context =
      make_chat_context(flatten_text_content(messages), add_generation_prompt, vars);
  std::string rendered = chat_template.empty() ? impl_->chat_template->render(context)
                                               : ChatTemplate::parse(chat_template).render(context);
  if (continue_final_message) rendered = kestrel::continue_final_message(std::move(rendered), messages);
  return rendered;
}

const std::string& LLM::chat_template_source() const { return impl_->chat_template_source; }

SamplingParams LLM::default_sampling_params() const {
  SamplingParams p;
  const GenerationDefaults& g = impl_->runner->generation_defaults();
  if (g.do_sample.has_value() && !*g.do_sample) {
    p.temperature = 0.0f;
    return p;
  }
  if (g.temperature) p.temperature = *g.temperature;
  if (g.top_k) p.top_k = *g.top_k;
  if (g.top_p) p.top_p = *g.top_p;
  if (g.min_p) p.min_p = *g.min_p;
  if (g.repetition_penalty) p.repetition_penalty = *g.repetition_penalty;
  return p;
}

const Tokenizer* LLM::tokenizer() const { return impl_->tokenizer.get(); }

std::string LLM::fatal_error() const {
  return impl_->tensor_parallel ? impl_->tensor_parallel->failure() : std::string();
}

LLMStats LLM::stats() const {
  const EngineStats e = impl_->engine->stats();
  const RunnerStats& r = impl_->runner->stats();
  LLMStats s;
  s.num_running = e.num_running;
  s.num_waiting = e.num_waiting;
  s.num_steps = e.num_steps;
  s.num_overlapped_steps = e.num_overlapped_steps;
  s.num_preemptions = e.num_preemptions;
  s.num_kv_blocks = impl_->runner->num_kv_blocks();
  s.block_size = impl_->runner->block_size();
  s.num_free_kv_blocks = e.num_free_kv_blocks;
  s.kv_cache_usage = e.kv_cache_usage;
  s.prefix_cache_queries = e.prefix_cache_queries;
  s.prefix_cache_hits = e.prefix_cache_hits;
  s.prefix_cache_hit_rate = e.prefix_cache_hit_rate;
  const DType kv = impl_->runner->kv_cache_dtype();
  s.kv_cache_dtype = kv == DType::kF8E4M3 ? "fp8_e4m3" : kv == DType::kBF16 ? "bf16" : "f32";
  s.kv_cache_element_bytes = static_cast<int>(dtype_size(kv));
  s.kv_cache_clamped = impl_->kv_clamped;
  s.prompt_tokens = e.total_prompt_tokens;
  s.generation_tokens = e.total_generation_tokens;
  s.computed_tokens = e.total_computed_tokens;
  s.graph_steps = r.graph_steps;
  s.vocab_parallel_steps = r.vocab_parallel_steps;
  s.eager_steps = r.eager_steps;
  s.num_graphs = r.num_graphs;
  s.graph_capture_seconds = r.graph_capture_seconds;
  s.activation_bytes = r.activation_bytes;
  s.kv_max_concurrency = r.kv_max_concurrency;
  s.prepare_seconds = r.prepare_seconds;
  s.launch_seconds = r.launch_seconds;
  s.sample_seconds = r.sample_seconds;
  if (const Communicator* c = impl_->runner->communicator()) s.communicator = c->name();
  return s;
}

int64_t LLM::kv_cache_clamped() {
  return impl_->runner->kv_cache_fp8() ? impl_->check_kv_clamps() : 0;
}

DeviceMemory LLM::device_memory() const {
  const MemoryInfo m = impl_->runner->backend().memory_info();
  return {m.total, m.free};
}

double LLM::time_decode_forward(int batch, int context_len, int iters) {
  return impl_->runner->time_decode_forward(batch, context_len, iters);
}

void LLM::set_profiler_capture(bool on) { impl_->runner->backend().set_profiler_capture(on); }

int LLM::vocab_size() const { return impl_->runner->model_config().vocab_size; }
int LLM::max_model_len() const { return impl_->engine->max_model_len(); }
std::string LLM::device() const { return impl_->runner->backend().name(); }
size_t LLM::weight_bytes() const { return impl_->runner->weight_bytes(); }
size_t LLM::kv_cache_bytes() const { return impl_->runner->kv_cache_bytes(); }

}  // namespace kestrel
