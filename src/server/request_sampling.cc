// The fields /v1/completions and /v1/chat/completions share: sampling, stop conditions,
// streaming, and the final checks of a request against the model.
#include <cctype>

#include "core/error.h"
#include "server/api_error.h"
#include "server/request_fields.h"
#include "server/request_parser.h"
#include "server/structured_request.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace kestrel::server {
namespace {

std::vector<std::string> read_stop_strings(const FieldReader& f) {
  const nlohmann::ordered_json* v = f.find("stop");
  if (!v) return {};
  std::vector<std::string> out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (const auto& s : *v) {
      if (!s.is_string()) throw_bad_request("stop", "'stop' must be a string or a list of strings");
      out.push_back(s.get<std::string>());
    }
  } else {
    throw_bad_request("stop", "'stop' must be a string or a list of strings, got {}",
                      json_type_name(*v));
  }
  for (const std::string& s : out) {
    if (s.empty()) throw_bad_request("stop", "'stop' strings must not be empty");
  }
  return out;
}

std::vector<int> read_int_list(const FieldReader& f, std::string_view key) {
  const nlohmann::ordered_json* v = f.find(key);
  if (!v) return {};
  if (!v->is_array()) {
    throw_bad_request(f.name(key), "'{}' must be a list of integers, got {}", f.name(key),
                      json_type_name(*v));
  }
  std::vector<int> out;
  for (const auto& x : *v) {
    if (!x.is_number_integer())
      throw_bad_request(f.name(key), "'{}' must be a list of integers", f.name(key));
    // Read wide, so that 2^32 + id is refused instead of becoming id.
    const bool fits = x.is_number_unsigned()
                          ? x.get<uint64_t>() <= uint64_t{std::numeric_limits<int>::max()}
                          : x.get<int64_t>() >= std::numeric_limits<int>::min() &&
                                x.get<int64_t>() <= std::numeric_limits<int>::max();
    if (!fits) {
      throw_bad_request(f.name(key), "'{}' has {} outside the range of a token id", f.name(key),
                        x.dump());
    }
    out.push_back(x.get<int>());
  }
  return out;
}

void read_stream_options(const FieldReader& f, GenerateRequest& req) {
  const nlohmann::ordered_json* v = f.find("stream_options");
  if (!v) return;
  if (!req.stream) {
    throw_bad_request("stream_options", "'stream_options' is only allowed when 'stream' is true");
  }
  FieldReader options(*v, "'stream_options'", "stream_options.");
  options.reject_unknown({"include_usage", "continuous_usage_stats"});
  req.include_usage = options.boolean("include_usage").value_or(false);
  // Without include_usage it is ignored, as in vLLM.
  const bool continuous = options.boolean("continuous_usage_stats").value_or(false);
  req.continuous_usage = req.include_usage && continuous;
}

// SamplingParams::validate's messages start with the field name ("top_p must be ...").
std::string param_of(const std::string& message) {
  size_t n = 0;
  while (n < message.size() &&
         (std::isalnum(static_cast<unsigned char>(message[n])) || message[n] == '_'))
    ++n;
  return message.substr(0, n);
}

