// Command-line flags shared by the kestrel subcommands (CLI11).
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

#include "kestrel/engine_config.h"
#include "kestrel/sampling_params.h"

namespace kestrel::cli {

// Validators with plain messages ("must be at least 1, got 0"; CLI11's PositiveNumber and
// NonNegativeNumber print the largest double). Numbers only; the option's own type still
// decides whether a fraction is accepted.
CLI::Validator at_least(double min);
// A number in [min, max] (CLI::Range lets NaN through).
CLI::Validator between(double min, double max);
// A seed: an integer in [0, 2^64) (CLI11 would saturate a larger one silently).
CLI::Validator seed_value();

// Engine sizing flags (--device, --max-num-seqs, ...), written into `config`.
void add_engine_flags(CLI::App& app, EngineConfig& config);

// Sampling flags. Unset flags stay nullopt so model defaults can fill them.
struct SamplingFlags {
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<float> presence_penalty, frequency_penalty;
  std::optional<int> top_k, max_tokens, min_tokens, n, logprobs;
  std::optional<uint64_t> seed;
  bool ignore_eos = false;
  std::vector<int> stop_token_ids;
  std::vector<std::string> stop;
  std::vector<std::string> logit_bias;  // "ID:BIAS" each (checked when parsed)
  // Flags over `base` (the model's defaults).
  SamplingParams apply(SamplingParams base) const;
};
void add_sampling_flags(CLI::App& app, SamplingFlags& flags);

// Process-wide setup from flags: log level.
void add_log_flag(CLI::App& app, std::string& level);
void set_log_level(const std::string& level);

}  // namespace kestrel::cli
