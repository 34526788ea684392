// Paged attention over flat mixed batches against a double-precision reference: decodes,
// prefill chunks after cached prefixes, long rows, GQA groups 1 to 16, head dims 16 to 128,
// block sizes 16 and 1, blocks scattered through the cache. Pure decode batches take the
// decode kernel (groups <= 16), batches with prefill rows at head dims 64 and 128 the
// tensor-core kernel (while its dispatch is on; attention_prefill.cu, or on compute
// capability 9.0 its wgmma twin attention_prefill_ws_sm90a.cu), everything else the general
// one. Cache slots that no sequence owns hold NaN, so a read past a sequence's keys
// shows up in the output. Every batch comes with a shuffled seq_order (the decode kernel's
// CTA order).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <numeric>

#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"
#include "cuda_test_util.h"

namespace kestrel {
namespace {

using namespace cuda_test;

// expect_close's tolerance (2% of the element plus 1% of the output's rms) plus a
// per-element allowance for rounding the kernel is allowed beyond fp32 (see run_case).
void expect_attention_close(const std::vector<double>& got, const std::vector<double>& ref,
                            const std::vector<double>& allowance) {
  ASSERT_EQ(got.size(), ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  ASSERT_GT(den, 0.0) << "reference is all zeros";
  const double rms = std::sqrt(den / ref.size());
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double tol = 2e-2 * std::fabs(ref[i]) + 1e-2 * rms + allowance[i];
    if (!(std::isfinite(got[i]) && std::fabs(got[i] - ref[i]) <= tol) && ++bad <= 5) {
      ADD_FAILURE() << "attention: element " << i << " is " << got[i] << ", expected " << ref[i]
                    << " (allowance for bf16 P " << allowance[i] << ")";
    }
  }
  EXPECT_EQ(bad, 0) << bad << " of " << ref.size() << " elements off";
  EXPECT_LE(std::sqrt(num / den), 1e-2) << "relative error norm";
}

// Decode batches of kDecodeMmaMinBf16Seqs or more sequences at head dims 64 and 128 take the
// tensor-core decode kernel (attention_decode_mma.cu); this set to 0 sends them to the
// CUDA-core one, to N > 0 moves the threshold to N sequences.
constexpr const char* kBf16DecodeMma = "KESTREL_DECODE_MMA_BF16";

struct SeqSpec {
  int cached;      // keys already in the cache
  int new_tokens;  // query tokens this step (their keys are in the cache too)
};

struct Config {
  int hq, hkv, d, block_size;
};

// kv_dtype kF8E4M3: an fp8 cache of random bytes with random power-of-two scales per KV
// head; the reference attends over the values the bytes hold.
void run_case(const Config& c, const std::vector<SeqSpec>& seqs, CudaKvLayout layout,
              std::mt19937& rng, DType kv_dtype = DType::kBF16, bool scatter = true) {
  Backend& be = gpu(layout);
  const int b_count = static_cast<int>(seqs.size());
  const int group = c.hq / c.hkv;
  std::vector<int32_t> qsl{0}, seq_lens;
  int max_blocks = 1, used_blocks = 0;
  for (const SeqSpec& s : seqs) {
    qsl.push_back(qsl.back() + s.new_tokens);
    seq_lens.push_back(s.cached + s.new_tokens);
    const int nb = (seq_lens.back() + c.block_size - 1) / c.block_size;
    used_blocks += nb;
    max_blocks = std::max(max_blocks, nb + 1);  // + 1: trailing unused entries stay 0
  }
  const int t_count = qsl.back();
  const int num_blocks = used_blocks + 3;

  // Scatter the sequences' blocks over the cache (or not: each sequence's pages in order).
  std::vector<int32_t> perm(num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  if (scatter) std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> tables(size_t(b_count) * max_blocks, 0);
  int next = 0;
  for (int b = 0; b < b_count; ++b) {
    const int nb = (seq_lens[b] + c.block_size - 1) / c.block_size;
    for (int i = 0; i < nb; ++i) tables[size_t(b) * max_blocks + i] = perm[next++];
  }
  auto slot_of = [&](int b, int pos) {
    return tables[size_t(b) * max_blocks + pos / c.block_size] * c.block_size + pos % c.block_size;
  };

  // K/V: NaN everywhere, random values at each sequence's key slots.
  const bool fp8 = kv_dtype == DType::kF8E4M3;
  const std::vector<float> scales = fp8 ? random_pow2_scales(2 * c.hkv, rng) : std::vector<float>{};
  HostKv cache = nan_kv_cache(layout, num_blocks, c.hkv, c.block_size, c.d, kv_dtype);
  std::vector<std::vector<double>> keys(b_count), vals(b_count);  // [pos, hkv, d]
  for (int b = 0; b < b_count; ++b) {
    const Shape rows{seq_lens[b], c.hkv, c.d};
    Bf16Data kd = fp8 ? random_fp8(rows, rng, scales.data()) : random_bf16(rows, rng);
    Bf16Data vd = fp8 ? random_fp8(rows, rng, scales.data() + c.hkv) : random_bf16(rows, rng);
    store_sequence(cache, layout, &tables[size_t(b) * max_blocks], seq_lens[b], kd.host, vd.host,
                   c.hkv, c.block_size, c.d);
    keys[b] = std::move(kd.values);
    vals[b] = std::move(vd.values);
  }

  Bf16Data q = random_bf16(Shape{t_count, int64_t(c.hq) * c.d}, rng, -3.0f, 3.0f);
  std::vector<int32_t> positions, slots;
  for (int b = 0; b < b_count; ++b) {
    for (int i = 0; i < seqs[b].new_tokens; ++i) {
      positions.push_back(seqs[b].cached + i);
      slots.push_back(slot_of(b, seqs[b].cached + i));
    }
  }
  AttentionMetadata meta;
  meta.num_tokens = t_count;
  meta.num_seqs = b_count;
  meta.block_size = c.block_size;
  for (const SeqSpec& s : seqs) {
    meta.max_query_len = std::max(meta.max_query_len, s.new_tokens);
    meta.max_seq_len = std::max(meta.max_seq_len, s.cached + s.new_tokens);
  }
  upload_paged_indices(be, meta, positions, slots, qsl, seq_lens, tables, max_blocks, rng);
  LayerKvCache kv = upload_kv(be, cache, scales);
  Tensor out = poisoned(DType::kBF16, Shape{t_count, int64_t(c.hq) * c.d}, be);
  const double scale = 1.0 / std::sqrt(double(c.d));
  be.attention(be.upload(q.host, DType::kBF16), kv, AttentionShape{c.hq, c.hkv, c.d}, meta,
                  static_cast<float>(scale), out);

  // The tensor-core kernel (batches with prefill rows at D 64 and 128; attention_prefill.cu)
  // rounds the softmax weights P to bf16 for the P V product, as FlashAttention does, while
  // the row sums stay those of the fp32 weights. Round-to-nearest bf16 keeps 8 significant
  // bits, so each weight is off by at most 2^-9 of itself and an output element by at most
  // 2^-9 sum_j p_j |v_j| / sum_j p_j (<= 2^-9 max |v|); the test allows twice that bound
  // (2^-8, for exp2f's and the fp32 sums' few ulps), per element, on that path only. The
  // other kernels keep P in fp32 and get no allowance.
  const bool p_in_bf16 = meta.max_query_len > 1 && (c.d == 64 || c.d == 128);
  std::vector<double> allowance(size_t(t_count) * c.hq * c.d, 0.0);
  std::vector<double> ref(size_t(t_count) * c.hq * c.d);
  std::vector<double> p;
  for (int b = 0; b < b_count; ++b) {
    for (int i = 0; i < seqs[b].new_tokens; ++i) {
      const int t = qsl[b] + i;
      const int pos = seqs[b].cached + i;
      for (int h = 0; h < c.hq; ++h) {
        const int g = h / group;
        const double* qv = &q.values[(size_t(t) * c.hq + h) * c.d];
        p.assign(pos + 1, 0.0);
        double mx = -1e300;
        for (int j = 0; j <= pos; ++j) {
          const double* kv_row = &keys[b][(size_t(j) * c.hkv + g) * c.d];
          double s = 0;
          for (int e = 0; e < c.d; ++e) s += qv[e] * kv_row[e];
          p[j] = s * scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (double& x : p) sum += (x = std::exp(x - mx));
        double* o = &ref[(size_t(t) * c.hq + h) * c.d];
        double* allow = &allowance[(size_t(t) * c.hq + h) * c.d];
        for (int j = 0; j <= pos; ++j) {
          const double* v_row = &vals[b][(size_t(j) * c.hkv + g) * c.d];
          for (int e = 0; e < c.d; ++e) {
            o[e] += p[j] / sum * v_row[e];
            if (p_in_bf16) allow[e] += std::ldexp(p[j] / sum * std::fabs(v_row[e]), -8);
          }
        }
      }
    }
  }
  expect_attention_close(fetch(out, be), ref, allowance);
}

const CudaKvLayout kLayouts[] = {CudaKvLayout::kTokenMajor, CudaKvLayout::kHeadMajor};

const Config kConfigs[] = {
    {4, 4, 64, 16},     // MHA
    {16, 8, 128, 16},   // Qwen3-0.6B (GQA 2)
    {8, 2, 128, 1},     // GQA 4, one-token blocks
    {12, 4, 128, 16},   // GQA 3: query tiles of 5 tokens
    {16, 1, 64, 16},    // GQA 16 (the largest group)
    {6, 3, 64, 1},
};

TEST(CudaAttention, DecodeBatch) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(51);
  std::uniform_int_distribution<int> ctx(0, 300);
  for (const Config& c : kConfigs) {
    std::vector<SeqSpec> seqs;
    for (int i = 0; i < 7; ++i) seqs.push_back({ctx(rng), 1});
    seqs.push_back({0, 1});  // a first token: one key
    for (CudaKvLayout layout : kLayouts) {
      SCOPED_TRACE(testing::Message() << layout_name(layout) << " Hq " << c.hq << " Hkv " << c.hkv
                                      << " D " << c.d << " block " << c.block_size);
      run_case(c, seqs, layout, rng);
    }
  }
}

TEST(CudaAttention, MixedPrefillAndDecode) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(52);
  const std::vector<SeqSpec> seqs{{0, 33}, {100, 1}, {17, 7}, {0, 1}, {250, 16}, {31, 2}, {5, 200}};
  for (const Config& c : kConfigs) {
    for (CudaKvLayout layout : kLayouts) {
      SCOPED_TRACE(testing::Message() << layout_name(layout) << " Hq " << c.hq << " Hkv " << c.hkv
                                      << " D " << c.d << " block " << c.block_size);
      run_case(c, seqs, layout, rng);
    }
  }
}

TEST(CudaAttention, LongRows) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(53);
  const std::vector<SeqSpec> seqs{{0, 1000}, {990, 10}, {1023, 1}};
  for (const Config& c : {Config{8, 2, 128, 16}, Config{4, 4, 64, 1}}) {
    for (CudaKvLayout layout : kLayouts) {
      SCOPED_TRACE(testing::Message() << layout_name(layout) << " Hq " << c.hq << " Hkv " << c.hkv
                                      << " D " << c.d << " block " << c.block_size);
      run_case(c, seqs, layout, rng);
    }
  }
}

TEST(CudaAttention, LongContextDecodeSplitsKeys) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(55);
  // Too few sequences to fill the GPU: the keys are split over CTAs and merged.
  const std::vector<SeqSpec> seqs{{3000, 1}, {1999, 1}, {40, 1}};
  for (const Config& c : {Config{16, 8, 128, 16}, Config{16, 1, 64, 1}}) {
    for (CudaKvLayout layout : kLayouts) {
      SCOPED_TRACE(testing::Message() << layout_name(layout) << " Hq " << c.hq << " Hkv " << c.hkv
                                      << " D " << c.d << " block " << c.block_size);
      run_case(c, seqs, layout, rng);
    }
  }
}

