#include "engine/llm_engine.h"

#include <xxhash.h>

#include <algorithm>
#include <string_view>
#include <unordered_set>

#include "core/error.h"

namespace kestrel {
namespace {

const SchedulerConfig& scheduler_config(const EngineLimits& limits) {
  KS_CHECK(limits.vocab_size >= 1, "vocab_size must be >= 1, got {}", limits.vocab_size);
  return limits;
}

}  // namespace

uint64_t sample_seed(uint64_t request_seed, int sample_index) {
  const uint64_t index = static_cast<uint64_t>(sample_index);
  return XXH3_64bits_withSeed(&index, sizeof(index), request_seed);
}

LLMEngine::LLMEngine(const EngineLimits& limits, ModelExecutor& executor)
    : limits_(limits),
      executor_(executor),
      block_manager_(limits.num_kv_blocks, limits.block_size, limits.enable_prefix_caching),
      scheduler_(scheduler_config(limits), block_manager_),
      seed_rng_(limits.seed),
      overlap_(limits.async_scheduling && executor.supports_overlap()) {}

LLMEngine::~LLMEngine() = default;

void LLMEngine::add_request(std::string request_id, std::vector<int> prompt,
                            SamplingParams params) {
  KS_CHECK(!requests_.contains(request_id), "request id '{}' is already in use", request_id);
  params.validate(limits_.vocab_size);
  KS_CHECK(!prompt.empty(), "request '{}': the prompt is empty", request_id);
  for (size_t i = 0; i < prompt.size(); ++i) {
    KS_CHECK(prompt[i] >= 0 && prompt[i] < limits_.vocab_size,
             "request '{}': prompt token {} at position {} is outside the vocabulary [0, {})",
             request_id, prompt[i], i, limits_.vocab_size);
  }
  try {
    scheduler_.check_prompt_len(static_cast<int>(prompt.size()));
  } catch (const Error& e) {
    throw_error("request '{}': {}", request_id, e.what());
  }

  const uint64_t request_seed = params.seed ? *params.seed : seed_rng_();
  Request request;
  request.params = std::make_shared<const SamplingParams>(std::move(params));
  const int n = request.params->n;
  for (int i = 0; i < n; ++i) {
    // The last sample takes the prompt vector itself; the others copy it.
    std::vector<int> tokens = i + 1 == n ? std::move(prompt) : prompt;
    request.samples.push_back(std::make_unique<Sequence>(next_seq_id_++, request_id, i,
                                                         std::move(tokens), request.params,
                                                         sample_seed(request_seed, i)));
    if (request.params->constraint) request.samples.back()->constraint = request.params->constraint->start();
  }
  std::vector<Sequence*> samples;
  for (auto& seq : request.samples) samples.push_back(seq.get());
  total_prompt_tokens_ += samples[0]->num_prompt_tokens;
  scheduler_.add(samples);
  requests_.emplace(std::move(request_id), std::move(request));
}

bool LLMEngine::abort_request(const std::string& request_id) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return false;
  drain();
  it = requests_.find(request_id);  // the drained step may have finished it
  std::erase_if(drained_, [&](const RequestOutput& o) { return o.request_id == request_id; });
  if (it == requests_.end()) return true;
  for (auto& seq : it->second.samples) scheduler_.abort(seq.get());
  requests_.erase(it);
  return true;
}

bool LLMEngine::abort_sample(const std::string& request_id, int sample_index) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return false;
  auto& samples = it->second.samples;
  if (sample_index < 0 || sample_index >= static_cast<int>(samples.size())) return false;
  drain();
  it = requests_.find(request_id);  // the drained step may have finished it
  if (it == requests_.end()) return false;
  Sequence* seq = it->second.samples[sample_index].get();
  if (seq->is_finished()) return false;
  scheduler_.abort(seq);
  bool all_finished = true;
  for (const auto& s : it->second.samples) all_finished = all_finished && s->is_finished();
  if (all_finished) requests_.erase(it);
  return true;
}

