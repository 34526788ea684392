// Small-batch GEMM: out[T, N] = x[T, K] * w[N, K]^T (+ bias[N]) for T <= 16 (gemv.h).
//
// Maths: one mma.sync m16n8k16 per 16 elements of K, with A = x (16 token rows, rows >= T
// zero) and B = w^T (8 output columns). A dot product does not care in which order K is
// summed, so A and B may use any permutation of K as long as it is the same one: lane
// (g = lane / 4, q = lane % 4) fetches 8 consecutive elements [8q, 8q + 8) of a 32-element
// K step as one 16-byte vector, of w row g and of x rows g and g + 8, and hands elements
// {0,1}, {2,3} to the first mma (fragment k slots 2q and 2q + 8) and {4,5}, {6,7} to the
// second. So no shuffling is needed and one 16-byte vector of w feeds two mmas.
//
// Layout: w [N, K] row-major; a tile is 8 columns (rows of w) x all of K. Each warp owns one
// tile and 1 / k_split of its K steps (a contiguous range, so every w row is read in long
// runs); with k_split > 1 the warps of a tile add their fp32 accumulators through shared
// memory in a fixed order (deterministic). CTA: max(4, k_split) warps.
//
// Bandwidth: the kernel is bound by reading w once, and at decode sizes by the latency of
// that read, so each warp issues all kUnroll steps of a batch before it waits. The copies go
// global -> shared with cp.async (each lane reads back only its own slots, so a wait_all and
// no barrier suffices). Plain register loads were tried first: ptxas interleaved them with
// the mmas to save registers, leaving ~3 of 8 loads in flight (see docs/cuda_backend.md).
// Out-of-range elements (rows >= T, columns >= N, the end of K) are zero-filled by the copy
// (source size 0) and never read. w skips L1; x is cached there (every warp reads it).
//
// Launched with launch_pdl (launch.cuh): the first batch's w copies are issued before
// pdl_wait(), so with programmatic dependent launch on, the weights are on their way while
// the kernel that writes x finishes; x, bias and out are touched only after the wait.
#include <cuda_bf16.h>

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm/gemv.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma.cuh"

namespace kestrel::kernels {
namespace {

constexpr int kTileCols = 8;    // n of one mma
constexpr int kStepK = 32;      // K elements per step: 4 lanes x 8 bf16
constexpr int kUnroll = 8;      // steps per batch: 8 x 16 B of w in flight per lane
constexpr int kMaxKSplit = 16;
constexpr int kMaxKSplitTall = 8;  // T > 8 stages a third vector: fewer warps fit
constexpr int kMinWarps = 4;
constexpr int kResidentWarpsPerSm = 32;

// 16 bytes global -> shared, no registers involved; zeros (nothing read) when !valid.
__device__ __forceinline__ void copy_w(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n"
               :: "r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void copy_x(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n"
               :: "r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void copy_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}


// 16-byte vectors staged per lane and step: w, x row g, and x row g + 8 when kTall.
template <bool kTall>
constexpr int kVecs = kTall ? 3 : 2;
template <bool kTall>
constexpr int kWarpStageBytes = kVecs<kTall> * kUnroll * 32 * 16;

// kTall: T in (8, 16], so x rows g + 8 are staged too. Dynamic shared memory:
// warps x kWarpStageBytes<kTall>.
template <bool kTall, typename OutT>
__global__ void __launch_bounds__(kMaxKSplit * 32)
    gemv_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                const __nv_bfloat16* __restrict__ bias, OutT* __restrict__ out, int t, int n,
                int k, int k_split) {
  extern __shared__ uint4 stage[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, q = lane % 4;
  const int tiles_per_cta = blockDim.x / 32 / k_split;
  const int tile = blockIdx.x * tiles_per_cta + warp / k_split;
  const int part = warp % k_split;
  const int col = tile * kTileCols + g;
  const int steps = (k + kStepK - 1) / kStepK;
  const int per_part = (steps + k_split - 1) / k_split;
  const int s_begin = part * per_part, s_end = min(steps, s_begin + per_part);
  const bool w_ok = col < n, x0_ok = g < t, x1_ok = kTall && g + 8 < t;
  // Clamped rows keep every address in bounds; the predicates zero-fill instead of reading.
  const __nv_bfloat16* w_row = w + static_cast<size_t>(min(col, n - 1)) * k + q * 8;
  const __nv_bfloat16* x_row0 = x + static_cast<size_t>(min(g, t - 1)) * k + q * 8;
  const __nv_bfloat16* x_row1 = x + static_cast<size_t>(min(g + 8, t - 1)) * k + q * 8;
  // This lane's slot of vector v at step u: stage[(warp * kVecs + v) * kUnroll + u][lane].
  uint4* mine = stage + static_cast<size_t>(warp) * kVecs<kTall> * kUnroll * 32 + lane;
  const uint32_t mine_addr = static_cast<uint32_t>(__cvta_generic_to_shared(mine));
  auto slot = [&](int v, int u) { return (v * kUnroll + u) * 32; };

  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  bool waited = false;
  for (int s = s_begin; s < s_end; s += kUnroll) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int kk = (s + u) * kStepK;
      const bool in = s + u < s_end && kk + q * 8 < k;
      copy_w(mine_addr + slot(0, u) * 16, w_row + (in ? kk : 0), in && w_ok);
    }
    if (!waited) {
      pdl_wait();
      pdl_trigger();
      waited = true;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int kk = (s + u) * kStepK;
      const bool in = s + u < s_end && kk + q * 8 < k;
      const int off = in ? kk : 0;
      copy_x(mine_addr + slot(1, u) * 16, x_row0 + off, in && x0_ok);
      if (kTall) copy_x(mine_addr + slot(2, u) * 16, x_row1 + off, in && x1_ok);
    }
    copy_wait_all();
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint4 wv = mine[slot(0, u)], xa = mine[slot(1, u)];
      const uint4 xb = kTall ? mine[slot(2, u)] : make_uint4(0, 0, 0, 0);
      mma_bf16(c, xa.x, xb.x, xa.y, xb.y, wv.x, wv.y);
      mma_bf16(c, xa.z, xb.z, xa.w, xb.w, wv.z, wv.w);
    }
    __syncwarp();  // this batch's slots are read before the next batch's copies land
  }
  if (!waited) pdl_wait();  // warps without K steps still write (zeros) and must wait