// OpenAI's logit_bias: {"<token id>": bias, ...}. The ranges (ids in the vocabulary, no id
// twice) are SamplingParams::validate's; the biases' is checked here too, on the value as
// sent, since one past a float's range would reach validate as inf.
std::vector<std::pair<int, float>> read_logit_bias(const FieldReader& f) {
  std::vector<std::pair<int, float>> out;
  const nlohmann::ordered_json* bias = f.find("logit_bias");
  if (bias == nullptr) return out;
  if (!bias->is_object()) throw_bad_request("logit_bias", "'logit_bias' must be an object");
  if (bias->size() > SamplingParams::kMaxLogitBias) {
    throw_bad_request("logit_bias", "'logit_bias' has {} entries; at most {}", bias->size(),
                      SamplingParams::kMaxLogitBias);
  }
  for (const auto& [key, value] : bias->items()) {
    int id = -1;
    const char* end = key.data() + key.size();
    const auto [ptr, ec] = std::from_chars(key.data(), end, id);
    if (key.empty() || ec != std::errc() || ptr != end) {
      throw_bad_request("logit_bias", "'logit_bias' keys are token ids (decimal integers), got \"{}\"",
                        key.size() > 40 ? key.substr(0, 40) + "..." : key);
    }
    if (!value.is_number()) {
      throw_bad_request("logit_bias", "'logit_bias' of token {} must be a number", id);
    }
    const double b = value.get<double>();
    constexpr double kMax = SamplingParams::kMaxBias;
    if (!(b >= -kMax && b <= kMax)) {
      throw_bad_request("logit_bias", "'logit_bias' of token {} must be in [-{}, {}], got {}", id,
                        kMax, kMax, b);
    }
    out.emplace_back(id, static_cast<float>(b));
  }
  return out;
}

}  // namespace

void check_model(const FieldReader& f, const ServingContext& ctx) {
  const std::optional<std::string> model = f.string("model");
  if (model && *model != ctx.served_model_name) {
    throw ApiError(404, fmt::format("The model `{}` does not exist.", *model), "model",
                   "invalid_request_error", "model_not_found");
  }
}

std::optional<int> read_sampling_fields(const FieldReader& f, const ServingContext& ctx,
                                        GenerateRequest& req) {
  SamplingParams& p = req.params;
  p = ctx.defaults;
  if (auto v = f.float32("temperature")) p.temperature = *v;
  if (auto v = f.float32("top_p")) p.top_p = *v;
  if (auto v = f.int32("top_k")) p.top_k = *v;
  if (auto v = f.float32("min_p")) p.min_p = *v;
  if (auto v = f.integer("seed")) p.seed = static_cast<uint64_t>(*v);
  if (auto v = f.int32("n")) p.n = *v;
  // vLLM takes best_of on both endpoints; null or n is what sampling does anyway.
  if (auto best_of = f.int32("best_of"); best_of && *best_of != p.n) {
    throw_bad_request("best_of", "'best_of' other than n is not supported");
  }
  if (auto v = f.float32("presence_penalty")) p.presence_penalty = *v;
  if (auto v = f.float32("frequency_penalty")) p.frequency_penalty = *v;
  if (auto v = f.float32("repetition_penalty")) p.repetition_penalty = *v;
  if (auto v = f.int32("min_tokens")) p.min_tokens = *v;
  p.ignore_eos = f.boolean("ignore_eos").value_or(false);
  p.stop_token_ids = read_int_list(f, "stop_token_ids");
  p.logprobs.reset();
  p.prompt_logprobs.reset();

  p.stop = read_stop_strings(f);
  p.skip_special_tokens = f.boolean("skip_special_tokens").value_or(true);
  p.include_stop_str_in_output = f.boolean("include_stop_str_in_output").value_or(false);
  req.stream = f.boolean("stream").value_or(false);
  read_stream_options(f, req);

  p.logit_bias = read_logit_bias(f);
  (void)f.string("user");

  std::optional<int> max_tokens;
  for (const char* key : {"max_completion_tokens", "max_tokens"}) {
    if (auto v = f.int32(key); v && !max_tokens) {
      max_tokens = *v;
      req.max_tokens_field = key;
    }
  }
  if (max_tokens && *max_tokens < 1) {
    throw_bad_request(req.max_tokens_field, "'{}' must be >= 1, got {}", req.max_tokens_field,
                      *max_tokens);
  }
  // Last: compiling is the costly part, and every cheaper mistake is reported first.
  p.constraint = read_structured_output(f, ctx);
  return max_tokens;
}

