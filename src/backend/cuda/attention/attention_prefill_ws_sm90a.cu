// Paged prefill attention on Hopper, warp-specialised: the same maths, rounding points, work
// items, key splits and outputs as attention_prefill_sm90a.cu (and attention_prefill.cu),
// arranged so that the tensor cores do not wait for the softmax or the copies
// (FlashAttention-3's structure).
//
// A CTA of three warpgroups owns 128 rows of one (sequence, KV head, query tile):
// - Warpgroup 0 copies: Q once, then each key tile's K and V rows (kKeys = 128 keys, 128-byte
//   swizzled panels as in wgmma.cuh) into a ring of kStages buffers. A tile whose rows are
//   consecutive in the cache (pages handed out in order, as a fresh cache does) comes as two
//   TMA boxes per tensor; any other tile by cp.async, row by row through the block table
//   (H200, 8,192-key prompt: 0.47 ms per layer with boxes, 0.70 without). Each fill
//   completes on an mbarrier (k_full / v_full); a buffer is refilled after both consumers
//   release it (k_empty / v_empty). The warpgroup runs on 40 registers (setmaxnreg).
// - Warpgroups 1 and 2 each own 64 rows (WarpgroupRows, prefill_wgmma.cuh) on 232 registers.
//   Step t issues S_t = Q K_t^T and O += P_{t-1} V_{t-1} together, then computes tile t's
//   softmax while the P V product runs, and rescales O once it is done.
// - The two consumers take turns at issuing their products (two named barriers, "ping-pong"),
//   so one warpgroup's softmax runs while the other's products occupy the tensor cores.
// A consumer whose rows see fewer key tiles than the CTA loads (the diagonal tile of a
// causal prompt) still takes its turns and releases those tiles, so neither the turn-taking
// nor the ring stalls.
// Shared memory at D = 128: Q 32 KB + kStages x (K + V) 64 KB + key row indices and barriers.
#include <algorithm>
#include <cstdlib>

#include "backend/cuda/attention/attention_prefill.cuh"
#include "backend/cuda/attention/kv_layout.cuh"
#include "backend/cuda/attention/prefill_wgmma.cuh"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/tma.cuh"
#include "backend/cuda/tma_map.h"
#include "backend/cuda/warpgroup_sync.cuh"

