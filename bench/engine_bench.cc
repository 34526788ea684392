// Host cost of the engine's step (schedule, postprocess, outputs) without a model: nano-vLLM's
// workload (256 sequences, 100..1024 prompt and output tokens, random.seed(0)) through
// LLMEngine with an executor that returns a token at once, so what is timed is the part of
// every GPU step that the device waits for.
//
// Build: ninja engine_bench; run: build/bench/engine_bench [num_seqs] (each output kind).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/python_random.h"
#include "engine/llm_engine.h"
#include "engine/model_executor.h"

namespace kestrel {
namespace {

// Samples token (position * 31 + seq) % 1000 for every sampled sequence; no model.
class InstantExecutor : public ModelExecutor {
 public:
  std::vector<SampledToken> execute(const ScheduledBatch& batch) override {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<SampledToken> out;
    for (const ScheduledSeq& s : batch.seqs) {
      if (!s.sample) continue;
      SampledToken t;
      t.token_id = static_cast<int>((s.seq->num_tokens() * 31 + s.seq->seq_id) % 1000);
      out.push_back(t);
    }
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
  }
  double seconds = 0;
};

int run(int num_seqs, OutputKind kind, const char* kind_name) {
  const BenchWorkload w = nano_vllm_bench_workload(num_seqs, 1024, 1024, 0);
  EngineLimits limits;
  limits.max_model_len = 2048;
  limits.num_kv_blocks = num_seqs * 2048 / 16 + 16;
  limits.vocab_size = 151936;
  InstantExecutor executor;
  LLMEngine engine(limits, executor);
  for (size_t i = 0; i < w.prompt_token_ids.size(); ++i) {
    SamplingParams p;
    p.temperature = 0.6f;
    p.ignore_eos = true;
    p.max_tokens = w.max_tokens[i];
    p.output_kind = kind;
    engine.add_request("bench-" + std::to_string(i), w.prompt_token_ids[i], p);
  }
  int64_t steps = 0, decode_steps = 0, outputs = 0;
  double decode_seconds = 0, total_seconds = 0;
  while (engine.has_unfinished()) {
    const EngineStats before = engine.stats();
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<RequestOutput> outs = engine.step();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const EngineStats after = engine.stats();
    const int64_t sampled = after.total_generation_tokens - before.total_generation_tokens;
    const int64_t computed = after.total_computed_tokens - before.total_computed_tokens;
    ++steps;
    total_seconds += dt;
    outputs += static_cast<int64_t>(outs.size());
    if (sampled > 0 && computed == sampled) {
      ++decode_steps;
      decode_seconds += dt;
    }
  }
  std::printf("engine_bench: %d sequences, %s outputs: %lld steps (%lld pure decode), %lld outputs\n",
              num_seqs, kind_name,
              static_cast<long long>(steps), static_cast<long long>(decode_steps),
              static_cast<long long>(outputs));
  std::printf("  host time per decode step: %.3f ms (executor %.3f ms of all %.3f s)\n",
              decode_steps ? 1e3 * decode_seconds / decode_steps : 0.0,
              1e3 * executor.seconds / steps, total_seconds);
  return 0;
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 256;
  kestrel::run(n, kestrel::OutputKind::kCumulative, "cumulative");
  kestrel::run(n, kestrel::OutputKind::kDelta, "delta");
  return kestrel::run(n, kestrel::OutputKind::kFinalOnly, "final-only");
}