  if (k_split > 1) {
    // Each lane parks its accumulators in its own first slot (no longer needed).
    reinterpret_cast<float4*>(mine)[0] = make_float4(c[0], c[1], c[2], c[3]);
    __syncthreads();
    if (part != 0) return;  // no barrier follows
    for (int p = 1; p < k_split; ++p) {
      const float4 v =
          reinterpret_cast<const float4*>(mine + size_t(p) * kVecs<kTall> * kUnroll * 32)[0];
      c[0] += v.x;
      c[1] += v.y;
      c[2] += v.z;
      c[3] += v.w;
    }
  }
  // Accumulator fragment: c[j] is (token g, column 2q + j), c[2 + j] is (token g + 8, ...).
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int nn = tile * kTileCols + 2 * q + j;
    if (nn >= n) continue;
    const float b = bias != nullptr ? __bfloat162float(bias[nn]) : 0.0f;
    if (g < t) store_out(c[j] + b, out + static_cast<size_t>(g) * n + nn);
    if (kTall && g + 8 < t) store_out(c[2 + j] + b, out + static_cast<size_t>(g + 8) * n + nn);
  }
}

template <bool kTall, typename OutT>
void launch(const void* x, const void* w, const void* bias, void* out, int t, int n, int k,
            int k_split, cudaStream_t stream) {
  const int max_warps = kTall ? kMaxKSplitTall : kMaxKSplit;
  k_split = std::min(k_split, max_warps);
  const int warps = std::max(kMinWarps, k_split);
  const int tiles = (n + kTileCols - 1) / kTileCols;
  const int tiles_per_cta = warps / k_split;
  const int grid = (tiles + tiles_per_cta - 1) / tiles_per_cta;
  const int smem = warps * kWarpStageBytes<kTall>;
  allow_dynamic_smem<gemv_kernel<kTall, OutT>>(max_warps * kWarpStageBytes<kTall>);
  launch_pdl("gemv_kernel", gemv_kernel<kTall, OutT>, dim3(grid), dim3(warps * 32), smem, stream,
             static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(w),
             static_cast<const __nv_bfloat16*>(bias), static_cast<OutT*>(out), t, n, k, k_split);
}

__global__ void spin_kernel(int64_t ns) {
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (static_cast<int64_t>(now - start) < ns);
}

}  // namespace

void spin_for(int64_t ns, cudaStream_t stream) {
  spin_kernel<<<1, 1, 0, stream>>>(ns);
  KS_CUDA_CHECK_LAUNCH("spin_kernel");
}

bool gemv_supported(int64_t t, int64_t n, int64_t k, const void* x, const void* w) {
  return t >= 1 && t <= kGemvMaxTokens && n >= 1 && n <= (int64_t(1) << 30) && k >= 8 &&
         k % 8 == 0 && k <= (int64_t(1) << 30) && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

int gemv_k_split(int64_t t, int64_t n, int64_t k, int num_sms) {
  const int64_t tiles = (n + kTileCols - 1) / kTileCols;
  const int64_t steps = (k + kStepK - 1) / kStepK;
  const int max_split = t > 8 ? kMaxKSplitTall : kMaxKSplit;
  // Enough warps that each has one batch: every load of the call is issued up front.
  int split = 1;
  while (split < max_split && steps > int64_t(split) * kUnroll) split *= 2;
  // Unless that is several waves of warps anyway: then fewer, longer warps (less reduction).
  const int64_t wave = int64_t(std::max(num_sms, 1)) * kResidentWarpsPerSm;
  while (split > 1 && tiles * split > 2 * wave) split /= 2;
  return split;
}

void gemv(const void* x, const void* w, const void* bias, void* out, bool f32_out, int64_t t,
          int64_t n, int64_t k, int num_sms, cudaStream_t stream, int k_split) {
  const bool valid_split = k_split >= 1 && k_split <= kMaxKSplit && (k_split & (k_split - 1)) == 0;
  if (!valid_split) k_split = gemv_k_split(t, n, k, num_sms);
  const int ti = static_cast<int>(t), ni = static_cast<int>(n), ki = static_cast<int>(k);
  if (t <= 8) {
    if (f32_out) launch<false, float>(x, w, bias, out, ti, ni, ki, k_split, stream);
    else launch<false, __nv_bfloat16>(x, w, bias, out, ti, ni, ki, k_split, stream);
  } else {
    if (f32_out) launch<true, float>(x, w, bias, out, ti, ni, ki, k_split, stream);
    else launch<true, __nv_bfloat16>(x, w, bias, out, ti, ni, ki, k_split, stream);
  }
}

}  // namespace kestrel::kernels