namespace kestrel::kernels::detail {
namespace {

using namespace detail::sm90;

constexpr int kKeys = 128;
constexpr int kThreads = 384;
constexpr int kProducerRegs = 40;
constexpr int kConsumerRegs = 232;  // 40 x 128 + 232 x 256 <= 168 x 384, the launch's pool
// Named barriers (0 is __syncthreads): consumer c's turn to issue is kBarTurn + c; the
// producer warpgroup's own barrier publishes a tile's key row indices.
constexpr int kBarTurn = 1;
constexpr int kBarProducer = 3;

// Byte offsets from a 1024-byte aligned base.
template <int D, int kStages>
struct Layout {
  static constexpr uint32_t kQPanel = kPrefillRows * 128;  // one 64-column panel of Q
  static constexpr uint32_t kKvPanel = kKeys * 128;        // one 64-column panel of a K/V tile
  static constexpr uint32_t kTile = (D / 64) * kKvPanel;
  static constexpr uint32_t kQ = 0;
  static constexpr uint32_t kK = kQ + (D / 64) * kQPanel;  // K[kStages]
  static constexpr uint32_t kV = kK + kStages * kTile;     // V[kStages]
  static constexpr uint32_t kRowIdx = kV + kStages * kTile;  // int32 [kStages][kKeys]
  // mbarriers: q_full, q_empty, then k_full, v_full, k_empty, v_empty [kStages] each
  static constexpr uint32_t kBars = kRowIdx + kStages * kKeys * 4;
  static constexpr uint32_t kBytes = kBars + (2 + 4 * kStages) * 8;
  static constexpr uint32_t kAlloc = kBytes + 1024;  // slack for the alignment
  static_assert(kAlloc + 64 <= 227 * 1024, "shared memory per block");
};

// Tiles are numbered across the CTA's work items (t0 + the item's own tile index), so the
// ring's buffers and parities run on from one item to the next; Q's barriers alternate per
// item n.
template <int kStages>
struct Ring {
  uint32_t bars;
  __device__ uint32_t q_full() const { return bars; }
  __device__ uint32_t q_empty() const { return bars + 8; }
  __device__ uint32_t k_full(int t) const { return bars + 8 * (2 + t % kStages); }
  __device__ uint32_t v_full(int t) const { return bars + 8 * (2 + kStages + t % kStages); }
  __device__ uint32_t k_empty(int t) const { return bars + 8 * (2 + 2 * kStages + t % kStages); }
  __device__ uint32_t v_empty(int t) const { return bars + 8 * (2 + 3 * kStages + t % kStages); }
  // Parity of tile t's use of its buffer (the consumers wait for it to fill; the producer,
  // for the use before it to be released: parity ^ 1, which a new barrier passes at once).
  __device__ static uint32_t parity(int t) { return (t / kStages) & 1; }
};

// Copies kKeys rows of one cache (row r at element r x D, or zeros where r < 0) into the
// swizzled tile at dst; producer threads only. Thread i copies chunk i % (D / 8) of keys
// i / (D / 8) + kPass j: those keys share their row % 8, so the swizzled destination moves by
// whole 8-row groups and the addresses cost one add per copy.
template <int D>
__device__ __forceinline__ void copy_rows(const bf16* cache, const int32_t* rows, uint32_t dst) {
  constexpr int kChunks = D / 8;
  constexpr int kPass = 128 / kChunks;  // keys per pass of the 128 producer threads
  static_assert(kPass % 8 == 0, "the swizzle repeats every 8 rows");
  const int part = threadIdx.x % kChunks;
  const int key0 = threadIdx.x / kChunks;
  const uint32_t at = dst + swizzled_chunk(key0, part, kKeys * 128);
  const bf16* const src = cache + part * 8;
#pragma unroll
  for (int j = 0; j < kKeys / kPass; ++j) {
    const int32_t r = rows[key0 + kPass * j];
    cp_async_16(at + kPass * j * 128, src + (r >= 0 ? int64_t(r) * D : 0), r >= 0);
  }
}

// Where a tile's K or V rows come from: a tile whose 128 rows lie contiguous in the cache
// (consecutive pages of a token-major cache, or one page of 128+ keys) as TMA boxes of 128
// rows through k_map / v_map (when `tma`); any other tile, and one past the keys' end, by
// cp.async row by row with zeros for missing keys. (Boxes of one 16-key page each measured
// slower than cp.async: 0.93 against 0.67 ms per layer at 8,192 keys.)
struct KvSource {
  const CUtensorMap* k_map;
  const CUtensorMap* v_map;
  bool tma;
};

// Fills one K or V buffer and arrives on its full barrier, which counts 128 arrivals: one
// per producer thread's copies, or thread 0's for all when the tile comes as TMA boxes.
// rows[]: the tile's key row indices (kv_layout.cuh's offset / D); the first one, row0, is
// (row0 % m, row0 / m) in the map's outer dims.
template <int D>
__device__ __forceinline__ void fill(bool boxes, const CUtensorMap* map, int32_t row0, int m,
                                     const bf16* cache, const int32_t* rows, uint32_t dst,
                                     uint32_t full) {
  if (boxes) {
    if (threadIdx.x == 0) {
      const int c1 = row0 % m, c2 = row0 / m;
      mbar_expect_tx(full, (D / 64) * kKeys * 128);  // one arrival, and the bytes to wait for
#pragma unroll
      for (int p = 0; p < D / 64; ++p) {
        tma_load_3d(dst + p * kKeys * 128, map, p * 64, c1, c2, full);
      }
      mbar_arrive(full, 127);
    }
    return;
  }
  copy_rows<D>(cache, rows, dst);
  cp_async_mbar_arrive(full);
}

// One work item's Q and key tiles; t0: tiles of the CTA's earlier items, n: their number.
template <int D, bool kHeadMajor, int kStages>
__device__ __forceinline__ void produce(const PagedAttentionArgs& a, const PrefillWork& w,
                                        int num_tiles, uint32_t base, int32_t* row_idx,
                                        const Ring<kStages>& ring, const KvSource& src, int t0,
                                        int n) {
  using L = Layout<D, kStages>;
  const int tid = threadIdx.x;  // 0 .. 127: one key of each tile
  mbar_wait(ring.q_empty(), (n & 1) ^ 1);  // the last item's products are done with Q
  load_q<D, 128>(a, w, base + L::kQ);
  cp_async_mbar_arrive(ring.q_full());
  const int32_t* block_table = a.block_tables + int64_t(w.b) * a.max_blocks_per_seq;
  // TMA boxes need a tile's 128 rows consecutive in the cache. Head-major pages of 128+ keys
  // (the only head-major ones src.tma allows) hold whole tiles; token-major tiles are
  // consecutive when their pages are numbered consecutively, which is checked once for the
  // CTA's whole key range (a per-tile check measured 0.46 -> 0.50 ms at 8,192 keys).
  bool consecutive = src.tma;
  if (consecutive && !kHeadMajor) {
    bool in_order = true;
    const int last = (w.k_end - 1) / a.block_size;
    for (int i = w.k_begin / a.block_size + tid; i < last; i += 128) {
      in_order = in_order && block_table[i + 1] == block_table[i] + 1;
    }
    consecutive = named_barrier_and(kBarProducer, 128, in_order);
  }
  // Each tile's page is fetched a tile ahead, so the block table's latency hides.
  auto page_of = [&](int key0) {
    const int j = key0 + tid;
    return j < w.k_end ? block_table[j / a.block_size] : -1;
  };
  const int m = kHeadMajor ? a.block_size : a.num_kv_heads;
  int page = num_tiles > 0 ? page_of(w.k_begin) : -1;
  for (int t = 0; t < num_tiles; ++t) {
    const int key0 = w.k_begin + t * kKeys;
    const int ct = t0 + t;  // the tile's number in the CTA's ring
    const int slot = ct % kStages;
    int32_t* const rows = row_idx + slot * kKeys;
    // The producer's earlier readers of this slot passed kBarProducer since (kStages >= 2).
    const int32_t row =
        page < 0 ? -1
                 : static_cast<int32_t>(kv_row_offset<kHeadMajor>(page, (key0 + tid) % a.block_size,
                                                                  w.g, a.num_kv_heads,
                                                                  a.block_size, D) /
                                        D);
    rows[tid] = row;
    if (t + 1 < num_tiles) page = page_of(key0 + kKeys);
    named_barrier_sync(kBarProducer, 128);
    const bool boxes = consecutive && key0 + kKeys <= w.k_end;
    // Every producer thread waits before it arrives on full: its arrival then cannot count
    // toward the buffer's previous fill. (Thread 0's row is rows[0], where boxes start.)
    mbar_wait(ring.k_empty(ct), Ring<kStages>::parity(ct) ^ 1);
    fill<D>(boxes, src.k_map, row, m, static_cast<const bf16*>(a.k_cache), rows,
            base + L::kK + slot * L::kTile, ring.k_full(ct));
    mbar_wait(ring.v_empty(ct), Ring<kStages>::parity(ct) ^ 1);
    fill<D>(boxes, src.v_map, row, m, static_cast<const bf16*>(a.v_cache), rows,
            base + L::kV + slot * L::kTile, ring.v_full(ct));
  }
}

// One consumer warpgroup: its 64 rows and its side of the ring and of the turn-taking.
template <int D, int kStages>
struct Consumer {
  using L = Layout<D, kStages>;
  static constexpr int kPBlocks = kKeys / 16;

