// Paged attention for batches with prefill rows on Hopper's warpgroup tensor cores (wgmma),
// the sm_90a twin of attention_prefill.cu: same maths, rounding points, work lookup, key
// splits and outputs (see there), different geometry.
//
// Geometry. A CTA of 2 warpgroups (256 threads) owns 128 rows of one (sequence, KV head,
// query tile), laid out as in attention_prefill.cu (row r: token r / G, head g G + r % G);
// warpgroup w owns rows [64 w, 64 w + 64), one wgmma M of 64.
// - Q [128, D] is copied once into shared memory (128-byte swizzle, wgmma.cuh) and read by
//   the tensor cores from there: S = Q K^T is a wgmma with both operands in shared memory.
// - Keys stream in tiles of kKeys = 128 (K and V [128, D] each, the same swizzled layout),
//   double-buffered with cp.async; each key row's cache offset is found once, by one thread,
//   two tiles ahead (as in attention_prefill.cu).
// - S [64, 128] per warpgroup (64 fp32 per thread, the m16n8 accumulator layout per warp);
//   causal mask and online softmax in registers as in attention_prefill.cu; P rounded once
//   to bf16 becomes the A operand of O += P V straight from registers, with V read
//   MN-major (transposed) from shared memory. O [64, D] is D / 2 fp32 per thread.
// - A warpgroup skips key tiles past its last row's position (wgmma is warpgroup-wide, so
//   skipping is per warpgroup, not per warp).
// Shared memory: Q 32 KB + 2 stages x (K + V) 128 KB + 2 KB of offsets at D = 128 (aligned
// to 1 KB for the swizzle); one CTA per SM, 230 registers at D = 128.
// The two warpgroups run in step (barriers around each tile). Since session 12 the default
// is the warp-specialised attention_prefill_ws_sm90a.cu (faster at every measured shape but
// a single short prompt); this one stays as KESTREL_PREFILL_SM90=step. Three earlier variants
// that overlapped more measured slower (docs/cuda_backend.md, "wgmma prefill attention").
#include "backend/cuda/attention/attention_prefill.cuh"
#include "backend/cuda/attention/kv_layout.cuh"
#include "backend/cuda/attention/prefill_wgmma.cuh"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"

