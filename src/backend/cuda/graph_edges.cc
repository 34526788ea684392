#include "backend/cuda/graph_edges.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "core/logging.h"

namespace kestrel {
namespace {

// The kernel's mangled name; "?" where the driver cannot say. Through the driver API because
// a library's kernels are driver functions (CUfunction or CUkernel), not runtime symbols.
std::string kernel_name(cudaGraphNode_t node) {
  static const auto get_params = driver_function<PFN_cuGraphKernelNodeGetParams_v12000>(
      "cuGraphKernelNodeGetParams", 12000);
  static const auto func_name = driver_function<PFN_cuFuncGetName_v12030>("cuFuncGetName", 12030);
  static const auto kernel_name =
      driver_function<PFN_cuKernelGetName_v12030>("cuKernelGetName", 12030);
  CUDA_KERNEL_NODE_PARAMS_v2 params{};
  if (get_params(reinterpret_cast<CUgraphNode>(node), &params) != CUDA_SUCCESS) return "?";
  const char* name = nullptr;
  const CUresult r = params.func != nullptr ? func_name(&name, params.func)
                                            : kernel_name(&name, params.kern);
  return r == CUDA_SUCCESS && name != nullptr ? std::string(name) : std::string("?");
}

bool is_kernel(cudaGraphNode_t node) {
  cudaGraphNodeType type;
  KS_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
  return type == cudaGraphNodeTypeKernel;
}

struct Edges {
  std::vector<cudaGraphNode_t> from, to;
  std::vector<cudaGraphEdgeData> data;
};

Edges edges_of(cudaGraph_t graph) {
  Edges e;
  size_t n = 0;
  KS_CUDA_CHECK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &n));
  e.from.resize(n);
  e.to.resize(n);
  e.data.resize(n);
  KS_CUDA_CHECK(cudaGraphGetEdges(graph, e.from.data(), e.to.data(), e.data.data(), &n));
  return e;
}

bool programmatic(const cudaGraphEdgeData& d) {
  return d.type == cudaGraphDependencyTypeProgrammatic;
}

void write_dot(cudaGraph_t graph, const char* dir) {
  static std::atomic<int> count{0};
  const std::string path = fmt::format("{}/graph_{}_{}.dot", dir, getpid(), count++);
  KS_CUDA_CHECK(cudaGraphDebugDotPrint(graph, path.c_str(), cudaGraphDebugDotFlagsVerbose));
}

}  // namespace

GraphEdgeSummary summarize_graph_edges(cudaGraph_t graph,
                                       std::optional<std::string_view> unsafe_prefix) {
  GraphEdgeSummary out;
  size_t n = 0;
  KS_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  KS_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &n));
  for (cudaGraphNode_t node : nodes) out.kernels += is_kernel(node) ? 1 : 0;

  const Edges e = edges_of(graph);
  for (size_t i = 0; i < e.to.size(); ++i) {
    if (programmatic(e.data[i])) {
      ++out.programmatic_edges;
      continue;
    }
    if (!is_kernel(e.from[i]) || !is_kernel(e.to[i])) continue;
    const std::string name = kernel_name(e.to[i]);
    ++out.plain_into[name];
    if (!unsafe_prefix || !std::string_view(name).starts_with(*unsafe_prefix)) continue;
    cudaGraphEdgeData d{};
    d.from_port = cudaGraphKernelNodePortProgrammatic;
    d.type = cudaGraphDependencyTypeProgrammatic;
    KS_CUDA_CHECK(cudaGraphRemoveDependencies(graph, &e.from[i], &e.to[i], &e.data[i], 1));
    KS_CUDA_CHECK(cudaGraphAddDependencies(graph, &e.from[i], &e.to[i], &d, 1));
    ++out.made_programmatic;
  }
  return out;
}

void inspect_captured_graph(cudaGraph_t graph) {
  if (const char* dir = std::getenv("KESTREL_GRAPH_DOT"); dir != nullptr && *dir != '\0') {
    write_dot(graph, dir);
  }
  const char* mode_env = std::getenv("KESTREL_GRAPH_EDGES");
  if (mode_env == nullptr || *mode_env == '\0') return;
  const std::string_view mode(mode_env);
  constexpr std::string_view kUnsafe = "unsafe-pdl:";
  const bool convert = mode.starts_with(kUnsafe);
  KS_CHECK(convert || mode == "report",
           "KESTREL_GRAPH_EDGES={}: expected report or unsafe-pdl:<prefix>", mode);
  const GraphEdgeSummary s = summarize_graph_edges(
      graph, convert ? std::optional(mode.substr(kUnsafe.size())) : std::nullopt);
  static std::atomic<bool> warned{false};
  if (s.made_programmatic > 0 && !warned.exchange(true)) {
    KS_LOG_WARN("KESTREL_GRAPH_EDGES={}: {} edges made programmatic into kernels that may not "
                "wait for their inputs (first graph); results may be wrong (a measurement, not a "
                "setting)",
                mode, s.made_programmatic);
  }
  std::string into;
  for (const auto& [name, count] : s.plain_into) into += fmt::format("\n  {} x {}", count, name);
  KS_LOG_INFO("graph edges: {} kernels, {} programmatic edges, {} made programmatic; plain "
              "kernel-to-kernel edges into:{}",
              s.kernels, s.programmatic_edges, s.made_programmatic, into);
}

}  // namespace kestrel