  WarpgroupRows<D, kKeys> rows;
  uint32_t p[kPBlocks][4];  // P_{t-1}, the A operand of the next P V
  float corr[2];
  const PrefillWork& w;
  const Ring<kStages>& ring;
  uint32_t base, q;
  int num_tiles, my_turn, other_turn;
  int t0, n;              // the ring's tiles and the items before this one (Ring)
  bool last_turn_passes;  // consumer 1's last turn would pass to a finished consumer 0

  __device__ Consumer(const PagedAttentionArgs& a, const PrefillWork& work, int tiles, int c,
                      uint32_t smem, const Ring<kStages>& r, int tiles_before, int items_before)
      : w(work), ring(r), base(smem), num_tiles(tiles), my_turn(kBarTurn + c),
        other_turn(kBarTurn + 1 - c), t0(tiles_before), n(items_before),
        last_turn_passes(c == 0) {
    rows.init(w, a.scale, 64 * c);
    q = base + L::kQ + rows.row0 * 128;
  }

  __device__ void release(uint32_t bar) const {
    __syncwarp();
    if (threadIdx.x % 32 == 0) mbar_arrive(bar);  // the barriers count 4 warps x 2 consumers
  }

  // Step t: S_t = Q K_t^T when kS, O += P_{t-1} V_{t-1} when kPV; then tile t's softmax while
  // P V runs. Every step takes a turn and releases K_t and V_{t-1} (once they have landed:
  // a release must not count toward the buffer's previous use). The flags are template
  // arguments so that no wgmma or wgmma wait sits under a runtime branch (ptxas would
  // serialise the products).
  template <bool kS, bool kPV>
  __device__ void step(int t) {
    const int ct = t0 + t;  // tile t's number in the ring
    if (t < num_tiles) mbar_wait(ring.k_full(ct), Ring<kStages>::parity(ct));
    if (t >= 1) mbar_wait(ring.v_full(ct - 1), Ring<kStages>::parity(ct - 1));
    fence_proxy_async_shared();  // the copies, seen through the barrier, before the wgmmas
    named_barrier_sync(my_turn, 256);
    if constexpr (kS) {
      rows.issue_s(q, L::kQPanel, base + L::kK + (ct % kStages) * L::kTile, L::kKvPanel);
      wgmma_commit();
    }
    if constexpr (kPV) {
      rows.issue_pv(p, base + L::kV + ((ct - 1) % kStages) * L::kTile, L::kKvPanel);
      wgmma_commit();
    }
    if (last_turn_passes || t < num_tiles) named_barrier_arrive(other_turn, 256);
    if constexpr (kS) {
      if constexpr (kPV) {
        wgmma_wait<1>();
      } else {
        wgmma_wait<0>();
      }
      wgmma_fence_operand(rows.s);
    }
    if (t < num_tiles) release(ring.k_empty(ct));
    if constexpr (kS) rows.softmax(w, w.k_begin + t * kKeys, corr);
    if constexpr (kPV) {
      wgmma_wait<0>();
      wgmma_fence_operand(rows.o);
    }
    if (t >= 1) release(ring.v_empty(ct - 1));
    if constexpr (kS) {
      if constexpr (kPV) rows.rescale_o(corr);
      rows.pack_p(p);
    }
  }

