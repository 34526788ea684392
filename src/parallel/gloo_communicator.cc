#include "parallel/gloo_communicator.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace kestrel {
namespace {

void check_host_f32(const Tensor& t, int rank, const char* op, const char* what) {
  KS_CHECK(t.defined(), "gloo communicator (rank {}): {} {} is not defined", rank, op, what);
  KS_CHECK(t.device() == Device::kCpu,
           "gloo communicator (rank {}): {} {} must be in host memory (CPU backend); device "
           "tensors go through the device communicator",
           rank, op, what);
  KS_CHECK(t.dtype() == DType::kF32, "gloo communicator (rank {}): {} {} must be F32, not {}", rank,
           op, what, dtype_name(t.dtype()));
}

}  // namespace

void GlooCommunicator::all_reduce_sum(Tensor& t) {
  check_host_f32(t, rank(), "all_reduce_sum", "tensor");
  group_.all_reduce_sum(t.data_as<float>(), static_cast<size_t>(t.numel()));
}

void GlooCommunicator::all_reduce_add(Tensor& t, Tensor& residual) {
  check_host_f32(residual, rank(), "all_reduce_add", "residual");
  KS_CHECK(residual.shape() == t.shape(),
           "gloo communicator (rank {}): all_reduce_add of {} into a residual of {}", rank(),
           t.shape().str(), residual.shape().str());
  all_reduce_sum(t);
  const float* sum = t.data_as<float>();
  float* r = residual.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) r[i] += sum[i];
}

void GlooCommunicator::broadcast(Tensor& t, int root) {
  KS_CHECK(t.defined() && t.device() == Device::kCpu,
           "gloo communicator (rank {}): broadcast needs a tensor in host memory", rank());
  group_.broadcast(t.data(), t.nbytes(), root);
}

void GlooCommunicator::all_gather_columns(const Tensor& in, Tensor& out) {
  check_host_f32(in, rank(), "all_gather_columns", "input");
  check_host_f32(out, rank(), "all_gather_columns", "output");
  const int64_t n = world_size();
  KS_CHECK(in.ndim() == 2 && out.ndim() == 2 && in.dim(0) == out.dim(0),
           "gloo communicator (rank {}): all_gather_columns needs in [R, C] and out [R, W] "
           "with the same R, got {} and {}",
           rank(), in.shape().str(), out.shape().str());
  const int64_t rows = in.dim(0), cols = in.dim(1), width = out.dim(1);
  KS_CHECK((n - 1) * cols < width && width <= n * cols,
           "gloo communicator (rank {}): all_gather_columns of {} columns from {} ranks needs "
           "{} < W <= {}, got W = {}",
           rank(), cols, n, (n - 1) * cols, n * cols, width);

  const size_t per_rank = static_cast<size_t>(rows * cols);
  gathered_.resize(per_rank * static_cast<size_t>(n));
  group_.all_gather(in.data(), per_rank * sizeof(float), gathered_.data());

  // Rank r's block is [R, C] at r * R * C; its columns land at [r*C, min(W, (r+1)*C)).
  float* dst = out.data_as<float>();
  for (int64_t r = 0; r < n; ++r) {
    const int64_t begin = r * cols;
    const int64_t take = std::min(width, begin + cols) - begin;
    const float* block = gathered_.data() + static_cast<size_t>(r) * per_rank;
    for (int64_t i = 0; i < rows; ++i) {
      std::memcpy(dst + i * width + begin, block + i * cols,
                  static_cast<size_t>(take) * sizeof(float));
    }
  }
}

std::unique_ptr<Communicator> make_gloo_communicator(ProcessGroup& group) {
  return std::make_unique<GlooCommunicator>(group);
}

}  // namespace kestrel