TEST(CudaAttention, DecodeKernelEveryHeadDimAndGroup) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(56);
  ScopedEnv cuda_cores(kBf16DecodeMma, "0");  // 10 sequences: the CUDA-core kernel's test
  // Contexts around the decode kernel's key tiles (16 keys per tile at D = 128, 32 at D = 64
  // and 32, 64 at D = 16) and one-key sequences; group 5 pads to 8 rows; group 16 takes two
  // CTAs per KV head.
  const Config configs[] = {{2, 2, 16, 16}, {8, 2, 32, 1},  {10, 2, 64, 16}, {8, 1, 128, 16},
                            {16, 2, 128, 1}, {3, 3, 32, 16}, {16, 16, 16, 1}, {32, 2, 64, 16}};
  const std::vector<SeqSpec> seqs{{0, 1},   {63, 1},  {64, 1},  {127, 1}, {128, 1},
                                  {255, 1}, {256, 1}, {300, 1}, {513, 1}, {5, 1}};
  for (const Config& c : configs) {
    for (CudaKvLayout layout : kLayouts) {
      SCOPED_TRACE(testing::Message() << layout_name(layout) << " Hq " << c.hq << " Hkv " << c.hkv
                                      << " D " << c.d << " block " << c.block_size);
      run_case(c, seqs, layout, rng);
    }
  }
}

