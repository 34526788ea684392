// The reference for the fp8 KV cache on the CPU: the F32 CPU backend whose KV store
// replaces every value it writes by its quantize-dequantize round trip,
// e4m3(x / scale) x scale, with scales the test chooses per (layer, K or V, head). An F32
// cache holding exactly the values an fp8 cache would read back: none of the fp8 storage
// code (allocation, the store's fp8 branch, the attention's dequantizing reads) runs here,
// only core/fp8's conversions (tested against their own oracle). It also records what the
// fp8 store must count: amax and clamps per (layer, K or V, head).
#pragma once

#include <cmath>
#include <map>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/fp8.h"

namespace kestrel::test {

class FakeQuantBackend final : public Backend {
 public:
  // scales[layer] = K heads then V heads (runtime/kv_scales.h's layout).
  FakeQuantBackend(int num_threads, std::vector<std::vector<float>> scales)
      : cpu_(num_threads), scales_(std::move(scales)) {
    amax_.resize(scales_.size());
    clamped_.resize(scales_.size());
    for (size_t l = 0; l < scales_.size(); ++l) {
      amax_[l].assign(scales_[l].size(), 0.0f);
      clamped_[l].assign(scales_[l].size(), 0);
    }
  }

  const std::vector<std::vector<float>>& amax() const { return amax_; }
  const std::vector<std::vector<int64_t>>& clamped() const { return clamped_; }

  Device device() const override { return cpu_.device(); }
  std::string name() const override { return "fake-quant cpu"; }
  DType compute_dtype() const override { return cpu_.compute_dtype(); }
  Tensor empty(DType dtype, Shape shape) override { return cpu_.empty(dtype, shape); }
  Tensor upload(const Tensor& host, DType dtype) override { return cpu_.upload(host, dtype); }
  Tensor to_host(const Tensor& t) override { return cpu_.to_host(t); }
  void synchronize() override {}
  std::vector<LayerKvCache> allocate_kv_cache(const KvCacheSpec& spec) override {
    std::vector<LayerKvCache> kv = cpu_.allocate_kv_cache(spec);  // F32
    for (size_t l = 0; l < kv.size(); ++l) layer_of_[kv[l].k.data()] = static_cast<int>(l);
    return kv;
  }
  void embedding(const Tensor& ids, const Tensor& table, Tensor& out) override {
    cpu_.embedding(ids, table, out);
  }
  void embedding_shard(const Tensor& ids, const Tensor& table, int64_t first_id,
                       Tensor& out) override {
    cpu_.embedding_shard(ids, table, first_id, out);
  }
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) override {
    cpu_.rms_norm(x, w, eps, out);
  }
  void add_rms_norm(Tensor& x, Tensor& residual, const Tensor& w, float eps) override {
    cpu_.add_rms_norm(x, residual, w, eps);
  }
  void linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) override {
    cpu_.linear(x, w, bias, out);
  }
  void silu_mul(const Tensor& x, Tensor& out) override { cpu_.silu_mul(x, out); }
  void gather_rows(const Tensor& x, const Tensor& rows, Tensor& out) override {
    cpu_.gather_rows(x, rows, out);
  }
  void attention(const Tensor& q, const LayerKvCache& kv, const AttentionShape& shape,
                 const AttentionMetadata& meta, float scale, Tensor& out) override {
    cpu_.attention(q, kv, shape, meta, scale, out);
  }

  void qk_norm_rope_store(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm, float eps,
                          const Tensor& cos_sin, const AttentionShape& shape,
                          const AttentionMetadata& meta, LayerKvCache& kv,
                          Tensor& q_out) override {
    cpu_.qk_norm_rope_store(qkv, q_norm, k_norm, eps, cos_sin, shape, meta, kv, q_out);
    const int l = layer_of_.at(kv.k.data());
    const int Hkv = shape.num_kv_heads, D = shape.head_dim;
    const int32_t* slots = meta.slot_mapping.data_as<int32_t>();
    for (int t = 0; t < meta.num_tokens; ++t) {
      if (slots[t] < 0) continue;
      for (int i = 0; i < 2; ++i) {
        float* cache = (i == 0 ? kv.k : kv.v).data_as<float>();
        for (int g = 0; g < Hkv; ++g) {
          const int at = i * Hkv + g;
          const float s = scales_[l][at];
          float* x = cache + (int64_t(slots[t]) * Hkv + g) * D;
          for (int d = 0; d < D; ++d) {
            amax_[l][at] = std::max(amax_[l][at], std::fabs(x[d]));
            if (std::fabs(x[d] / s) > kE4M3Max) ++clamped_[l][at];
            x[d] = e4m3_to_f32(f32_to_e4m3(x[d] / s)) * s;
          }
        }
      }
    }
  }

 private:
  CpuBackend cpu_;
  std::vector<std::vector<float>> scales_;
  std::vector<std::vector<float>> amax_;
  std::vector<std::vector<int64_t>> clamped_;
  std::map<const void*, int> layer_of_;
};

}  // namespace kestrel::test
