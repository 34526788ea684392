// Accuracy of the fp8 KV cache against the unquantized one (issue #16), on any model
// directory and device.
//
// The reference engine (kv_cache_dtype auto: bf16 on CUDA, f32 on the CPU) continues N
// random prompts of L ids greedily for S steps, with its top-2 log-probabilities. Then each
// engine under test is teacher-forced on that continuation: for every step k it gets the
// prompt plus the reference's first k tokens, max_tokens 1, its 20 most likely tokens
// (prefix caching makes the growing prefixes cheap). Per step:
//   top-1 agreement:    its most likely token is the reference's;
//   |logprob diff|:     |its log-probability of the reference's token - the reference's|
//                       (counted apart when that token is outside its top 20);
// and free-running greedy agreement: its own greedy continuation against the reference's,
// step by step up to the first step whose reference top-2 margin is below --margin (the
// steps after one that near a tie say nothing about the cache). The reference engine
// teacher-forced on its own continuation is the control row: the noise of prefill against
// decode arithmetic, which the fp8 rows include too.
//
// Run: build/bench/kv_fp8_accuracy MODEL_DIR [--device auto|cpu|cuda] [--prompt-len 32]
//        [--steps S] [--prompts N] [--margin 0.1] [--seed 0]
// S defaults to min(128, max_model_len - L), N to enough prompts for 1,024 steps.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kestrel/llm.h"

namespace {

using kestrel::EngineConfig;
using kestrel::LLM;
using kestrel::SamplingParams;
using kestrel::TokenLogprobs;

struct Options {
  std::string model;
  std::string device = "auto";
  int prompt_len = 32;
  int steps = 0;
  int prompts = 0;
  double margin = 0.1;
  unsigned seed = 0;
};

Options parse(int argc, char** argv) {
  Options o;
  auto usage = [&] {
    std::fprintf(stderr,
                 "usage: %s MODEL_DIR [--device auto|cpu|cuda] [--prompt-len L] [--steps S] "
                 "[--prompts N] [--margin M] [--seed X]\n",
                 argv[0]);
    std::exit(2);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--", 0) != 0) {
      if (!o.model.empty()) usage();
      o.model = a;
      continue;
    }
    if (i + 1 >= argc) usage();
    const std::string v = argv[++i];
    if (a == "--device") o.device = v;
    else if (a == "--prompt-len") o.prompt_len = std::atoi(v.c_str());
    else if (a == "--steps") o.steps = std::atoi(v.c_str());
    else if (a == "--prompts") o.prompts = std::atoi(v.c_str());
    else if (a == "--margin") o.margin = std::atof(v.c_str());
    else if (a == "--seed") o.seed = static_cast<unsigned>(std::atoi(v.c_str()));
    else usage();
  }
  if (o.model.empty() || o.prompt_len < 1) usage();
  return o;
}

SamplingParams greedy(int max_tokens, int logprobs) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.ignore_eos = true;
  p.max_tokens = max_tokens;
  p.logprobs = logprobs;
  return p;
}

// The reference's greedy continuations and their logprobs, per prompt.
struct Continuation {
  std::vector<std::vector<int>> tokens;
  std::vector<std::vector<TokenLogprobs>> logprobs;
};

Continuation continue_greedily(LLM& llm, const std::vector<std::vector<int>>& prompts, int steps,
                               int logprobs) {
  Continuation c;
  for (const auto& out : llm.generate(prompts, greedy(steps, logprobs), false)) {
    c.tokens.push_back(out.outputs.at(0).token_ids);
    c.logprobs.push_back(out.outputs.at(0).logprobs);
  }
  return c;
}

struct Row {
  int steps = 0;
  int top1_same = 0;
  int outside_top = 0;
  double sum_diff = 0, max_diff = 0;
  int greedy_compared = 0, greedy_same = 0, prompts_whole = 0;
  int64_t clamped = 0;
};