TEST(CudaAttention, DecodeKernelSplitsKeys) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(57);
  // Few sequences: the decode kernel splits the keys (chunks not aligned to pages at block
  // 16 when the chunk is not a multiple of it) and the merge kernel combines them. Four bf16
  // sequences would take the tensor-core kernel at head dims 64 and 128; this is the
  // CUDA-core kernel's test.
  ScopedEnv cuda_cores(kBf16DecodeMma, "0");
  const std::vector<SeqSpec> seqs{{4000, 1}, {700, 1}, {129, 1}, {0, 1}};
  for (const Config& c : {Config{8, 2, 32, 16}, Config{12, 3, 64, 1}, Config{8, 8, 128, 16}}) {
    for (CudaKvLayout layout : kLayouts) {
      SCOPED_TRACE(testing::Message() << layout_name(layout) << " Hq " << c.hq << " Hkv " << c.hkv
                                      << " D " << c.d << " block " << c.block_size);
      run_case(c, seqs, layout, rng);
    }
  }
}

TEST(CudaAttention, LongTailDecodeBatch) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(59);
  // Several waves of CTAs with contexts up to 1,500 keys: the plan halves the longer half of
  // the batch (AttentionSplit::tail_seqs; the order is shuffled, so which sequences are
  // halved is arbitrary, and halves of short ones keep all their keys in the first CTA).
  std::vector<SeqSpec> seqs;
  std::uniform_int_distribution<int> ctx(0, 1500);
  for (int i = 0; i < 150; ++i) seqs.push_back({ctx(rng), 1});
  seqs.push_back({300, 1});
  // Hkv 8 and group 2 (1,208 CTAs); group 16 in two parts (1,208); D 64 (1,208). The tail
  // halves are the CUDA-core decode kernel's.
  ScopedEnv cuda_cores(kBf16DecodeMma, "0");
  for (const Config& c : {Config{16, 8, 128, 16}, Config{64, 4, 128, 16}, Config{16, 8, 64, 1}}) {
    for (CudaKvLayout layout : kLayouts) {
      SCOPED_TRACE(testing::Message() << layout_name(layout) << " Hq " << c.hq << " Hkv " << c.hkv
                                      << " D " << c.d << " block " << c.block_size);
      run_case(c, seqs, layout, rng);
    }
  }
}

