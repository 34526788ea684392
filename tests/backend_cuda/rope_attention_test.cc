// qk_norm_rope_attention, the fused decode kernel (q/k RMSNorm, RoPE, K/V store and attention
// in one launch), against the two ops it replaces run one after the other on the same inputs:
// qk_norm_rope_store and attention, each checked against double-precision references in
// rope_store_test.cc and attention_test.cc (and the model against HF in runtime_gpu_tests).
// Decode batches of odd lengths (one-key sequences, 640 keys split 13 ways, 3,000 keys), a
// padding row (slot -1), GQA groups 1 to 16, head dims 16 to 128, with and without q/k norms,
// split plans made for the batch and for a longer context (as a captured graph's), both KV
// layouts. Cache slots no sequence owns hold NaN. The same on an fp8 cache (random power-of-two
// scales), where the fused kernel quantizes the new K/V and attends over their bytes' values.
// Batches of 9+ sequences at head dims 64 and 128 (and every fp8 batch there) take the
// tensor-core decode kernel, whose fused form norms and rotates q in its fragment registers
// and patches the new K/V into its ring: the ten-sequence batch is that case (its keys split,
// with plans made for the batch and for a longer context, as a captured graph's).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "cuda_test_util.h"

namespace kestrel {
namespace {

using namespace cuda_test;

constexpr float kEps = 1e-6f;
constexpr int kMaxPos = 4096;

struct Config {
  int hq, hkv, d, block_size;
  bool norms;
};

// The raw bits of a device tensor's elements (bf16 or fp8), each widened to 16 bits.
std::vector<uint16_t> bits(const Tensor& t, Backend& be) {
  Tensor h = be.to_host(t);
  std::vector<uint16_t> v(static_cast<size_t>(h.numel()));
  if (h.dtype() == DType::kF8E4M3) {
    std::copy_n(h.data_as<uint8_t>(), v.size(), v.begin());
  } else {
    std::memcpy(v.data(), h.data(), v.size() * 2);
  }
  return v;
}

// cached[b]: keys already in the cache for sequence b, whose new token sits at position
// cached[b]; `padding` appends a row as the runner pads graphs (seq_len 1, slot -1).
void run_case(const Config& c, const std::vector<int>& cached, bool padding, int plan_len,
              CudaKvLayout layout, std::mt19937& rng, DType kv_dtype = DType::kBF16) {
  const bool fp8 = kv_dtype == DType::kF8E4M3;
  Backend& be = gpu(layout);
  const int real = static_cast<int>(cached.size());
  const int b_count = real + (padding ? 1 : 0);
  const int heads = c.hq + 2 * c.hkv;
  std::vector<int32_t> seq_lens, qsl{0};
  int max_blocks = 1, used = 0;
  for (int b = 0; b < b_count; ++b) {
    seq_lens.push_back(b < real ? cached[b] + 1 : 1);
    qsl.push_back(b + 1);
    const int nb = (seq_lens.back() + c.block_size - 1) / c.block_size;
    used += b < real ? nb : 0;
    max_blocks = std::max(max_blocks, nb + 1);
  }
  const int num_blocks = used + 3;
  std::vector<int32_t> perm(num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> tables(size_t(b_count) * max_blocks, 0);  // padding: all zeros
  int next = 0;
  for (int b = 0; b < real; ++b) {
    const int nb = (seq_lens[b] + c.block_size - 1) / c.block_size;
    for (int i = 0; i < nb; ++i) tables[size_t(b) * max_blocks + i] = perm[next++];
  }

  // K/V: NaN, random at every cached key; the new tokens' slots are still NaN.
  HostKv cache = nan_kv_cache(layout, num_blocks, c.hkv, c.block_size, c.d, kv_dtype);
  const std::vector<float> scales = fp8 ? random_pow2_scales(2 * c.hkv, rng) : std::vector<float>{};
  auto rows = [&](int n, const float* head_scales) {
    const Shape shape{std::max(n, 1), c.hkv, c.d};
    return fp8 ? random_fp8(shape, rng, head_scales).host : random_bf16(shape, rng).host;
  };
  std::vector<int32_t> positions, slots;
  for (int b = 0; b < b_count; ++b) {
    const int n = b < real ? cached[b] : 0;
    const int32_t* table = &tables[size_t(b) * max_blocks];
    store_sequence(cache, layout, table, n, rows(n, scales.data()),
                   rows(n, scales.data() + (fp8 ? c.hkv : 0)), c.hkv, c.block_size, c.d);
    positions.push_back(n);
    slots.push_back(b < real ? table[n / c.block_size] * c.block_size + n % c.block_size : -1);
  }

  AttentionMetadata meta;
  meta.num_tokens = meta.num_seqs = b_count;
  meta.block_size = c.block_size;
  meta.max_query_len = 1;
  meta.max_seq_len = plan_len;
  upload_paged_indices(be, meta, positions, slots, qsl, seq_lens, tables, max_blocks, rng);

  const Tensor qkv = be.upload(random_bf16(Shape{b_count, int64_t(heads) * c.d}, rng, -2.0f, 2.0f).host,
                               DType::kBF16);
  const Tensor qn = c.norms ? be.upload(random_bf16(Shape{c.d}, rng, 0.5f, 1.5f).host, DType::kBF16)
                            : Tensor();
  const Tensor kn = c.norms ? be.upload(random_bf16(Shape{c.d}, rng, 0.5f, 1.5f).host, DType::kBF16)
                            : Tensor();
  const Tensor cos_sin = be.upload(rope_table(kMaxPos, c.d, 1e6), DType::kF32);
  const AttentionShape shape{c.hq, c.hkv, c.d};
  const float scale = 1.0f / std::sqrt(float(c.d));
  const Shape q_shape{b_count, int64_t(c.hq) * c.d};

  // The two ops, one after the other.
  LayerKvCache kv_ref = upload_kv(be, cache, scales);
  Tensor q_ref = poisoned(DType::kBF16, q_shape, be);
  Tensor out_ref = poisoned(DType::kBF16, q_shape, be);
  be.qk_norm_rope_store(qkv, qn, kn, kEps, cos_sin, shape, meta, kv_ref, q_ref);
  be.attention(q_ref, kv_ref, shape, meta, scale, out_ref);

  // The fused op, twice (the split counters must be back at zero after the first).
  LayerKvCache kv = upload_kv(be, cache, scales);
  Tensor q = poisoned(DType::kBF16, q_shape, be);
  Tensor out = poisoned(DType::kBF16, q_shape, be);
  Tensor out2 = poisoned(DType::kBF16, q_shape, be);
  be.qk_norm_rope_attention(qkv, qn, kn, kEps, cos_sin, shape, meta, kv, scale, q, out);
  be.qk_norm_rope_attention(qkv, qn, kn, kEps, cos_sin, shape, meta, kv, scale, q, out2);

  // Padding rows attend to whatever key 0 of block 0 holds: their outputs are never used.
  const size_t real_elems = size_t(real) * c.hq * c.d;
  std::vector<double> got = fetch(out, be), ref = fetch(out_ref, be);
  got.resize(real_elems);
  ref.resize(real_elems);
  // Only the fp32 summation order differs (and, rarely, one bf16 rounding of a normed k).
  expect_close(got, ref, "attention output", 5e-3, 1e-2, 5e-3);
  std::vector<uint16_t> o1 = bits(out, be), o2 = bits(out2, be);
  o1.resize(real_elems);
  o2.resize(real_elems);
  EXPECT_EQ(o1, o2) << "a second launch gave other results";

  // The cache: the same bits everywhere (NaN where nothing was written), except that a new
  // K element may be one bf16 (or e4m3) step away (its RMSNorm sums in another order).
  const uint16_t nan_bits = fp8 ? 0x7f : 0x7fc0;
  const std::vector<uint16_t> k_got = bits(kv.k, be), k_ref = bits(kv_ref.k, be);
  const std::vector<uint16_t> v_got = bits(kv.v, be), v_ref = bits(kv_ref.v, be);
  int k_bad = 0, v_bad = 0;
  for (size_t i = 0; i < k_ref.size(); ++i) {
    const int diff = fp8 ? std::abs(int(int8_t(k_got[i])) - int(int8_t(k_ref[i])))
                         : std::abs(int(int16_t(k_got[i])) - int(int16_t(k_ref[i])));
    if (k_got[i] != k_ref[i] && (diff > 1 || k_ref[i] == nan_bits || k_got[i] == nan_bits)) ++k_bad;
    if (v_got[i] != v_ref[i]) ++v_bad;
  }
  EXPECT_EQ(k_bad, 0) << "K cache elements that differ";
  EXPECT_EQ(v_bad, 0) << "V cache elements that differ";
}

TEST(CudaRopeAttention, MatchesTheOpsItFuses) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(7);
  const Config configs[] = {
      {16, 8, 128, 16, true},   // Qwen3-0.6B
      {16, 8, 128, 16, false},  // no q/k norm
      {8, 2, 128, 1, true},     // GQA 4, one-token blocks
      {4, 4, 64, 16, true},     // MHA
      {32, 2, 64, 16, true},    // GQA 16: two CTAs per KV head
      {24, 2, 128, 16, true},   // GQA 12: two CTAs of 6 heads
      {4, 2, 32, 16, true},
      {2, 1, 16, 16, false},
  };
  const std::vector<std::vector<int>> batches = {
      {639}, {0}, {5, 100, 1023, 31, 0}, {2999}, {3, 700, 16, 0, 255, 64, 1500, 15, 100, 31}};
  for (CudaKvLayout layout : {CudaKvLayout::kTokenMajor, CudaKvLayout::kHeadMajor}) {
    for (const Config& c : configs) {
      for (const std::vector<int>& cached : batches) {
        const int longest = *std::max_element(cached.begin(), cached.end()) + 1;
        for (int plan_len : {longest, kMaxPos}) {
          for (bool padding : {false, true}) {
            SCOPED_TRACE(testing::Message()
                         << layout_name(layout) << " Hq " << c.hq << " Hkv " << c.hkv << " D "
                         << c.d << " block " << c.block_size << " norms " << c.norms << " seqs "
                         << cached.size() << " longest " << longest << " plan " << plan_len
                         << " padding " << padding);
            run_case(c, cached, padding, plan_len, layout, rng);
          }
        }
      }
    }
  }
  // bf16 at D = 128 takes rings of two or three tiles by batch (attention_decode_mma.cuh):
  // both, forced, at every group there.
  for (const char* ring : {"2", "3"}) {
    ScopedEnv depth("KESTREL_DECODE_MMA_BF16_STAGES", ring);
    for (const Config& c : configs) {
      if (c.d != 128) continue;
      for (const std::vector<int>& cached : batches) {
        SCOPED_TRACE(testing::Message() << "ring " << ring << " Hq " << c.hq << " Hkv " << c.hkv
                                        << " norms " << c.norms << " seqs " << cached.size());
        const int longest = *std::max_element(cached.begin(), cached.end()) + 1;
        run_case(c, cached, true, longest, CudaKvLayout::kTokenMajor, rng);
      }
    }
  }
}

TEST(CudaRopeAttention, Fp8CacheMatchesTheOpsItFuses) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(8);
  const Config configs[] = {{16, 8, 128, 16, true}, {8, 2, 128, 1, false}, {32, 2, 64, 16, true},
                            {4, 2, 32, 16, true}, {2, 1, 16, 16, false}};
  const std::vector<std::vector<int>> batches = {
      {639}, {0}, {5, 100, 1023, 31, 0}, {2999}, {3, 700, 16, 0, 255, 64, 1500, 15, 100, 31}};
  for (CudaKvLayout layout : {CudaKvLayout::kTokenMajor, CudaKvLayout::kHeadMajor}) {
    for (const Config& c : configs) {
      for (const std::vector<int>& cached : batches) {
        const int longest = *std::max_element(cached.begin(), cached.end()) + 1;
        SCOPED_TRACE(testing::Message() << layout_name(layout) << " Hq " << c.hq << " Hkv "
                                        << c.hkv << " D " << c.d << " block " << c.block_size
                                        << " seqs " << cached.size() << " longest " << longest);
        run_case(c, cached, true, longest, layout, rng, DType::kF8E4M3);
      }
    }
  }
}

}  // namespace
}  // namespace kestrel
