#include "core/python_random.h"

#include <bit>

#include "core/error.h"

namespace kestrel {

namespace {

constexpr int kM = 397;
constexpr uint32_t kMatrixA = 0x9908b0dfu;
constexpr uint32_t kUpperMask = 0x80000000u;
constexpr uint32_t kLowerMask = 0x7fffffffu;

}  // namespace

void PythonRandom::init_genrand(uint32_t s) {
  mt_[0] = s;
  for (int i = 1; i < kN; ++i) {
    mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  }
  index_ = kN;
}

// Matsumoto and Nishimura's init_by_array, as CPython's _randommodule.c uses it.
void PythonRandom::init_by_array(const uint32_t* key, int key_length) {
  init_genrand(19650218u);
  int i = 1, j = 0;
  for (int k = kN > key_length ? kN : key_length; k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525u)) + key[j] +
             static_cast<uint32_t>(j);
    ++i;
    ++j;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
    if (j >= key_length) j = 0;
  }
  for (int k = kN - 1; k > 0; --k) {
    mt_[i] =
        (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941u)) - static_cast<uint32_t>(i);
    ++i;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
  }
  mt_[0] = 0x80000000u;  // guarantees a non-zero initial state
  index_ = kN;
}

void PythonRandom::seed(uint64_t seed) {
  // CPython splits abs(n) into 32-bit words, least significant first, dropping leading
  // zero words but keeping at least one (seed 0 -> key [0]).
  uint32_t key[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  init_by_array(key, key[1] != 0 ? 2 : 1);
}

void PythonRandom::twist() {
  for (int kk = 0; kk < kN; ++kk) {
    const uint32_t y = (mt_[kk] & kUpperMask) | (mt_[(kk + 1) % kN] & kLowerMask);
    mt_[kk] = mt_[(kk + kM) % kN] ^ (y >> 1) ^ ((y & 1u) ? kMatrixA : 0u);
  }
  index_ = 0;
}

uint32_t PythonRandom::genrand_uint32() {
  if (index_ >= kN) twist();
  uint32_t y = mt_[index_++];
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= (y >> 18);
  return y;
}

uint64_t PythonRandom::getrandbits(int k) {
  KS_CHECK(k >= 0 && k <= 64, "getrandbits: k must be in [0, 64], got {}", k);
  if (k == 0) return 0;
  if (k <= 32) return genrand_uint32() >> (32 - k);
  // CPython fills 32-bit words least significant first; the last word keeps its top bits.
  const uint64_t low = genrand_uint32();
  const uint64_t high = genrand_uint32() >> (64 - k);
  return low | (high << 32);
}

uint64_t PythonRandom::randbelow(uint64_t n) {
  KS_CHECK(n >= 1, "randbelow: n must be >= 1");
  const int k = std::bit_width(n);  // n.bit_length(): a power of two still takes k bits
  uint64_t r = getrandbits(k);
  while (r >= n) r = getrandbits(k);
  return r;
}

int64_t PythonRandom::randint(int64_t a, int64_t b) {
  KS_CHECK(a <= b, "randint: empty range [{}, {}]", a, b);
  const uint64_t width = static_cast<uint64_t>(b) - static_cast<uint64_t>(a) + 1;
  KS_CHECK(width != 0, "randint: range [{}, {}] is too wide", a, b);
  return static_cast<int64_t>(static_cast<uint64_t>(a) + randbelow(width));
}

double PythonRandom::random() {
  const uint32_t a = genrand_uint32() >> 5;  // 27 bits
  const uint32_t b = genrand_uint32() >> 6;  // 26 bits
  return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

BenchWorkload nano_vllm_bench_workload(int num_seqs, int max_input_len, int max_output_len,
                                       uint64_t seed) {
  KS_CHECK(num_seqs >= 0 && max_input_len >= 100 && max_output_len >= 100,
           "bench workload: need num_seqs >= 0 and max lengths >= 100");
  PythonRandom rng(seed);
  BenchWorkload w;
  w.prompt_token_ids.resize(num_seqs);
  for (auto& prompt : w.prompt_token_ids) {
    // range(randint(...)) is evaluated before the inner list's randint(0, 10000) calls.
    prompt.resize(static_cast<size_t>(rng.randint(100, max_input_len)));
    for (int& t : prompt) t = static_cast<int>(rng.randint(0, 10000));
  }
  w.max_tokens.resize(num_seqs);
  for (int& m : w.max_tokens) m = static_cast<int>(rng.randint(100, max_output_len));
  return w;
}

}  // namespace kestrel