TEST(CudaAttention, LargeDecodeBatch) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(58);
  // Contexts under 256 keys are never split: the decode kernel writes bf16 output directly.
  // At Hkv 8, 300 sequences are several waves of CTAs.
  std::vector<SeqSpec> seqs;
  std::uniform_int_distribution<int> ctx(0, 200);
  for (int i = 0; i < 300; ++i) seqs.push_back({ctx(rng), 1});
  for (const char* mma : {"1", "0"}) {  // D 64 and 128: the tensor-core kernel, then not
    ScopedEnv dispatch(kBf16DecodeMma, mma);
    for (const Config& c : {Config{16, 8, 128, 16}, Config{8, 1, 64, 1}, Config{8, 2, 32, 16},
                            Config{20, 4, 16, 1}}) {
      SCOPED_TRACE(testing::Message() << kBf16DecodeMma << "=" << mma << " Hq " << c.hq
                                      << " Hkv " << c.hkv << " D " << c.d);
      run_case(c, seqs, CudaKvLayout::kTokenMajor, rng);
    }
  }
}

// The split plan on a 132-SM device, by hand: decode batches count one CTA per (sequence,
// KV head, part of the group) against 6 per SM (792 slots) and split floor(792 / CTAs) ways
// (whole waves), at most one split per 48 keys of the longest sequence and 32 in all.
kernels::AttentionSplit plan_split(int seqs, int hkv, int max_seq_len, int max_query_len,
                                   int group = 2, int ctas_per_sm = 0, bool ordered = false,
                                   bool fp8 = false) {
  static const int32_t order[1] = {0};  // only whether there is an order matters here
  kernels::PagedAttentionArgs a;
  a.seq_order = ordered ? order : nullptr;
  a.num_tokens = a.num_seqs = seqs;
  a.num_q_heads = group * hkv;
  a.num_kv_heads = hkv;
  a.head_dim = 128;
  a.max_query_len = max_query_len;
  a.kv.fp8 = fp8;
  return kernels::plan_attention_split(a, max_seq_len, 132, ctas_per_sm);
}

TEST(CudaAttention, DecodeSplitPlan) {
  ScopedEnv cuda_cores(kBf16DecodeMma, "0");
  auto plan = [](int seqs, int hkv, int max_seq_len, int max_query_len, int group = 2,
                 int ctas_per_sm = 0, bool ordered = false) {
    return plan_split(seqs, hkv, max_seq_len, max_query_len, group, ctas_per_sm, ordered);
  };
  EXPECT_EQ(plan(256, 8, 1024, 1).num_splits, 1);  // 2048 CTAs, no order: no split
  // Several waves in longest-first order: the first half of the order is halved.
  const kernels::AttentionSplit tail = plan(256, 8, 1024, 1, 2, 0, true);
  EXPECT_EQ(tail.num_splits, 2);
  EXPECT_EQ(tail.tail_seqs, 128);
  EXPECT_EQ(tail.kv_chunk, 128);
  EXPECT_EQ(plan(256, 8, 255, 1, 2, 0, true).num_splits, 1);  // no sequence of 256 keys
  EXPECT_EQ(plan(64, 8, 1024, 1, 2, 0, true).tail_seqs, 0);    // one wave: z-splits if any
  EXPECT_EQ(plan(16, 8, 4096, 1).num_splits, 6);   // 128 CTAs: 768 fit, 896 would not
  EXPECT_EQ(plan(64, 8, 1024, 1).num_splits, 1);   // 512 CTAs: floor(1.5)
  EXPECT_EQ(plan(3, 8, 3000, 1).num_splits, 32);   // 24 CTAs: 33 fit, at most 32 splits
  EXPECT_EQ(plan(5, 8, 3000, 1).num_splits, 19);   // 40 CTAs: floor(19.8), not 20
  EXPECT_EQ(plan(3, 8, 1000, 1).num_splits, 20);   // at most 1000 / 48 splits
  EXPECT_EQ(plan(1, 8, 640, 1).num_splits, 13);    // single stream: 640 / 48
  EXPECT_EQ(plan(3, 8, 200, 1).num_splits, 4);
  EXPECT_EQ(plan(3, 8, 90, 1).num_splits, 1);      // too short to split
  EXPECT_EQ(plan(16, 8, 4096, 1).kv_chunk, 48);
  // A kernel that fits 5 CTAs per SM (the fused one): 660 slots, 5 splits of 128 CTAs.
  EXPECT_EQ(plan(16, 8, 4096, 1, 2, 5).num_splits, 5);
  // Not all decodes: the general kernel's CTAs, (1 query tile + 3) x 8 = 32: 17 splits.
  EXPECT_EQ(plan(3, 8, 3000, 0).num_splits, 17);
  // Group 16 (Hq 32, Hkv 2): two CTAs per (sequence, KV head), 16 x 2 x 2 = 64: 12 splits.
  EXPECT_EQ(plan(16, 2, 4096, 1, 16).num_splits, 12);
}

