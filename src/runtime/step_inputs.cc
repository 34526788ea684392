#include "runtime/step_inputs.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/tensor.h"

namespace kestrel {
namespace {

constexpr size_t kAlign = 4;  // i32 elements: 16 bytes

size_t aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

StepInputs::StepInputs(Backend& backend, int max_num_batched_tokens, int max_num_seqs,
                       int max_table_width)
    : backend_(backend),
      capacity_{max_num_batched_tokens, max_num_seqs, max_num_seqs, max_table_width} {
  KS_CHECK(max_num_batched_tokens > 0 && max_num_seqs > 0 && max_table_width > 0,
           "StepInputs: bad capacity ({} tokens, {} seqs, {} columns)", max_num_batched_tokens,
           max_num_seqs, max_table_width);
  const size_t n = offsets(capacity_).end;
  // The buffer and its host staging copy (on the CPU both are host memory) are written
  // whole: sizes beyond the machine would end in the OOM killer, not in an error.
  const double bytes = 2.0 * static_cast<double>(n * sizeof(int32_t));
  KS_CHECK(bytes <= host_memory_bytes(),
           "max_num_batched_tokens {}, max_num_seqs {} and max_model_len / block_size {} need "
           "{:.1f} GiB of step buffers, more than this machine's {:.1f} GiB of memory",
           max_num_batched_tokens, max_num_seqs, max_table_width, bytes / (1 << 30),
           host_memory_bytes() / (1 << 30));
  device_ = backend_.empty(DType::kI32, {static_cast<int64_t>(n)});
  staging_.resize(n);
}

StepInputs::Offsets StepInputs::offsets(const StepShape& s) {
  Offsets o;
  o.ids = 0;
  o.positions = o.ids + aligned(s.num_tokens);
  o.slots = o.positions + aligned(s.num_tokens);
  o.query_start_loc = o.slots + aligned(s.num_tokens);
  o.seq_lens = o.query_start_loc + aligned(s.num_seqs + 1);
  o.order = o.seq_lens + aligned(s.num_seqs);
  o.rows = o.order + aligned(s.num_seqs);
  o.tables = o.rows + aligned(s.num_rows);
  o.end = o.tables + aligned(static_cast<size_t>(s.num_seqs) * s.table_width);
  return o;
}

void StepInputs::check_fits(const StepShape& s) const {
  KS_CHECK(s.num_tokens > 0 && s.num_seqs > 0 && s.num_rows >= 0 && s.table_width > 0 &&
               s.num_tokens <= capacity_.num_tokens && s.num_seqs <= capacity_.num_seqs &&
               s.num_rows <= capacity_.num_rows && s.table_width <= capacity_.table_width,
           "step of {} tokens, {} sequences, {} rows, {} block-table columns exceeds the "
           "runner's buffers ({}, {}, {}, {})",
           s.num_tokens, s.num_seqs, s.num_rows, s.table_width, capacity_.num_tokens,
           capacity_.num_seqs, capacity_.num_rows, capacity_.table_width);
}

void StepInputs::upload(const HostBatch& b, const StepShape& shape) {
  check_fits(shape);
  const int T = static_cast<int>(b.input_ids.size());
  const int B = static_cast<int>(b.seq_lens.size());
  const int S = static_cast<int>(b.sample_rows.size());
  KS_ASSERT(T <= shape.num_tokens && B <= shape.num_seqs && S <= shape.num_rows &&
                b.max_blocks <= shape.table_width,
            "StepInputs: shape ({}, {}, {}, {}) smaller than the batch ({}, {}, {}, {})",
            shape.num_tokens, shape.num_seqs, shape.num_rows, shape.table_width, T, B, S,
            b.max_blocks);
  KS_ASSERT(shape.num_tokens - T == shape.num_seqs - B,
            "StepInputs: padding needs one token per padding sequence");
  const Offsets o = offsets(shape);
  int32_t* h = staging_.data();
  const int pad_tokens = shape.num_tokens - T;

  std::copy(b.input_ids.begin(), b.input_ids.end(), h + o.ids);
  std::copy(b.positions.begin(), b.positions.end(), h + o.positions);
  std::copy(b.slot_mapping.begin(), b.slot_mapping.end(), h + o.slots);
  std::fill_n(h + o.ids + T, pad_tokens, 0);
  std::fill_n(h + o.positions + T, pad_tokens, 0);
  std::fill_n(h + o.slots + T, pad_tokens, -1);

  std::copy(b.query_start_loc.begin(), b.query_start_loc.end(), h + o.query_start_loc);
  std::copy(b.seq_lens.begin(), b.seq_lens.end(), h + o.seq_lens);
  for (int i = B; i < shape.num_seqs; ++i) {
    h[o.query_start_loc + i + 1] = T + (i - B) + 1;
    h[o.seq_lens + i] = 1;
  }

  int32_t* order = h + o.order;
  const int32_t* lens = h + o.seq_lens;
  std::iota(order, order + shape.num_seqs, 0);
  std::stable_sort(order, order + shape.num_seqs,
                   [lens](int32_t x, int32_t y) { return lens[x] > lens[y]; });

  std::copy(b.sample_rows.begin(), b.sample_rows.end(), h + o.rows);
  for (int i = S; i < shape.num_rows; ++i) {
    // A padding token when there is one, else the last real token (a prompt-only step).
    h[o.rows + i] = pad_tokens > 0 ? T + std::min(i - S, pad_tokens - 1) : T - 1;
  }

  const int W = shape.table_width;
  int32_t* tables = h + o.tables;
  std::fill_n(tables, static_cast<size_t>(shape.num_seqs) * W, 0);
  for (int i = 0; i < B; ++i) {
    const int32_t* src = b.block_tables.data() + static_cast<size_t>(i) * b.max_blocks;
    std::copy(src, src + b.max_blocks, tables + static_cast<size_t>(i) * W);
  }

  Tensor host(h, DType::kI32, {static_cast<int64_t>(o.end)});
  Tensor dst = view(0, {static_cast<int64_t>(o.end)});
  backend_.copy_from_host(host, dst);
}

void StepInputs::upload_padding(const StepShape& shape) {
  HostBatch empty;
  empty.query_start_loc = {0};
  upload(empty, shape);
}

Tensor StepInputs::view(size_t offset, Shape shape) const {
  return device_.slice(static_cast<int64_t>(offset),
                       static_cast<int64_t>(offset) + shape.numel())
      .view(shape);
}

Tensor StepInputs::input_ids(const StepShape& s) const {
  return view(offsets(s).ids, {s.num_tokens});
}

Tensor StepInputs::sample_rows(const StepShape& s) const {
  return view(offsets(s).rows, {s.num_rows});
}

AttentionMetadata StepInputs::metadata(const StepShape& s, int max_query_len, int max_seq_len,
                                       int block_size) const {
  const Offsets o = offsets(s);
  AttentionMetadata m;
  m.num_tokens = s.num_tokens;
  m.num_seqs = s.num_seqs;
  m.max_query_len = std::max(max_query_len, 1);
  m.max_seq_len = std::max(max_seq_len, 1);
  m.block_size = block_size;
  m.positions = view(o.positions, {s.num_tokens});
  m.slot_mapping = view(o.slots, {s.num_tokens});
  m.query_start_loc = view(o.query_start_loc, {s.num_seqs + 1});
  m.seq_lens = view(o.seq_lens, {s.num_seqs});
  m.block_tables = view(o.tables, {s.num_seqs, s.table_width});
  m.seq_order = view(o.order, {s.num_seqs});
  return m;
}

}  // namespace kestrel
