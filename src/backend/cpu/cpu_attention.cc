// Causal attention over the paged KV cache.
//
// For token t of sequence b at position p, query head h reads KV head g = h / (Hq / Hkv) and
// keys 0..p of b, found at slot block_tables[b][j / block_size] * block_size + j % block_size
// of the cache [num_blocks, block_size, Hkv, D]:
//   s_j = scale * q_h . k_j,   out_h = sum_j softmax(s)_j v_j,
// with the softmax in fp32 after subtracting the row maximum. One work item is (token, KV
// head): the Hq / Hkv query heads sharing a KV head are done together so each K/V row is
// read once per group. Items are spread over threads dynamically because their costs differ
// (a token late in a long prompt sees many more keys than a decode of a short one).
// Padding tokens (after query_start_loc[B]) get zeros. An fp8 cache's rows are dequantized
// (e4m3 * scale, cpu_kv_fp8.h) into scratch as they are read.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_check.h"
#include "backend/cpu/cpu_kv_fp8.h"
#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

namespace kestrel::cpu {
namespace {

inline float dot(const float* a, const float* b, int n) {
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

// q . k0..k3 into out[0..3]: four independent accumulators, so the adds of one key do not
// wait on another's (a single reduction chain is latency-bound).
inline void dot4(const float* q, const float* k0, const float* k1, const float* k2, const float* k3,
                 int n, float* out) {
  float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
#pragma omp simd reduction(+ : a0, a1, a2, a3)
  for (int i = 0; i < n; ++i) {
    a0 += q[i] * k0[i];
    a1 += q[i] * k1[i];
    a2 += q[i] * k2[i];
    a3 += q[i] * k3[i];
  }
  out[0] = a0;
  out[1] = a1;
  out[2] = a2;
  out[3] = a3;
}

// The default build targets baseline x86-64 (SSE2); the hot loop is also compiled for AVX2
// and AVX-512 and picked at load time, as OpenBLAS does for its kernels.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define KS_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define KS_CPU_CLONES
#endif

struct AttentionArgs {
  const float* q;
  const float* k_cache;  // F32 caches
  const float* v_cache;
  const uint8_t* k8;  // fp8 caches, read through k_tables / v_tables (one per KV head)
  const uint8_t* v8;
  const Fp8Table* k_tables;
  const Fp8Table* v_tables;
  float* out;
  int num_q_heads, num_kv_heads, head_dim, block_size;
  float scale;
};

// Attention of token t's query heads in KV group g over keys 0..num_keys-1 of the sequence
// whose block table is `table`. scores and rows are scratch, resized here.
KS_CPU_CLONES void attend_group(const AttentionArgs& a, int64_t t, int g, const int32_t* table,
                                int num_keys, std::vector<float>& scores,
                                std::vector<float>& rows) {
  const int G = a.num_q_heads / a.num_kv_heads, D = a.head_dim, Hkv = a.num_kv_heads;
  // G * num_keys scores, then G reciprocal sums.
  scores.resize(static_cast<size_t>(G) * num_keys + G);
  float* inv_sum = scores.data() + static_cast<size_t>(G) * num_keys;
  const float* q = a.q + (t * a.num_q_heads + static_cast<int64_t>(g) * G) * D;
  float* out = a.out + (t * a.num_q_heads + static_cast<int64_t>(g) * G) * D;
  auto row_offset = [&](int j) {
    const int64_t slot =
        static_cast<int64_t>(table[j / a.block_size]) * a.block_size + j % a.block_size;
    return (slot * Hkv + g) * D;
  };
  // Key or value row j: the cache row itself, or an fp8 row dequantized into scratch row r.
  rows.resize(static_cast<size_t>(4) * D);
  auto k_row = [&](int j, int r) -> const float* {
    if (a.k8 == nullptr) return a.k_cache + row_offset(j);
    load_fp8_row(a.k8 + row_offset(j), D, a.k_tables[g], rows.data() + r * D);
    return rows.data() + r * D;
  };
  auto v_row = [&](int j) -> const float* {
    if (a.v8 == nullptr) return a.v_cache + row_offset(j);
    load_fp8_row(a.v8 + row_offset(j), D, a.v_tables[g], rows.data());
    return rows.data();
  };

  int j = 0;
  for (; j + 4 <= num_keys; j += 4) {
    const float* k0 = k_row(j, 0);
    const float* k1 = k_row(j + 1, 1);
    const float* k2 = k_row(j + 2, 2);
    const float* k3 = k_row(j + 3, 3);
    for (int h = 0; h < G; ++h) {
      float* s = scores.data() + h * num_keys + j;
      dot4(q + h * D, k0, k1, k2, k3, D, s);
      for (int i = 0; i < 4; ++i) s[i] *= a.scale;
    }
  }
  for (; j < num_keys; ++j) {
    const float* k = k_row(j, 0);
    for (int h = 0; h < G; ++h) scores[h * num_keys + j] = a.scale * dot(q + h * D, k, D);
  }
  for (int h = 0; h < G; ++h) {
    float* s = scores.data() + h * num_keys;
    const float m = *std::max_element(s, s + num_keys);
    float sum = 0.0f;
    for (int j = 0; j < num_keys; ++j) {
      s[j] = std::exp(s[j] - m);
      sum += s[j];
    }
    inv_sum[h] = 1.0f / sum;
  }
  std::memset(out, 0, sizeof(float) * G * D);
  for (j = 0; j < num_keys; ++j) {
    const float* v = v_row(j);
    for (int h = 0; h < G; ++h) {
      const float p = scores[h * num_keys + j];
      float* o = out + h * D;
#pragma omp simd
      for (int i = 0; i < D; ++i) o[i] += p * v[i];
    }
  }
  for (int h = 0; h < G; ++h) {
    for (int i = 0; i < D; ++i) out[h * D + i] *= inv_sum[h];
  }
}

}  // namespace

void attention(const Tensor& q, const LayerKvCache& kv, const AttentionShape& shape,
               const AttentionMetadata& meta, float scale, Tensor& out, int num_threads) {
  const char* op = "attention";
  check_attention_shape(shape, op);
  const int Hq = shape.num_q_heads, Hkv = shape.num_kv_heads, D = shape.head_dim;
  check_tensor(q, op, "q", DType::kF32, 2);
  const int64_t T = q.dim(0);
  check_dim(q, op, "q", 1, static_cast<int64_t>(Hq) * D, "num_q_heads head_dim");
  check_tensor(out, op, "out", DType::kF32, 2);
  KS_CHECK(out.shape() == q.shape(), "{}: out {} must have q's shape {}", op, out.shape().str(),
           q.shape().str());
  KS_CHECK(std::isfinite(scale), "{}: scale must be finite, got {}", op, scale);
  check_kv_cache(kv, op, shape);
  check_dim(kv.k, op, "kv.k", 1, meta.block_size, "meta.block_size");
  KS_CHECK(meta.num_tokens == T, "{}: meta.num_tokens {} != q rows {}", op, meta.num_tokens, T);
  const MetadataView m = check_metadata(meta, op, kv.k.dim(0));

  const bool fp8 = kv.fp8();
  std::vector<Fp8Table> tables;  // K heads, then V heads
  if (fp8) {
    const float* kv_scale = kv.scale.data_as<float>();
    tables.reserve(2 * Hkv);
    for (int i = 0; i < 2 * Hkv; ++i) tables.emplace_back(kv_scale[i]);
  }
  const AttentionArgs args{q.data_as<float>(),
                           fp8 ? nullptr : kv.k.data_as<float>(),
                           fp8 ? nullptr : kv.v.data_as<float>(),
                           fp8 ? kv.k.data_as<uint8_t>() : nullptr,
                           fp8 ? kv.v.data_as<uint8_t>() : nullptr,
                           fp8 ? tables.data() : nullptr,
                           fp8 ? tables.data() + Hkv : nullptr,
                           out.data_as<float>(),
                           Hq,
                           Hkv,
                           D,
                           m.block_size,
                           scale};
  const int64_t num_items = T * Hkv;
  int64_t work = 0;  // multiply-adds: two per key and dimension per query head
  for (int64_t t = 0; t < T; ++t) work += 2 * (m.positions[t] + 1) * int64_t(Hq) * D;
#pragma omp parallel num_threads(team_size(work / 8, num_threads))
  {
    std::vector<float> scores, rows;
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < num_items; ++item) {
      const int64_t t = item / Hkv;
      const int g = static_cast<int>(item % Hkv);
      const int b = m.token_seq[t];
      if (b < 0) {
        const int G = Hq / Hkv;
        std::memset(args.out + (t * Hq + static_cast<int64_t>(g) * G) * D, 0,
                    sizeof(float) * G * D);
        continue;
      }
      const int32_t* table = m.block_tables + static_cast<int64_t>(b) * m.max_blocks_per_seq;
      attend_group(args, t, g, table, m.positions[t] + 1, scores, rows);
    }
  }
}

}  // namespace kestrel::cpu