// The tensor-core decode kernel's plan (132 SMs): one CTA per (sequence, KV head) against its
// CTAs per SM (fp8: 3, 396 slots; bf16 at D = 128: 3 with rings of two tiles, 2 with rings of
// three, whichever fills the batch's waves better); a batch short of a wave splits
// floor(slots / CTAs) ways, in chunks of at least 128 keys; several waves never split.
TEST(CudaAttention, DecodeMmaSplitPlan) {
  ScopedEnv on(kBf16DecodeMma, "16");  // bf16 batches of 16+ sequences: 15 stay below
  // 128 CTAs: 3 splits fill 384 of 396 slots as well as 2 fill 256 of 264: rings of two.
  EXPECT_EQ(plan_split(16, 8, 4096, 1).num_splits, 3);
  EXPECT_EQ(plan_split(16, 8, 4096, 1).kv_chunk, 128);
  // 256 CTAs: 65% of 396 slots against 97% of 264: rings of three, no split.
  EXPECT_EQ(plan_split(32, 8, 4096, 1).num_splits, 1);
  EXPECT_EQ(plan_split(256, 8, 1024, 1, 2, 0, true).num_splits, 1);  // 2048 CTAs: no tail halves
  // 512 CTAs (a Qwen3-8B TP=4 rank at 256 sequences): 1.94 waves of 264, whole.
  EXPECT_EQ(plan_split(256, 2, 4096, 1, 4).num_splits, 1);
  EXPECT_EQ(plan_split(16, 8, 255, 1).num_splits, 1);     // under two chunks of keys
  EXPECT_EQ(plan_split(16, 8, 300, 1).num_splits, 2);     // 300 / 128
  EXPECT_EQ(plan_split(16, 2, 4096, 1, 16).num_splits, 12);  // group 16: 32 CTAs, 396 slots
  {
    ScopedEnv three("KESTREL_DECODE_MMA_BF16_STAGES", "3");  // forced: 264 slots
    EXPECT_EQ(plan_split(16, 8, 4096, 1).num_splits, 2);
    EXPECT_EQ(plan_split(16, 2, 4096, 1, 16).num_splits, 8);
  }
  {
    ScopedEnv two("KESTREL_DECODE_MMA_BF16_STAGES", "2");  // forced: 396 slots
    EXPECT_EQ(plan_split(32, 8, 4096, 1).num_splits, 1);   // floor(1.55)
    EXPECT_EQ(plan_split(24, 8, 4096, 1).num_splits, 2);   // 192 CTAs: floor(2.06)
  }
  // Fewer bf16 sequences keep the CUDA-core kernel's plan (6 splits per 48 keys, 792 slots).
  EXPECT_EQ(plan_split(15, 8, 4096, 1).num_splits, 6);
  EXPECT_EQ(plan_split(15, 8, 4096, 1).kv_chunk, 48);
  // An fp8 cache takes the tensor-core kernel at any batch size: 24 CTAs, 396 / 24 = 16.
  EXPECT_EQ(plan_split(3, 8, 3000, 1, 2, 0, false, true).num_splits, 16);
  EXPECT_EQ(plan_split(3, 8, 3000, 1, 2, 0, false, true).kv_chunk, 128);
}

// bf16 decode batches on the tensor-core kernel: splits (one wave), block sizes of 1, 16 and
// 32 (per-key lookups, a page per tile, two tiles per page), groups 1 to 16, both layouts,
// with rings of two and of three tiles; then several waves (the depth the batch chooses),
// and warps of over 32 tiles.
TEST(CudaAttention, DecodeMmaKernelBf16) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(90);
  ScopedEnv on(kBf16DecodeMma, "1");
  std::vector<SeqSpec> seqs{{0, 1}, {63, 1}, {300, 1}, {1023, 1}, {3000, 1}, {5, 1}, {16, 1}, {17, 1}};
  std::uniform_int_distribution<int> ctx(0, 2000);
  while (seqs.size() < 20) seqs.push_back({ctx(rng), 1});
  const Config configs[] = {{16, 8, 128, 16}, {32, 2, 128, 1}, {10, 2, 64, 16}, {16, 16, 64, 32},
                            {16, 4, 128, 32}};
  for (const char* ring : {"2", "3"}) {
    ScopedEnv depth("KESTREL_DECODE_MMA_BF16_STAGES", ring);
    for (const Config& c : configs) {
      for (CudaKvLayout layout : kLayouts) {
        SCOPED_TRACE(testing::Message() << "ring " << ring << ", " << layout_name(layout) << " Hq "
                                        << c.hq << " Hkv " << c.hkv << " D " << c.d << " block "
                                        << c.block_size);
        run_case(c, seqs, layout, rng);
      }
    }
  }
  std::vector<SeqSpec> many, long_seqs;
  std::uniform_int_distribution<int> short_ctx(0, 1500), long_ctx(2100, 2600);
  for (int i = 0; i < 150; ++i) many.push_back({short_ctx(rng), 1});
  for (int i = 0; i < 100; ++i) long_seqs.push_back({long_ctx(rng), 1});
  run_case(Config{16, 8, 128, 16}, many, CudaKvLayout::kTokenMajor, rng);
  run_case(Config{16, 8, 128, 16}, long_seqs, CudaKvLayout::kHeadMajor, rng);
}

