// CudaBackend::sample: the validating entry point of the device sampler. Checks the logits
// and the batch, validates each row as the CPU sampler does (same limits, same messages),
// turns each row's token lists into one deduplicated list of edits (mask, repetition,
// frequency/presence counts), uploads everything in one copy, launches the kernels
// (sampling.cu) and copies the results back in one copy.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <optional>
#include <string_view>
#include <vector>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/pinned_host.h"
#include "backend/cuda/sampling/sampling.h"
#include "backend/cuda/sampling/sampling_nucleus.h"
#include "backend/cuda/sampling/sampling_plain.h"
#include "backend/cuda/sampling/sampling_topk.h"
#include "core/error.h"
#include "parallel/communicator.h"

namespace kestrel {

namespace {

using sampling_kernels::PenaltyEntry;
using sampling_kernels::RowParams;
using sampling_kernels::RowResult;
using sampling_kernels::TopLogprob;

constexpr size_t kAlign = 256;

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

template <typename T>
void check_row_vector(const std::vector<T>& v, int rows, const char* name) {
  KS_CHECK(static_cast<int>(v.size()) == rows, "sample: batch.{} has {} entries for {} rows",
           name, v.size(), rows);
}

// A row's span of a flat token list; `offsets` is empty (no lists) or has rows + 1 entries.
struct TokenLists {
  const std::vector<int>& tokens;
  const std::vector<int>& offsets;
  const char* name;

  void validate(int rows) const {
    if (offsets.empty()) return;
    KS_CHECK(static_cast<int>(offsets.size()) == rows + 1,
             "sample: batch.{}_offsets has {} entries for {} rows (needs rows + 1)", name,
             offsets.size(), rows);
    KS_CHECK(offsets[0] == 0 && static_cast<size_t>(offsets[rows]) == tokens.size(),
             "sample: batch.{}_offsets must run from 0 to {}", name, tokens.size());
    for (int r = 0; r < rows; ++r) {
      KS_CHECK(offsets[r] <= offsets[r + 1], "sample: batch.{}_offsets decrease at row {}", name,
               r);
    }
  }
  const int* begin(int r) const { return offsets.empty() ? nullptr : tokens.data() + offsets[r]; }
  const int* end(int r) const { return offsets.empty() ? nullptr : tokens.data() + offsets[r + 1]; }
};

void validate_row(const SamplingBatch& b, int r) {
  const float t = b.temperature[r];
  KS_CHECK(t >= 0.0f && std::isfinite(t), "row {}: temperature must be >= 0, got {}", r, t);
  KS_CHECK(b.top_k[r] >= -1, "row {}: top_k must be -1 or >= 0, got {}", r, b.top_k[r]);
  KS_CHECK(b.top_p[r] > 0.0f && b.top_p[r] <= 1.0f, "row {}: top_p must be in (0, 1], got {}", r,
           b.top_p[r]);
  KS_CHECK(b.min_p[r] >= 0.0f && b.min_p[r] <= 1.0f, "row {}: min_p must be in [0, 1], got {}", r,
           b.min_p[r]);
  KS_CHECK(b.repetition_penalty[r] > 0.0f, "row {}: repetition_penalty must be > 0, got {}", r,
           b.repetition_penalty[r]);
  KS_CHECK(std::isfinite(b.presence_penalty[r]) && std::isfinite(b.frequency_penalty[r]),
           "row {}: presence and frequency penalties must be finite", r);
  KS_CHECK(b.num_logprobs[r] >= -1, "row {}: logprobs must be >= 0", r);
  KS_CHECK(b.num_logprobs[r] <= sampling_kernels::kMaxTopLogprobs,
           "row {}: the CUDA sampler returns at most {} top logprobs, {} asked", r,
           sampling_kernels::kMaxTopLogprobs, b.num_logprobs[r]);
  KS_CHECK(b.position[r] >= 0, "row {}: position must be >= 0, got {}", r, b.position[r]);
}

}  // namespace

// Host state of the device sampler, reused across calls so that a step allocates nothing
// once the batch sizes have been seen. Two launches may be outstanding (the engine's
// overlap): each has its own pinned parameter buffer, mapped result buffer and StreamMark,
// taken in turn; a launch reuses a slot only after the launch two before it was collected.
class CudaSampler {
 public:
  CudaSampler() = default;
  CudaSampler(const CudaSampler&) = delete;
  CudaSampler& operator=(const CudaSampler&) = delete;

