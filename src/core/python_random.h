// PythonRandom: CPython's `random` module (MT19937) reproduced exactly, so that workloads
// defined by Python scripts (nano-vLLM's bench.py: `random.seed(0)` then `randint` calls)
// can be rebuilt in C++ token for token.
//
// Covered: random.seed(int) for ints in [0, 2^64), getrandbits(k) for k <= 64,
// randint / randrange-style bounded draws (CPython's _randbelow_with_getrandbits, with its
// rejection loop, so the number of words consumed matches too) and random().
// Not thread-safe: one instance per thread.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace kestrel {

class PythonRandom {
 public:
  // Same state as `random.seed(seed)`.
  explicit PythonRandom(uint64_t seed) { this->seed(seed); }

  void seed(uint64_t seed);

  // The next raw MT19937 output (CPython's genrand_uint32).
  uint32_t genrand_uint32();
  // `random.getrandbits(k)`. REQUIRES: 0 <= k <= 64; throws kestrel::Error otherwise.
  uint64_t getrandbits(int k);
  // `random._randbelow(n)`: uniform in [0, n). REQUIRES n >= 1.
  uint64_t randbelow(uint64_t n);
  // `random.randint(a, b)`: uniform in [a, b], both ends included. REQUIRES a <= b.
  int64_t randint(int64_t a, int64_t b);
  // `random.random()`: uniform double in [0, 1) with 53 random bits.
  double random();

 private:
  static constexpr int kN = 624;
  void init_genrand(uint32_t s);
  void init_by_array(const uint32_t* key, int key_length);
  void twist();

  std::array<uint32_t, kN> mt_{};
  int index_ = kN;
};

// The workload of nano-vLLM's bench.py, drawn in its order: random.seed(seed); for each
// sequence `[randint(0, 10000) for _ in range(randint(100, max_input_len))]`; then for each
// sequence max_tokens = randint(100, max_output_len). With the defaults this is the
// project's headline benchmark (142,827 prompt tokens, 133,966 output tokens).
struct BenchWorkload {
  std::vector<std::vector<int>> prompt_token_ids;
  std::vector<int> max_tokens;
};
BenchWorkload nano_vllm_bench_workload(int num_seqs = 256, int max_input_len = 1024,
                                       int max_output_len = 1024, uint64_t seed = 0);

}  // namespace kestrel