TEST(CudaAttention, ManySequencesInOneLaunch) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(54);
  // 70 sequences: the tile lookup scans query_start_loc in several 32-wide steps.
  std::vector<SeqSpec> seqs;
  std::uniform_int_distribution<int> ctx(0, 60), len(1, 9);
  for (int i = 0; i < 70; ++i) seqs.push_back({ctx(rng), i % 3 == 0 ? len(rng) : 1});
  for (CudaKvLayout layout : kLayouts) {
    SCOPED_TRACE(layout_name(layout));
    run_case(Config{16, 8, 128, 16}, seqs, layout, rng);
  }
}

// Prefill batches at head dims 64 and 128 take the tensor-core kernel (attention_prefill.cu)
// when its dispatch is on, the general kernel otherwise.
const Config kPrefillConfigs[] = {
    {8, 8, 64, 16},    // GQA 1
    {16, 8, 128, 16},  // GQA 2 (Qwen3-0.6B)
    {8, 2, 128, 1},    // GQA 4, one-token blocks
    {16, 2, 64, 16},   // GQA 8
    {8, 8, 128, 1},    // GQA 1, D 128
    {32, 4, 128, 16},  // GQA 8, D 128
};

TEST(CudaAttention, PrefillLongPromptsWithCachedPrefixes) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(60);
  // Whole prompts and chunks after cached prefixes (through the block table), around the
  // kernel's 64-key and 64-row tiles.
  const std::vector<SeqSpec> seqs{{0, 1000}, {700, 333}, {64, 64}, {1, 127}, {129, 65}};
  int i = 0;
  for (const Config& c : kPrefillConfigs) {
    const CudaKvLayout layout = kLayouts[i++ % 2];
    SCOPED_TRACE(testing::Message() << layout_name(layout) << " Hq " << c.hq << " Hkv " << c.hkv
                                    << " D " << c.d << " block " << c.block_size);
    run_case(c, seqs, layout, rng);
  }
}

TEST(CudaAttention, PrefillOddLengthsWithDecodes) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(61);
  // Query lengths 1, 7, 33 and 1000 in one batch, decodes among them.
  const std::vector<SeqSpec> seqs{{0, 1}, {0, 7}, {40, 33}, {13, 1000}, {250, 1}, {64, 7}, {5, 1}};
  int i = 1;
  for (const Config& c : kPrefillConfigs) {
    const CudaKvLayout layout = kLayouts[i++ % 2];
    SCOPED_TRACE(testing::Message() << layout_name(layout) << " Hq " << c.hq << " Hkv " << c.hkv
                                    << " D " << c.d << " block " << c.block_size);
    run_case(c, seqs, layout, rng);
  }
}

TEST(CudaAttention, PrefillSplitsKeys) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(62);
  // Short chunks after long prefixes: too few CTAs to fill the GPU, so the keys are split
  // (rows whose visible keys all lie in other splits write empty partials) and merged.
  const std::vector<SeqSpec> seqs{{3000, 40}, {1500, 9}, {0, 2}};
  for (const Config& c : {Config{16, 8, 128, 16}, Config{8, 1, 64, 1}, Config{6, 2, 64, 16}}) {
    for (CudaKvLayout layout : kLayouts) {
      SCOPED_TRACE(testing::Message() << layout_name(layout) << " Hq " << c.hq << " Hkv " << c.hkv
                                      << " D " << c.d << " block " << c.block_size);
      run_case(c, seqs, layout, rng);
    }
  }
}

TEST(CudaAttention, PrefillUniformBatches) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(64);
  // Every sequence with the same number of new tokens (after different cached prefixes): the
  // tensor-core kernel maps its CTAs to tiles directly, longest first across sequences; with
  // two long prefixes the keys are also split.
  const std::vector<std::vector<SeqSpec>> batches{{{0, 100}, {37, 100}, {300, 100}, {1, 100}},
                                                  {{2000, 40}, {1000, 40}}};
  for (const auto& seqs : batches) {
    for (const Config& c : {Config{16, 8, 128, 16}, Config{8, 8, 64, 1}, Config{32, 4, 128, 16}}) {
      SCOPED_TRACE(testing::Message() << "Hq " << c.hq << " Hkv " << c.hkv << " D " << c.d
                                      << " first prefix " << seqs[0].cached);
      run_case(c, seqs, CudaKvLayout::kTokenMajor, rng);
    }
  }
}

// The warp-specialised kernel's persistent form (the default for uniform batches) with three
// CTAs, so that each runs many (sequence, KV head, query tile) items through one ring: the
// uniform batches above (the second with its keys split) and a longer one. Other kernels
// ignore the env. (Passed on an H200 in session 15.)
TEST(CudaAttention, PrefillPersistentSeveralItemsPerCta) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(72);
  ScopedEnv persist("KESTREL_PREFILL_WS_PERSIST", "1");
  ScopedEnv ctas("KESTREL_PREFILL_WS_CTAS", "3");
  const std::vector<std::vector<SeqSpec>> batches{{{0, 100}, {37, 100}, {300, 100}, {1, 100}},
                                                  {{2000, 40}, {1000, 40}},
                                                  {{0, 300}, {5, 300}}};
  for (const auto& seqs : batches) {
    for (const Config& c : {Config{16, 8, 128, 16}, Config{8, 8, 64, 1}}) {
      for (CudaKvLayout layout : kLayouts) {
        SCOPED_TRACE(testing::Message() << layout_name(layout) << " Hq " << c.hq << " D " << c.d
                                        << " first prefix " << seqs[0].cached);
        run_case(c, seqs, layout, rng);
      }
    }
  }
}