  // Validates the batch and uploads its parameters, so that a caller can do it before the
  // forward and the copy hides behind it. launch() samples the staged batch (staging it
  // first when it is not).
  void stage(CudaBackend& be, const SamplingBatch& batch, int vocab);
  void launch(CudaBackend& be, const Tensor& logits, const SamplingBatch& batch);
  // Backend::launch_sample_vocab_parallel.
  void launch_vocab_parallel(CudaBackend& be, const Tensor& local_logits,
                             const SamplingBatch& batch, int vocab, Communicator& comm, bool keep);
  std::vector<SampledToken> collect();
  void discard(CudaBackend& be);

 private:
  static constexpr int kSlots = 2;
  // What collect() needs of a launch.
  struct Launched {
    int slot = 0;
    int vocab = 0;
    int top_stride = 0;
    size_t result_bytes = 0;
    std::vector<int> num_logprobs;  // per row
  };
  struct Staged {
    Launched launch;
    sampling_kernels::SampleArgs args;  // all but the logits
  };

  // Appends the row's edits to entries_ (one entry per distinct id). An output id below 0
  // is pending_token(slot) when token feedback holds feedback_rows slots: it returns that
  // slot (the penalties kernel counts the token there), else -1.
  int build_penalties(const SamplingBatch& b, int r, int vocab, int feedback_rows,
                      const TokenLists& prompt, const TokenLists& output, const TokenLists& masked);
  // `doubling`: grow at least twofold, for a buffer that grows a little every step (a
  // penalised batch's entries); the others are sized by rows and vocab, and stay tight.
  uint8_t* device_bytes(CudaBackend& be, Tensor& t, size_t bytes, bool doubling = false) {
    if (!t.defined() || t.nbytes() < bytes) {
      const size_t grown = doubling && t.defined() ? std::max(bytes, 2 * t.nbytes()) : bytes;
      t = Tensor();
      t = be.empty(DType::kU8, Shape{static_cast<int64_t>(grown)});
    }
    return t.data_as<uint8_t>();
  }

  std::vector<RowParams> rows_;
  std::vector<PenaltyEntry> entries_;
  std::vector<int32_t> processed_rows_;
  std::vector<int32_t> entry_of_;  // [vocab]: entry index of an id in the current row, or -1
  PinnedBuffer upload_[kSlots];
  // The kernels write each row's result and top logprobs here directly (mapped).
  PinnedBuffer results_[kSlots] = {PinnedBuffer(true), PinnedBuffer(true)};
  StreamMark done_[kSlots];  // after each slot's kernels
  std::optional<Staged> staged_;
  int next_slot_ = 0;
  std::deque<Launched> launched_;
  // F32 views of the vocab-parallel path's buffers, grown as needed: this rank's chunk
  // statistics [rows, 4 chunks], every rank's [rows, 4 world chunks], the owners' tokens.
  Tensor f32_rows(CudaBackend& be, Tensor& t, int64_t rows, int64_t cols) {
    if (!t.defined() || t.dim(0) < rows || t.dim(1) != cols) {
      t = Tensor();
      t = be.empty(DType::kF32, Shape{std::max<int64_t>(rows, 256), cols});
    }
    return t.slice(0, rows);
  }
  // Takes the staged batch (staging `batch` first when none is), checked against `vocab`.
  Staged take_staged(CudaBackend& be, const SamplingBatch& batch, int vocab);

