// NcclCommunicator: at world size 1 (a LocalCommunicator host) the collectives are identities,
// eagerly and inside a CUDA graph, and abort() breaks it; with two GPUs, two ranks in this
// process (one thread each) sum and gather across devices.
#include "backend/cuda/collectives/nccl_communicator.h"
#include "backend/cuda/collectives/nccl_thread_ranks.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <exception>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"

namespace kestrel {
namespace {

using cuda_test::fetch;
using cuda_test::gpu;
using cuda_test::poisoned;

#define KS_REQUIRE_NCCL()                                                                \
  do {                                                                                   \
    KS_REQUIRE_GPU();                                                                    \
    if (!nccl_available()) GTEST_SKIP() << "this build has no NCCL (KESTREL_NCCL_ROOT)"; \
  } while (0)

// KS_REQUIRE_NCCL and at least two GPUs (the multi-rank tests: one rank per GPU).
#define KS_REQUIRE_TWO_GPUS()                                                            \
  do {                                                                                   \
    KS_REQUIRE_NCCL();                                                                   \
    int devices_ = 0;                                                                    \
    ASSERT_EQ(cudaGetDeviceCount(&devices_), cudaSuccess);                               \
    if (devices_ < 2) GTEST_SKIP() << "needs 2 CUDA devices, found " << devices_;        \
  } while (0)

// Random non-zero values, exact in BF16, as a host tensor of `dtype`.
Tensor random_host(DType dtype, Shape shape, std::mt19937& rng) {
  Tensor t = Tensor::host(dtype, shape);
  std::uniform_real_distribution<float> dist(0.25f, 2.0f);
  std::bernoulli_distribution sign(0.5);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = bf16_to_f32(f32_to_bf16(sign(rng) ? dist(rng) : -dist(rng)));
    if (dtype == DType::kBF16)
      t.data_as<uint16_t>()[i] = f32_to_bf16(v);
    else
      t.data_as<float>()[i] = v;
  }
  return t;
}

std::vector<double> host_values(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] =
        t.dtype() == DType::kBF16 ? bf16_to_f32(t.data_as<uint16_t>()[i]) : t.data_as<float>()[i];
  }
  return v;
}

// in[:, :width] of a row-major [rows, cols] host tensor.
std::vector<double> first_columns(const Tensor& in, int64_t width) {
  const std::vector<double> all = host_values(in);
  std::vector<double> v;
  for (int64_t r = 0; r < in.dim(0); ++r) {
    for (int64_t c = 0; c < width; ++c) v.push_back(all[r * in.dim(1) + c]);
  }
  return v;
}

TEST(NcclCommunicator, WorldOneAllReduceKeepsValues) {
  KS_REQUIRE_NCCL();
  LocalCommunicator host;
  auto comm = make_nccl_communicator(gpu(), host);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->world_size(), 1);
  EXPECT_EQ(comm->name(), "nccl");
  std::mt19937 rng(1);
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const Tensor h = random_host(dtype, Shape{7, 33}, rng);
    Tensor t = gpu().upload(h, dtype);
    comm->all_reduce_sum(t);
    EXPECT_EQ(fetch(t), host_values(h)) << "eager";
    // Inside a graph (after the eager call above, as the header asks), replayed twice.
    auto graph = gpu().capture_graph([&] { comm->all_reduce_sum(t); });
    ASSERT_NE(graph, nullptr);
    graph->replay();
    graph->replay();
    EXPECT_EQ(fetch(t), host_values(h)) << "graph";
  }
}

TEST(NcclCommunicator, WorldOneBroadcastKeepsValues) {
  KS_REQUIRE_NCCL();
  LocalCommunicator host;
  auto comm = make_nccl_communicator(gpu(), host);
  std::mt19937 rng(5);
  const Tensor h = random_host(DType::kBF16, Shape{3, 11}, rng);
  Tensor t = gpu().upload(h, DType::kBF16);
  comm->broadcast(t, 0);
  EXPECT_EQ(fetch(t), host_values(h));
  EXPECT_THROW(comm->broadcast(t, 1), Error);
}