// On compute capability 9.0 the tests above run a wgmma kernel (attention_prefill_ws_sm90a.cu);
// this one runs the mma.sync kernel that other GPUs take, on the same cases, by switching
// the sm_90a kernels off for its duration.
TEST(CudaAttention, PrefillMmaSyncKernel) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(65);
  ScopedEnv mma_sync("KESTREL_PREFILL_SM90", "0");
  // The cases of the prefill tests above, with shorter prompts (the double reference is slow).
  const std::vector<std::vector<SeqSpec>> batches{
      {{0, 300}, {700, 133}, {64, 64}, {1, 127}, {129, 65}},
      {{0, 1}, {0, 7}, {40, 33}, {13, 260}, {250, 1}, {64, 7}, {5, 1}},
      {{3000, 40}, {1500, 9}, {0, 2}}};
  for (const auto& seqs : batches) {
    for (const Config& c : {Config{16, 8, 128, 16}, Config{8, 8, 64, 1}, Config{32, 4, 128, 16}}) {
      SCOPED_TRACE(testing::Message() << "Hq " << c.hq << " Hkv " << c.hkv << " D " << c.d
                                      << " sequences " << seqs.size());
      run_case(c, seqs, CudaKvLayout::kTokenMajor, rng);
    }
  }
}

// On compute capability 9.0 the prefill tests above run the warp-specialised wgmma kernel
// (attention_prefill_ws_sm90a.cu: a copying warpgroup, a ring of K/V buffers, two computing
// warpgroups taking turns) with its 2-buffer ring. This one runs it with 3 buffers, and the
// in-step wgmma kernel (attention_prefill_sm90a.cu), on prompts long enough to go round the
// ring several times, chunks after cached prefixes whose diagonal tile only one warpgroup
// needs, key splits, head dims 64 and 128, both layouts.
TEST(CudaAttention, PrefillOtherWgmmaKernels) {
  KS_REQUIRE_GPU();
  if (kestrel::kernels::compute_capability() != 90) GTEST_SKIP() << "sm_90a kernels";
  std::mt19937 rng(66);
  const std::vector<std::vector<SeqSpec>> batches{
      {{0, 900}, {700, 133}, {64, 64}, {1, 127}, {129, 65}},
      {{0, 1}, {0, 7}, {40, 33}, {13, 260}, {250, 1}, {64, 7}, {5, 1}},
      {{3000, 40}, {1500, 9}, {0, 2}}};
  for (const char* variant : {"ring of 3", "in-step"}) {
    const bool ring3 = variant[0] == 'r';
    ScopedEnv kernel("KESTREL_PREFILL_SM90", ring3 ? "1" : "step");
    ScopedEnv stages("KESTREL_PREFILL_WS_STAGES", ring3 ? "3" : "2");
    int i = 0;
    for (const auto& seqs : batches) {
      // Block sizes 16 and 256 take TMA boxes of 16 and 128 keys, 1 row-by-row copies.
      for (const Config& c :
           {Config{16, 8, 128, 16}, Config{8, 8, 64, 1}, Config{16, 8, 128, 256}}) {
        const CudaKvLayout layout = kLayouts[i++ % 2];
        SCOPED_TRACE(testing::Message() << variant << " " << layout_name(layout) << " Hq "
                                        << c.hq << " Hkv " << c.hkv << " D " << c.d
                                        << " sequences " << seqs.size());
        run_case(c, seqs, layout, rng);
      }
    }
  }
}

// Pages in order, as a fresh cache hands them out: the warp-specialised kernel copies whole
// 128-key tiles of consecutive rows as TMA boxes (token-major pages of any size, head-major
// pages of 128+ keys) and the rest row by row.
TEST(CudaAttention, PrefillConsecutivePages) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(67);
  const std::vector<SeqSpec> seqs{{0, 900}, {700, 133}, {64, 64}, {1, 127}, {129, 65}};
  for (const Config& c : {Config{16, 8, 128, 16}, Config{16, 8, 128, 256}, Config{8, 8, 64, 32}}) {
    for (CudaKvLayout layout : kLayouts) {
      SCOPED_TRACE(testing::Message() << layout_name(layout) << " Hq " << c.hq << " Hkv " << c.hkv
                                      << " D " << c.d << " block " << c.block_size);
      run_case(c, seqs, layout, rng, DType::kBF16, false);
    }
  }
}

TEST(CudaAttention, PrefillSmallHeadDimsGeneralKernel) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(63);
  // Head dims 16 and 32 stay on the CUDA-core kernel for prefill.
  const std::vector<SeqSpec> seqs{{0, 33}, {100, 1}, {17, 70}, {5, 200}};
  for (const Config& c : {Config{4, 2, 32, 16}, Config{6, 3, 16, 1}, Config{16, 1, 32, 16}}) {
    SCOPED_TRACE(testing::Message() << "Hq " << c.hq << " Hkv " << c.hkv << " D " << c.d);
    run_case(c, seqs, CudaKvLayout::kTokenMajor, rng);
  }
}

