// Helpers shared by the CUDA backend tests: one backend per test binary, bf16 inputs with
// their exact values for the double-precision references, NaN-poisoned outputs, and a
// bf16-aware comparison.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/fp8.h"
#include "core/tensor.h"

namespace kestrel::cuda_test {

// Every GPU test starts with this: CI machines have no GPU and skip.
#define KS_REQUIRE_GPU()                                                     \
  do {                                                                       \
    if (!::kestrel::cuda_device_available()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

// One backend per KV layout for the whole binary (creating one sets up cuBLASLt and its
// workspace). Each backend has its own stream: a test uses one backend for all its tensors.
inline Backend& gpu(CudaKvLayout layout = CudaKvLayout::kTokenMajor) {
  static std::unique_ptr<Backend> token_major = make_cuda_backend(0, CudaKvLayout::kTokenMajor);
  if (layout == CudaKvLayout::kTokenMajor) return *token_major;
  static std::unique_ptr<Backend> head_major = make_cuda_backend(0, CudaKvLayout::kHeadMajor);
  return *head_major;
}

inline const char* layout_name(CudaKvLayout layout) {
  return layout == CudaKvLayout::kHeadMajor ? "head-major" : "token-major";
}

// Element offset of K/V row (block, offset in block, kv head) in a layer's pages, written
// from the layouts' definitions in cuda_backend.h.
inline size_t kv_row(CudaKvLayout layout, int64_t block, int offset, int kv_head,
                     int num_kv_heads, int block_size, int head_dim) {
  const int64_t row = layout == CudaKvLayout::kHeadMajor
                          ? (block * num_kv_heads + kv_head) * block_size + offset
                          : (block * block_size + offset) * num_kv_heads + kv_head;
  return static_cast<size_t>(row * head_dim);
}

// One layer's K and V pages on the host, every element NaN, so that a read of a slot no
// sequence owns shows up in the output. `spec` (one layer) lets upload_kv allocate its
// device twin the way the engine does.
struct HostKv {
  Tensor k, v;
  KvCacheSpec spec;
};

// dtype: kBF16, or kF8E4M3 for an fp8 cache (NaN is 0x7f there).
inline HostKv nan_kv_cache(CudaKvLayout layout, int num_blocks, int num_kv_heads, int block_size,
                           int head_dim, DType dtype = DType::kBF16) {
  const Shape shape = layout == CudaKvLayout::kHeadMajor
                          ? Shape{num_blocks, num_kv_heads, block_size, head_dim}
                          : Shape{num_blocks, block_size, num_kv_heads, head_dim};
  HostKv kv{Tensor::host(dtype, shape), Tensor::host(dtype, shape),
            KvCacheSpec{1, num_blocks, block_size, num_kv_heads, head_dim, dtype}};
  if (dtype == DType::kF8E4M3) {
    std::fill_n(kv.k.data_as<uint8_t>(), kv.k.numel(), uint8_t{0x7f});
    std::fill_n(kv.v.data_as<uint8_t>(), kv.v.numel(), uint8_t{0x7f});
  } else {
    std::fill_n(kv.k.data_as<uint16_t>(), kv.k.numel(), uint16_t{0x7fc0});
    std::fill_n(kv.v.data_as<uint16_t>(), kv.v.numel(), uint16_t{0x7fc0});
  }
  return kv;
}

// A host cache on the device, in pages from be.allocate_kv_cache (`be` must have the
// cache's layout). An fp8 one gets `scales` [2 * Hkv] (K's then V's, powers of two); amax
// and clamp counts start at zero (backend.h, LayerKvCache).
inline LayerKvCache upload_kv(Backend& be, const HostKv& cache, const std::vector<float>& scales = {}) {
  LayerKvCache kv = be.allocate_kv_cache(cache.spec)[0];
  // Equal shapes can still be different layouts (when Hkv == block_size): the caller's part.
  KS_CHECK(kv.k.shape() == cache.k.shape(), "upload_kv: the backend's pages are {}, the host's {}",
           kv.k.shape().str(), cache.k.shape().str());
  be.copy_from_host(cache.k, kv.k);
  be.copy_from_host(cache.v, kv.v);
  if (!kv.fp8()) return kv;
  Tensor s = Tensor::host(DType::kF32, kv.scale.shape());
  KS_CHECK(scales.size() == static_cast<size_t>(s.numel()), "upload_kv: {} scales for kv.scale {}",
           scales.size(), kv.scale.shape().str());
  std::copy(scales.begin(), scales.end(), s.data_as<float>());
  be.copy_from_host(s, kv.scale);
  return kv;
}

// Random powers of two from 2^-3 to 2^2, n of them.
inline std::vector<float> random_pow2_scales(int n, std::mt19937& rng) {
  std::uniform_int_distribution<int> e(-3, 2);
  std::vector<float> s(n);
  for (float& x : s) x = std::ldexp(1.0f, e(rng));
  return s;
}

// Writes positions [0, n) of one sequence, keys and values [n, num_kv_heads, head_dim] of the
// cache's dtype, into `kv` through the sequence's block table.
inline void store_sequence(HostKv& kv, CudaKvLayout layout, const int32_t* table, int n,
                           const Tensor& keys, const Tensor& values, int num_kv_heads,
                           int block_size, int head_dim) {
  for (int pos = 0; pos < n; ++pos) {
    for (int h = 0; h < num_kv_heads; ++h) {
      const size_t src = (size_t(pos) * num_kv_heads + h) * head_dim;
      const size_t dst = kv_row(layout, table[pos / block_size], pos % block_size, h,
                                num_kv_heads, block_size, head_dim);
      const size_t es = dtype_size(kv.k.dtype());
      std::memcpy(kv.k.data_as<uint8_t>() + dst * es, keys.data_as<uint8_t>() + src * es, head_dim * es);
      std::memcpy(kv.v.data_as<uint8_t>() + dst * es, values.data_as<uint8_t>() + src * es, head_dim * es);
    }
  }
}

// A bf16 host tensor of uniform random values in [lo, hi) and the exact values it holds.
struct Bf16Data {
  Tensor host;
  std::vector<double> values;
};

inline Bf16Data random_bf16(Shape shape, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  Bf16Data d{Tensor::host(DType::kBF16, shape), {}};
  std::uniform_real_distribution<float> dist(lo, hi);
  auto* p = d.host.data_as<uint16_t>();
  d.values.resize(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < d.values.size(); ++i) {
    p[i] = f32_to_bf16(dist(rng));
    d.values[i] = bf16_to_f32(p[i]);
  }
  return d;
}

// Random fp8 rows [n, Hkv, D] (core/fp8.h): the bytes of uniform values in [-2, 2) (normals,
// subnormals and zeros) and the values they hold, byte x head_scales[h].
inline Bf16Data random_fp8(Shape shape, std::mt19937& rng, const float* head_scales) {
  Bf16Data d{Tensor::host(DType::kF8E4M3, shape), {}};
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  auto* p = d.host.data_as<uint8_t>();
  const int64_t hkv = shape[1], dim = shape[2];
  d.values.resize(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < d.values.size(); ++i) {
    p[i] = f32_to_e4m3(dist(rng));
    d.values[i] = double(e4m3_to_f32(p[i])) * head_scales[(i / dim) % hkv];
  }
  return d;
}

inline Tensor i32_host(const std::vector<int32_t>& v, Shape shape) {
  Tensor t = Tensor::host(DType::kI32, shape);
  for (size_t i = 0; i < v.size(); ++i) t.data_as<int32_t>()[i] = v[i];
  return t;
}

inline Tensor i32_host(const std::vector<int32_t>& v) {
  return i32_host(v, Shape{static_cast<int64_t>(v.size())});
}

// A device tensor filled with NaN, so an element the op fails to write is caught.
inline Tensor poisoned(DType dtype, Shape shape, Backend& be = gpu()) {
  Tensor h = Tensor::host(dtype, shape);
  for (int64_t i = 0; i < h.numel(); ++i) {
    if (dtype == DType::kBF16) h.data_as<uint16_t>()[i] = 0x7fc0;
    else if (dtype == DType::kF8E4M3) h.data_as<uint8_t>()[i] = 0x7f;
    else h.data_as<float>()[i] = std::numeric_limits<float>::quiet_NaN();
  }
  return be.upload(h, dtype);
}

// Device tensor -> host doubles (BF16 or F32).
inline std::vector<double> fetch(const Tensor& t, Backend& be = gpu()) {
  Tensor h = be.to_host(t);
  std::vector<double> v(static_cast<size_t>(h.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = h.dtype() == DType::kBF16 ? bf16_to_f32(h.data_as<uint16_t>()[i])
                                     : h.data_as<float>()[i];
  }
  return v;
}

// got vs a double reference: every element finite, ||got - ref|| / ||ref|| <= rel_norm, and
// each |got_i - ref_i| <= elem_rel * |ref_i| + elem_abs * rms(ref) (the absolute part covers
// results that cancel to near zero).
inline void expect_close(const std::vector<double>& got, const std::vector<double>& ref,
                         const std::string& what, double rel_norm = 1e-2, double elem_rel = 2e-2,
                         double elem_abs = 1e-2) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  ASSERT_GT(den, 0.0) << what << ": reference is all zeros";
  const double rms = std::sqrt(den / ref.size());
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const bool ok = std::isfinite(got[i]) &&
                    std::fabs(got[i] - ref[i]) <= elem_rel * std::fabs(ref[i]) + elem_abs * rms;
    if (!ok && ++bad <= 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", expected " << ref[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << ref.size() << " elements off";
  EXPECT_LE(std::sqrt(num / den), rel_norm) << what << ": relative error norm";
}

// x's t rows on the GPU with `pad` extra rows of NaN after them: a product kernel must not
// read past row t.
inline Tensor upload_x_with_nan_tail(const Bf16Data& x, int t, int k, int pad) {
  Tensor h = Tensor::host(DType::kBF16, Shape{t + pad, k});
  std::memcpy(h.data(), x.host.data(), size_t(t) * k * 2);
  for (int64_t i = int64_t(t) * k; i < h.numel(); ++i) h.data_as<uint16_t>()[i] = 0x7fc0;
  return gpu().upload(h, DType::kBF16);
}

// out[t, n] = sum_k x[t, k] w[n, k] (+ bias[n]) in double.
inline std::vector<double> linear_ref(const Bf16Data& x, const Bf16Data& w, const Bf16Data* bias, int t,
                               int n, int k) {
  std::vector<double> out(size_t(t) * n);
  for (int i = 0; i < t; ++i) {
    for (int j = 0; j < n; ++j) {
      double s = bias ? bias->values[j] : 0.0;
      const double* xr = &x.values[size_t(i) * k];
      const double* wr = &w.values[size_t(j) * k];
      for (int c = 0; c < k; ++c) s += xr[c] * wr[c];
      out[size_t(i) * n + j] = s;
    }
  }
  return out;
}

// cos_sin [max_pos, D]: cos(p * theta^(-2i/D)) in [:, i], sin in [:, D/2 + i] (float, as a
// model computes it). Host tensor.
inline Tensor rope_table(int max_pos, int d, double theta) {
  Tensor t = Tensor::host(DType::kF32, Shape{max_pos, d});
  float* p = t.data_as<float>();
  for (int pos = 0; pos < max_pos; ++pos) {
    for (int i = 0; i < d / 2; ++i) {
      const double freq = std::pow(theta, -2.0 * i / d);
      p[size_t(pos) * d + i] = static_cast<float>(std::cos(pos * freq));
      p[size_t(pos) * d + d / 2 + i] = static_cast<float>(std::sin(pos * freq));
    }
  }
  return t;
}

// A random permutation of [0, n): AttentionMetadata::seq_order (any order must give the same
// results; the runner passes the longest sequence first).
inline std::vector<int32_t> shuffled_order(int n, std::mt19937& rng) {
  std::vector<int32_t> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

// A paged step's index arrays into `meta`, on the device: positions and slots [T],
// query_start_loc [B + 1], seq_lens [B], block tables [B, max_blocks] and a shuffled
// seq_order (B = seq_lens.size()).
inline void upload_paged_indices(Backend& be, AttentionMetadata& meta,
                                 const std::vector<int32_t>& positions,
                                 const std::vector<int32_t>& slots,
                                 const std::vector<int32_t>& query_start_loc,
                                 const std::vector<int32_t>& seq_lens,
                                 const std::vector<int32_t>& tables, int max_blocks,
                                 std::mt19937& rng) {
  const int b_count = static_cast<int>(seq_lens.size());
  meta.positions = be.upload(i32_host(positions), DType::kI32);
  meta.slot_mapping = be.upload(i32_host(slots), DType::kI32);
  meta.query_start_loc = be.upload(i32_host(query_start_loc), DType::kI32);
  meta.seq_lens = be.upload(i32_host(seq_lens), DType::kI32);
  meta.block_tables = be.upload(i32_host(tables, Shape{b_count, max_blocks}), DType::kI32);
  meta.seq_order = be.upload(i32_host(shuffled_order(b_count, rng)), DType::kI32);
}

// The token counts the tests sweep (odd on purpose).
inline const std::vector<int>& token_counts() {
  static const std::vector<int> counts{1, 7, 33, 200};
  return counts;
}

// Sets an environment variable for its lifetime (the kernels' dispatch switches, read at
// each launch), then puts back what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* before = std::getenv(name);
    had_ = before != nullptr;
    if (had_) saved_ = before;
    setenv(name, value, 1);
  }
  ~ScopedEnv() { had_ ? setenv(name_, saved_.c_str(), 1) : unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  bool had_ = false;
  std::string saved_;
};

}  // namespace kestrel::cuda_test
