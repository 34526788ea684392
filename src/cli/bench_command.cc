#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/flags.h"
#include "core/python_random.h"
#include "kestrel/llm.h"

namespace kestrel::cli {

Runner add_bench_command(CLI::App& app) {
  struct Options {
    std::string model;
    int num_seqs = 256;
    int max_input_len = 1024;
    int max_output_len = 1024;
    uint64_t seed = 0;
    EngineConfig engine;
    std::string log_level = "warn";
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "nano-vLLM's throughput benchmark: random prompts, ignore_eos, lengths uniform in "
               "100..max drawn as Python's random.seed(seed)/randint would");
  cmd->add_option("--model", o->model, "Hugging Face model directory")->required();
  cmd->add_option("--num-seqs", o->num_seqs)->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--max-input-len", o->max_input_len)->check(CLI::Range(100, 1 << 20))->capture_default_str();
  cmd->add_option("--max-output-len", o->max_output_len)->check(CLI::Range(100, 1 << 20))->capture_default_str();
  cmd->add_option("--seed", o->seed, "Python random seed of the workload")->capture_default_str();
  add_engine_flags(*cmd, o->engine);
  add_log_flag(*cmd, o->log_level);
  return [o] {
    set_log_level(o->log_level);
    const BenchWorkload w =
        nano_vllm_bench_workload(o->num_seqs, o->max_input_len, o->max_output_len, o->seed);
    if (o->engine.max_model_len == 0) o->engine.max_model_len = o->max_input_len + o->max_output_len;
    LLM llm(o->model, o->engine);

    std::vector<SamplingParams> params(w.prompt_token_ids.size());
    int64_t prompt_tokens = 0, output_tokens = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      params[i].temperature = 0.6f;
      params[i].ignore_eos = true;
      params[i].max_tokens = w.max_tokens[i];
      prompt_tokens += static_cast<int64_t>(w.prompt_token_ids[i].size());
      output_tokens += w.max_tokens[i];
    }
    // Warm-up, as nano-vLLM's bench does.
    SamplingParams warm;
    warm.max_tokens = 4;
    llm.generate(std::vector<std::vector<int>>{{1, 2, 3, 4}}, warm, false);

    auto t0 = std::chrono::steady_clock::now();
    std::vector<RequestOutput> out = llm.generate(w.prompt_token_ids, params, true);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    int64_t generated = 0;
    for (const RequestOutput& r : out) generated += static_cast<int64_t>(r.outputs[0].token_ids.size());

    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    const EngineMetrics m = llm.metrics();
    std::printf("device:            %s\n", llm.device().c_str());
    std::printf("sequences:         %d (seed %llu, lengths 100..%d in, 100..%d out)\n", o->num_seqs,
                static_cast<unsigned long long>(o->seed), o->max_input_len, o->max_output_len);
    std::printf("prompt tokens:     %lld\n", static_cast<long long>(prompt_tokens));
    std::printf("output tokens:     %lld (expected %lld)\n", static_cast<long long>(generated),
                static_cast<long long>(output_tokens));
    std::printf("time:              %.2f s\n", seconds);
    std::printf("output throughput: %.2f tok/s\n", generated / seconds);
    std::printf("total throughput:  %.2f tok/s\n", (generated + prompt_tokens) / seconds);
    std::printf("preemptions:       %lld\n", static_cast<long long>(m.num_preemptions));
    std::printf("kv cache:          %d blocks x %d tokens (%.1f MiB), weights %.1f MiB\n",
                m.num_kv_blocks, m.block_size, llm.kv_cache_bytes() / 1048576.0,
                llm.weight_bytes() / 1048576.0);
    std::printf("peak host memory:  %.1f MiB\n", usage.ru_maxrss / 1024.0);
    return generated == output_tokens ? 0 : 1;
  };
}

}  // namespace kestrel::cli