RequestOutput LLMEngine::make_output(const std::string& request_id, Request& request) const {
  const bool delta = request.params->output_kind == OutputKind::kDelta;
  RequestOutput out;
  out.request_id = request_id;
  const Sequence& first = *request.samples[0];
  // Copying the prompt into every step's output is a third of the engine's host time at
  // nano-vLLM's workload (bench/engine_bench): deltas carry it once.
  if (!delta || !request.prompt_reported) {
    out.prompt_token_ids.assign(first.prompt_token_ids().begin(), first.prompt_token_ids().end());
    request.prompt_reported = true;
  }
  out.num_cached_tokens = first.num_cached_tokens;
  if (first.computes_prompt_logprobs() && first.prompt_logprobs_done() &&
      (!delta || !request.prompt_logprobs_reported)) {
    out.prompt_logprobs = first.prompt_logprobs;
    request.prompt_logprobs_reported = true;
  }
  out.finished = true;
  if (delta && request.reported.size() != request.samples.size()) {
    request.reported.assign(request.samples.size(), 0);
  }
  for (size_t i = 0; i < request.samples.size(); ++i) {
    const Sequence& seq = *request.samples[i];
    const std::span<const int> tokens = seq.settled_output_token_ids();
    const size_t from = delta ? std::min(request.reported[i], tokens.size()) : 0;
    CompletionOutput c;
    c.index = seq.sample_index;
    c.token_ids.assign(tokens.begin() + from, tokens.end());
    c.finish_reason = seq.finish_reason;
    if (from < seq.logprobs.size())
      c.logprobs.assign(seq.logprobs.begin() + from, seq.logprobs.end());
    if (delta) request.reported[i] = tokens.size();
    out.finished = out.finished && seq.is_finished();
    out.outputs.push_back(std::move(c));
  }
  return out;
}

std::vector<RequestOutput> LLMEngine::step() {
  if (overlap_) return step_overlapped();
  ScheduledBatch batch = scheduler_.schedule();
  if (batch.empty()) {
    KS_ASSERT(!scheduler_.has_unfinished(), "work is queued but nothing could be scheduled");
    return {};
  }
  const std::vector<SampledToken> sampled = executor_.execute(batch);
  count_step(batch, sampled);
  std::vector<RequestOutput> outputs;
  report(scheduler_.postprocess(batch, sampled), outputs);
  return outputs;
}

void LLMEngine::count_step(const ScheduledBatch& batch, std::span<const SampledToken> sampled) {
  int num_sampled = 0;
  for (const ScheduledSeq& s : batch.seqs) num_sampled += s.sample ? 1 : 0;
  KS_CHECK(static_cast<int>(sampled.size()) == num_sampled,
           "the model executor returned {} tokens for {} sampled sequences", sampled.size(),
           num_sampled);
  for (const SampledToken& t : sampled) {
    KS_CHECK(t.token_id >= 0 && t.token_id < limits_.vocab_size,
             "the model executor sampled token {} outside the vocabulary [0, {})", t.token_id,
             limits_.vocab_size);
  }
  ++num_steps_;
  total_computed_tokens_ += batch.num_tokens;
  total_generation_tokens_ += num_sampled;
}

void LLMEngine::report(const std::vector<Sequence*>& changed, std::vector<RequestOutput>& outputs) {
  std::unordered_set<std::string_view> reported;
  const size_t first = outputs.size();
  for (Sequence* seq : changed) {
    if (!reported.insert(seq->request_id).second) continue;
    auto it = requests_.find(seq->request_id);
    KS_ASSERT(it != requests_.end());
    Request& request = it->second;
    if (request.params->output_kind == OutputKind::kFinalOnly &&
        !std::all_of(request.samples.begin(), request.samples.end(),
                     [](const auto& s) { return s->is_finished(); })) {
      continue;
    }
    outputs.push_back(make_output(it->first, request));
  }
  // Only now: ending a request destroys its sequences, which `changed` points to. With a
  // step in flight that may name them, they live on in retired_ until it is settled.
  for (size_t i = first; i < outputs.size(); ++i) {
    if (!outputs[i].finished) continue;
    auto it = requests_.find(outputs[i].request_id);
    if (!in_flight_.empty()) retired_.push_back(std::move(it->second));
    requests_.erase(it);
  }
}

