// Time to first token of one prompt alone, the latency a chat user feels: each prompt
// length in turn (fresh random ids, so no prefix-cache hits), max_tokens 1, timed on the
// host around LLM::generate. A length seen for the first time is "cold" (the first use of
// its GEMM shapes and kernels); a repeat is "warm". The runner's host timers split each
// request into prepare (batch building and upload), launch (enqueueing the forward) and
// sample (waiting for the device and sampling).
//
// Run: build/bench/ttft_bench MODEL_DIR [len ...]   (default 512 512 2048 8192 8192 500 100 1000 3000 37)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kestrel/llm.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR [prompt length ...]\n", argv[0]);
    return 2;
  }
  std::vector<int> lengths;
  for (int i = 2; i < argc; ++i) lengths.push_back(std::atoi(argv[i]));
  if (lengths.empty()) lengths = {512, 512, 2048, 8192, 8192, 500, 100, 1000, 3000, 37};
  kestrel::EngineConfig config;
  kestrel::LLM llm(argv[1], config);
  kestrel::SamplingParams params;
  params.max_tokens = 1;
  params.ignore_eos = true;
  params.temperature = 0.0f;
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> id(0, llm.vocab_size() - 1);
  std::set<int> seen;
  std::printf("%8s %6s %10s %12s %10s %10s %10s %6s\n", "length", "state", "ttft ms", "prompt tok/s",
              "prepare", "launch", "sample", "steps");
  for (int len : lengths) {
    std::vector<int> prompt(len);
    for (int& t : prompt) t = id(rng);
    const kestrel::LLMStats before = llm.stats();
    const auto t0 = std::chrono::steady_clock::now();
    llm.generate(std::vector<std::vector<int>>{prompt}, params, false);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const kestrel::LLMStats after = llm.stats();
    const int64_t steps = after.eager_steps + after.graph_steps - before.eager_steps - before.graph_steps;
    std::printf("%8d %6s %10.2f %12.0f %10.2f %10.2f %10.2f %6lld\n", len,
                seen.insert(len).second ? "cold" : "warm", s * 1e3, len / s,
                (after.prepare_seconds - before.prepare_seconds) * 1e3,
                (after.launch_seconds - before.launch_seconds) * 1e3,
                (after.sample_seconds - before.sample_seconds) * 1e3, static_cast<long long>(steps));
  }
  return 0;
}