  Tensor io_dev_, processed_dev_, plain_dev_, topk_dev_, nucleus_dev_;
  // KESTREL_SAMPLER_SPLIT=N: the first passes of top_k rows, and of top_p / min_p rows, are
  // split over blocks in batches of at most N such rows (0: never; for A/B benchmarks), not
  // kTopKSplitMaxRows and kNucleusSplitMaxRows.
  const int split_rows_ = [] {
    const char* env = std::getenv("KESTREL_SAMPLER_SPLIT");
    return env == nullptr ? -1 : std::max(std::atoi(env), 0);
  }();
  int split_rows(int default_rows) const { return split_rows_ >= 0 ? split_rows_ : default_rows; }
  Tensor shard_stats_, shard_all_, shard_tokens_;
};

int CudaSampler::build_penalties(const SamplingBatch& b, int r, int vocab, int feedback_rows,
                                 const TokenLists& prompt, const TokenLists& output,
                                 const TokenLists& masked) {
  if (entry_of_.size() != static_cast<size_t>(vocab)) entry_of_.assign(vocab, -1);
  const size_t first = entries_.size();
  auto entry = [&](int id) -> PenaltyEntry& {
    if (entry_of_[id] < 0) {
      entry_of_[id] = static_cast<int32_t>(entries_.size());
      entries_.push_back(PenaltyEntry{id, 0, 0});
    }
    return entries_[entry_of_[id]];
  };
  const float rep = b.repetition_penalty[r];
  const bool presence_or_frequency = b.presence_penalty[r] != 0.0f || b.frequency_penalty[r] != 0.0f;
  int pending_slot = -1;
  if (rep != 1.0f || presence_or_frequency) {
    for (const TokenLists* l : {&prompt, &output}) {
      for (const int* t = l->begin(r); t != l->end(r); ++t) {
        if (*t < 0 && l == &output && -1 - *t < feedback_rows) {  // pending_token(slot)
          KS_CHECK(pending_slot < 0, "sample: row {} has more than one pending output token", r);
          pending_slot = -1 - *t;
          continue;
        }
        KS_CHECK(*t >= 0 && *t < vocab, "{} token id {} is outside the vocab [0, {})", l->name, *t,
                 vocab);
        if (rep != 1.0f) entry(*t).flags |= sampling_kernels::kPenaltyRepetition;
      }
    }
    if (presence_or_frequency) {
      for (const int* t = output.begin(r); t != output.end(r); ++t) {
        if (*t >= 0) ++entry(*t).output_count;
      }
    }
  }
  for (const int* t = masked.begin(r); t != masked.end(r); ++t) {
    if (*t >= 0 && *t < vocab) entry(*t).flags |= sampling_kernels::kPenaltyMasked;
  }
  if (!b.bias_offsets.empty()) {
    for (int i = b.bias_offsets[r]; i < b.bias_offsets[r + 1]; ++i) {
      const int id = b.bias_tokens[i];
      KS_CHECK(id >= 0 && id < vocab, "logit_bias token id {} is outside the vocab [0, {})", id,
               vocab);
      KS_CHECK(std::isfinite(b.bias_values[i]), "logit_bias of token {} is not finite", id);
      KS_CHECK(entry_of_[id] < 0 || entries_[entry_of_[id]].bias == 0.0f,
               "logit_bias: token id {} is given more than once", id);
      entry(id).bias = b.bias_values[i];
    }
  }
  for (size_t e = first; e < entries_.size(); ++e) entry_of_[entries_[e].id] = -1;
  return pending_slot;
}

void CudaSampler::stage(CudaBackend& be, const SamplingBatch& batch, int vocab) {
  KS_CHECK(launched_.size() < kSlots, "sample: {} launches are outstanding already", kSlots);
  staged_.reset();
  const int num_rows = batch.num_rows;
  KS_CHECK(num_rows >= 0, "sample: num_rows must be >= 0, got {}", num_rows);
  KS_CHECK(vocab > 0, "sample: vocab must be > 0, got {}", vocab);
  Staged st;
  Launched& l = st.launch;
  l.slot = next_slot_;
  l.vocab = vocab;
  if (num_rows == 0) {
    staged_ = std::move(st);
    return;
  }
  check_row_vector(batch.temperature, num_rows, "temperature");
  check_row_vector(batch.top_k, num_rows, "top_k");
  check_row_vector(batch.top_p, num_rows, "top_p");
  check_row_vector(batch.min_p, num_rows, "min_p");
  check_row_vector(batch.repetition_penalty, num_rows, "repetition_penalty");
  check_row_vector(batch.presence_penalty, num_rows, "presence_penalty");
  check_row_vector(batch.frequency_penalty, num_rows, "frequency_penalty");
  check_row_vector(batch.seed, num_rows, "seed");
  check_row_vector(batch.position, num_rows, "position");
  check_row_vector(batch.num_logprobs, num_rows, "num_logprobs");
  const TokenLists prompt{batch.prompt_tokens, batch.prompt_offsets, "prompt"};
  const TokenLists output{batch.output_tokens, batch.output_offsets, "output"};
  const TokenLists masked{batch.masked_tokens, batch.masked_offsets, "masked"};
  const TokenLists bias{batch.bias_tokens, batch.bias_offsets, "bias"};
  prompt.validate(num_rows);
  output.validate(num_rows);
  masked.validate(num_rows);
  bias.validate(num_rows);
  KS_CHECK(batch.bias_values.size() == batch.bias_tokens.size(),
           "sample: batch.bias_values holds {} values for {} ids", batch.bias_values.size(),
           batch.bias_tokens.size());
  // Structured outputs: rows with an allowed-token mask (none: allowed_row is empty).
  int num_masks = 0;
  if (!batch.allowed_row.empty()) {
    check_row_vector(batch.allowed_row, num_rows, "allowed_row");
    KS_CHECK(batch.mask_words == (vocab + 31) / 32,
             "sample: batch.mask_words is {} for vocab {} (needs {})", batch.mask_words, vocab,
             (vocab + 31) / 32);
    KS_CHECK(batch.allowed_masks.size() % batch.mask_words == 0,
             "sample: batch.allowed_masks holds {} words, not whole rows of {}",
             batch.allowed_masks.size(), batch.mask_words);
    num_masks = static_cast<int>(batch.allowed_masks.size() / batch.mask_words);
  }

  rows_.assign(num_rows, RowParams{});
  // Token feedback on: an output id pending_token(slot) names one of its slots.
  const int feedback_rows =
      be.token_feedback().defined() ? static_cast<int>(be.token_feedback().numel()) : 0;
  entries_.clear();
  processed_rows_.clear();
  int top_stride = 0;
  for (int r = 0; r < num_rows; ++r) {
    validate_row(batch, r);
    RowParams& p = rows_[r];
    p.temperature = batch.temperature[r];
    p.top_k = batch.top_k[r] > 0 && batch.top_k[r] < vocab ? batch.top_k[r] : 0;
    p.top_p = batch.top_p[r];
    p.min_p = batch.min_p[r];
    p.repetition_penalty = batch.repetition_penalty[r];
    p.presence_penalty = batch.presence_penalty[r];
    p.frequency_penalty = batch.frequency_penalty[r];
    p.num_logprobs = batch.num_logprobs[r];
    p.seed = batch.seed[r];
    p.position = batch.position[r];
    if (p.num_logprobs > 0) top_stride = std::max(top_stride, std::min(p.num_logprobs, vocab));
    p.penalty_begin = static_cast<int32_t>(entries_.size());
    p.pending_slot = build_penalties(batch, r, vocab, feedback_rows, prompt, output, masked);
    p.penalty_end = static_cast<int32_t>(entries_.size());
    p.mask_row = batch.allowed_row.empty() ? -1 : batch.allowed_row[r];
    KS_CHECK(p.mask_row >= -1 && p.mask_row < num_masks,
             "sample: row {}: allowed_row {} outside the {} masks", r, p.mask_row, num_masks);
    if (p.penalty_end > p.penalty_begin || p.mask_row >= 0 || p.pending_slot >= 0) {
      p.processed_row = static_cast<int32_t>(processed_rows_.size());
      processed_rows_.push_back(r);
    }
  }

  // One device buffer: [rows | processed_rows | entries | masks] uploaded, [results | top]
  // read back.
  const size_t rows_bytes = align_up(sizeof(RowParams) * num_rows);
  const size_t proc_bytes = align_up(sizeof(int32_t) * processed_rows_.size());
  const size_t entry_bytes = align_up(sizeof(PenaltyEntry) * entries_.size());
  const size_t mask_bytes = num_masks > 0 ? align_up(sizeof(uint32_t) * batch.allowed_masks.size()) : 0;
  const size_t in_bytes = rows_bytes + proc_bytes + entry_bytes + mask_bytes;
  const size_t result_bytes = align_up(sizeof(RowResult) * num_rows);
  const size_t top_bytes = sizeof(TopLogprob) * static_cast<size_t>(num_rows) * top_stride;
  const size_t out_bytes = result_bytes + top_bytes;
  uint8_t* dev = device_bytes(be, io_dev_, in_bytes, true);
  // The launch two before used this slot: its copy from the pinned buffer must be done (a
  // collected launch's is; a vocab-parallel rank's other than 0 collects nothing).
  done_[l.slot].wait();
  uint8_t* host_in = upload_[l.slot].get(in_bytes);
  std::memcpy(host_in, rows_.data(), sizeof(RowParams) * num_rows);
  std::memcpy(host_in + rows_bytes, processed_rows_.data(), sizeof(int32_t) * processed_rows_.size());
  std::memcpy(host_in + rows_bytes + proc_bytes, entries_.data(),
              sizeof(PenaltyEntry) * entries_.size());
  if (num_masks > 0) {
    std::memcpy(host_in + rows_bytes + proc_bytes + entry_bytes, batch.allowed_masks.data(),
                sizeof(uint32_t) * batch.allowed_masks.size());
  }
  const cudaStream_t stream = be.stream();
  KS_CUDA_CHECK(cudaMemcpyAsync(dev, host_in, in_bytes, cudaMemcpyHostToDevice, stream));

  sampling_kernels::SampleArgs& args = st.args;
  if (!processed_rows_.empty()) {
    args.processed = reinterpret_cast<float*>(device_bytes(
        be, processed_dev_, sizeof(float) * static_cast<size_t>(vocab) * processed_rows_.size()));
  }
  args.rows = reinterpret_cast<const RowParams*>(dev);
  args.processed_rows = reinterpret_cast<const int32_t*>(dev + rows_bytes);
  args.penalties = reinterpret_cast<const PenaltyEntry*>(dev + rows_bytes + proc_bytes);
  if (num_masks > 0) {
    args.masks = reinterpret_cast<const uint32_t*>(dev + rows_bytes + proc_bytes + entry_bytes);
    args.mask_words = batch.mask_words;
  }
  results_[l.slot].get(out_bytes);
  uint8_t* out = results_[l.slot].device_ptr();
  args.results = reinterpret_cast<RowResult*>(out);
  args.top = reinterpret_cast<TopLogprob*>(out + result_bytes);
  args.num_rows = num_rows;
  args.num_processed = static_cast<int>(processed_rows_.size());
  args.vocab = vocab;
  args.top_stride = top_stride;
  args.num_plain = static_cast<int>(std::count_if(
      rows_.begin(), rows_.end(), [](const RowParams& p) { return sampling_kernels::is_plain(p); }));
  if (args.num_plain > 0) {
    args.plain_scratch =
        device_bytes(be, plain_dev_, sampling_kernels::plain_scratch_bytes(num_rows, vocab));
  }
  args.num_topk_split = static_cast<int>(std::count_if(rows_.begin(), rows_.end(), [](const RowParams& p) {
    return sampling_kernels::takes_topk_split(p);
  }));
  const size_t topk_bytes = sampling_kernels::topk_scratch_bytes(num_rows, vocab);
  if (args.num_topk_split > 0 && args.num_topk_split <= split_rows(sampling_kernels::kTopKSplitMaxRows) && topk_bytes > 0) {
    args.topk_scratch = device_bytes(be, topk_dev_, topk_bytes);
  }
  args.num_nucleus_split = static_cast<int>(std::count_if(rows_.begin(), rows_.end(), [](const RowParams& p) {
    return sampling_kernels::takes_nucleus_split(p);
  }));
  const size_t nucleus_bytes = sampling_kernels::nucleus_scratch_bytes(num_rows, vocab);
  if (args.num_nucleus_split > 0 && args.num_nucleus_split <= split_rows(sampling_kernels::kNucleusSplitMaxRows) && nucleus_bytes > 0) {
    args.nucleus_scratch = device_bytes(be, nucleus_dev_, nucleus_bytes);
  }
  const Tensor& feedback = be.token_feedback();
  if (feedback.defined()) {
    KS_CHECK(num_rows <= feedback.numel(), "sample: {} rows for token feedback of {}", num_rows,
             feedback.numel());
    args.feedback = feedback.data_as<int32_t>();
  }
  l.top_stride = top_stride;
  l.result_bytes = result_bytes;
  l.num_logprobs.resize(num_rows);
  for (int r = 0; r < num_rows; ++r) l.num_logprobs[r] = rows_[r].num_logprobs;
  staged_ = std::move(st);
}

void CudaSampler::launch(CudaBackend& be, const Tensor& logits, const SamplingBatch& batch) {
  KS_CHECK(logits.defined() && logits.device() == Device::kCuda,
           "sample: logits must be a CUDA tensor");
  KS_CHECK(logits.dtype() == DType::kF32, "sample: logits must be F32, got {}",
           dtype_name(logits.dtype()));
  KS_CHECK(logits.ndim() == 2 && logits.dim(0) == batch.num_rows && logits.dim(1) > 0,
           "sample: logits {} must be [{}, vocab > 0]", logits.shape().str(), batch.num_rows);
  KS_CHECK(logits.dim(1) < (int64_t{1} << 31), "sample: vocab {} is too large", logits.dim(1));
  const int vocab = static_cast<int>(logits.dim(1));
  Staged st = take_staged(be, batch, vocab);
  const int num_rows = batch.num_rows;
  if (num_rows > 0) {
    st.args.logits = static_cast<const float*>(logits.data());
    sampling_kernels::sample_rows(st.args, be.stream());
    done_[st.launch.slot].record(be.stream());
  }
  launched_.push_back(std::move(st.launch));
  next_slot_ = (next_slot_ + 1) % kSlots;
}

CudaSampler::Staged CudaSampler::take_staged(CudaBackend& be, const SamplingBatch& batch,
                                             int vocab) {
  if (!staged_) stage(be, batch, vocab);
  Staged st = std::move(*staged_);
  staged_.reset();
  const int num_rows = static_cast<int>(st.launch.num_logprobs.size());
  KS_CHECK(num_rows == batch.num_rows && st.launch.vocab == vocab,
           "sample: the staged batch ({} rows, vocab {}) is not this one ({} rows, vocab {})",
           num_rows, st.launch.vocab, batch.num_rows, vocab);
  return st;
}

// The three steps of sampling_plain.h's vocab-parallel path with the two collectives between
// them, all in stream order (the collectives are the communicator's, on this stream).
void CudaSampler::launch_vocab_parallel(CudaBackend& be, const Tensor& local_logits,
                                        const SamplingBatch& batch, int vocab, Communicator& comm,
                                        bool keep) {
  using sampling_kernels::kPlainChunk;
  KS_CHECK(local_logits.defined() && local_logits.device() == Device::kCuda &&
               local_logits.dtype() == DType::kF32 && local_logits.ndim() == 2 &&
               local_logits.dim(0) == batch.num_rows,
           "vocab-parallel sample: logits {} must be CUDA F32 [{}, Vp]", local_logits.shape().str(),
           batch.num_rows);
  const int64_t Vp = local_logits.dim(1);
  const int world = comm.world_size(), rank = comm.rank();
  KS_CHECK(Vp > 0 && Vp % kPlainChunk == 0 && (world - 1) * Vp < vocab && vocab <= world * Vp,
           "vocab-parallel sample: {} columns a rank over {} ranks do not split a vocabulary of "
           "{} in chunks of {}",
           Vp, world, vocab, kPlainChunk);
  Staged st = take_staged(be, batch, vocab);
  const int num_rows = batch.num_rows;
  if (num_rows > 0) {
    const sampling_kernels::PlainShard shard{rank, static_cast<int>(Vp / kPlainChunk),
                                             static_cast<int>(std::min<int64_t>(Vp, vocab - rank * Vp)),
                                             static_cast<int>(Vp)};
    // A chunk's 16-byte statistics travel as 4 floats.
    const int64_t cols = 4 * int64_t{shard.chunks};
    Tensor mine = f32_rows(be, shard_stats_, num_rows, cols);
    Tensor all = f32_rows(be, shard_all_, num_rows, world * cols);
    // The owners' tokens, padded to 16 bytes for the peer all-reduce (the tail is not read).
    Tensor tokens = f32_rows(be, shard_tokens_, (num_rows + 3) / 4 * 4, 1);
    sampling_kernels::SampleArgs& args = st.args;
    args.logits = static_cast<const float*>(local_logits.data());
    auto* stats = static_cast<sampling_kernels::PlainChunkStat*>(mine.data());
    sampling_kernels::plain_shard_stats(args, shard, world, stats, be.stream());
    comm.all_gather_columns(mine, all);
    sampling_kernels::plain_shard_pick(args, shard, world,
                                       static_cast<const sampling_kernels::PlainChunkStat*>(all.data()),
                                       tokens.data_as<float>(), be.stream());
    comm.all_reduce_sum(tokens);
    sampling_kernels::plain_shard_finish(args, tokens.data_as<float>(), be.stream());
    done_[st.launch.slot].record(be.stream());
  }
  if (keep) launched_.push_back(std::move(st.launch));
  next_slot_ = (next_slot_ + 1) % kSlots;
}

std::vector<SampledToken> CudaSampler::collect() {
  KS_CHECK(!launched_.empty(), "sample: nothing launched to collect");
  const Launched l = std::move(launched_.front());
  launched_.pop_front();
  const int num_rows = static_cast<int>(l.num_logprobs.size());
  std::vector<SampledToken> out(num_rows);
  if (num_rows == 0) return out;
  done_[l.slot].wait();
  const int vocab = l.vocab;
  const int top_stride = l.top_stride;
  const uint8_t* host_out = results_[l.slot].get(0);  // written by the kernels
  const auto* results = reinterpret_cast<const RowResult*>(host_out);
  const auto* top = reinterpret_cast<const TopLogprob*>(host_out + l.result_bytes);
  for (int r = 0; r < num_rows; ++r) {
    const RowResult& res = results[r];
    KS_CHECK(res.status != sampling_kernels::kRowNoFiniteLogit,
             "sample: row {}: sampling needs a finite logit", r);
    KS_CHECK(res.status != sampling_kernels::kRowNoFiniteRawLogit,
             "sample: row {}: logprobs need a finite logit", r);
    KS_ASSERT(res.status == sampling_kernels::kRowOk && res.token >= 0 && res.token < vocab,
              "device sampler returned token {} (status {}) for row {}", res.token, res.status, r);
    out[r].token_id = res.token;
    if (l.num_logprobs[r] < 0) continue;
    TokenLogprobs lp;
    lp.token_id = res.token;
    lp.logprob = res.logprob;
    lp.rank = res.rank;
    lp.top.reserve(res.num_top);
    const TopLogprob* row_top = top + static_cast<size_t>(r) * top_stride;
    for (int i = 0; i < res.num_top; ++i) lp.top.emplace_back(row_top[i].id, row_top[i].logprob);
    out[r].logprobs = std::move(lp);
  }
  return out;
}

void CudaSampler::discard(CudaBackend& be) {
  KS_CUDA_CHECK(cudaStreamSynchronize(be.stream()));
  launched_.clear();
  staged_.reset();
}

CudaSampler& CudaBackend::sampler() {
  if (!sampler_) {
    KS_CUDA_CHECK(cudaSetDevice(holder_->device));  // its events belong to this device
    sampler_ = std::make_shared<CudaSampler>();
  }
  return *sampler_;
}

std::vector<SampledToken> CudaBackend::sample(const Tensor& logits, const SamplingBatch& batch) {
  sampler().launch(*this, logits, batch);
  return sampler().collect();
}

void CudaBackend::stage_sample(const SamplingBatch& batch, int vocab) {
  sampler().stage(*this, batch, vocab);
}

void CudaBackend::launch_sample(const Tensor& logits, const SamplingBatch& batch) {
  sampler().launch(*this, logits, batch);
}

void CudaBackend::launch_sample_vocab_parallel(const Tensor& local_logits,
                                               const SamplingBatch& batch, int vocab,
                                               Communicator& comm, bool keep) {
  sampler().launch_vocab_parallel(*this, local_logits, batch, vocab, comm, keep);
}

std::vector<SampledToken> CudaBackend::collect_sample() { return sampler().collect(); }

void CudaBackend::discard_samples() {
  if (sampler_) sampler_->discard(*this);
}

bool CudaBackend::enable_token_feedback(int max_rows) {
  KS_CHECK(max_rows >= 1, "token feedback needs at least one row, got {}", max_rows);
  if (feedback_.defined() && feedback_.numel() >= max_rows) return true;
  // A graph captured before may still read the old buffer: keep it.
  if (feedback_.defined()) retired_scratch_.push_back(feedback_);
  feedback_ = empty(DType::kI32, Shape{max_rows});
  KS_CUDA_CHECK(cudaMemsetAsync(feedback_.data(), 0, feedback_.nbytes(), stream()));
  return true;
}

// The penalties kernel counts a pending output id from its feedback slot (build_penalties'
// pending_slot). KESTREL_PENDING_PENALTIES=0 makes the engine settle penalised steps first
// instead, to measure what the overlap gives.
bool CudaBackend::samples_pending_tokens() const {
  static const bool on = [] {
    const char* env = std::getenv("KESTREL_PENDING_PENALTIES");
    return env == nullptr || std::string_view(env) != "0";
  }();
  return on;
}

}  // namespace kestrel