void read_prompt_logprobs(const FieldReader& f, GenerateRequest& req) {
  const std::optional<int> v = f.int32("prompt_logprobs");
  if (!v) return;
  if (*v < 0 || *v > SamplingParams::kMaxLogprobs) {
    throw_bad_request("prompt_logprobs", "'prompt_logprobs' must be in [0, {}], got {}",
                      SamplingParams::kMaxLogprobs, *v);
  }
  if (req.stream) {
    if (*v > 0) {
      throw_bad_request("prompt_logprobs", "'prompt_logprobs' is not available with 'stream'");
    }
    return;
  }
  req.prompt_logprobs = *v;
  req.params.prompt_logprobs = *v;
}

void finish_request(const ServingContext& ctx, std::optional<int> max_tokens,
                    const std::string& prompt_param, GenerateRequest& req,
                    std::optional<int> unset_max_tokens) {
  SamplingParams& p = req.params;
  p.max_tokens = max_tokens;
  // Before validate(), whose message would name max_tokens whatever the client sent.
  if (max_tokens && p.min_tokens > *max_tokens) {
    throw_bad_request("min_tokens", "min_tokens must be <= {} ({}), got {}", req.max_tokens_field,
                      *max_tokens, p.min_tokens);
  }
  try {
    p.validate(ctx.vocab_size);
  } catch (const Error& e) {
    throw ApiError(400, e.what(), param_of(e.what()));
  }
  if (!p.stop.empty() && ctx.tokenizer == nullptr) {
    throw_bad_request("stop", "stop strings need the model's tokenizer");
  }
  // A bound on one request's share of the engine: 1,000 prompts at n = 128 queued 128,000
  // sequences, and everyone else waited behind them.
  const size_t seqs = req.prompts.size() * static_cast<size_t>(std::max(p.n, 1));
  if (seqs > kMaxSequencesPerRequest) {
    throw_bad_request(prompt_param, "this request asks for {} sequences ({} prompts x n = {}); at most {} per request",
                      seqs, req.prompts.size(), p.n, kMaxSequencesPerRequest);
  }
  req.max_tokens.clear();
  for (size_t i = 0; i < req.prompts.size(); ++i) {
    const std::vector<int>& prompt = req.prompts[i];
    const std::string which = req.prompts.size() > 1 ? fmt::format("prompt {}", i) : "the prompt";
    if (prompt.empty()) throw_bad_request(prompt_param, "{} is empty", which);
    for (int id : prompt) {
      if (id < 0 || id >= ctx.vocab_size) {
        throw_bad_request(prompt_param, "{} has token id {} outside the vocabulary [0, {})", which,
                          id, ctx.vocab_size);
      }
    }
    const int len = static_cast<int>(prompt.size());
    if (len >= ctx.max_model_len) {
      throw_bad_request(prompt_param,
                        "This model's maximum context length is {} tokens. However, your request "
                        "has {} input tokens. Please reduce the length of the input.",
                        ctx.max_model_len, len);
    }
    // In 64 bits: max_tokens near INT_MAX would overflow the sum and pass.
    if (max_tokens && int64_t{len} + *max_tokens > ctx.max_model_len) {
      throw_bad_request(req.max_tokens_field,
                        "This model's maximum context length is {} tokens. However, you requested "
                        "{} tokens ({} in the input, {} in the completion). Please reduce the "
                        "length of the input or completion.",
                        ctx.max_model_len, int64_t{len} + *max_tokens, len, *max_tokens);
    }
    const int to_context_end = ctx.max_model_len - len;
    const int budget = max_tokens ? *max_tokens
                                  : std::min(unset_max_tokens.value_or(to_context_end), to_context_end);
    if (p.min_tokens > budget) {
      throw_bad_request("min_tokens", "min_tokens must be <= {} ({}), got {}",
                        req.max_tokens_field, budget, p.min_tokens);
    }
    req.max_tokens.push_back(budget);
  }
}

}  // namespace kestrel::server
