// graph_edges.h on a captured graph of three launches: our PDL-launched elementwise kernel,
// a cuBLASLt product (launched plainly by the library), then our PDL-launched silu_mul. The
// summary must see the plain edge into the library's kernel and the programmatic one out of
// it, and the unsafe conversion must leave no plain kernel-to-kernel edge behind.
#include "backend/cuda/graph_edges.h"

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "backend/cuda/gemm/gemm.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"

namespace kestrel {
namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

struct DeviceBuffer {
  explicit DeviceBuffer(size_t elems) {
    EXPECT_EQ(cudaMalloc(&p, elems * sizeof(__nv_bfloat16)), cudaSuccess);
    std::vector<__nv_bfloat16> host(elems);
    std::mt19937 rng(static_cast<unsigned>(elems));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& v : host) v = __float2bfloat16(u(rng));
    EXPECT_EQ(cudaMemcpy(p, host.data(), elems * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(p); }
  __nv_bfloat16* get() const { return static_cast<__nv_bfloat16*>(p); }
  void* p = nullptr;
};

// add_into, a product of 16 rows (past the GEMV kernel's rows: set_gemv_max_tokens(0) too),
// silu_mul: a layer's chain of kernel, product, kernel.
struct Chain {
  static constexpr int64_t kT = 16, kK = 256, kN = 512;
  DeviceBuffer x{kT * kK}, x2{kT * kK}, w{kN * kK}, y{kT * kN}, act{kT * kN / 2};

  // Runs the product once eagerly (planning and any workspace growth happen outside the
  // capture), then captures the chain.
  cudaGraph_t capture(cudaStream_t s, GemmRunner& gemm) {
    gemm.run(x.get(), w.get(), nullptr, y.get(), CUDA_R_16BF, kT, kN, kK);
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    cudaGraph_t g = nullptr;
    EXPECT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    kernels::add_into(x.get(), x2.get(), kT * kK, s);
    gemm.run(x.get(), w.get(), nullptr, y.get(), CUDA_R_16BF, kT, kN, kK);
    kernels::silu_mul(y.get(), kT, kN / 2, act.get(), s);
    EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
    return g;
  }
};

bool ours(const std::string& name) {
  return name.find("add_into") != std::string::npos || name.find("silu_mul") != std::string::npos;
}

TEST(GraphEdges, SeesThePlainEdgeIntoALibraryKernel) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  {
    GemmRunner gemm(s);
    gemm.set_gemv_max_tokens(0);
    gemm.set_wgmma_gemm(false);  // 16 rows would take our wgmma kernel, entered with PDL
    Chain chain;
    cudaGraph_t g = chain.capture(s, gemm);
    ASSERT_NE(g, nullptr);
    const GraphEdgeSummary report = summarize_graph_edges(g);
    EXPECT_GE(report.kernels, 3u);
    EXPECT_GE(report.programmatic_edges, 1u) << "silu_mul is launched with PDL";
    int plain = 0;
    for (const auto& [name, count] : report.plain_into) {
      EXPECT_FALSE(ours(name)) << name << ": our kernels are entered programmatically";
      EXPECT_NE(name, "?") << "the driver named no kernel";
      plain += count;
    }
    EXPECT_GE(plain, 1) << "the edge into cuBLASLt's kernel is plain";
    EXPECT_EQ(report.made_programmatic, 0u);

    // The conversion (a measurement switch): every plain kernel-to-kernel edge, then none.
    const GraphEdgeSummary converted = summarize_graph_edges(g, std::string_view());
    EXPECT_EQ(converted.made_programmatic, static_cast<size_t>(plain));
    const GraphEdgeSummary after = summarize_graph_edges(g);
    EXPECT_TRUE(after.plain_into.empty());
    EXPECT_EQ(after.programmatic_edges, report.programmatic_edges + plain);
    cudaGraphExec_t exec = nullptr;
    EXPECT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess) << "the converted graph instantiates";
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
  }
  cudaStreamDestroy(s);
}

// The same chain with the product on our wgmma kernel (GemmRunner's default for 9-64 rows on
// compute capability 9.0): no plain edge is left, since every kernel of it waits on its grid
// dependency.
TEST(GraphEdges, OurDecodeProductIsEnteredProgrammatically) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  if (kernels::compute_capability() != 90) GTEST_SKIP() << "the wgmma kernel needs sm_90a";
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  {
    GemmRunner gemm(s);
    gemm.set_gemv_max_tokens(0);
    ASSERT_TRUE(gemm.wgmma_gemm());
    Chain chain;
    cudaGraph_t g = chain.capture(s, gemm);
    ASSERT_NE(g, nullptr);
    const GraphEdgeSummary report = summarize_graph_edges(g);
    EXPECT_EQ(report.kernels, 3u);
    EXPECT_EQ(report.programmatic_edges, 2u);
    EXPECT_TRUE(report.plain_into.empty());
    EXPECT_EQ(gemm.num_plans(), 0u) << "no cuBLASLt plan was made";
    cudaGraphDestroy(g);
  }
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace kestrel
