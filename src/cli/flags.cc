#include "cli/flags.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <charconv>
#include <optional>
#include <string>
#include <utility>

#include "chat/chat_template.h"
#include "core/error.h"

namespace kestrel::cli {
namespace {

// The value as a number, or nullopt.
std::optional<double> number(const std::string& text) {
  double v = 0;
  if (!CLI::detail::lexical_cast(text, v)) return std::nullopt;
  return v;
}

// "1" for 1.0, "0.05" for 0.05.
std::string plain(double v) { return fmt::format("{}", v); }

// --chat-template: the file or template must be usable, said before the model loads.
CLI::Validator usable_chat_template() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        try {
          ChatTemplate::parse(chat_template_source(text));
          return "";
        } catch (const Error& e) {
          return e.what();
        }
      },
      "FILE|TEMPLATE");
}

}  // namespace

CLI::Validator at_least(double min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        const std::optional<double> v = number(text);
        if (!v) return "must be a number, got '" + text + "'";
        if (!(*v >= min)) return "must be at least " + plain(min) + ", got " + text;
        return "";
      },
      ">=" + plain(min));
}

CLI::Validator between(double min, double max) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        const std::optional<double> v = number(text);
        if (!v) return "must be a number, got '" + text + "'";
        if (!(*v >= min && *v <= max)) {
          return "must be between " + plain(min) + " and " + plain(max) + ", got " + text;
        }
        return "";
      },
      plain(min) + ".." + plain(max));
}

CLI::Validator seed_value() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (!text.empty() && text[0] == '-') return "must be at least 0, got " + text;
        uint64_t v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec == std::errc::result_out_of_range) return "must be below 2^64, got " + text;
        if (ec != std::errc() || end != text.data() + text.size()) {
          return "must be an integer, got '" + text + "'";
        }
        return "";
      },
      "0..2^64-1");
}

namespace {

// "ID:BIAS" (--logit-bias), or nullopt when `text` is not one. The ranges are
// SamplingParams::validate's.
std::optional<std::pair<int, float>> parse_logit_bias(const std::string& text) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) return std::nullopt;
  int id = 0;
  const char* id_end = text.data() + colon;
  if (auto [ptr, ec] = std::from_chars(text.data(), id_end, id); ec != std::errc() || ptr != id_end) {
    return std::nullopt;
  }
  float bias = 0.0f;
  const char* end = text.data() + text.size();
  if (auto [ptr, ec] = std::from_chars(id_end + 1, end, bias); ec != std::errc() || ptr != end) {
    return std::nullopt;
  }
  return std::pair{id, bias};
}

}  // namespace

