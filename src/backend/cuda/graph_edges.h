// The dependency edges of a captured CUDA graph: which kernels wait for the whole kernel
// before them and which start under programmatic dependent launch (PDL), and a measurement
// that turns the plain edges into a named library's kernels into programmatic ones.
//
// Why: our kernels are launched with PDL, so stream capture joins them by programmatic edges
// and each starts (and streams its weights) while the one before drains. cuBLASLt's kernels
// are launched plainly, so the edge into each is a full boundary, four a layer in a decode
// step of 9-256 tokens (docs/cuda_backend.md, "Where the PDL chain breaks").
//
// What session 18 measured with it (H200, Qwen3-0.6B shape): each decode graph of 9+ tokens
// holds 112 plain kernel-to-kernel edges, all into cuBLASLt's nvjet_sm90_tst_* kernels (four
// a layer); the batch-1 graph none.
// Making those programmatic (`unsafe-pdl:nvjet`) took a 64-sequence step from 2.281 to 2.038
// ms (-10.7%) and a 256-sequence one from 5.127 to 5.022 ms, and changed the greedy tokens:
// the nvjet kernels read their inputs without waiting on the grid dependency, and ours trigger
// at once. So the switch measures what the boundaries cost and is never a setting to run with.
//
// KESTREL_GRAPH_EDGES (read at each capture):
//   report              log each captured graph's kernel count, its programmatic edges and
//                       the kernels entered through plain kernel-to-kernel edges (name, count)
//                       (with --log-level info where the command's default is quieter)
//   unsafe-pdl:<prefix> also make the plain edges from a kernel into kernels whose name starts
//                       with <prefix> programmatic. WRONG RESULTS where those kernels do not
//                       wait (cuBLASLt's): for measuring the boundaries' cost only
// KESTREL_GRAPH_DOT=<dir>   write each captured graph to <dir>/graph_<pid>_<n>.dot
//                           (cudaGraphDebugDotPrint, verbose)
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace kestrel {

struct GraphEdgeSummary {
  size_t kernels = 0;               // kernel nodes
  size_t programmatic_edges = 0;    // edges that were programmatic already
  size_t made_programmatic = 0;     // plain edges this call turned programmatic
  std::map<std::string, int> plain_into;  // kernel name -> plain kernel-to-kernel edges into it
};

// Counts a graph's kernels and edges. With `unsafe_prefix`, the plain kernel-to-kernel edges
// into kernels whose name starts with it become programmatic (see above: wrong results where
// those kernels do not wait). Before instantiation.
GraphEdgeSummary summarize_graph_edges(cudaGraph_t graph,
                                       std::optional<std::string_view> unsafe_prefix = {});

// Applies the two switches above to a graph just captured, before it is instantiated.
void inspect_captured_graph(cudaGraph_t graph);

}  // namespace kestrel
