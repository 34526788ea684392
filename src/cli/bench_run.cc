#include "cli/bench_run.h"
#include "runtime/progress_bar.h"

#include <chrono>
#include <string>
#include <unordered_map>

#include "engine/llm_engine.h"
#include "backend/backend.h"
#include "runtime/model_runner.h"

namespace kestrel::cli {

namespace {

void add_step(StepPhases& p, double dt, const RunnerStats& before, const RunnerStats& after) {
  ++p.steps;
  p.step += dt;
  p.prepare += after.prepare_seconds - before.prepare_seconds;
  p.launch += after.launch_seconds - before.launch_seconds;
  p.sample += after.sample_seconds - before.sample_seconds;
}

}  // namespace

Timings run_workload(LLM& llm, const BenchWorkload& w, const std::vector<SamplingParams>& params,
                     ProfileSteps profile) {
  LLMEngine& engine = llm.engine();
  const ModelRunner& runner = llm.runner();
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < w.prompt_token_ids.size(); ++i) {
    const std::string id = "bench-" + std::to_string(i);
    index[id] = i;
    engine.add_request(id, w.prompt_token_ids[i], params[i]);
  }
  std::vector<char> has_first(w.prompt_token_ids.size(), 0);
  size_t num_first = 0;
  Timings t;
  Backend& backend = llm.runner().backend();
  int64_t step_index = 0, steps_since_first = -1;  // -1: some sequence has no token yet
  bool capturing = false;
  ProgressBar bar(w.prompt_token_ids.size(), true);  // on a terminal only
  size_t finished = 0;
  const auto start = std::chrono::steady_clock::now();
  while (engine.has_unfinished()) {
    const bool capture = (profile == ProfileSteps::kPrompt && step_index == 0) ||
                         (profile == ProfileSteps::kDecode && steps_since_first >= 2 &&
                          steps_since_first < 4);
    if (capture != capturing) backend.set_profiler_capture(capturing = capture);
    ++step_index;
    if (steps_since_first >= 0) ++steps_since_first;
    const EngineStats before = engine.stats();
    const RunnerStats runner_before = runner.stats();
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<RequestOutput> outs = engine.step();
    const auto t1 = std::chrono::steady_clock::now();
    const EngineStats after = engine.stats();
    const double dt = std::chrono::duration<double>(t1 - t0).count();
    const int64_t sampled = after.total_generation_tokens - before.total_generation_tokens;
    const int64_t computed = after.total_computed_tokens - before.total_computed_tokens;
    t.generated += sampled;
    const bool pure_decode = sampled > 0 && computed == sampled;  // one token per sequence
    if (pure_decode) t.decode_tokens += sampled;
    add_step(pure_decode ? t.decode : t.mixed, dt, runner_before, runner.stats());
    for (const RequestOutput& o : outs) {
      auto it = index.find(o.request_id);
      if (o.finished && it != index.end()) ++finished;
      if (it == index.end() || has_first[it->second] || o.outputs.empty() ||
          o.outputs[0].token_ids.empty()) {
        continue;
      }
      has_first[it->second] = 1;
      if (++num_first == has_first.size()) {
        t.first_tokens = std::chrono::duration<double>(t1 - start).count();
        t.generated_before_first = t.generated;
        steps_since_first = 0;
      }
    }
    bar.update(finished, dt > 0 ? double(computed - sampled) / dt : 0, dt > 0 ? sampled / dt : 0);
  }
  t.total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (capturing) backend.set_profiler_capture(false);
  return t;
}

}  // namespace kestrel::cli