  __device__ void run() {
    if (my_turn == kBarTurn + 1) named_barrier_arrive(other_turn, 256);  // consumer 0 first
    mbar_wait(ring.q_full(), n & 1);
    // Tiles this warpgroup's rows see: a prefix of the CTA's. (Broadcast from lane 0, so
    // that ptxas sees a warp-uniform value: wgmma under a branch it thinks divergent is
    // serialised.)
    const int needed = __shfl_sync(0xffffffffu,
                                   rows.last_pos < w.k_begin
                                       ? 0
                                       : min(num_tiles, (rows.last_pos - w.k_begin) / kKeys + 1),
                                   0);
    int t = 0;
    if (needed > 0) {
      step<true, false>(0);
      for (t = 1; t < needed; ++t) step<true, true>(t);
      step<false, true>(t++);
    }
    for (; t <= num_tiles; ++t) step<false, false>(t);
    release(ring.q_empty());  // every product that read Q is done (waited for in the steps)
  }
};

// A CTA runs work items blockIdx.x, + gridDim.x, ... of num_x x Hkv x splits (KV head
// fastest, then prefill_grid's query-tile axis, longest tiles first; key split slowest).
// With one CTA per item this is the plain grid; with fewer (persistent: one per SM) the
// copying warpgroup starts the next item's Q and key tiles while the computing warpgroups
// finish the last one, instead of a new CTA's launch, set-up and first copies each time.
template <int D, bool kHeadMajor, int kStages>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_ws_kernel(const __grid_constant__ CUtensorMap k_map,
                      const __grid_constant__ CUtensorMap v_map, bool tma,
                      PagedAttentionArgs a, int group, int q_tile, int uniform_tiles, int num_x,
                      AttentionSplit split, float* part_ml, float* part_acc) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  pdl_wait();
  pdl_trigger();
  using L = Layout<D, kStages>;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = aligned_smem_base(smem_raw);
  int32_t* const row_idx = reinterpret_cast<int32_t*>(
      smem_raw + (base - static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw))) +
      L::kRowIdx);
  const Ring<kStages> ring{base + L::kBars};
  if (threadIdx.x == 0) {
    mbar_init(ring.q_full(), 128);  // 128 producer threads' arrivals (fill)
    mbar_init(ring.q_empty(), 8);   // one arrival per consumer warp
    for (int s = 0; s < kStages; ++s) {
      mbar_init(ring.k_full(s), 128);
      mbar_init(ring.v_full(s), 128);
      mbar_init(ring.k_empty(s), 8);
      mbar_init(ring.v_empty(s), 8);
    }
  }
  __syncthreads();
  const int heads = a.num_kv_heads;
  const int items = num_x * heads * split.num_splits;
  // Calls body(work, split, tiles, t0, n) for each of the CTA's items that has work, t0 and n
  // counting the tiles and items before it. Each warpgroup runs its own loop: code after
  // setmaxnreg must fit the registers it sets (ptxas ignores it otherwise).
  auto each_item = [&](auto&& body) {
    int t0 = 0, n = 0;
    for (int item = blockIdx.x; item < items; item += gridDim.x) {
      const int g = item % heads, x = item / heads % num_x, z = item / heads / num_x;
      const PrefillWork w =
          prefill_work_at(a, group, q_tile, uniform_tiles, split, kKeys, num_x, x, g, z);
      if (w.b < 0) continue;
      const int tiles = w.k_end > w.k_begin ? (w.k_end - w.k_begin + kKeys - 1) / kKeys : 0;
      body(w, z, tiles, t0, n);
      t0 += tiles;
      ++n;
    }
  };
  // Broadcast from lane 0 so that ptxas sees it warp-uniform (see Consumer::run).
  const int warpgroup = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
  if (warpgroup == 0) {
    setmaxnreg_dec<kProducerRegs>();
    each_item([&](const PrefillWork& w, int, int tiles, int t0, int n) {
      produce<D, kHeadMajor, kStages>(a, w, tiles, base, row_idx, ring,
                                      KvSource{&k_map, &v_map, tma}, t0, n);
    });
    cp_async_wait_all();
  } else {
    setmaxnreg_inc<kConsumerRegs>();
    each_item([&](const PrefillWork& w, int z, int tiles, int t0, int n) {
      Consumer<D, kStages> consumer(a, w, tiles, warpgroup - 1, base, ring, t0, n);
      consumer.run();
      consumer.rows.store(a, w, z, part_ml, part_acc);
    });
  }
