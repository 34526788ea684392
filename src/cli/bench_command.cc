// kestrel bench: throughput of a generation workload, printed beside its floor on the
// device it ran on (src/runtime/perf_model.h; ceilings measured in the same process).
//
// Workloads: nano-vLLM's bench (default: --num-seqs prompts and outputs of lengths uniform
// in 100..max, random ids, Python random.seed(seed)), or fixed lengths with
// --fixed-input-len / --fixed-output-len (single stream: --num-seqs 1). ignore_eos always.
// Reports the whole run, the prefill phase (until every sequence has its first token) and
// the decode phase (the rest), plus the bench's own step timers: pure-decode steps vs
// steps that computed prompt tokens.
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/bench_run.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/structured_flags.h"
#include "core/error.h"
#include "core/python_random.h"
#include "core/tensor.h"
#include "io/model_config.h"
#include "kestrel/llm.h"
#include "runtime/device_ceilings.h"
#include "runtime/perf_model.h"

namespace kestrel::cli {

namespace {

struct Options {
  std::string model;
  int num_seqs = 256;
  int max_input_len = 1024;
  int max_output_len = 1024;
  int fixed_input_len = 0;
  int fixed_output_len = 0;
  float temperature = 0.6f;
  int top_k = -1;
  float top_p = 1.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::string regex;  // every output constrained to it (structured outputs)
  uint64_t seed = 0;
  std::string json_path;
  bool measure_ceilings = true;
  std::string profile_steps = "none";
  EngineConfig engine;
  std::string log_level = "warn";
};

// Fixed lengths: prompts of random ids in [0, 10000] drawn as nano-vLLM's bench draws them.
BenchWorkload fixed_workload(const Options& o) {
  PythonRandom rng(o.seed);
  BenchWorkload w;
  for (int i = 0; i < o.num_seqs; ++i) {
    std::vector<int> p(o.fixed_input_len);
    for (int& t : p) t = static_cast<int>(rng.randint(0, 10000));
    w.prompt_token_ids.push_back(std::move(p));
    w.max_tokens.push_back(o.fixed_output_len);
  }
  return w;
}

struct ForwardTiming {
  int batch = 0, context = 0;
  double seconds = 0;
};

// The device time of a decode forward alone, at batch 1 and at the workload's batch, with
// the workload's mean context halfway through its outputs: the step timers minus this is
// what the host and the sampler add.
std::vector<ForwardTiming> time_forwards(LLM& llm, const BenchWorkload& w, int max_num_seqs) {
  double prompt = 0, output = 0;
  for (size_t i = 0; i < w.prompt_token_ids.size(); ++i) {
    prompt += static_cast<double>(w.prompt_token_ids[i].size());
    output += w.max_tokens[i];
  }
  const int n = static_cast<int>(w.prompt_token_ids.size());
  const int context = std::max(1, static_cast<int>((prompt + output / 2) / n));
  std::vector<ForwardTiming> out;
  for (int batch : {1, std::min(n, max_num_seqs)}) {
    if (!out.empty() && out.back().batch == batch) continue;
    out.push_back({batch, context, llm.time_decode_forward(batch, context, 20)});
  }
  return out;
}

void print_phases(const char* what, const StepPhases& p, double tokens) {
  if (p.steps == 0) return;
  std::printf("%-18s %lld, %.3f ms each%s: prepare %.3f, launch %.3f, sample (+ wait) %.3f, engine %.3f ms\n",
              (std::string(what) + ":").c_str(), static_cast<long long>(p.steps), p.ms(p.step),
              tokens > 0 ? fmt::format(" ({:.1f} seqs)", tokens / p.steps).c_str() : "",
              p.ms(p.prepare), p.ms(p.launch), p.ms(p.sample), p.engine_ms());
}

// Refuses a workload that cannot run, before it is drawn: sequences longer than the model's
// context, or token lists larger than this machine's memory (each token is held a few times
// over: the workload, the engine's sequence, the output).
void check_workload_fits(const Options& o, bool fixed, const ModelConfig& model) {
  const int64_t input = fixed ? o.fixed_input_len : o.max_input_len;
  const int64_t output = fixed ? o.fixed_output_len : o.max_output_len;
  KS_CHECK(input + output <= model.max_position_embeddings,
           "prompts of up to {} tokens and outputs of up to {} ({} in all) exceed the model's "
           "max_position_embeddings {}",
           input, output, input + output, model.max_position_embeddings);
  const double bytes = 4.0 * sizeof(int) * static_cast<double>(o.num_seqs) * double(input + output);
  KS_CHECK(bytes <= host_memory_bytes(),
           "--num-seqs {} of up to {} tokens need about {:.1f} GiB for their token ids, more than "
           "this machine's {:.1f} GiB of memory",
           o.num_seqs, input + output, bytes / (1 << 30), host_memory_bytes() / (1 << 30));
}

// Throws unless `path` can be written; opened for appending, so that nothing is lost yet.
void check_writable(const std::string& path) {
  std::ofstream f(path, std::ios::app);
  KS_CHECK(f.good(), "--json {}: cannot write it: {}", path, std::strerror(errno));
}

std::string ratio(double floor_value, double measured) {
  if (floor_value <= 0 || measured <= 0) return "n/a";
  return fmt::format("{:.1f}%", 100.0 * floor_value / measured);
}

}  // namespace

Runner add_bench_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "throughput benchmark (nano-vLLM's by default: random prompts, ignore_eos, lengths "
               "uniform in 100..max as Python's random.seed(seed)/randint draw them), printed "
               "beside the floor of the workload on this device");
  cmd->add_option("--model", o->model, "Hugging Face model directory")->required();
  cmd->add_option("--num-seqs", o->num_seqs)->check(at_least(1))->capture_default_str();
  cmd->add_option("--max-input-len", o->max_input_len)->check(CLI::Range(100, 1 << 20))->capture_default_str();
  cmd->add_option("--max-output-len", o->max_output_len)->check(CLI::Range(100, 1 << 20))->capture_default_str();
  cmd->add_option("--fixed-input-len", o->fixed_input_len, "every prompt this long (with --fixed-output-len)")->check(at_least(1));
  cmd->add_option("--fixed-output-len", o->fixed_output_len, "every output this long")->check(at_least(1));
  cmd->add_option("--temperature", o->temperature, "sampling temperature (0 = greedy)")->capture_default_str();
  cmd->add_option("--top-k", o->top_k, "keep the k most likely tokens (-1 = off; Qwen3's default is 20)")
      ->check(CLI::Range(-1, 1 << 30))->capture_default_str();
  cmd->add_option("--top-p", o->top_p, "nucleus sampling mass in (0, 1] (1 = off; Qwen3's default is 0.95)")
      ->check(CLI::Range(0.0f, 1.0f))->capture_default_str();
  cmd->add_option("--repetition-penalty", o->repetition_penalty,
                  "divide (positive) or multiply (negative) the logits of prompt and output ids by this (1 = off)")
      ->capture_default_str();
  cmd->add_option("--presence-penalty", o->presence_penalty, "subtract this from the logits of output ids (0 = off)")
      ->capture_default_str();
  cmd->add_option("--frequency-penalty", o->frequency_penalty,
                  "subtract this times the count from the logits of output ids (0 = off)")
      ->capture_default_str();
  cmd->add_option("--regex", o->regex,
                  "constrain every output to this regular expression (structured outputs, over "
                  "the model's tokenizer): what constrained steps cost");
  cmd->add_option("--seed", o->seed, "Python random seed of the workload")->check(seed_value())->capture_default_str();
  cmd->add_option("--json", o->json_path, "also write the results to this JSON file");
  cmd->add_flag("!--no-ceilings", o->measure_ceilings, "skip measuring the device's copy bandwidth and GEMM rate");
  cmd->add_option("--profile-steps", o->profile_steps,
                  "steps an attached profiler captures (ncu --profile-from-start off): none, prompt "
                  "(the first step) or decode (two pure-decode steps once every sequence has a token)")
      ->check(CLI::IsMember({"none", "prompt", "decode"}))
      ->capture_default_str();
  add_engine_flags(*cmd, o->engine);
  add_log_flag(*cmd, o->log_level);
  return [o] {
    set_log_level(o->log_level);
    const bool fixed = o->fixed_input_len > 0 || o->fixed_output_len > 0;
    KS_CHECK(!fixed || (o->fixed_input_len > 0 && o->fixed_output_len > 0),
             "give both --fixed-input-len and --fixed-output-len");
    // Before minutes of running: where the results go, and whether the workload fits at all.
    if (!o->json_path.empty()) check_writable(o->json_path);
    const ModelConfig config = load_model_config(o->model);
    check_workload_fits(*o, fixed, config);
    BenchWorkload w = fixed ? fixed_workload(*o)
                            : nano_vllm_bench_workload(o->num_seqs, o->max_input_len,
                                                       o->max_output_len, o->seed);
    // nano-vLLM draws ids in [0, 10000]: a smaller vocabulary takes them modulo its size (a
    // model of 10,001 ids or more gets nano-vLLM's own prompts).
    if (config.vocab_size <= 10000) {
      for (std::vector<int>& prompt : w.prompt_token_ids) {
        for (int& t : prompt) t %= config.vocab_size;
      }
    }
    if (o->engine.max_model_len == 0) {
      o->engine.max_model_len = fixed ? o->fixed_input_len + o->fixed_output_len
                                      : o->max_input_len + o->max_output_len;
    }
    std::vector<SamplingParams> params(w.prompt_token_ids.size());
    std::vector<int> prompt_lens, output_lens;
    for (size_t i = 0; i < params.size(); ++i) {
      params[i].temperature = o->temperature;
      params[i].top_k = o->top_k;
      params[i].top_p = o->top_p;
      params[i].repetition_penalty = o->repetition_penalty;
      params[i].presence_penalty = o->presence_penalty;
      params[i].frequency_penalty = o->frequency_penalty;
      params[i].ignore_eos = true;
      params[i].max_tokens = w.max_tokens[i];
      params[i].output_kind = OutputKind::kDelta;  // the run loop only looks for first tokens
      params[i].detokenize = false;                // random ids: text would only cost time
      prompt_lens.push_back(static_cast<int>(w.prompt_token_ids[i].size()));
      output_lens.push_back(w.max_tokens[i]);
    }
    if (!params.empty()) params[0].validate(config.vocab_size);  // before loading the model

    // The copy rate on a fresh device as well as after the run: measured after the
    // workload in the same process it came out ~14% lower on an H100 (2,583 against
    // 3,014 GB/s), and a floor should use the best rate the device reaches.
    const double copy_before = o->measure_ceilings ? measure_copy_rate(o->engine.device) : 0.0;

    Timings t;
    std::vector<ForwardTiming> forward_alone;
    std::string device_memory;  // on a GPU
    std::string device;
    size_t weight_bytes = 0;
    LLMStats m;
    {
      LLM llm(o->model, o->engine);
      SamplingParams warm;  // warm-up, as nano-vLLM's bench does
      warm.max_tokens = 4;
      llm.generate(std::vector<std::vector<int>>{{1, 2, 3, 4}}, warm, false);
      StructuredFlags regex;
      regex.regex = o->regex;
      if (const auto grammar = compile_structured_flags(regex, llm)) {
        for (SamplingParams& p : params) p.constraint = grammar;
      }
      const ProfileSteps profile = o->profile_steps == "prompt"   ? ProfileSteps::kPrompt
                                   : o->profile_steps == "decode" ? ProfileSteps::kDecode
                                                                  : ProfileSteps::kNone;
      t = run_workload(llm, w, params, profile);
      device = llm.device();
      if (device.rfind("cuda", 0) == 0) {
        forward_alone = time_forwards(llm, w, o->engine.max_num_seqs);
        const DeviceMemory mem = llm.device_memory();
        device_memory = fmt::format(
            "weights {:.2f} GiB, KV cache {:.2f} GiB, activations {:.2f} GiB; {:.2f} GiB in use of {:.2f} GiB",
            llm.weight_bytes() / 1073741824.0, llm.kv_cache_bytes() / 1073741824.0,
            llm.stats().activation_bytes / 1073741824.0,
            (mem.total - mem.free) / 1073741824.0, mem.total / 1073741824.0);
      }
      weight_bytes = llm.weight_bytes();
      m = llm.stats();
    }  // the engine's memory goes back before the ceilings are measured

    const bool on_gpu = device.rfind("cuda", 0) == 0;
    // Under tensor parallelism: one rank's share (weight_bytes is rank 0's shard), over one
    // device's ceilings.
    const WorkloadCost cost = workload_cost(config, weight_bytes, m.kv_cache_element_bytes, prompt_lens,
                                            output_lens, o->engine.max_num_seqs,
                                            o->engine.tensor_parallel_size);
    DeviceCeilings ceil;
    double copy_after = 0;
    if (o->measure_ceilings && on_gpu) {
      ceil = measure_device_ceilings(o->engine.device);
      copy_after = ceil.copy_bytes_per_second;
      ceil.copy_bytes_per_second = std::max(copy_before, copy_after);
    }
    const double decode_floor = decode_floor_seconds(cost, ceil.copy_bytes_per_second);
    const double prefill_floor = prefill_floor_seconds(cost, ceil.gemm_flops_per_second);
    const bool have_ceilings = ceil.copy_bytes_per_second > 0 && ceil.gemm_flops_per_second > 0;
    const double total_floor = have_ceilings ? decode_floor + prefill_floor : 0;
    const double out_tps = t.generated / t.total;
    const double prefill_tps = cost.prompt_tokens / t.first_tokens;
    const int64_t decode_tokens = t.generated - t.generated_before_first;
    const double decode_seconds = t.total - t.first_tokens;
    const double decode_tps = decode_seconds > 0 ? decode_tokens / decode_seconds : 0;
    // The decode floor covers every decode step; its tokens are all but the first ones.
    const double decode_floor_tps =
        decode_floor > 0 ? (cost.output_tokens - static_cast<int64_t>(prompt_lens.size())) / decode_floor : 0;

    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    std::printf("device:            %s\n", device.c_str());
    if (fixed) {
      std::printf("workload:          %d sequences, %d prompt + %d output tokens each (seed %llu)\n",
                  o->num_seqs, o->fixed_input_len, o->fixed_output_len,
                  static_cast<unsigned long long>(o->seed));
    } else {
      std::printf("workload:          nano-vLLM bench, %d sequences, lengths 100..%d in, 100..%d out (seed %llu)\n",
                  o->num_seqs, o->max_input_len, o->max_output_len, static_cast<unsigned long long>(o->seed));
    }
    std::printf("tokens:            %lld prompt, %lld output (expected %lld), temperature %.2f",
                static_cast<long long>(cost.prompt_tokens), static_cast<long long>(t.generated),
                static_cast<long long>(cost.output_tokens), o->temperature);
    if (o->top_k > 0) std::printf(", top_k %d", o->top_k);
    if (o->top_p < 1.0f) std::printf(", top_p %.2f", o->top_p);
    if (o->repetition_penalty != 1.0f) std::printf(", repetition_penalty %.2f", o->repetition_penalty);
    if (o->presence_penalty != 0.0f) std::printf(", presence_penalty %.2f", o->presence_penalty);
    if (o->frequency_penalty != 0.0f) std::printf(", frequency_penalty %.2f", o->frequency_penalty);
    if (!o->regex.empty()) std::printf(", regex %s", o->regex.c_str());
    std::printf("\n");
    if (have_ceilings) {
      std::printf("ceilings:          copy %.0f GB/s (1 GiB device copy, read + written; %.0f before the run, %.0f after), bf16 GEMM %.0f TFLOP/s (%d^3)\n",
                  ceil.copy_bytes_per_second / 1e9, copy_before / 1e9, copy_after / 1e9,
                  ceil.gemm_flops_per_second / 1e12, ceil.gemm_size);
    } else {
      std::printf("ceilings:          not measured (%s), so no floors below\n",
                  on_gpu ? "--no-ceilings" : "the CPU backend has no device ceilings");
    }
    std::printf("floor model:       decode %lld steps, %.2f TB KV + %.2f TB weights read; prefill %.1f TFLOP\n",
                static_cast<long long>(cost.decode_steps), cost.kv_read_bytes / 1e12,
                cost.weight_read_bytes / 1e12, cost.prefill_flops / 1e12);
    std::printf("%-24s %14s %14s %9s\n", "", "measured", "floor", "of floor");
    std::printf("%-24s %12.3f s %12.3f s %9s\n", "total time", t.total, total_floor,
                ratio(total_floor, t.total).c_str());
    std::printf("%-24s %10.0f tok/s %8.0f tok/s %9s\n", "output throughput", out_tps,
                total_floor > 0 ? cost.output_tokens / total_floor : 0.0, ratio(total_floor, t.total).c_str());
    std::printf("%-24s %10.0f tok/s %8.0f tok/s %9s\n", "prefill (to 1st tokens)", prefill_tps,
                prefill_floor > 0 ? cost.prompt_tokens / prefill_floor : 0.0,
                ratio(prefill_floor, t.first_tokens).c_str());
    if (o->num_seqs == 1) {
      // One prompt alone: its prefill time is the latency a chat user waits.
      std::printf("%-24s %12.2f ms %11.2f ms %9s\n", "time to first token", 1e3 * t.first_tokens,
                  1e3 * prefill_floor, ratio(prefill_floor, t.first_tokens).c_str());
    }
    std::printf("%-24s %10.0f tok/s %8.0f tok/s %9s\n", "decode (the rest)", decode_tps, decode_floor_tps,
                decode_floor_tps > 0 && decode_tps > 0 ? fmt::format("{:.1f}%", 100 * decode_tps / decode_floor_tps).c_str() : "n/a");
    print_phases("decode steps", t.decode, double(t.decode_tokens));
    print_phases("prompt steps", t.mixed, 0);
    for (const ForwardTiming& f : forward_alone) {
      std::printf("forward alone:     batch %d, context %d: %.3f ms (device time of one decode forward, no sampling)\n",
                  f.batch, f.context, 1e3 * f.seconds);
    }
    std::printf("engine:            %lld preemptions; kv cache %d blocks x %d tokens (%s); weights %.1f MiB; "
                "%lld of %lld steps launched while the one before ran\n",
                static_cast<long long>(m.num_preemptions), m.num_kv_blocks, m.block_size,
                m.kv_cache_dtype.c_str(), weight_bytes / 1048576.0,
                static_cast<long long>(m.num_overlapped_steps), static_cast<long long>(m.num_steps));
    if (m.kv_cache_dtype == "fp8_e4m3") {
      std::printf("fp8 kv cache:      %lld values clamped\n", static_cast<long long>(m.kv_cache_clamped));
    }
    if (!m.communicator.empty()) {
      std::printf("tensor parallel:   %d ranks (%s); %lld of %lld steps sampled on each rank's vocab shard\n",
                  o->engine.tensor_parallel_size, m.communicator.c_str(),
                  static_cast<long long>(m.vocab_parallel_steps), static_cast<long long>(m.num_steps));
    }
    if (!device_memory.empty()) std::printf("device memory:     %s\n", device_memory.c_str());
    std::printf("peak host memory:  %.1f MiB\n", usage.ru_maxrss / 1024.0);

    if (!o->json_path.empty()) {
      nlohmann::json j = {
          {"device", device}, {"model", o->model}, {"fixed", fixed}, {"num_seqs", o->num_seqs},
          {"fixed_input_len", o->fixed_input_len}, {"fixed_output_len", o->fixed_output_len},
          {"enforce_eager", o->engine.enforce_eager}, {"temperature", o->temperature},
          {"top_k", o->top_k}, {"top_p", o->top_p},
          {"repetition_penalty", o->repetition_penalty}, {"presence_penalty", o->presence_penalty},
          {"frequency_penalty", o->frequency_penalty}, {"regex", o->regex},
          {"prompt_tokens", cost.prompt_tokens}, {"output_tokens", t.generated},
          {"vocab_parallel_steps", m.vocab_parallel_steps},
          {"overlapped_steps", m.num_overlapped_steps}, {"steps", m.num_steps},
          {"expected_output_tokens", cost.output_tokens}, {"total_s", t.total},
          {"first_tokens_s", t.first_tokens}, {"output_tok_s", out_tps},
          {"prefill_tok_s", prefill_tps}, {"decode_tok_s", decode_tps},
          {"floor_total_s", total_floor}, {"floor_prefill_s", prefill_floor},
          {"floor_decode_s", decode_floor}, {"floor_decode_tok_s", decode_floor_tps},
          {"copy_bytes_per_s", ceil.copy_bytes_per_second},
          {"copy_bytes_per_s_before", copy_before},
          {"copy_bytes_per_s_after", copy_after},
          {"gemm_flops_per_s", ceil.gemm_flops_per_second},
          {"decode_steps", t.decode.steps}, {"decode_step_ms", t.decode.ms(t.decode.step)},
          {"decode_prepare_ms", t.decode.ms(t.decode.prepare)},
          {"decode_launch_ms", t.decode.ms(t.decode.launch)},
          {"decode_sample_ms", t.decode.ms(t.decode.sample)},
          {"decode_engine_ms", t.decode.engine_ms()},
          {"mixed_steps", t.mixed.steps}, {"mixed_step_ms", t.mixed.ms(t.mixed.step)},
          {"preemptions", m.num_preemptions}, {"num_kv_blocks", m.num_kv_blocks}};
      for (const ForwardTiming& f : forward_alone) {
        j["forward_alone"].push_back({{"batch", f.batch}, {"context", f.context}, {"ms", 1e3 * f.seconds}});
      }
      std::ofstream out(o->json_path);
      out << j.dump(2) << "\n";
      out.flush();
      KS_CHECK(out.good(), "--json {}: cannot write it: {}", o->json_path, std::strerror(errno));
    }
    return t.generated == cost.output_tokens ? 0 : 1;
  };
}

}  // namespace kestrel::cli
