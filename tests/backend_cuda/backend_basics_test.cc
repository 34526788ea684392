// The CUDA backend's plumbing: error reporting (also without a GPU), uploads with dtype
// conversion, KV cache allocation, and op argument validation.
#include <cublasLt.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <string>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "cuda_test_util.h"

namespace kestrel {
namespace {

using namespace cuda_test;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CudaCheck, NamesCallFileAndLine) {
  // Fails on any machine: an invalid device without a GPU, "no driver" on CI.
  const std::string msg = error_of([] { KS_CUDA_CHECK(cudaSetDevice(-1)); });
  EXPECT_NE(msg.find("cudaSetDevice(-1)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("backend_basics_test.cc:"), std::string::npos) << msg;
}

TEST(CudaCheck, FailedCallDoesNotBlameTheNextLaunch) {
  KS_REQUIRE_GPU();
  EXPECT_THROW(KS_CUDA_CHECK(cudaSetDevice(-1)), Error);
  // The next kernel launch must not report the failure above as its own.
  Tensor out = gpu().empty(DType::kBF16, Shape{1, 64});
  Tensor table = gpu().empty(DType::kBF16, Shape{4, 64});
  EXPECT_NO_THROW(gpu().embedding(gpu().upload(i32_host({2}), DType::kI32), table, out));
  gpu().synchronize();
}

TEST(CudaCheck, CublasStatusIsNamed) {
  const std::string msg = error_of([] { KS_CUBLAS_CHECK(CUBLAS_STATUS_NOT_SUPPORTED); });
  EXPECT_NE(msg.find("CUBLAS_STATUS_NOT_SUPPORTED"), std::string::npos) << msg;
  EXPECT_NE(msg.find("backend_basics_test.cc:"), std::string::npos) << msg;
}

TEST(CudaBackend, MissingDeviceIsAnError) {
  EXPECT_THROW(make_cuda_backend(1000), Error);
}

TEST(CudaBackend, DescribesItself) {
  KS_REQUIRE_GPU();
  EXPECT_EQ(gpu().device(), Device::kCuda);
  EXPECT_EQ(gpu().compute_dtype(), DType::kBF16);
  EXPECT_EQ(gpu().name().rfind("cuda:0 (", 0), 0u) << gpu().name();
}

TEST(CudaBackend, UploadConvertsFloatTypes) {
  KS_REQUIRE_GPU();
  // Hand-derived bit patterns: 1.0 = 0x3f80, -2.5 = 0xc020, 1 + 2^-7 = 0x3f81 in bf16;
  // 1 + 2^-8 is a tie between 0x3f80 and 0x3f81 and rounds to even (0x3f80).
  Tensor h = Tensor::host(DType::kF32, Shape{4});
  float* f = h.data_as<float>();
  f[0] = 1.0f, f[1] = -2.5f, f[2] = 1.0f + 1.0f / 128, f[3] = 1.0f + 1.0f / 256;
  Tensor back = gpu().to_host(gpu().upload(h, DType::kBF16));
  ASSERT_EQ(back.dtype(), DType::kBF16);
  ASSERT_EQ(back.shape(), (Shape{4}));
  const uint16_t* b = back.data_as<uint16_t>();
  EXPECT_EQ(b[0], 0x3f80);
  EXPECT_EQ(b[1], 0xc020);
  EXPECT_EQ(b[2], 0x3f81);
  EXPECT_EQ(b[3], 0x3f80);

  // F16 1.5 (0x3e00) -> bf16 0x3fc0; and an I32 tensor round-trips unchanged.
  Tensor h16 = Tensor::host(DType::kF16, Shape{1});
  h16.data_as<uint16_t>()[0] = 0x3e00;
  EXPECT_EQ(gpu().to_host(gpu().upload(h16, DType::kBF16)).data_as<uint16_t>()[0], 0x3fc0);
  Tensor ids = i32_host({7, -3, 123456});
  Tensor ids_back = gpu().to_host(gpu().upload(ids, DType::kI32));
  EXPECT_EQ(ids_back.data_as<int32_t>()[1], -3);
  EXPECT_EQ(ids_back.data_as<int32_t>()[2], 123456);

  EXPECT_THROW(gpu().upload(ids, DType::kBF16), Error);  // no int -> float conversion
}

// kAuto (the engine's backend): the first cache settles the layout, head-major for fp8 and
// token-major for bf16, and later caches keep it.
TEST(CudaBackend, AutoLayoutFollowsTheFirstCachesDtype) {
  KS_REQUIRE_GPU();
  if (std::getenv("KESTREL_KV_LAYOUT") != nullptr) GTEST_SKIP() << "layout forced";
  KvCacheSpec spec;
  spec.num_layers = 1;
  spec.num_blocks = 3;
  spec.block_size = 16;
  spec.num_kv_heads = 2;
  spec.head_dim = 64;
  for (DType first : {DType::kF8E4M3, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(first));
    auto backend = make_cuda_backend(0);
    auto& cuda = dynamic_cast<CudaBackend&>(*backend);
    spec.dtype = first;
    const Shape pages = first == DType::kF8E4M3 ? Shape{3, 2, 16, 64} : Shape{3, 16, 2, 64};
    EXPECT_EQ(cuda.allocate_kv_cache(spec)[0].k.shape(), pages);
    spec.dtype = first == DType::kF8E4M3 ? DType::kBF16 : DType::kF8E4M3;
    EXPECT_EQ(cuda.allocate_kv_cache(spec)[0].k.shape(), pages) << "the second cache";
    EXPECT_EQ(cuda.kv_layout(), first == DType::kF8E4M3 ? CudaKvLayout::kHeadMajor
                                                         : CudaKvLayout::kTokenMajor);
  }
}

TEST(CudaBackend, KvCacheLayersAreDisjointPages) {
  KS_REQUIRE_GPU();
  KvCacheSpec spec;
  spec.num_layers = 3;
  spec.num_blocks = 5;
  spec.block_size = 16;
  spec.num_kv_heads = 2;
  spec.head_dim = 64;
  spec.dtype = DType::kBF16;
  auto layers = gpu().allocate_kv_cache(spec);
  ASSERT_EQ(layers.size(), 3u);
  const size_t tensor_bytes = size_t(5) * 16 * 2 * 64 * 2;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(layers[i].k.shape(), (Shape{5, 16, 2, 64}));
    EXPECT_EQ(layers[i].k.nbytes(), tensor_bytes);
    EXPECT_EQ(static_cast<char*>(layers[i].v.data()) - static_cast<char*>(layers[i].k.data()),
              static_cast<ptrdiff_t>(tensor_bytes));
  }
  EXPECT_EQ(static_cast<char*>(layers[2].k.data()) - static_cast<char*>(layers[0].k.data()),
            static_cast<ptrdiff_t>(4 * tensor_bytes));
  // Head-major pages: [blocks, kv heads, block size, head dim].
  EXPECT_EQ(gpu(CudaKvLayout::kHeadMajor).allocate_kv_cache(spec)[1].v.shape(),
            (Shape{5, 2, 16, 64}));
  spec.dtype = DType::kF32;
  EXPECT_THROW(gpu().allocate_kv_cache(spec), Error);

  // fp8: half the bytes, and per layer scales of 1, amax 0 and no clamps ([2, Hkv]).
  spec.dtype = DType::kF8E4M3;
  auto fp8 = gpu().allocate_kv_cache(spec);
  EXPECT_EQ(fp8[1].k.nbytes(), tensor_bytes / 2);
  EXPECT_EQ(fp8[1].k.dtype(), DType::kF8E4M3);
  ASSERT_TRUE(fp8[1].fp8());
  const Tensor scale = gpu().to_host(fp8[1].scale), amax = gpu().to_host(fp8[1].amax);
  const Tensor clamped = gpu().to_host(fp8[1].clamped);
  ASSERT_EQ(scale.shape(), (Shape{2, 2}));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(scale.data_as<float>()[i], 1.0f);
    EXPECT_EQ(amax.data_as<float>()[i], 0.0f);
    EXPECT_EQ(clamped.data_as<int64_t>()[i], 0);
  }
}

TEST(CudaBackend, OpsRejectBadArguments) {
  KS_REQUIRE_GPU();
  Tensor x = gpu().empty(DType::kBF16, Shape{4, 64});
  Tensor w = gpu().empty(DType::kBF16, Shape{32, 48});  // K mismatch
  Tensor out = gpu().empty(DType::kBF16, Shape{4, 32});
  std::string msg = error_of([&] { gpu().linear(x, w, Tensor(), out); });
  EXPECT_NE(msg.find("linear"), std::string::npos) << msg;

  Tensor xf = gpu().empty(DType::kF32, Shape{4, 64});
  Tensor norm_w = gpu().empty(DType::kBF16, Shape{64});
  msg = error_of([&] { gpu().rms_norm(xf, norm_w, 1e-6f, xf); });
  EXPECT_NE(msg.find("rms_norm: x must be BF16"), std::string::npos) << msg;

  Tensor host_x = Tensor::host(DType::kBF16, Shape{4, 64});
  msg = error_of([&] { gpu().silu_mul(host_x, out); });
  EXPECT_NE(msg.find("not on the CUDA device"), std::string::npos) << msg;

  AttentionShape shape{8, 3, 128};  // 8 query heads do not split over 3 KV heads
  AttentionMetadata meta;
  LayerKvCache kv;
  Tensor q = gpu().empty(DType::kBF16, Shape{4, 8 * 128});
  msg = error_of([&] { gpu().attention(q, kv, shape, meta, 1.0f, q); });
  EXPECT_NE(msg.find("not a multiple"), std::string::npos) << msg;
  shape = AttentionShape{8, 8, 96};
  msg = error_of([&] { gpu().attention(q, kv, shape, meta, 1.0f, q); });
  EXPECT_NE(msg.find("head_dim 96 unsupported"), std::string::npos) << msg;
}

}  // namespace
}  // namespace kestrel
