#include "cli/bench_run.h"

#include <chrono>
#include <string>

#include "runtime/progress_bar.h"

namespace kestrel::cli {

namespace {

void add_step(StepPhases& p, double dt, const LLMStats& before, const LLMStats& after) {
  ++p.steps;
  p.step += dt;
  p.prepare += after.prepare_seconds - before.prepare_seconds;
  p.launch += after.launch_seconds - before.launch_seconds;
  p.sample += after.sample_seconds - before.sample_seconds;
}

}  // namespace

Timings run_workload(LLM& llm, const BenchWorkload& w, const std::vector<SamplingParams>& params,
                     ProfileSteps profile) {
  std::vector<RequestStream> streams;
  streams.reserve(w.prompt_token_ids.size());
  for (size_t i = 0; i < w.prompt_token_ids.size(); ++i) {
    streams.push_back(
        llm.add_request(w.prompt_token_ids[i], params[i], "bench-" + std::to_string(i)));
  }
  std::vector<size_t> pending(streams.size());  // unfinished, by index
  for (size_t i = 0; i < pending.size(); ++i) pending[i] = i;
  std::vector<char> has_first(streams.size(), 0);
  size_t num_first = 0;
  Timings t;
  int64_t step_index = 0, steps_since_first = -1;  // -1: some sequence has no token yet
  bool capturing = false;
  ProgressBar bar(streams.size(), true);  // on a terminal only
  const auto start = std::chrono::steady_clock::now();
  while (llm.has_unfinished()) {
    const bool capture = (profile == ProfileSteps::kPrompt && step_index == 0) ||
                         (profile == ProfileSteps::kDecode && steps_since_first >= 2 &&
                          steps_since_first < 4);
    if (capture != capturing) llm.set_profiler_capture(capturing = capture);
    ++step_index;
    if (steps_since_first >= 0) ++steps_since_first;
    const LLMStats before = llm.stats();
    const auto t0 = std::chrono::steady_clock::now();
    llm.step();
    const auto t1 = std::chrono::steady_clock::now();
    const LLMStats after = llm.stats();
    const double dt = std::chrono::duration<double>(t1 - t0).count();
    const int64_t sampled = after.generation_tokens - before.generation_tokens;
    const int64_t computed = after.computed_tokens - before.computed_tokens;
    t.generated += sampled;
    const bool pure_decode = sampled > 0 && computed == sampled;  // one token per sequence
    if (pure_decode) t.decode_tokens += sampled;
    add_step(pure_decode ? t.decode : t.mixed, dt, before, after);
    std::erase_if(pending, [&](size_t i) {
      for (const RequestOutput& o : streams[i].take()) {
        if (has_first[i] || o.outputs.empty() || o.outputs[0].token_ids.empty()) continue;
        has_first[i] = 1;
        if (++num_first == has_first.size()) {
          t.first_tokens = std::chrono::duration<double>(t1 - start).count();
          t.generated_before_first = t.generated;
          steps_since_first = 0;
        }
      }
      return streams[i].finished();
    });
    bar.update(streams.size() - pending.size(), dt > 0 ? double(computed - sampled) / dt : 0,
               dt > 0 ? sampled / dt : 0);
  }
  t.total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (capturing) llm.set_profiler_capture(false);
  return t;
}

}  // namespace kestrel::cli