// Teacher-forced on the reference's continuation, and its own greedy continuation.
Row measure(LLM& llm, const std::vector<std::vector<int>>& prompts, const Continuation& ref,
            int steps, double margin) {
  std::vector<std::vector<int>> forced;
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (int k = 0; k < steps; ++k) {
      std::vector<int> p = prompts[i];
      p.insert(p.end(), ref.tokens[i].begin(), ref.tokens[i].begin() + k);
      forced.push_back(std::move(p));
    }
  }
  const auto outs = llm.generate(forced, greedy(1, SamplingParams::kMaxLogprobs), false);
  Row r;
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (int k = 0; k < steps; ++k) {
      const TokenLogprobs& got = outs[i * steps + k].outputs.at(0).logprobs.at(0);
      const int want = ref.tokens[i][k];
      ++r.steps;
      r.top1_same += got.token_id == want;
      const auto it = std::find_if(got.top.begin(), got.top.end(),
                                   [&](const auto& t) { return t.first == want; });
      if (it == got.top.end()) {
        ++r.outside_top;
        continue;
      }
      const double d = std::fabs(double(it->second) - ref.logprobs[i][k].logprob);
      r.sum_diff += d;
      r.max_diff = std::max(r.max_diff, d);
    }
  }
  const Continuation own = continue_greedily(llm, prompts, steps, 0);
  for (size_t i = 0; i < prompts.size(); ++i) {
    int until = 0;  // the first step whose reference margin is below `margin`
    while (until < steps) {
      const auto& top = ref.logprobs[i][until].top;
      if (top.size() < 2 || top[0].second - top[1].second < margin) break;
      ++until;
    }
    int same = 0;
    while (same < until && own.tokens[i][same] == ref.tokens[i][same]) ++same;
    r.greedy_compared += until;
    r.greedy_same += same;
    r.prompts_whole += same == until;
  }
  r.clamped = llm.kv_cache_clamped();
  return r;
}

void print_row(const char* name, const Row& r, int num_prompts) {
  const int in_top = r.steps - r.outside_top;
  std::printf("%-12s %6d %8.2f%% %12.5f %12.5f %8d %8d / %-6d %5d / %-5d %10lld\n", name, r.steps,
              100.0 * r.top1_same / r.steps, in_top ? r.sum_diff / in_top : 0.0, r.max_diff,
              r.outside_top, r.greedy_same, r.greedy_compared, r.prompts_whole, num_prompts,
              static_cast<long long>(r.clamped));
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  EngineConfig config;
  config.device = o.device;
  config.seed = o.seed;

  std::vector<std::vector<int>> prompts;
  Continuation ref;
  Row control;
  int steps = o.steps;
  std::string device;
  {
    LLM llm(o.model, config);
    device = llm.device();
    const int room = llm.max_model_len() - o.prompt_len;
    if (steps <= 0) steps = std::min(128, room);
    if (steps <= 0 || steps > room) {
      std::fprintf(stderr, "%d prompt ids + %d steps do not fit max_model_len %d\n", o.prompt_len,
                   steps, llm.max_model_len());
      return 2;
    }
    const int n = o.prompts > 0 ? o.prompts : (1024 + steps - 1) / steps;
    std::mt19937 rng(o.seed);
    std::uniform_int_distribution<int> id(0, llm.vocab_size() - 1);
    prompts.assign(n, std::vector<int>(o.prompt_len));
    for (auto& p : prompts) {
      for (int& t : p) t = id(rng);
    }
    ref = continue_greedily(llm, prompts, steps, 2);
    control = measure(llm, prompts, ref, steps, o.margin);
  }  // one engine at a time: each sizes its cache from the device's memory
  config.kv_cache_dtype = "fp8";
  Row fp8;
  {
    LLM llm(o.model, config);
    fp8 = measure(llm, prompts, ref, steps, o.margin);
  }

  std::printf("model:   %s\n", o.model.c_str());
  std::printf("device:  %s; reference: kv_cache_dtype auto (%s)\n", device.c_str(),
              device.rfind("cuda", 0) == 0 ? "bf16" : "f32");
  std::printf("work:    %zu random prompts of %d ids (seed %u), %d greedy steps each; greedy "
              "compared up to the first reference top-2 margin < %.3g nats\n",
              prompts.size(), o.prompt_len, o.seed, steps, o.margin);
  std::printf("%-12s %6s %9s %12s %12s %8s %17s %13s %10s\n", "kv cache", "steps", "top-1",
              "mean|dlp|", "max|dlp|", "!top20", "greedy same", "whole prompts", "clamped");
  print_row("auto (ctrl)", control, static_cast<int>(prompts.size()));
  print_row("fp8", fp8, static_cast<int>(prompts.size()));
  return 0;
}
