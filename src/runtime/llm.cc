#include "kestrel/llm.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "core/error.h"
#include "engine/llm_engine.h"
#include "io/model_config.h"
#include "parallel/local_workers.h"
#include "runtime/model_runner.h"
#include "runtime/progress_bar.h"
#include "runtime/tp_executor.h"
#include "runtime/tp_worker.h"
#include "runtime/stop_strings.h"
#include "chat/chat_template.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {

namespace {

EngineLimits make_limits(const EngineConfig& config, const ModelRunner& runner,
                         const std::vector<int>& eos_token_ids) {
  const ModelConfig& model = runner.model_config();
  EngineLimits limits;
  limits.max_num_seqs = config.max_num_seqs;
  limits.max_num_batched_tokens = config.max_num_batched_tokens;
  limits.max_model_len =
      config.max_model_len > 0 ? config.max_model_len : model.max_position_embeddings;
  KS_CHECK(limits.max_model_len <= model.max_position_embeddings,
           "max_model_len {} exceeds the model's max_position_embeddings {}",
           limits.max_model_len, model.max_position_embeddings);
  limits.block_size = runner.block_size();
  limits.num_kv_blocks = runner.num_kv_blocks();
  limits.enable_prefix_caching = config.enable_prefix_caching;
  limits.enable_chunked_prefill = config.enable_chunked_prefill;
  limits.vocab_size = model.vocab_size;
  limits.eos_token_ids = eos_token_ids;
  limits.seed = config.seed;
  limits.async_scheduling = config.async_scheduling;
  return limits;
}

}  // namespace

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
  uint64_t next_request = 0;
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
    // A broken template fails chat requests, not the whole model.
    if (!impl_->tokenizer->chat_template().empty()) {
      try {
        impl_->chat_template = ChatTemplate::parse(impl_->tokenizer->chat_template());
      } catch (const Error& e) {
        impl_->chat_template_error = e.what();
      }
    }
  }
  impl_->engine =
      std::make_unique<LLMEngine>(make_limits(config, *impl_->runner, eos), *impl_->executor);
}

LLM::~LLM() = default;

std::vector<RequestOutput> LLM::generate(const std::vector<std::vector<int>>& prompts,
                                         const std::vector<SamplingParams>& params,
                                         bool progress) {
  KS_CHECK(params.size() == 1 || params.size() == prompts.size(),
           "generate: {} sampling params for {} prompts (give one, or one per prompt)",
           params.size(), prompts.size());
  LLMEngine& engine = *impl_->engine;
  // Stop strings are checked on the text, here; made first so that bad ones throw before
  // anything runs.
  std::vector<std::optional<StopStrings>> stops(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const SamplingParams& p = params.size() == 1 ? params[0] : params[i];
    if (p.stop.empty()) continue;
    KS_CHECK(impl_->tokenizer != nullptr,
             "prompt {}: stop strings need tokenizer.json in the model directory", i);
    try {
      stops[i].emplace(*impl_->tokenizer, p, prompts[i]);
    } catch (const Error& e) {
      throw_error("prompt {}: {}", i, e.what());
    }
  }
  std::vector<std::string> ids;
  ids.reserve(prompts.size());
  try {
    for (size_t i = 0; i < prompts.size(); ++i) {
      ids.push_back("gen-" + std::to_string(impl_->next_request++));
      // Only finished requests are returned, so only they need reporting; stop strings are
      // checked on the cumulative tokens of every step.
      SamplingParams p = params.size() == 1 ? params[0] : params[i];
      p.output_kind = stops[i] ? OutputKind::kCumulative : OutputKind::kFinalOnly;
      try {
        engine.add_request(ids.back(), prompts[i], std::move(p));
      } catch (const Error& e) {
        ids.pop_back();
        throw_error("prompt {}: {}", i, e.what());
      }
    }
  } catch (...) {
    for (const std::string& id : ids) engine.abort_request(id);
    throw;
  }

  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < ids.size(); ++i) index[ids[i]] = i;
  std::vector<RequestOutput> results(prompts.size());
  size_t done = 0;
  ProgressBar bar(prompts.size(), progress);
  while (done < prompts.size()) {
    const EngineStats before = engine.stats();
    auto t0 = std::chrono::steady_clock::now();
    std::vector<RequestOutput> outputs = engine.step();
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const EngineStats after = engine.stats();
    for (RequestOutput& out : outputs) {
      auto it = index.find(out.request_id);
      if (it == index.end()) continue;
      if (std::optional<StopStrings>& stop = stops[it->second]) {
        for (int sample : stop->update(out)) engine.abort_sample(out.request_id, sample);
        stop->apply(out);
      }
      if (!out.finished) continue;
      if (impl_->tokenizer) {
        for (CompletionOutput& c : out.outputs) {
          if (stops[it->second] && stops[it->second]->cut(c.index)) continue;  // text set
          c.text = impl_->tokenizer->decode(c.token_ids, true);
        }
      }
      results[it->second] = std::move(out);
      index.erase(it);  // an aborted request may still be reported this step
      ++done;
    }
    const double computed = double(after.total_computed_tokens - before.total_computed_tokens);
    const double sampled = double(after.total_generation_tokens - before.total_generation_tokens);
    bar.update(done, dt > 0 ? (computed - sampled) / dt : 0, dt > 0 ? sampled / dt : 0);
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
  LLMEngine& engine = *impl_->engine;
  DetokenizerOptions options;  // made first: bad stop strings throw before anything runs
  options.stop = params.stop;
  options.include_stop_str_in_output = params.include_stop_str_in_output;
  Detokenizer detok(*impl_->tokenizer, options, prompt);
  const std::string id = "stream-" + std::to_string(impl_->next_request++);
  SamplingParams cumulative = params;  // the detokenizer takes the whole token list
  cumulative.output_kind = OutputKind::kCumulative;
  engine.add_request(id, prompt, std::move(cumulative));
  try {
    while (true) {
      for (RequestOutput& out : engine.step()) {
        if (out.request_id != id) continue;
        CompletionOutput& c = out.outputs.at(0);
        std::string text;
        size_t fed = detok.num_tokens();
        while (fed < c.token_ids.size() && !detok.stopped()) text += detok.add_token(c.token_ids[fed++]);
        if (!text.empty()) on_text(text);
        if (detok.stopped()) {  // the tokens after the one that completed the match go
          engine.abort_request(id);
          c = cut_at_stop(std::move(c), fed, detok);
          out.finished = true;
          return out;
        }
        if (out.finished) {
          const std::string rest = detok.finish();
          if (!rest.empty()) on_text(rest);
          out.outputs[0].text = std::string(detok.output_text());
          return out;
        }
      }
    }
  } catch (...) {
    engine.abort_request(id);
    throw;
  }
}