void add_engine_flags(CLI::App& app, EngineConfig& c) {
  app.add_option("--device", c.device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  app.add_option("--max-num-seqs", c.max_num_seqs, "most sequences per step")->check(at_least(1))->capture_default_str();
  app.add_option("--max-num-batched-tokens", c.max_num_batched_tokens, "token budget per step")->check(at_least(1))->capture_default_str();
  app.add_option("--max-model-len", c.max_model_len, "longest sequence; 0 = the model's")->check(at_least(0));
  app.add_option("--block-size", c.block_size, "tokens per KV block (a power of two)")->check(at_least(1))->capture_default_str();
  app.add_option("--num-kv-blocks", c.num_kv_blocks, "KV blocks; 0 = size from memory")->check(at_least(0));
  app.add_option("--kv-cache-memory", c.kv_cache_memory_bytes, "CPU: KV cache bytes when --num-kv-blocks is 0")->check(at_least(1));
  app.add_option("--gpu-memory-utilization", c.gpu_memory_utilization, "CUDA: fraction of GPU memory to use")->check(between(0.05, 1.0))->capture_default_str();
  app.add_option("--kv-cache-dtype", c.kv_cache_dtype, "KV cache storage: auto or bf16 (the backend's: bf16 on CUDA, f32 on the CPU), fp8 or fp8_e4m3 (8-bit, scaled per layer and KV head; docs/kv_cache.md)")->capture_default_str();
  app.add_flag("!--no-prefix-caching", c.enable_prefix_caching, "disable prefix caching");
  app.add_flag("!--no-chunked-prefill", c.enable_chunked_prefill, "never split a prompt across steps");
  // The upper bound (a few times the cores) is the CPU backend's check.
  app.add_option("--threads", c.num_threads, "CPU threads; 0 = all cores")->check(at_least(0));
  app.add_flag("--enforce-eager", c.enforce_eager, "CUDA: no CUDA graphs");
  app.add_option("--chat-template", c.chat_template, "a Jinja chat template (a file, or the template itself) to use instead of the model's")->check(usable_chat_template());
  app.add_flag("!--no-async-scheduling", c.async_scheduling, "wait for each step's tokens before scheduling the next (no host/device overlap)");
  app.add_option("--tensor-parallel-size,--tp", c.tensor_parallel_size, "ranks that each hold a shard of the model (GPUs, or CPU processes)")->check(at_least(1))->capture_default_str();
  app.add_option("--tp-rendezvous", c.tp_rendezvous, "a shared directory where the ranks of a launcher-started group (mpirun, srun) meet; empty: one host, ranks started by the engine");
}

void add_sampling_flags(CLI::App& app, SamplingFlags& f) {
  app.add_option("--temperature", f.temperature, "0 = greedy (default: the model's generation_config)");
  app.add_option("--top-k", f.top_k, "-1 or 0 = off");
  app.add_option("--top-p", f.top_p);
  app.add_option("--min-p", f.min_p);
  app.add_option("--seed", f.seed, "per-request seed (reproducible sampling)")->check(seed_value());
  app.add_option("--max-tokens", f.max_tokens, "tokens to generate (default 64)");
  app.add_option("--min-tokens", f.min_tokens);
  app.add_flag("--ignore-eos", f.ignore_eos);
  app.add_option("--stop-token-ids", f.stop_token_ids)->delimiter(',');
  app.add_option("--stop", f.stop, "text that ends the output (repeatable)")->allow_extra_args(false);
  app.add_option("--repetition-penalty", f.repetition_penalty);
  app.add_option("--presence-penalty", f.presence_penalty);
  app.add_option("--frequency-penalty", f.frequency_penalty);
  app.add_option("-n,--n", f.n, "samples per prompt");
  app.add_option("--logprobs", f.logprobs, "top log-probabilities per token (0..20)");
  app.add_option("--logit-bias", f.logit_bias,
                 "ID:BIAS added to token ID's logit before the penalties, BIAS in [-100, 100] "
                 "(repeatable, or comma-separated)")
      ->delimiter(',')
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            return parse_logit_bias(text) ? "" : "expected ID:BIAS (e.g. 13:-100), got '" + text + "'";
          },
          "ID:BIAS"));
}

SamplingParams SamplingFlags::apply(SamplingParams p) const {
  if (temperature) p.temperature = *temperature;
  if (top_k) p.top_k = *top_k;
  if (top_p) p.top_p = *top_p;
  if (min_p) p.min_p = *min_p;
  if (seed) p.seed = *seed;
  if (max_tokens) p.max_tokens = *max_tokens;
  if (min_tokens) p.min_tokens = *min_tokens;
  if (repetition_penalty) p.repetition_penalty = *repetition_penalty;
  if (presence_penalty) p.presence_penalty = *presence_penalty;
  if (frequency_penalty) p.frequency_penalty = *frequency_penalty;
  if (n) p.n = *n;
  if (logprobs) p.logprobs = *logprobs;
  p.ignore_eos = p.ignore_eos || ignore_eos;
  p.stop_token_ids.insert(p.stop_token_ids.end(), stop_token_ids.begin(), stop_token_ids.end());
  p.stop.insert(p.stop.end(), stop.begin(), stop.end());
  for (const std::string& entry : logit_bias) p.logit_bias.push_back(*parse_logit_bias(entry));
  return p;
}

void add_log_flag(CLI::App& app, std::string& level) {
  app.add_option("--log-level", level, "trace, debug, info, warn, error, off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
}

void set_log_level(const std::string& level) {
  spdlog::set_level(spdlog::level::from_str(level));
}

}  // namespace kestrel::cli