std::vector<RequestOutput> LLMEngine::step_overlapped() {
  std::vector<RequestOutput> outputs = std::move(drained_);
  drained_.clear();
  try {
    const Settle need = settle_needed();
    if (need == Settle::kBeforeScheduling) settle_oldest(outputs);
    ScheduledBatch batch = scheduler_.schedule();
    if (batch.empty() && in_flight_.empty()) {
      KS_ASSERT(!scheduler_.has_unfinished(), "work is queued but nothing could be scheduled");
      return outputs;
    }
    const bool launched = !batch.empty();
    const bool defer_sampling = launched && need == Settle::kBeforeSampling;
    if (launched) {
      if (defer_sampling) {
        executor_.launch_forward(batch);
      } else {
        executor_.launch(batch);
      }
      scheduler_.on_launched(batch);
      in_flight_.push_back(std::move(batch));
      if (in_flight_.size() == 2) ++num_overlapped_steps_;
    }
    // The step before, done by now or soon: the device goes on with this one meanwhile.
    if (in_flight_.size() == 2) settle_oldest(outputs);
    // Its tokens are in the sequences now (constraints advanced): this step's sampling.
    if (defer_sampling) executor_.launch_sampling(in_flight_.back());
    // Nothing left to schedule: settle now, so that has_unfinished() false means idle.
    if (!launched || requests_.empty()) {
      while (!in_flight_.empty()) settle_oldest(outputs);
    }
  } catch (...) {
    undo_in_flight();
    throw;
  }
  if (in_flight_.empty()) retired_.clear();
  return outputs;
}

LLMEngine::Settle LLMEngine::settle_needed() const {
  if (in_flight_.empty()) return Settle::kNone;
  if (!scheduler_.can_schedule_ahead()) return Settle::kBeforeScheduling;
  for (const ScheduledSeq& s : in_flight_.front().seqs) {
    // A constraint's next mask follows from the pending token; penalties count it, which
    // not every executor's sampler can.
    if (!s.sample) continue;
    if (s.seq->constraint ||
        (s.seq->params->has_penalties() && !executor_.samples_pending_tokens())) {
      return executor_.supports_deferred_sampling() ? Settle::kBeforeSampling
                                                    : Settle::kBeforeScheduling;
    }
  }
  return Settle::kNone;
}

void LLMEngine::settle_oldest(std::vector<RequestOutput>& outputs) {
  const std::vector<SampledToken> sampled = executor_.collect();
  const ScheduledBatch& batch = in_flight_.front();
  count_step(batch, sampled);
  const std::vector<Sequence*> changed = scheduler_.settle(batch, sampled);
  // Requests retired before: only the batch just settled could still name them.
  std::vector<Request> older = std::move(retired_);
  retired_.clear();
  in_flight_.pop_front();
  report(changed, outputs);
}

void LLMEngine::undo_in_flight() {
  executor_.discard();
  for (auto b = in_flight_.rbegin(); b != in_flight_.rend(); ++b) scheduler_.undo_launched(*b);
  in_flight_.clear();
  retired_.clear();
}

void LLMEngine::drain() {
  if (in_flight_.empty()) return;
  try {
    while (!in_flight_.empty()) settle_oldest(drained_);
  } catch (const std::exception&) {
    // The abort that drains must go through. The failed step is undone: it runs again at
    // the next step(), whose caller then gets its error.
    undo_in_flight();
  }
  retired_.clear();
}

EngineStats LLMEngine::stats() const {
  EngineStats s;
  s.num_running = scheduler_.num_running();
  s.num_waiting = scheduler_.num_waiting();
  s.num_free_kv_blocks = block_manager_.num_free_blocks();
  s.kv_cache_usage = block_manager_.usage();
  const PrefixCacheStats& cache = block_manager_.prefix_cache_stats();
  s.prefix_cache_queries = cache.queries;
  s.prefix_cache_hits = cache.hits;
  s.prefix_cache_hit_rate = cache.hit_rate();
  s.num_preemptions = scheduler_.num_preemptions();
  s.total_prompt_tokens = total_prompt_tokens_;
  s.total_generation_tokens = total_generation_tokens_;
  s.total_computed_tokens = total_computed_tokens_;
  s.num_steps = num_steps_;
  s.num_overlapped_steps = num_overlapped_steps_;
  return s;
}

}  // namespace kestrel
