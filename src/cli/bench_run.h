// The bench's run loop: the workload through the engine step by step, with the host-side
// step timers that split pure-decode steps from steps that computed prompt tokens, and the
// model runner's phase timers (prepare, launch, sample) over each kind of step.
#pragma once

#include <cstdint>
#include <vector>

#include "kestrel/llm.h"
#include "kestrel/sampling_params.h"
#include "core/python_random.h"

namespace kestrel::cli {

// Sums over the steps of one kind, in seconds.
struct StepPhases {
  int64_t steps = 0;
  double step = 0;     // engine.step() wall time
  double prepare = 0;  // runner: host batch + copy to the device
  double launch = 0;   // runner: enqueue the forward
  double sample = 0;   // runner: sampling, including the wait for the forward
  // Per step in ms: engine work outside the runner (schedule, postprocess, outputs).
  double engine_ms() const { return steps ? 1e3 * (step - prepare - launch - sample) / steps : 0; }
  double ms(double total) const { return steps ? 1e3 * total / steps : 0; }
};

struct Timings {
  double total = 0, first_tokens = 0;  // seconds: the run; until every sequence has a token
  int64_t generated = 0, generated_before_first = 0;
  int64_t decode_tokens = 0;
  StepPhases decode, mixed;  // pure-decode steps; steps that computed prompt tokens
};

// Which steps an attached profiler captures (ncu --profile-from-start off): none, the first
// step (it computes prompt tokens), or two pure-decode steps two steps after every sequence
// has its first token.
enum class ProfileSteps { kNone, kPrompt, kDecode };

Timings run_workload(LLM& llm, const BenchWorkload& w, const std::vector<SamplingParams>& params,
                     ProfileSteps profile = ProfileSteps::kNone);

}  // namespace kestrel::cli
