// Oracle: CPython itself. Long sequences are produced by running python3 at test time
// (python3 is part of CI); a few values and the DESIGN.md workload totals are also written
// here as constants (printed once by python3 3.11's `random`, and by DESIGN.md).
#include "core/python_random.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"

namespace kestrel {
namespace {

// Runs `python3 -c <code>` and returns its stdout; fails the test if python3 fails.
std::string run_python(const std::string& code) {
  const std::string cmd = "python3 -c '" + code + "'";
  FILE* pipe = popen(cmd.c_str(), "r");
  EXPECT_NE(pipe, nullptr) << "cannot run python3";
  if (pipe == nullptr) return "";
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  EXPECT_EQ(pclose(pipe), 0) << "python3 failed: " << cmd;
  return out;
}

template <typename T>
std::vector<T> parse_numbers(const std::string& text) {
  std::istringstream in(text);
  std::vector<T> v;
  T x;
  while (in >> x) v.push_back(x);
  return v;
}

TEST(PythonRandom, FirstBenchDrawsMatchCPython) {
  // random.seed(0); randint(100, 1024), then randint(0, 10000) x 964: from python3.
  PythonRandom rng(0);
  EXPECT_EQ(rng.randint(100, 1024), 964);
  EXPECT_EQ(rng.randint(0, 10000), 6311);
  EXPECT_EQ(rng.randint(0, 10000), 6890);
  EXPECT_EQ(rng.randint(0, 10000), 663);
  EXPECT_EQ(rng.randint(0, 10000), 4242);
  EXPECT_EQ(rng.randint(0, 10000), 8376);
}

TEST(PythonRandom, RandintSequencesMatchCPythonForManySeeds) {
  // Seeds with one and two 32-bit key words, and the largest 64-bit one.
  for (const uint64_t seed : {0ull, 1ull, 12345ull, 4294967295ull, 4294967301ull,
                              9223372036854775815ull, 18446744073709551615ull}) {
    const std::string code = "import random; random.seed(" + std::to_string(seed) +
                             "); print(*[random.randint(100, 1024) for _ in range(2000)]);"
                             " print(*[random.randint(-5, 5) for _ in range(500)])";
    const auto expected = parse_numbers<int64_t>(run_python(code));
    ASSERT_EQ(expected.size(), 2500u) << "seed " << seed;
    PythonRandom rng(seed);
    for (size_t i = 0; i < 2000; ++i) {
      ASSERT_EQ(rng.randint(100, 1024), expected[i]) << "seed " << seed << " draw " << i;
    }
    for (size_t i = 2000; i < 2500; ++i) {
      ASSERT_EQ(rng.randint(-5, 5), expected[i]) << "seed " << seed << " draw " << i;
    }
  }
}

TEST(PythonRandom, GetrandbitsAndWideRangesMatchCPython) {
  // Widths 1..64 exercise the one-word and two-word paths; randint(0, 0) consumes a word
  // (randbelow(1) draws 1 bit), and wide ranges exercise the rejection loop with k > 32.
  std::string code =
      "import random; random.seed(777); out = []\n"
      "for k in range(0, 65): out.append(random.getrandbits(k))\n"
      "out.append(random.randint(0, 0))\n"
      "for _ in range(200): out.append(random.randint(0, 3 * 2**40))\n"
      "for _ in range(50): out.append(random.randint(-2**62, 2**62))\n"
      "print(*out)";
  // Parse as strings: values reach 2^64 - 1 and negative numbers, beyond one integer type.
  std::istringstream in(run_python(code));
  std::vector<std::string> tokens;
  for (std::string t; in >> t;) tokens.push_back(t);
  ASSERT_EQ(tokens.size(), 65u + 1 + 200 + 50);
  PythonRandom rng(777);
  size_t i = 0;
  for (int k = 0; k <= 64; ++k, ++i) {
    ASSERT_EQ(std::to_string(rng.getrandbits(k)), tokens[i]) << "k=" << k;
  }
  ASSERT_EQ(std::to_string(rng.randint(0, 0)), tokens[i++]);
  for (int n = 0; n < 200; ++n, ++i) {
    ASSERT_EQ(std::to_string(rng.randint(0, 3ll << 40)), tokens[i]) << "draw " << n;
  }
  for (int n = 0; n < 50; ++n, ++i) {
    ASSERT_EQ(std::to_string(rng.randint(-(1ll << 62), 1ll << 62)), tokens[i]) << n;
  }
}

TEST(PythonRandom, RandomMatchesCPythonBitForBit) {
  const auto expected = parse_numbers<std::string>(
      run_python("import random; random.seed(2024); print(*[random.random().hex() for _ in "
                 "range(300)])"));
  ASSERT_EQ(expected.size(), 300u);
  PythonRandom rng(2024);
  for (size_t i = 0; i < expected.size(); ++i) {
    const double x = rng.random();
    ASSERT_EQ(x, std::strtod(expected[i].c_str(), nullptr)) << "draw " << i;
    ASSERT_GE(x, 0.0);
    ASSERT_LT(x, 1.0);
  }
}

TEST(PythonRandom, RejectsBadArguments) {
  PythonRandom rng(0);
  EXPECT_THROW(rng.getrandbits(65), Error);
  EXPECT_THROW(rng.getrandbits(-1), Error);
  EXPECT_THROW(rng.randint(3, 2), Error);
  EXPECT_THROW(rng.randbelow(0), Error);
}

TEST(PythonRandom, NanoVllmBenchWorkloadMatchesDesignTotals) {
  // DESIGN.md: 256 sequences, seed 0 -> 142,827 prompt tokens and 133,966 output tokens.
  const BenchWorkload w = nano_vllm_bench_workload();
  ASSERT_EQ(w.prompt_token_ids.size(), 256u);
  ASSERT_EQ(w.max_tokens.size(), 256u);
  size_t prompt_tokens = 0;
  for (const auto& p : w.prompt_token_ids) {
    prompt_tokens += p.size();
    for (int t : p) ASSERT_TRUE(t >= 0 && t <= 10000);
  }
  EXPECT_EQ(prompt_tokens, 142827u);
  EXPECT_EQ(std::accumulate(w.max_tokens.begin(), w.max_tokens.end(), 0), 133966);
  // Spot values printed by python3 running bench.py's two list comprehensions.
  EXPECT_EQ(w.prompt_token_ids[0].size(), 964u);
  EXPECT_EQ(w.prompt_token_ids[1].size(), 724u);
  EXPECT_EQ(w.prompt_token_ids[4].size(), 316u);
  EXPECT_EQ(w.prompt_token_ids[0][4], 8376);
  EXPECT_EQ(w.max_tokens[0], 845);
  EXPECT_EQ(w.max_tokens[4], 500);
}

TEST(PythonRandom, NanoVllmBenchWorkloadMatchesCPythonTokenForToken) {
  const std::string code =
      "from random import randint, seed\n"
      "seed(0)\n"
      "p = [[randint(0, 10000) for _ in range(randint(100, 1024))] for _ in range(256)]\n"
      "o = [randint(100, 1024) for _ in range(256)]\n"
      "print(*[len(x) for x in p]); print(*[t for x in p for t in x]); print(*o)";
  const auto expected = parse_numbers<int>(run_python(code));
  const BenchWorkload w = nano_vllm_bench_workload();
  std::vector<int> actual;
  for (const auto& p : w.prompt_token_ids) actual.push_back(static_cast<int>(p.size()));
  for (const auto& p : w.prompt_token_ids) actual.insert(actual.end(), p.begin(), p.end());
  actual.insert(actual.end(), w.max_tokens.begin(), w.max_tokens.end());
  ASSERT_EQ(actual.size(), expected.size());
  EXPECT_TRUE(actual == expected);
}

}  // namespace
}  // namespace kestrel
