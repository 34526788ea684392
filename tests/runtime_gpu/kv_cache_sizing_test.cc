// KV cache sizing arithmetic (src/runtime/kv_cache_sizing.h) on hand-derived numbers.
#include <gtest/gtest.h>

#include "core/error.h"
#include "runtime/kv_cache_sizing.h"

namespace kestrel {
namespace {

constexpr size_t kGiB = size_t{1} << 30, kMiB = size_t{1} << 20;

TEST(KvCacheSizing, GetsWhatTheShareLeaves) {
  DeviceMemoryProfile p;
  p.total = 80 * kGiB;
  p.free_after_profile = 70 * kGiB;  // 10 GiB in use after weights and the profile
  p.weight_bytes = 2 * kGiB;
  p.activation_bytes = 3 * kGiB;
  // 0.9 x 80 = 72 GiB share, minus 10 in use: 62 GiB = 63488 blocks of 1 MiB.
  const KvCacheSize s = size_kv_cache_for_device(p, 0.9f, kMiB, 16, 1600);
  EXPECT_NEAR(s.num_blocks, 63488, 1);  // 0.9f is not exactly 0.9
  EXPECT_EQ(s.bytes, static_cast<size_t>(s.num_blocks) * kMiB);
  EXPECT_NEAR(s.max_concurrency, 634.88, 0.02);  // 100 blocks per 1600-token sequence
  EXPECT_NE(s.summary.find("other 5.00 GiB"), std::string::npos) << s.summary;
}

TEST(KvCacheSizing, TooLittleMemorySaysByHowMuch) {
  DeviceMemoryProfile p;
  p.total = 10 * kGiB;
  p.free_after_profile = 1 * kGiB;  // 9 GiB in use = the whole 0.9 share
  try {
    size_kv_cache_for_device(p, 0.9f, kMiB, 16, 1600);  // one sequence: 100 MiB
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("short by 0.10 GiB"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("max_model_len 1600"), std::string::npos) << e.what();
  }
  EXPECT_THROW(size_kv_cache_for_device(p, 0.0f, kMiB, 16, 1600), Error);
  EXPECT_THROW(size_kv_cache_for_device(p, 1.5f, kMiB, 16, 1600), Error);
}

TEST(KvCacheSizing, WeightsThatDoNotFitSayByHowMuch) {
  // 0.9 x 16 = 14.4 GiB share, 1 GiB in use: 13.4 GiB of room for 15 GiB of weights.
  EXPECT_NO_THROW(check_weights_fit(16 * kGiB, 15 * kGiB, 13 * kGiB, 0.9f));
  try {
    check_weights_fit(16 * kGiB, 15 * kGiB, 15 * kGiB, 0.9f);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("short by 1.60 GiB"), std::string::npos) << e.what();
  }
}

TEST(KvCacheSizing, HostBudgetCappedByUsefulBlocks) {
  // 2 sequences of 160 tokens need 20 blocks of 16; the budget would allow 4096.
  EXPECT_EQ(kv_blocks_for_host_budget(4 * int64_t(kGiB), kMiB, 2, 160, 16), 20);
  EXPECT_EQ(kv_blocks_for_host_budget(5 * int64_t(kMiB), kMiB, 2, 160, 16), 5);
  EXPECT_THROW(kv_blocks_for_host_budget(100, kMiB, 2, 160, 16), Error);
}

}  // namespace
}  // namespace kestrel