TEST(NcclCommunicator, WorldOneAllGatherColumnsCopies) {
  KS_REQUIRE_NCCL();
  LocalCommunicator host;
  auto comm = make_nccl_communicator(gpu(), host);
  std::mt19937 rng(2);
  struct Case {
    int64_t rows, cols, width;
  };
  // One row at full width gathers in place; the others go through the scratch, the last
  // with the trailing padding columns dropped.
  for (const Case c : {Case{1, 13, 13}, Case{5, 13, 13}, Case{9, 40, 37}, Case{1, 40, 33}}) {
    for (DType dtype : {DType::kBF16, DType::kF32}) {
      SCOPED_TRACE(
          fmt::format("{} rows {} cols {} width {}", dtype_name(dtype), c.rows, c.cols, c.width));
      const Tensor h = random_host(dtype, Shape{c.rows, c.cols}, rng);
      const Tensor in = gpu().upload(h, dtype);
      Tensor out = poisoned(dtype, Shape{c.rows, c.width});
      comm->all_gather_columns(in, out);
      EXPECT_EQ(fetch(out), first_columns(h, c.width)) << "eager";
      Tensor graph_out = poisoned(dtype, Shape{c.rows, c.width});
      auto graph = gpu().capture_graph([&] { comm->all_gather_columns(in, graph_out); });
      ASSERT_NE(graph, nullptr);
      graph->replay();
      EXPECT_EQ(fetch(graph_out), first_columns(h, c.width)) << "graph";
    }
  }
  // in == out, the only layout LocalCommunicator accepts, works here too.
  const Tensor h = random_host(DType::kBF16, Shape{3, 8}, rng);
  Tensor same = gpu().upload(h, DType::kBF16);
  comm->all_gather_columns(same, same);
  EXPECT_EQ(fetch(same), host_values(h));
}

TEST(NcclCommunicator, GatherScratchCannotGrowInsideCapture) {
  KS_REQUIRE_NCCL();
  LocalCommunicator host;
  auto comm = make_nccl_communicator(gpu(), host);
  const Tensor in = gpu().upload(Tensor::host(DType::kF32, Shape{4, 16}), DType::kF32);
  Tensor out = gpu().empty(DType::kF32, Shape{4, 16});
  try {
    gpu().capture_graph([&] { comm->all_gather_columns(in, out); });
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("before capturing"), std::string::npos) << e.what();
  }
  // A shape-check error is the caller's, not the group's: the communicator still works.
  comm->all_gather_columns(in, out);
  gpu().synchronize();
}

TEST(NcclCommunicator, RejectsBadArguments) {
  KS_REQUIRE_NCCL();
  LocalCommunicator host;
  auto comm = make_nccl_communicator(gpu(), host);
  Tensor i32 = gpu().empty(DType::kI32, Shape{4});
  EXPECT_THROW(comm->all_reduce_sum(i32), Error);
  Tensor host_t = Tensor::host(DType::kF32, Shape{4});
  EXPECT_THROW(comm->all_reduce_sum(host_t), Error);
  const Tensor in = gpu().empty(DType::kF32, Shape{2, 8});
  Tensor wide = gpu().empty(DType::kF32, Shape{2, 9});
  EXPECT_THROW(comm->all_gather_columns(in, wide), Error);
  Tensor other_type = gpu().empty(DType::kBF16, Shape{2, 8});
  EXPECT_THROW(comm->all_gather_columns(in, other_type), Error);
  Tensor f32 = gpu().empty(DType::kF32, Shape{2, 8});
  EXPECT_THROW(comm->all_reduce_add(f32, f32), Error);  // BF16 only
  Tensor bf = gpu().empty(DType::kBF16, Shape{2, 8}), longer = gpu().empty(DType::kBF16, Shape{3, 8});
  EXPECT_THROW(comm->all_reduce_add(bf, longer), Error);
  EXPECT_NO_THROW(comm->barrier());
}

