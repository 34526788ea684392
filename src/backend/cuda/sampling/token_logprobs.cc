// CudaBackend::token_logprobs: the validating entry point of the device sampler's logprobs
// of given tokens (prompt logprobs): checks the logits and the tokens, runs
// sampling_kernels::token_logprobs over the rows where they are, and copies back only the
// entries (a few hundred bytes a row instead of the row's vocabulary).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/sampling/sampling.h"
#include "core/error.h"

namespace kestrel {

std::vector<TokenLogprobs> CudaBackend::token_logprobs(const Tensor& logits,
                                                       std::span<const int> tokens, int num_top) {
  using sampling_kernels::RowResult;
  using sampling_kernels::TopLogprob;
  KS_CHECK(logits.defined() && logits.device() == Device::kCuda && logits.dtype() == DType::kF32 &&
               logits.ndim() == 2,
           "token_logprobs: logits must be a CUDA F32 [rows, vocab] tensor");
  const int rows = static_cast<int>(logits.dim(0)), vocab = static_cast<int>(logits.dim(1));
  KS_CHECK(static_cast<int>(tokens.size()) == rows, "token_logprobs: {} tokens for {} rows",
           tokens.size(), rows);
  KS_CHECK(num_top >= 0 && num_top <= sampling_kernels::kMaxTopLogprobs,
           "token_logprobs: num_top must be in [0, {}], got {}", sampling_kernels::kMaxTopLogprobs,
           num_top);
  for (int r = 0; r < rows; ++r) {
    KS_CHECK(tokens[r] >= 0 && tokens[r] < vocab,
             "token_logprobs: token id {} of row {} is outside the vocab [0, {})", tokens[r], r,
             vocab);
  }
  if (rows == 0) return {};
  static_assert(sizeof(RowResult) % 4 == 0 && sizeof(TopLogprob) % 4 == 0);
  const int top_stride = std::max(1, std::min(num_top, vocab));
  Tensor ids = Tensor::host(DType::kI32, {rows});
  std::copy(tokens.begin(), tokens.end(), ids.data_as<int32_t>());
  const Tensor device_ids = upload(ids, DType::kI32);
  Tensor results = empty(DType::kI32, {rows * static_cast<int64_t>(sizeof(RowResult) / 4)});
  Tensor top = empty(DType::kI32,
                     {static_cast<int64_t>(rows) * top_stride * static_cast<int64_t>(sizeof(TopLogprob) / 4)});
  sampling_kernels::TokenLogprobsArgs a;
  a.logits = logits.data_as<float>();
  a.tokens = device_ids.data_as<int32_t>();
  a.results = static_cast<RowResult*>(results.data());
  a.top = static_cast<TopLogprob*>(top.data());
  a.num_rows = rows;
  a.vocab = vocab;
  a.num_top = num_top;
  a.top_stride = top_stride;
  sampling_kernels::token_logprobs(a, stream());
  const Tensor host_results = to_host(results);  // waits for the kernel
  const Tensor host_top = to_host(top);
  const auto* res = reinterpret_cast<const RowResult*>(host_results.data());
  const auto* tops = reinterpret_cast<const TopLogprob*>(host_top.data());
  std::vector<TokenLogprobs> out(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    KS_CHECK(res[r].status == sampling_kernels::kRowOk,
             "logprobs need a finite logit; row {} has none", r);
    TokenLogprobs& lp = out[r];
    lp.token_id = res[r].token;
    lp.logprob = res[r].logprob;
    lp.rank = res[r].rank;
    lp.top.reserve(static_cast<size_t>(res[r].num_top));
    const TopLogprob* row_top = tops + static_cast<size_t>(r) * top_stride;
    for (int i = 0; i < res[r].num_top; ++i) lp.top.emplace_back(row_top[i].id, row_top[i].logprob);
  }
  return out;
}

}  // namespace kestrel