namespace kestrel::kernels::detail {
namespace {

using namespace detail::sm90;

constexpr int kRows = kPrefillRows;

// Shared memory for Q and two K/V tiles of kKeys keys (byte offsets from a 1024-byte aligned
// base; 128-byte swizzled panels of 64 columns, wgmma.cuh).
template <int D, int kKeys>
struct Layout {
  static constexpr int kStages = 2;
  static constexpr uint32_t kQPanel = kRows * 128;   // one 64-column panel of Q
  static constexpr uint32_t kKvPanel = kKeys * 128;  // one 64-column panel of a K or V tile
  static constexpr uint32_t kTile = (D / 64) * kKvPanel;
  static constexpr uint32_t kQ = 0;
  static constexpr uint32_t kK = kQ + (D / 64) * kQPanel;  // K[kStages]
  static constexpr uint32_t kV = kK + kStages * kTile;     // V[kStages]
  static constexpr uint32_t kOff = kV + kStages * kTile;   // int64 off[kStages][kKeys]
  static constexpr uint32_t kBytes = kOff + kStages * kKeys * 8;
  static constexpr uint32_t kAlloc = kBytes + 1024;        // slack for the alignment
};

template <int D, bool kHeadMajor, int kKeys>
__global__ void __launch_bounds__(256, 1)
    prefill_sm90_kernel(PagedAttentionArgs a, int group, int q_tile, int uniform_tiles,
                        AttentionSplit split, float* part_ml, float* part_acc) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  pdl_wait();
  pdl_trigger();
  using L = Layout<D, kKeys>;
  constexpr int kThreads = 256;
  constexpr int kChunks = D / 8;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = aligned_smem_base(smem_raw);
  int64_t* const off = reinterpret_cast<int64_t*>(
      smem_raw + (base - static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw))) + L::kOff);
  const int tid = threadIdx.x;
  const PrefillWork w = find_prefill_work(a, group, q_tile, uniform_tiles, split, kKeys);
  if (w.b < 0) return;

  load_q<D, kThreads>(a, w, base + L::kQ);
  cp_async_commit();

  const int32_t* block_table = a.block_tables + int64_t(w.b) * a.max_blocks_per_seq;
  // Tile key0's key offsets into off[slot], one key per thread of [0, kKeys): the page is
  // fetched first (page_of) and turned into an offset later (store_offset), so the block
  // table's latency hides behind a tile of maths.
  auto page_of = [&](int key0) {
    const int j = key0 + tid;
    return tid < kKeys && j < w.k_end ? block_table[j / a.block_size] : -1;
  };
  auto store_offset = [&](int key0, int page, int slot) {
    if (tid < kKeys) {
      const int j = key0 + tid;
      off[slot * kKeys + tid] =
          page < 0 ? -1
                   : kv_row_offset<kHeadMajor>(page, j % a.block_size, w.g, a.num_kv_heads,
                                               a.block_size, D);
    }
  };
  auto load_tile = [&](int buf) {
    for (int i = tid; i < kKeys * kChunks; i += kThreads) {
      const int key = i / kChunks;
      const int part = i % kChunks;
      const int64_t row = off[buf * kKeys + key];
      const bool valid = row >= 0;
      const int64_t src = valid ? row + part * 8 : 0;
      const uint32_t at = buf * L::kTile + swizzled_chunk(key, part, L::kKvPanel);
      cp_async_16(base + L::kK + at, static_cast<const bf16*>(a.k_cache) + src, valid);
      cp_async_16(base + L::kV + at, static_cast<const bf16*>(a.v_cache) + src, valid);
    }
    cp_async_commit();
  };

  WarpgroupRows<D, kKeys> rows;
  rows.init(w, a.scale, 64 * (tid / 128));
  const uint32_t q_wg = base + L::kQ + rows.row0 * 128;
  const int num_tiles = w.k_end > w.k_begin ? (w.k_end - w.k_begin + kKeys - 1) / kKeys : 0;
  store_offset(w.k_begin, page_of(w.k_begin), 0);
  store_offset(w.k_begin + kKeys, page_of(w.k_begin + kKeys), 1);
  __syncthreads();
  if (num_tiles > 0) {
    load_tile(0);
    cp_async_wait<1>();  // Q; tile 0 may stay in flight (the loop waits for it)
  } else {
    cp_async_wait<0>();
  }
  fence_proxy_async_shared();
  __syncthreads();
  for (int it = 0; it < num_tiles; ++it) {
    const int buf = it & 1;
    const int key0 = w.k_begin + it * kKeys;
    if (it + 1 < num_tiles) {
      load_tile(buf ^ 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    fence_proxy_async_shared();  // tile `it`'s copies before the tensor cores read them
    __syncthreads();
    const int next_page = page_of(key0 + 2 * kKeys);
    if (rows.needs(key0)) {  // warpgroup-uniform
      rows.tile(w, key0, q_wg, L::kQPanel, base + L::kK + buf * L::kTile,
                base + L::kV + buf * L::kTile, L::kKvPanel);
    }
    store_offset(key0 + 2 * kKeys, next_page, buf);
    __syncthreads();  // every warpgroup done with buf before it is refilled
  }
  cp_async_wait<0>();
  rows.store(a, w, blockIdx.z, part_ml, part_acc);
#else
  __trap();  // compiled for sm_90a only; the dispatch never launches it elsewhere
#endif
}

template <int D, bool kHeadMajor>
void launch(const PagedAttentionArgs& a, const AttentionSplit& split, float* part_ml,
            float* part_acc, cudaStream_t stream) {
  constexpr int kKeys = 128;
  const int group = a.num_q_heads / a.num_kv_heads;
  const int q_tile = kRows / group;
  const int bytes = static_cast<int>(Layout<D, kKeys>::kAlloc);
  allow_dynamic_smem<prefill_sm90_kernel<D, kHeadMajor, kKeys>>(bytes);
  int uniform_tiles;
  const dim3 grid = prefill_grid(a, split, q_tile, &uniform_tiles);
  launch_pdl("attention prefill_sm90_kernel", prefill_sm90_kernel<D, kHeadMajor, kKeys>, grid,
             256, bytes, stream, a, group, q_tile, uniform_tiles, split, part_ml, part_acc);
  KS_CUDA_CHECK_LAUNCH("attention prefill_sm90_kernel");
}

template <int D>
void launch_layout(const PagedAttentionArgs& a, const AttentionSplit& split, float* part_ml,
                   float* part_acc, cudaStream_t stream) {
  if (a.kv_head_major) return launch<D, true>(a, split, part_ml, part_acc, stream);
  launch<D, false>(a, split, part_ml, part_acc, stream);
}

}  // namespace

void prefill_attention_sm90(const PagedAttentionArgs& a, const AttentionSplit& split,
                            float* part_ml, float* part_acc, cudaStream_t stream) {
  switch (a.head_dim) {
    case 64:
      launch_layout<64>(a, split, part_ml, part_acc, stream);
      break;
    case 128:
      launch_layout<128>(a, split, part_ml, part_acc, stream);
      break;
    default:
      KS_CUDA_CHECK(cudaErrorInvalidValue);  // use_prefill_kernel() said no
  }
}

}  // namespace kestrel::kernels::detail
