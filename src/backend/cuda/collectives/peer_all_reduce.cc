// PeerAllReduce (peer_all_reduce.h): mapping every rank's buffer into every other rank, and
// agreeing on it.
#include "backend/cuda/collectives/peer_all_reduce.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "core/logging.h"

namespace kestrel {
namespace {

// What a rank tells the others about its allocation.
struct PeerInfo {
  int32_t ok = 0;  // this rank allocated and exported its memory
  int32_t pid = 0;
  int32_t device = 0;
  uint64_t address = 0;  // for a peer in the same process, which cannot open the IPC handle
  cudaIpcMemHandle_t handle{};
};

// Every rank's `mine`, on every rank, through the host communicator.
std::vector<PeerInfo> exchange(Communicator& host, const PeerInfo& mine) {
  std::vector<PeerInfo> all(static_cast<size_t>(host.world_size()));
  for (int r = 0; r < host.world_size(); ++r) {
    if (r == host.rank()) all[r] = mine;
    host.broadcast_host(&all[r], sizeof(PeerInfo), r);
  }
  return all;
}

bool all_ranks(Communicator& host, bool ok) {
  PeerInfo mine;
  mine.ok = ok ? 1 : 0;
  for (const PeerInfo& p : exchange(host, mine)) ok = ok && p.ok != 0;
  return ok;
}

// Flags, the two data buffers, the low-latency region.
size_t ll_offset() { return kernels::kPeerFlagsBytes + 2 * PeerAllReduce::kCapacity; }
size_t ts_offset() { return ll_offset() + kernels::kPeerLlRegionBytes; }
size_t allocation_bytes() {
  return ts_offset() + kernels::kPeerTwoShotRegionBytes(PeerAllReduce::kCapacity);
}
// Call numbers: the one-shot kernel's, the low-latency kernel's, the two-shot kernel's.
constexpr int kCounters = kernels::kPeerMaxBlocks + kernels::kPeerLlBlocks + kernels::kPeerMaxBlocks;

}  // namespace

int64_t agreed_env(Communicator& host, const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const char* env = std::getenv(name);
  const int64_t want = env != nullptr ? std::clamp<int64_t>(std::atoll(env), lo, hi) : fallback;
  return host.all_reduce_min_host(want);
}

PeerAllReduce::PeerAllReduce(int device, int rank, int world_size)
    : device_(device), rank_(rank), world_size_(world_size) {}

std::unique_ptr<PeerAllReduce> PeerAllReduce::create(int device, Communicator& host) {
  const int world = host.world_size(), rank = host.rank();
  if (world < 2) return nullptr;  // nothing to reduce, and nobody to agree with
  const char* env = std::getenv("KESTREL_CUSTOM_ALLREDUCE");
  bool ok = world <= kMaxRanks && !(env != nullptr && std::strcmp(env, "0") == 0);
  std::string why = !ok ? (world > kMaxRanks ? fmt::format("more than {} ranks", kMaxRanks)
                                             : std::string("KESTREL_CUSTOM_ALLREDUCE=0"))
                        : std::string();

  std::unique_ptr<PeerAllReduce> self(new PeerAllReduce(device, rank, world));
  PeerInfo mine;
  if (ok) {
    try {
      KS_CUDA_CHECK(cudaSetDevice(device));
      KS_CUDA_CHECK(cudaMalloc(&self->local_, allocation_bytes()));
      KS_CUDA_CHECK(cudaMemset(self->local_, 0, allocation_bytes()));
      void* counter = nullptr;
      KS_CUDA_CHECK(cudaMalloc(&counter, kCounters * sizeof(uint32_t)));
      self->counter_ = static_cast<uint32_t*>(counter);
      KS_CUDA_CHECK(cudaMemset(counter, 0, kCounters * sizeof(uint32_t)));
      void* flag = nullptr;
      KS_CUDA_CHECK(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped));
      self->abort_host_ = static_cast<volatile int*>(flag);
      *self->abort_host_ = 0;
      void* flag_device = nullptr;
      KS_CUDA_CHECK(cudaHostGetDevicePointer(&flag_device, flag, 0));
      self->abort_device_ = static_cast<int*>(flag_device);
      KS_CUDA_CHECK(cudaIpcGetMemHandle(&mine.handle, self->local_));
      KS_CUDA_CHECK(cudaDeviceSynchronize());  // zeroed before any peer can post a flag
      mine.ok = 1;
      mine.pid = static_cast<int32_t>(getpid());
      mine.device = device;
      mine.address = reinterpret_cast<uint64_t>(self->local_);
    } catch (const Error& e) {
      why = e.what();
    }
  }
  const std::vector<PeerInfo> infos = exchange(host, mine);
  bool mapped = true;
  for (const PeerInfo& p : infos) mapped = mapped && p.ok != 0;
  self->peers_.assign(static_cast<size_t>(world), nullptr);
  self->opened_.assign(static_cast<size_t>(world), false);
  for (int r = 0; r < world && mapped; ++r) {
    const PeerInfo& p = infos[r];
    if (r == rank) {
      self->peers_[r] = self->local_;
      continue;
    }
    try {
      int can = 0;
      if (p.pid == mine.pid) {  // ranks as threads of one process (tests)
        KS_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, device, p.device));
        KS_CHECK(can != 0, "cuda:{} cannot access cuda:{}", device, p.device);
        const cudaError_t err = cudaDeviceEnablePeerAccess(p.device, 0);
        if (err == cudaErrorPeerAccessAlreadyEnabled) {
          (void)cudaGetLastError();  // clears it
        } else {
          KS_CUDA_CHECK(err);
        }
        self->peers_[r] = reinterpret_cast<void*>(p.address);
      } else {
        KS_CUDA_CHECK(cudaIpcOpenMemHandle(&self->peers_[r], p.handle,
                                           cudaIpcMemLazyEnablePeerAccess));
        self->opened_[r] = true;
      }
    } catch (const Error& e) {
      why = fmt::format("rank {}'s memory: {}", r, e.what());
      mapped = false;
    }
  }
  if (!all_ranks(host, mapped)) {
    KS_LOG_INFO("tensor parallelism: all-reduces through NCCL only (no peer-mapped buffers: {})",
                why.empty() ? "another rank could not map them" : why);
    return nullptr;  // the destructor unmaps what was mapped
  }
  // The low-latency kernel by default (Qwen3-8B single stream on H200s: 3.536 -> 3.433 ms a
  // token at TP=2, 442.7 -> 447.1 decode tok/s at TP=4; docs/parallel.md). Every rank must
  // agree: the ranks run the same kernel each call.
  const char* ll = std::getenv("KESTREL_PEER_LL");
  const bool want_ll = ll == nullptr || std::strcmp(ll, "0") != 0;
  self->low_latency_ = all_ranks(host, want_ll);
  // A smaller cap for measuring the peer kernels against NCCL by size (an A/B switch).
  const auto capacity = static_cast<int64_t>(kCapacity);
  self->max_bytes_ =
      static_cast<size_t>(agreed_env(host, "KESTREL_PEER_MAX_BYTES", capacity, 0, capacity));
  // The two-shot kernel for tensors of at least KESTREL_PEER_TWO_SHOT_BYTES (0: never), on
  // KESTREL_PEER_TWO_SHOT_BLOCKS blocks. By default from 512 KiB at three ranks and more: on
  // 4 x H200 it takes 19.8 us where one-shot takes 25.7 at 2 MiB, 13.2 against 14.6 at
  // 1 MiB, but 9.0 against 6.3 at 256 KiB (allreduce_bench); nano-vLLM's benchmark at TP=4
  // 20,595 -> 21,136 output tok/s. Two ranks move the same bytes either way and keep one-shot.
  const int64_t two_shot_default = world >= 3 ? int64_t{512} << 10 : 0;
  const int64_t two_shot =
      agreed_env(host, "KESTREL_PEER_TWO_SHOT_BYTES", two_shot_default, 0, capacity);
  self->two_shot_bytes_ = two_shot > 0 ? static_cast<size_t>(two_shot) : SIZE_MAX;
  self->two_shot_blocks_ = static_cast<int>(agreed_env(
      host, "KESTREL_PEER_TWO_SHOT_BLOCKS", kernels::kPeerBlocks, 1, kernels::kPeerMaxBlocks));
  // At two ranks the one-shot kernel pushes its data into the peer's buffer instead of
  // pulling the peer's (peer_all_reduce.cu); KESTREL_PEER_PUSH=0 pulls.
  self->push_ = world == 2 && agreed_env(host, "KESTREL_PEER_PUSH", 1, 0, 1) == 1;
  // The one-shot kernel's grid, and whether at two ranks a thread batches its loads (A/B
  // switches: KESTREL_PEER_BLOCKS, KESTREL_PEER_UNROLL=0).
  self->blocks_ = static_cast<int>(
      agreed_env(host, "KESTREL_PEER_BLOCKS", kernels::kPeerBlocks, 1, kernels::kPeerMaxBlocks));
  self->unroll_ = agreed_env(host, "KESTREL_PEER_UNROLL", 1, 0, 1) == 1;
  KS_LOG_INFO("tensor parallelism: peer all-reduce up to {} KiB on {} blocks{}{}{}, NCCL above",
              self->max_bytes_ >> 10, self->blocks_, self->push_ ? " (pushed to the peer)" : "",
              self->low_latency_
                  ? fmt::format(" (low-latency kernel up to {} KiB)", kernels::kPeerLlBytes >> 10)
                  : std::string(),
              self->two_shot_bytes_ <= self->max_bytes_
                  ? fmt::format(" (two-shot kernel on {} blocks from {} KiB)",
                                self->two_shot_blocks_, self->two_shot_bytes_ >> 10)
                  : std::string());
  return self;
}