#else
  __trap();  // compiled for sm_90a only; the dispatch never launches it elsewhere
#endif
}

// The map of one layer's K or V cache for boxes of 128 rows of one KV head, 64 dims:
// token-major [blocks * block_size, Hkv, D] or head-major [blocks * Hkv, block_size, D],
// innermost last (kv_layout.cuh). Head-major boxes stay inside a page: block_size must be a
// multiple of 128.
CUtensorMap kv_map(const void* cache, const PagedAttentionArgs& a) {
  const uint64_t d = a.head_dim, bs = a.block_size, hkv = a.num_kv_heads, n = a.num_blocks;
  const uint64_t mid = a.kv_head_major ? bs : hkv;
  const uint64_t dims[3] = {d, mid, n * (a.kv_head_major ? hkv : bs)};
  const uint64_t strides[2] = {d * 2, mid * d * 2};
  const uint32_t box[3] = {64, a.kv_head_major ? uint32_t(kKeys) : 1u,
                           a.kv_head_major ? 1u : uint32_t(kKeys)};
  return bf16_tensor_map(cache, 3, dims, strides, box);
}

// TMA boxes unless KESTREL_PREFILL_WS_TMA=0 or head-major pages shorter than a tile.
bool use_tma(const PagedAttentionArgs& a) {
  const char* env = std::getenv("KESTREL_PREFILL_WS_TMA");
  if (env != nullptr && env[0] == '0') return false;
  return !a.kv_head_major || a.block_size % kKeys == 0;
}