std::string LLM::apply_chat_template(const nlohmann::ordered_json& messages,
                                     bool add_generation_prompt,
                                     const nlohmann::ordered_json& extra) const {
  KS_CHECK(impl_->chat_template_error.empty(), "the model's chat template does not parse: {}",
           impl_->chat_template_error);
  KS_CHECK(impl_->chat_template.has_value(),
           "the model has no chat template (tokenizer_config.json chat_template)");
  nlohmann::ordered_json vars = extra;
  if (!vars.contains("bos_token")) vars["bos_token"] = impl_->tokenizer->bos_token();
  if (!vars.contains("eos_token")) vars["eos_token"] = impl_->tokenizer->eos_token();
  return impl_->chat_template->render(make_chat_context(messages, add_generation_prompt, vars));
}

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
LLMEngine& LLM::engine() { return *impl_->engine; }
ModelRunner& LLM::runner() { return *impl_->runner; }

std::string LLM::fatal_error() const {
  return impl_->tensor_parallel ? impl_->tensor_parallel->failure() : std::string();
}

EngineMetrics LLM::metrics() const {
  const EngineStats s = impl_->engine->stats();
  EngineMetrics m;
  m.num_kv_blocks = impl_->runner->num_kv_blocks();
  m.block_size = impl_->runner->block_size();
  m.kv_cache_usage = s.kv_cache_usage;
  m.prefix_cache_hit_rate = s.prefix_cache_hit_rate;
  m.num_preemptions = s.num_preemptions;
  m.prompt_tokens = s.total_prompt_tokens;
  m.generation_tokens = s.total_generation_tokens;
  m.computed_tokens = s.total_computed_tokens;
  return m;
}

int LLM::vocab_size() const { return impl_->runner->model_config().vocab_size; }
int LLM::max_model_len() const { return impl_->engine->max_seq_len(); }
std::string LLM::device() const { return impl_->runner->backend().name(); }
size_t LLM::weight_bytes() const { return impl_->runner->weight_bytes(); }
size_t LLM::kv_cache_bytes() const { return impl_->runner->kv_cache_bytes(); }

}  // namespace kestrel