PeerAllReduce::~PeerAllReduce() {
  // Results ignored: a destructor has no one to tell.
  cudaSetDevice(device_);
  for (size_t r = 0; r < peers_.size(); ++r) {
    if (opened_[r]) cudaIpcCloseMemHandle(peers_[r]);
  }
  if (local_ != nullptr) cudaFree(local_);
  if (counter_ != nullptr) cudaFree(counter_);
  if (abort_host_ != nullptr) cudaFreeHost(const_cast<int*>(abort_host_));
}

void PeerAllReduce::run(void* data, int64_t n, DType dtype, cudaStream_t stream, void* residual) {
  const size_t bytes = static_cast<size_t>(n) * dtype_size(dtype);
  KS_CHECK(dtype == DType::kBF16 || dtype == DType::kF32,
           "peer all-reduce: BF16 or F32, not {}", dtype_name(dtype));
  KS_CHECK(takes(bytes, data), "peer all-reduce: {} bytes at {} (16-byte multiples up to {})",
           bytes, data, max_bytes_);
  kernels::PeerAllReduceArgs a{};
  for (int r = 0; r < world_size_; ++r) a.bases[r] = static_cast<char*>(peers_[r]);
  a.data = data;
  KS_CHECK(residual == nullptr || takes(bytes, residual),
           "peer all-reduce: residual at {} (16-byte aligned)", residual);
  a.residual = residual;
  a.vecs = static_cast<int64_t>(bytes / 16);
  a.capacity = kCapacity;
  a.counter = counter_;
  a.blocks = blocks_;
  a.unroll = unroll_;
  a.ll_counter = counter_ + kernels::kPeerMaxBlocks;
  a.ll_offset = ll_offset();
  a.ts_counter = counter_ + kernels::kPeerMaxBlocks + kernels::kPeerLlBlocks;
  a.ts_offset = ts_offset();
  a.ts_blocks = two_shot_blocks_;
  a.abort = abort_device_;
  a.rank = rank_;
  if (low_latency_ && bytes <= kernels::kPeerLlBytes) {
    kernels::peer_all_reduce_ll(a, world_size_, dtype == DType::kBF16, stream);
  } else if (bytes >= two_shot_bytes_) {
    kernels::peer_all_reduce_two_shot(a, world_size_, dtype == DType::kBF16, stream);
  } else {
    kernels::peer_all_reduce(a, world_size_, dtype == DType::kBF16, push_, stream);
  }
}

void PeerAllReduce::abort() {
  if (abort_host_ != nullptr) *abort_host_ = 1;
}

}  // namespace kestrel
