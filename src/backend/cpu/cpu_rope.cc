// qk_norm_rope_store: per-head RMSNorm of q and k (Qwen3), rotary embedding in the "neox"
// form (rotate halves: x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin for i < D/2), then q to
// q_out and k, v to their cache slots (an fp8 cache quantizes them there and keeps its amax
// and clamp counts, cpu_kv_fp8.h). Parallel over tokens.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_check.h"
#include "backend/cpu/cpu_kv_fp8.h"
#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

namespace kestrel::cpu {
namespace {

// head[0..D) = rms_norm(src) * w (or src when w is null), then rotated by cos/sin [D/2].
inline void norm_rope_head(const float* src, const float* w, float eps, const float* cos,
                           const float* sin, int D, float* head) {
  if (w != nullptr) {
    double sum = 0.0;
    for (int i = 0; i < D; ++i) sum += static_cast<double>(src[i]) * src[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(sum / D + eps));
    for (int i = 0; i < D; ++i) head[i] = src[i] * inv * w[i];
  } else {
    for (int i = 0; i < D; ++i) head[i] = src[i];
  }
  const int half = D / 2;
  for (int i = 0; i < half; ++i) {
    const float x1 = head[i];
    const float x2 = head[i + half];
    head[i] = x1 * cos[i] - x2 * sin[i];
    head[i + half] = x2 * cos[i] + x1 * sin[i];
  }
}

}  // namespace

void qk_norm_rope_store(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm, float eps,
                        const Tensor& cos_sin, const AttentionShape& shape,
                        const AttentionMetadata& meta, LayerKvCache& kv, Tensor& q_out,
                        int num_threads) {
  const char* op = "qk_norm_rope_store";
  check_attention_shape(shape, op);
  const int Hq = shape.num_q_heads, Hkv = shape.num_kv_heads, D = shape.head_dim;
  KS_CHECK(D % 2 == 0, "{}: head_dim must be even for rotary embedding, got {}", op, D);
  check_tensor(qkv, op, "qkv", DType::kF32, 2);
  const int64_t T = qkv.dim(0);
  const int64_t W = static_cast<int64_t>(Hq + 2 * Hkv) * D;
  check_dim(qkv, op, "qkv", 1, W, "(num_q_heads + 2 num_kv_heads) head_dim");
  check_tensor(q_out, op, "q_out", DType::kF32, 2);
  check_dim(q_out, op, "q_out", 0, T, "T");
  check_dim(q_out, op, "q_out", 1, static_cast<int64_t>(Hq) * D, "num_q_heads head_dim");
  if (q_norm.defined()) {
    check_tensor(q_norm, op, "q_norm", DType::kF32, 1);
    check_dim(q_norm, op, "q_norm", 0, D, "head_dim");
  }
  if (k_norm.defined()) {
    check_tensor(k_norm, op, "k_norm", DType::kF32, 1);
    check_dim(k_norm, op, "k_norm", 0, D, "head_dim");
  }
  KS_CHECK(eps >= 0.0f && std::isfinite(eps), "{}: eps must be finite and >= 0, got {}", op, eps);
  check_tensor(cos_sin, op, "cos_sin", DType::kF32, 2);
  check_dim(cos_sin, op, "cos_sin", 1, D, "head_dim");
  check_kv_cache(kv, op, shape);
  check_dim(kv.k, op, "kv.k", 1, meta.block_size, "meta.block_size");
  KS_CHECK(meta.num_tokens == T, "{}: meta.num_tokens {} != qkv rows {}", op, meta.num_tokens, T);
  const MetadataView m = check_metadata(meta, op, kv.k.dim(0));
  const int64_t max_pos = cos_sin.dim(0);
  for (int64_t t = 0; t < T; ++t) {
    KS_CHECK(m.positions[t] >= 0 && m.positions[t] < max_pos,
             "{}: positions[{}] = {} is outside the rotary table of {} positions", op, t,
             m.positions[t], max_pos);
  }

  const float* in = qkv.data_as<float>();
  const float* table = cos_sin.data_as<float>();
  const float* qw = q_norm.defined() ? q_norm.data_as<float>() : nullptr;
  const float* kw = k_norm.defined() ? k_norm.data_as<float>() : nullptr;
  float* q = q_out.data_as<float>();
  const bool fp8 = kv.fp8();
  // An fp8 cache gets each head's row through a scratch row, quantized as it is stored.
  float* kc = fp8 ? nullptr : kv.k.data_as<float>();
  float* vc = fp8 ? nullptr : kv.v.data_as<float>();
  uint8_t* k8 = fp8 ? kv.k.data_as<uint8_t>() : nullptr;
  uint8_t* v8 = fp8 ? kv.v.data_as<uint8_t>() : nullptr;
  const float* scale = fp8 ? kv.scale.data_as<float>() : nullptr;  // [2, Hkv]
  std::vector<Fp8StoreCounts> counts(fp8 ? 2 * Hkv : 0);
#pragma omp parallel num_threads(team_size(T* W * 2, num_threads))
  {
    std::vector<Fp8StoreCounts> mine(counts.size());
    std::vector<float> row_k(fp8 ? D : 0);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < T; ++t) {
      const float* row = in + t * W;
      const float* cos = table + static_cast<int64_t>(m.positions[t]) * D;
      const float* sin = cos + D / 2;
      for (int h = 0; h < Hq; ++h) {
        norm_rope_head(row + static_cast<int64_t>(h) * D, qw, eps, cos, sin, D,
                       q + (t * Hq + h) * D);
      }
      const int64_t slot = m.slot_mapping[t];
      if (slot < 0) continue;
      for (int g = 0; g < Hkv; ++g) {
        const int64_t dst = (slot * Hkv + g) * D;
        const float* k_src = row + static_cast<int64_t>(Hq + g) * D;
        const float* v = row + static_cast<int64_t>(Hq + Hkv + g) * D;
        if (!fp8) {
          norm_rope_head(k_src, kw, eps, cos, sin, D, kc + dst);
          for (int i = 0; i < D; ++i) vc[dst + i] = v[i];
          continue;
        }
        norm_rope_head(k_src, kw, eps, cos, sin, D, row_k.data());
        store_fp8_row(row_k.data(), D, scale[g], k8 + dst, mine[g]);
        store_fp8_row(v, D, scale[Hkv + g], v8 + dst, mine[Hkv + g]);
      }
    }
    if (fp8) {
#pragma omp critical
      for (size_t i = 0; i < counts.size(); ++i) {
        counts[i].amax = std::max(counts[i].amax, mine[i].amax);
        counts[i].clamped += mine[i].clamped;
      }
    }
  }
  if (!fp8) return;
  float* amax = kv.amax.data_as<float>();
  int64_t* clamped = kv.clamped.data_as<int64_t>();
  for (size_t i = 0; i < counts.size(); ++i) {
    amax[i] = std::max(amax[i], counts[i].amax);
    clamped[i] += counts[i].clamped;
  }
}

}  // namespace kestrel::cpu