TEST(NcclCommunicator, AbortBreaksEveryLaterCall) {
  KS_REQUIRE_NCCL();
  LocalCommunicator host;
  auto comm = make_nccl_communicator(gpu(), host);
  Tensor t = gpu().upload(Tensor::host(DType::kF32, Shape{16}), DType::kF32);
  comm->all_reduce_sum(t);
  gpu().synchronize();
  comm->abort("peer x went away");
  comm->abort("a second abort is ignored");
  auto expect_aborted = [](const std::function<void()>& call, const char* what) {
    try {
      call();
      ADD_FAILURE() << what << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("peer x went away"), std::string::npos)
          << what << ": " << e.what();
    }
  };
  expect_aborted([&] { comm->all_reduce_sum(t); }, "all_reduce_sum");
  expect_aborted([&] { comm->all_reduce_sum(t); }, "all_reduce_sum again");
  Tensor out = gpu().empty(DType::kF32, Shape{1, 16});
  expect_aborted(
      [&] {
        comm->all_gather_columns(t.view(Shape{1, 16}), out);
      },
      "all_gather_columns");
  expect_aborted([&] { comm->barrier(); }, "barrier");
  expect_aborted([&] { comm->all_reduce_min_host(3); }, "all_reduce_min_host");
}

TEST(NcclCommunicator, TwoRanksInOneProcess) {
  KS_REQUIRE_TWO_GPUS();
  constexpr int kRanks = 2;
  constexpr int64_t kRows = 3, kCols = 8, kWidth = 13;  // rank 1 keeps 5 of its 8 columns
  std::vector<Tensor> inputs_f32, inputs_bf16, gather_in;
  std::mt19937 rng(3);
  for (int r = 0; r < kRanks; ++r) {
    inputs_f32.push_back(random_host(DType::kF32, Shape{5, 37}, rng));
    inputs_bf16.push_back(random_host(DType::kBF16, Shape{5, 37}, rng));
    gather_in.push_back(random_host(DType::kBF16, Shape{kRows, kCols}, rng));
  }
  struct Result {
    std::vector<double> f32, bf16, bf16_graph, gathered;
    std::string error;
  };
  std::vector<Result> results(kRanks);
  const std::vector<std::string> errors =
      run_nccl_ranks(kRanks, [&](int r, Backend& backend, Communicator& comm) {
        Tensor f32 = backend.upload(inputs_f32[r], DType::kF32);
        Tensor bf16 = backend.upload(inputs_bf16[r], DType::kBF16);
        comm.all_reduce_sum(f32);
        comm.all_reduce_sum(bf16);
        results[r].f32 = fetch(f32, backend);
        results[r].bf16 = fetch(bf16, backend);
        // Once more inside a graph, on fresh copies of the inputs.
        Tensor g = backend.upload(inputs_bf16[r], DType::kBF16);
        auto graph = backend.capture_graph([&] { comm.all_reduce_sum(g); });
        graph->replay();
        results[r].bf16_graph = fetch(g, backend);
        const Tensor in = backend.upload(gather_in[r], DType::kBF16);
        Tensor out = poisoned(DType::kBF16, Shape{kRows, kWidth}, backend);
        comm.all_gather_columns(in, out);
        results[r].gathered = fetch(out, backend);
        comm.barrier();
      });
  for (int r = 0; r < kRanks; ++r) results[r].error = errors[r];

  // The sums, rounded once as NCCL does: two addends, one addition, whatever the algorithm.
  // (The bf16 inputs lie in [0.25, 2] in magnitude, so their sum is exact in float.)
  std::vector<double> sum_f32, sum_bf16, gathered;
  const auto a32 = host_values(inputs_f32[0]), b32 = host_values(inputs_f32[1]);
  const auto a16 = host_values(inputs_bf16[0]), b16 = host_values(inputs_bf16[1]);
  for (size_t i = 0; i < a32.size(); ++i) {
    sum_f32.push_back(static_cast<float>(a32[i]) + static_cast<float>(b32[i]));
    sum_bf16.push_back(bf16_to_f32(f32_to_bf16(static_cast<float>(a16[i] + b16[i]))));
  }
  const auto g0 = host_values(gather_in[0]), g1 = host_values(gather_in[1]);
  for (int64_t row = 0; row < kRows; ++row) {
    for (int64_t c = 0; c < kWidth; ++c) {
      gathered.push_back(c < kCols ? g0[row * kCols + c] : g1[row * kCols + c - kCols]);
    }
  }
  for (int r = 0; r < kRanks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_EQ(results[r].error, "");
    EXPECT_EQ(results[r].f32, sum_f32);
    EXPECT_EQ(results[r].bf16, sum_bf16);
    EXPECT_EQ(results[r].bf16_graph, results[r].bf16);
    EXPECT_EQ(results[r].gathered, gathered);
  }
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

// The peer-mapped one-shot all-reduce that NcclCommunicator takes for small tensors (at most
// PeerAllReduce::kCapacity bytes, 16-byte multiples), on two GPUs with ranks as threads:
// decode-sized and odd shapes, the largest it takes and one beyond (NCCL's), many calls in a
// row (its call numbers and alternating buffers) and replays of a captured graph, each
// against the exact sum (two bf16 addends: one rounding, whatever the algorithm).
// The one-shot kernel at every size (two ranks default to the low-latency one up to 16 KiB),
// in the direction KESTREL_PEER_PUSH says.
void check_peer_all_reduce_sums() {
  cuda_test::ScopedEnv one_shot("KESTREL_PEER_LL", "0");
  constexpr int kRanks = 2, kRounds = 3, kReplays = 4;
  const std::vector<std::pair<DType, Shape>> cases = {
      {DType::kBF16, Shape{1, 8}},      {DType::kBF16, Shape{1, 4096}},
      {DType::kBF16, Shape{7, 4096}},   {DType::kBF16, Shape{256, 4096}},
      {DType::kBF16, Shape{512, 4096}},                                 // = kCapacity
      {DType::kBF16, Shape{600, 4096}},                                 // NCCL's
      {DType::kF32, Shape{3, 1000}},    {DType::kBF16, Shape{5, 37}}};  // 370 bytes: NCCL's
  // inputs[rank][round][case]; the graph's inputs [rank][replay].
  std::vector<std::vector<std::vector<Tensor>>> inputs(kRanks);
  std::vector<std::vector<Tensor>> graph_inputs(kRanks);
  std::mt19937 rng(11);
  for (int r = 0; r < kRanks; ++r) {
    for (int k = 0; k < kRounds; ++k) {
      inputs[r].emplace_back();
      for (const auto& [dtype, shape] : cases)
        inputs[r][k].push_back(random_host(dtype, shape, rng));
    }
    for (int k = 0; k < kReplays; ++k)
      graph_inputs[r].push_back(random_host(DType::kBF16, Shape{3, 4096}, rng));
  }
  std::vector<std::vector<std::vector<double>>> got(kRanks);
  const std::vector<std::string> errors =
      run_nccl_ranks(kRanks, [&](int r, Backend& backend, Communicator& comm) {
        for (int k = 0; k < kRounds; ++k) {
          for (const Tensor& in : inputs[r][k]) {
            Tensor t = backend.upload(in, in.dtype());
            comm.all_reduce_sum(t);
            got[r].push_back(fetch(t, backend));
          }
        }
        Tensor g = backend.empty(DType::kBF16, Shape{3, 4096});
        backend.copy_from_host(graph_inputs[r][0], g);
        auto graph = backend.capture_graph([&] { comm.all_reduce_sum(g); });
        for (int k = 0; k < kReplays; ++k) {
          backend.copy_from_host(graph_inputs[r][k], g);
          graph->replay();
          got[r].push_back(fetch(g, backend));
        }
        comm.barrier();
      });

  auto sum = [](const Tensor& a, const Tensor& b) {
    std::vector<double> s;
    const auto x = host_values(a), y = host_values(b);
    for (size_t i = 0; i < x.size(); ++i) {
      const float f = static_cast<float>(x[i]) + static_cast<float>(y[i]);
      s.push_back(a.dtype() == DType::kBF16 ? bf16_to_f32(f32_to_bf16(f)) : f);
    }
    return s;
  };
  std::vector<std::vector<double>> want;
  for (int k = 0; k < kRounds; ++k) {
    for (size_t c = 0; c < cases.size(); ++c) want.push_back(sum(inputs[0][k][c], inputs[1][k][c]));
  }
  for (int k = 0; k < kReplays; ++k) want.push_back(sum(graph_inputs[0][k], graph_inputs[1][k]));
  for (int r = 0; r < kRanks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_EQ(errors[r], "");
    ASSERT_EQ(got[r].size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(got[r][i] == want[i]) << "call " << i;
  }
}

// check() with the two-rank one-shot kernel pushing into the peer's buffer (the default),
// then pulling from it, then pushing on grids of other sizes (an odd one, the most blocks)
// and with one load in flight a thread.
void in_every_one_shot_variant(void (*check)()) {
  struct Variant {
    const char *push, *blocks, *unroll;
  };
  for (const Variant& v : {Variant{"1", "32", "1"}, Variant{"0", "32", "1"},
                           Variant{"1", "7", "1"}, Variant{"1", "128", "1"},
                           Variant{"1", "32", "0"}}) {
    SCOPED_TRACE(std::string("KESTREL_PEER_PUSH=") + v.push + " KESTREL_PEER_BLOCKS=" + v.blocks +
                 " KESTREL_PEER_UNROLL=" + v.unroll);
    cuda_test::ScopedEnv direction("KESTREL_PEER_PUSH", v.push);
    cuda_test::ScopedEnv blocks("KESTREL_PEER_BLOCKS", v.blocks);
    cuda_test::ScopedEnv unroll("KESTREL_PEER_UNROLL", v.unroll);
    check();
  }
}

TEST(NcclCommunicator, PeerAllReduceSumsExactly) {
  KS_REQUIRE_TWO_GPUS();
  in_every_one_shot_variant(check_peer_all_reduce_sums);
}

// all_reduce_add at two ranks: the peer kernel's fused add (decode-sized rows) and NCCL's
// all-reduce then the add kernel (600 rows, beyond the peer buffer; 37 columns, not 16-byte
// rows), eager and in a captured graph: t is the exact sum (one rounding), and every rank's
// residual becomes round(residual + t), add_rms_norm's add, the same bits on both ranks.
void check_all_reduce_add() {
  cuda_test::ScopedEnv one_shot("KESTREL_PEER_LL", "0");  // as PeerAllReduceSumsExactly
  constexpr int kRanks = 2, kReplays = 3;
  const std::vector<Shape> shapes = {Shape{1, 8}, Shape{1, 4096}, Shape{7, 4096},
                                     Shape{600, 4096}, Shape{5, 37}};
  const size_t graph_case = shapes.size();  // parts[r][graph_case + k]: replay k's
  std::mt19937 rng(13);
  // residuals[case]: the same on every rank, as the model's residual stream is.
  std::vector<Tensor> residuals;
  for (const Shape& shape : shapes) residuals.push_back(random_host(DType::kBF16, shape, rng));
  const Tensor graph_residual = random_host(DType::kBF16, Shape{3, 4096}, rng);
  std::vector<std::vector<Tensor>> parts(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    for (const Shape& shape : shapes) parts[r].push_back(random_host(DType::kBF16, shape, rng));
    for (int k = 0; k < kReplays; ++k) {
      parts[r].push_back(random_host(DType::kBF16, Shape{3, 4096}, rng));
    }
  }
  std::vector<std::vector<std::vector<double>>> sums(kRanks), res(kRanks);
  const std::vector<std::string> errors =
      run_nccl_ranks(kRanks, [&](int r, Backend& backend, Communicator& comm) {
        EXPECT_TRUE(comm.has_all_reduce_add());
        for (size_t c = 0; c < shapes.size(); ++c) {
          Tensor t = backend.upload(parts[r][c], DType::kBF16);
          Tensor residual = backend.upload(residuals[c], DType::kBF16);
          comm.all_reduce_add(t, residual);
          sums[r].push_back(fetch(t, backend));
          res[r].push_back(fetch(residual, backend));
        }
        Tensor t = backend.upload(parts[r][graph_case], DType::kBF16);
        Tensor residual = backend.upload(graph_residual, DType::kBF16);
        comm.all_reduce_add(t, residual);  // a warm-up call before the capture
        auto graph = backend.capture_graph([&] { comm.all_reduce_add(t, residual); });
        for (int k = 0; k < kReplays; ++k) {
          backend.copy_from_host(parts[r][graph_case + k], t);
          backend.copy_from_host(graph_residual, residual);
          graph->replay();
          sums[r].push_back(fetch(t, backend));
          res[r].push_back(fetch(residual, backend));
        }
        comm.barrier();
      });

  auto round_bf16 = [](float f) { return static_cast<double>(bf16_to_f32(f32_to_bf16(f))); };
  std::vector<std::vector<double>> want_sum, want_res;
  auto expect = [&](const Tensor& a, const Tensor& b, const Tensor& residual) {
    const auto x = host_values(a), y = host_values(b), z = host_values(residual);
    std::vector<double> s, q;
    for (size_t i = 0; i < x.size(); ++i) {
      const double sum = round_bf16(static_cast<float>(x[i]) + static_cast<float>(y[i]));
      s.push_back(sum);
      q.push_back(round_bf16(static_cast<float>(z[i]) + static_cast<float>(sum)));
    }
    want_sum.push_back(s);
    want_res.push_back(q);
  };
  for (size_t c = 0; c < shapes.size(); ++c) expect(parts[0][c], parts[1][c], residuals[c]);
  for (int k = 0; k < kReplays; ++k) {
    expect(parts[0][graph_case + k], parts[1][graph_case + k], graph_residual);
  }
  for (int r = 0; r < kRanks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_EQ(errors[r], "");
    ASSERT_EQ(sums[r].size(), want_sum.size());
    for (size_t i = 0; i < want_sum.size(); ++i) {
      EXPECT_TRUE(sums[r][i] == want_sum[i]) << "sum of call " << i;
      EXPECT_TRUE(res[r][i] == want_res[i]) << "residual of call " << i;
    }
  }
}

TEST(NcclCommunicator, AllReduceAddAddsTheSumIntoTheResidual) {
  KS_REQUIRE_TWO_GPUS();
  in_every_one_shot_variant(check_all_reduce_add);
}


// The two-shot kernel (reduce-scatter then all-gather through the peers' memory) on up to
// four GPUs: sums of the same bits as the one-shot kernel (fp32 in rank order, one rounding),
// with shards of uneven length (375 vectors over 4 ranks), fewer vectors than ranks, the whole
// buffer, the residual add, and one-shot calls in between (the kernels keep separate call
// numbers), eager and in a captured graph.
TEST(NcclCommunicator, TwoShotPeerAllReduceSumsExactly) {
  KS_REQUIRE_TWO_GPUS();
  cuda_test::ScopedEnv one_shot("KESTREL_PEER_LL", "0");
  cuda_test::ScopedEnv two_shot("KESTREL_PEER_TWO_SHOT_BYTES", "32");  // 16 bytes: one-shot
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  const int ranks = std::min(devices, 4);
  constexpr int kRounds = 3, kReplays = 4;
  struct Case {
    DType dtype;
    Shape shape;
    bool add;  // all_reduce_add into a residual (BF16)
  };
  const std::vector<Case> cases = {
      {DType::kBF16, Shape{1, 8}, false},     {DType::kBF16, Shape{1, 16}, false},
      {DType::kBF16, Shape{3, 1000}, false},  {DType::kF32, Shape{3, 1000}, false},
      {DType::kBF16, Shape{7, 4096}, false},  {DType::kBF16, Shape{256, 4096}, false},
      {DType::kBF16, Shape{512, 4096}, false},  // = kCapacity
      {DType::kBF16, Shape{3, 1000}, true},   {DType::kBF16, Shape{256, 4096}, true}};
  const std::vector<size_t> graph_cases = {0, 8, 2, 7};  // one-shot and two-shot in turn
  std::mt19937 rng(23);
  // in[rank][call], residuals[call] (the same on every rank): the rounds' calls, then the
  // replays' (graph_cases in order, per replay).
  std::vector<const Case*> calls;
  for (int k = 0; k < kRounds; ++k) {
    for (const Case& c : cases) calls.push_back(&c);
  }
  for (int k = 0; k < kReplays; ++k) {
    for (size_t c : graph_cases) calls.push_back(&cases[c]);
  }
  std::vector<std::vector<Tensor>> in(ranks);
  std::vector<Tensor> residuals;
  for (const Case* c : calls) {
    for (int r = 0; r < ranks; ++r) in[r].push_back(random_host(c->dtype, c->shape, rng));
    residuals.push_back(random_host(DType::kBF16, c->shape, rng));
  }
  std::vector<std::vector<std::vector<double>>> got(ranks);
  const std::vector<std::string> errors =
      run_nccl_ranks(ranks, [&](int r, Backend& backend, Communicator& comm) {
        size_t call = 0;
        for (; call < size_t{kRounds} * cases.size(); ++call) {
          Tensor t = backend.upload(in[r][call], calls[call]->dtype);
          if (calls[call]->add) {
            Tensor residual = backend.upload(residuals[call], DType::kBF16);
            comm.all_reduce_add(t, residual);
            got[r].push_back(fetch(t, backend));
            got[r].push_back(fetch(residual, backend));
          } else {
            comm.all_reduce_sum(t);
            got[r].push_back(fetch(t, backend));
          }
        }
        std::vector<Tensor> t, residual;
        for (size_t c : graph_cases) {
          t.push_back(backend.empty(cases[c].dtype, cases[c].shape));
          residual.push_back(backend.empty(DType::kBF16, cases[c].shape));
        }
        auto graph = backend.capture_graph([&] {
          for (size_t g = 0; g < graph_cases.size(); ++g) {
            if (cases[graph_cases[g]].add) {
              comm.all_reduce_add(t[g], residual[g]);
            } else {
              comm.all_reduce_sum(t[g]);
            }
          }
        });
        for (int k = 0; k < kReplays; ++k) {
          for (size_t g = 0; g < graph_cases.size(); ++g) {
            backend.copy_from_host(in[r][call + g], t[g]);
            backend.copy_from_host(residuals[call + g], residual[g]);
          }
          graph->replay();
          for (size_t g = 0; g < graph_cases.size(); ++g) {
            got[r].push_back(fetch(t[g], backend));
            if (cases[graph_cases[g]].add) got[r].push_back(fetch(residual[g], backend));
          }
          call += graph_cases.size();
        }
        comm.barrier();
      });

  auto round = [](DType dtype, float f) {
    return dtype == DType::kBF16 ? static_cast<double>(bf16_to_f32(f32_to_bf16(f))) : f;
  };
  std::vector<std::vector<double>> want;
  for (size_t call = 0; call < calls.size(); ++call) {
    std::vector<std::vector<double>> x;
    for (int r = 0; r < ranks; ++r) x.push_back(host_values(in[r][call]));
    std::vector<double> s(x[0].size());
    for (size_t i = 0; i < s.size(); ++i) {
      float f = static_cast<float>(x[0][i]);
      for (int r = 1; r < ranks; ++r) f += static_cast<float>(x[r][i]);
      s[i] = round(calls[call]->dtype, f);
    }
    want.push_back(s);
    if (calls[call]->add) {
      const std::vector<double> z = host_values(residuals[call]);
      std::vector<double> q(z.size());
      for (size_t i = 0; i < z.size(); ++i) {
        q[i] = round(DType::kBF16, static_cast<float>(z[i]) + static_cast<float>(s[i]));
      }
      want.push_back(q);
    }
  }
  for (int r = 0; r < ranks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + " of " + std::to_string(ranks));
    ASSERT_EQ(errors[r], "");
    ASSERT_EQ(got[r].size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(got[r][i] == want[i]) << "result " << i;
  }
}

// The low-latency kernel (peer_all_reduce_ll.cu; the default at two ranks) at two ranks: tensors up
// to its 16 KiB (bf16 and f32, the limit itself) and one above (the one-shot kernel), 40
// rounds so that both call parities are reused many times and the two kernels' calls
// interleave, all_reduce_sum and all_reduce_add, then a captured graph replayed: the exact
// sums and residuals on both ranks, as without it.
TEST(NcclCommunicator, LowLatencyPeerAllReduceSumsExactly) {
  KS_REQUIRE_TWO_GPUS();
  cuda_test::ScopedEnv low_latency("KESTREL_PEER_LL", "1");
  constexpr int kRanks = 2, kRounds = 40, kReplays = 5;
  const std::vector<std::pair<DType, Shape>> cases = {
      {DType::kBF16, Shape{1, 8}},    {DType::kBF16, Shape{1, 4096}}, {DType::kBF16, Shape{2, 4096}},
      {DType::kBF16, Shape{3, 4096}}, {DType::kF32, Shape{1, 4096}},  {DType::kF32, Shape{3, 1000}},
      {DType::kBF16, Shape{5, 40}}};
  const Shape add_shape{1, 4096};
  std::mt19937 rng(17);
  // in[rank][call]: the sums' inputs, then each round's all_reduce_add input, then the
  // graph's; residuals[call] for the adds (the same on both ranks).
  std::vector<std::vector<Tensor>> in(kRanks);
  std::vector<Tensor> residuals;
  for (int k = 0; k < kRounds + kReplays; ++k) residuals.push_back(random_host(DType::kBF16, add_shape, rng));
  for (int r = 0; r < kRanks; ++r) {
    for (int k = 0; k < kRounds; ++k) {
      for (const auto& [dtype, shape] : cases) in[r].push_back(random_host(dtype, shape, rng));
      in[r].push_back(random_host(DType::kBF16, add_shape, rng));
    }
    for (int k = 0; k < kReplays; ++k) in[r].push_back(random_host(DType::kBF16, add_shape, rng));
  }
  std::vector<std::vector<std::vector<double>>> got(kRanks);
  const std::vector<std::string> errors =
      run_nccl_ranks(kRanks, [&](int r, Backend& backend, Communicator& comm) {
        size_t call = 0;
        for (int k = 0; k < kRounds; ++k) {
          for (size_t c = 0; c < cases.size(); ++c) {
            Tensor t = backend.upload(in[r][call++], cases[c].first);
            comm.all_reduce_sum(t);
            got[r].push_back(fetch(t, backend));
          }
          Tensor t = backend.upload(in[r][call++], DType::kBF16);
          Tensor residual = backend.upload(residuals[k], DType::kBF16);
          comm.all_reduce_add(t, residual);
          got[r].push_back(fetch(t, backend));
          got[r].push_back(fetch(residual, backend));
        }
        Tensor t = backend.upload(in[r][call], DType::kBF16);
        Tensor residual = backend.upload(residuals[kRounds], DType::kBF16);
        comm.all_reduce_add(t, residual);  // a warm-up call before the capture
        auto graph = backend.capture_graph([&] { comm.all_reduce_add(t, residual); });
        for (int k = 0; k < kReplays; ++k) {
          backend.copy_from_host(in[r][call + k], t);
          backend.copy_from_host(residuals[kRounds + k], residual);
          graph->replay();
          got[r].push_back(fetch(t, backend));
          got[r].push_back(fetch(residual, backend));
        }
        comm.barrier();
      });

  auto round = [](DType dtype, float f) {
    return dtype == DType::kBF16 ? static_cast<double>(bf16_to_f32(f32_to_bf16(f))) : f;
  };
  std::vector<std::vector<double>> want;
  auto sum = [&](const Tensor& a, const Tensor& b) {
    const auto x = host_values(a), y = host_values(b);
    std::vector<double> s;
    for (size_t i = 0; i < x.size(); ++i) {
      s.push_back(round(a.dtype(), static_cast<float>(x[i]) + static_cast<float>(y[i])));
    }
    return s;
  };
  auto added = [&](const Tensor& residual, const std::vector<double>& s) {
    const auto z = host_values(residual);
    std::vector<double> q;
    for (size_t i = 0; i < z.size(); ++i) {
      q.push_back(round(DType::kBF16, static_cast<float>(z[i]) + static_cast<float>(s[i])));
    }
    return q;
  };
  size_t call = 0;
  for (int k = 0; k < kRounds; ++k) {
    for (size_t c = 0; c < cases.size(); ++c, ++call) want.push_back(sum(in[0][call], in[1][call]));
    want.push_back(sum(in[0][call], in[1][call]));
    want.push_back(added(residuals[k], want.back()));
    ++call;
  }
  for (int k = 0; k < kReplays; ++k, ++call) {
    want.push_back(sum(in[0][call], in[1][call]));
    want.push_back(added(residuals[kRounds + k], want.back()));
  }
  for (int r = 0; r < kRanks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_EQ(errors[r], "");
    ASSERT_EQ(got[r].size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(got[r][i] == want[i]) << "result " << i;
  }
}

}  // namespace
}  // namespace kestrel