template <int D, bool kHeadMajor, int kStages>
void launch(const PagedAttentionArgs& a, const AttentionSplit& split, float* part_ml,
            float* part_acc, cudaStream_t stream) {
  const int group = a.num_q_heads / a.num_kv_heads;
  const int q_tile = kPrefillRows / group;
  const int bytes = static_cast<int>(Layout<D, kStages>::kAlloc);
  allow_dynamic_smem<prefill_ws_kernel<D, kHeadMajor, kStages>>(bytes);
  int uniform_tiles;
  const dim3 items = prefill_grid(a, split, q_tile, &uniform_tiles);
  const int64_t num_items = int64_t(items.x) * items.y * items.z;
  // Persistent (one CTA per SM, or KESTREL_PREFILL_WS_CTAS of them: the tests' way to give
  // each CTA several items) for batches of equal-length prompts, unless
  // KESTREL_PREFILL_WS_PERSIST is 0 (H200, session 14: the prefill workload +1% and +3% in
  // two pairs of runs). A ragged batch keeps one CTA per item (finding an item there is a
  // warp's scan over the sequences, which a plain grid does once per CTA).
  const char* env = std::getenv("KESTREL_PREFILL_WS_PERSIST");
  const bool persistent = uniform_tiles > 0 && (env == nullptr || env[0] != '0');
  int ctas = 1, device = 0;
  KS_CUDA_CHECK(cudaGetDevice(&device));
  KS_CUDA_CHECK(cudaDeviceGetAttribute(&ctas, cudaDevAttrMultiProcessorCount, device));
  if (const char* cap = std::getenv("KESTREL_PREFILL_WS_CTAS")) {
    ctas = std::clamp(std::atoi(cap), 1, ctas);
  }
  const auto grid =
      static_cast<unsigned>(persistent ? std::min<int64_t>(num_items, ctas) : num_items);
  const bool tma = use_tma(a);
  CUtensorMap k_map{}, v_map{};
  if (tma) {
    k_map = kv_map(a.k_cache, a);
    v_map = kv_map(a.v_cache, a);
  }
  launch_pdl("attention prefill_ws_kernel", prefill_ws_kernel<D, kHeadMajor, kStages>, grid,
             kThreads, bytes, stream, k_map, v_map, tma, a, group, q_tile, uniform_tiles,
             static_cast<int>(items.x), split, part_ml, part_acc);
  KS_CUDA_CHECK_LAUNCH("attention prefill_ws_kernel");
}

template <int D, int kStages>
void launch_layout(const PagedAttentionArgs& a, const AttentionSplit& split, float* part_ml,
                   float* part_acc, cudaStream_t stream) {
  if (a.kv_head_major) return launch<D, true, kStages>(a, split, part_ml, part_acc, stream);
  launch<D, false, kStages>(a, split, part_ml, part_acc, stream);
}

template <int kStages>
void launch_stages(const PagedAttentionArgs& a, const AttentionSplit& split, float* part_ml,
                   float* part_acc, cudaStream_t stream) {
  switch (a.head_dim) {
    case 64:
      launch_layout<64, kStages>(a, split, part_ml, part_acc, stream);
      break;
    case 128:
      launch_layout<128, kStages>(a, split, part_ml, part_acc, stream);
      break;
    default:
      KS_CUDA_CHECK(cudaErrorInvalidValue);  // use_prefill_kernel() said no
  }
}

}  // namespace

void prefill_attention_sm90_ws(const PagedAttentionArgs& a, const AttentionSplit& split,
                               float* part_ml, float* part_acc, cudaStream_t stream) {
  const char* env = std::getenv("KESTREL_PREFILL_WS_STAGES");
  if (env != nullptr && env[0] == '3') return launch_stages<3>(a, split, part_ml, part_acc, stream);
  launch_stages<2>(a, split, part_ml, part_acc, stream);
}

}  // namespace kestrel::kernels::detail