// ---- Decode kernel: GQA groups 9..16, mixed lengths (dattn helper) ----------------------

TEST(CudaAttention, DecodeKernelLargeGroups) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(70);
  // Groups above 8 are served by two CTAs per KV head (8, 6 and 5 heads each here; group 15
  // leaves the second CTA 7 heads, group 9 pads 5 heads to 8 rows), at every head dim, with
  // contexts around the key tiles, one-key sequences and a split (the 3000-key sequence).
  const Config configs[] = {{32, 2, 128, 16}, {24, 2, 128, 1}, {9, 1, 64, 16},
                            {30, 2, 64, 1},   {16, 1, 32, 16}, {48, 3, 16, 16}};
  const std::vector<SeqSpec> seqs{{0, 1},   {31, 1},  {32, 1},  {127, 1}, {128, 1},
                                  {300, 1}, {513, 1}, {5, 1},   {3000, 1}};
  for (const Config& c : configs) {
    for (CudaKvLayout layout : kLayouts) {
      SCOPED_TRACE(testing::Message() << layout_name(layout) << " Hq " << c.hq << " Hkv " << c.hkv
                                      << " D " << c.d << " block " << c.block_size);
      run_case(c, seqs, layout, rng);
    }
  }
}

TEST(CudaAttention, DecodeKernelMixedLengths) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(71);
  // Lengths 1..2500 in one batch: few enough CTAs that the keys are split, so short
  // sequences leave some of their splits empty while long ones fill all of them.
  std::vector<SeqSpec> seqs;
  std::uniform_int_distribution<int> ctx(0, 2500);
  for (int i = 0; i < 24; ++i) seqs.push_back({ctx(rng), 1});
  seqs.push_back({0, 1});
  for (const Config& c : {Config{16, 8, 128, 16}, Config{32, 2, 128, 16}}) {
    SCOPED_TRACE(testing::Message() << "Hq " << c.hq << " Hkv " << c.hkv << " D " << c.d);
    run_case(c, seqs, CudaKvLayout::kTokenMajor, rng);
  }
}

// ---- fp8 cache (kernels.h, KvQuant) -----------------------------------------------------

// Every kernel on an fp8 cache: the decode kernel (split and not, groups up to 16), the
// tensor-core prefill kernel (mma.sync: the wgmma one reads bf16 only) and the general one
// (head dims 16 and 32), both layouts.
TEST(CudaAttention, Fp8CacheDecode) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(80);
  const std::vector<SeqSpec> seqs{{0, 1}, {63, 1}, {300, 1}, {1023, 1}, {3000, 1}, {5, 1}};
  // Blocks of 16 and 32 keys take the tensor-core kernel's page-per-tile copies, blocks of 1
  // its per-key lookups.
  const Config configs[] = {{16, 8, 128, 16}, {32, 2, 128, 1}, {10, 2, 64, 16}, {8, 2, 32, 16},
                            {2, 2, 16, 1},    {16, 4, 128, 32}};
  for (const Config& c : configs) {
    for (CudaKvLayout layout : kLayouts) {
      SCOPED_TRACE(testing::Message() << layout_name(layout) << " Hq " << c.hq << " Hkv " << c.hkv
                                      << " D " << c.d << " block " << c.block_size);
      run_case(c, seqs, layout, rng, DType::kF8E4M3);
    }
  }
  std::vector<SeqSpec> many;  // several CTA waves: halved tails
  std::uniform_int_distribution<int> ctx(0, 1500);
  for (int i = 0; i < 150; ++i) many.push_back({ctx(rng), 1});
  run_case(Config{16, 8, 128, 16}, many, CudaKvLayout::kTokenMajor, rng, DType::kF8E4M3);
  // Unsplit sequences of over 32 tiles per warp: the tensor-core kernel's second round of
  // block-table entries.
  std::vector<SeqSpec> long_seqs;
  std::uniform_int_distribution<int> long_ctx(2100, 2600);
  for (int i = 0; i < 100; ++i) long_seqs.push_back({long_ctx(rng), 1});
  run_case(Config{16, 8, 128, 16}, long_seqs, CudaKvLayout::kHeadMajor, rng, DType::kF8E4M3);
}

TEST(CudaAttention, Fp8CachePrefill) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(81);
  const std::vector<std::vector<SeqSpec>> batches{
      {{0, 300}, {700, 133}, {64, 64}, {1, 127}, {129, 65}, {250, 1}},
      {{3000, 40}, {1500, 9}, {0, 2}},        // split keys
      {{0, 100}, {37, 100}, {300, 100}}};     // uniform
  const Config configs[] = {{16, 8, 128, 16}, {8, 8, 64, 1}, {32, 4, 128, 16}, {4, 2, 32, 16},
                            {6, 3, 16, 1}};
  for (const auto& seqs : batches) {
    int i = 0;
    for (const Config& c : configs) {
      const CudaKvLayout layout = kLayouts[i++ % 2];
      SCOPED_TRACE(testing::Message() << layout_name(layout) << " Hq " << c.hq << " Hkv " << c.hkv
                                      << " D " << c.d << " block " << c.block_size
                                      << " sequences " << seqs.size());
      run_case(c, seqs, layout, rng, DType::kF8E4M3);
    }
  }
}

}  // namespace
}  // namespace kestrel
