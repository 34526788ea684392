// StepInputs: one step's model inputs (token ids, AttentionMetadata, sample rows) in one
// fixed backend buffer, refilled from the host with a single copy per step.
//
// Fixed addresses are what CUDA graphs need: a graph captured for a StepShape reads the
// views that shape gives, and every later upload() with that shape writes the same places.
// Layout (i32, each region starting on a 16-byte boundary), for a shape (T, B, S, W):
//   input_ids [T] | positions [T] | slot_mapping [T] | query_start_loc [B + 1] |
//   seq_lens [B] | seq_order [B] | sample_rows [S] | block_tables [B, W]
// so region offsets depend only on the shape.
//
// Padding (a shape larger than the batch, for a graph captured at a larger batch size):
// padding sequence b >= B owns one padding token; padding tokens have id 0, position 0 and
// slot -1 (no KV write); padding sequences have seq_len 1 and an all-zero block table (they
// read key 0 of block 0, whatever it holds: their outputs are ignored); padding sample rows
// point at padding tokens. seq_order lists the B sequences (padding included) by seq_len,
// longest first, ties in batch order.
//
// Not thread-safe; one per ModelRunner.
#pragma once

#include <vector>

#include "backend/backend.h"
#include "runtime/batch_builder.h"

namespace kestrel {

struct StepShape {
  int num_tokens = 0;   // T
  int num_seqs = 0;     // B
  int num_rows = 0;     // S, sampled rows
  int table_width = 0;  // W, block-table columns
  bool operator==(const StepShape&) const = default;
};

class StepInputs {
 public:
  // Room for steps of up to max_num_batched_tokens tokens, max_num_seqs sequences and sampled rows,
  // and max_table_width block-table columns.
  StepInputs(Backend& backend, int max_num_batched_tokens, int max_num_seqs, int max_table_width);

  // Packs `batch` into `shape` (padding as above) and copies it to the backend buffer.
  // REQUIRES: shape covers the batch: T >= batch tokens and, when padded, T - tokens ==
  // B - seqs (one token per padding sequence); S >= batch sample rows (extra rows are
  // padding); W >= batch.max_blocks. An empty sample_rows in `batch` with S == 1 samples the
  // last token (the caller discards it). Throws kestrel::Error when the shape exceeds the
  // capacity.
  void upload(const HostBatch& batch, const StepShape& shape);
  // A batch of padding only (graph warm-up and capture).
  void upload_padding(const StepShape& shape);

  // Views of the buffer for `shape` (what upload() with that shape filled).
  Tensor input_ids(const StepShape& shape) const;
  Tensor sample_rows(const StepShape& shape) const;
  // max_query_len / max_seq_len are host-side hints for the backend (see backend.h).
  AttentionMetadata metadata(const StepShape& shape, int max_query_len, int max_seq_len,
                             int block_size) const;

  const StepShape& capacity() const { return capacity_; }

 private:
  struct Offsets {
    size_t ids, positions, slots, query_start_loc, seq_lens, order, rows, tables, end;  // elements
  };
  static Offsets offsets(const StepShape& shape);
  Tensor view(size_t offset, Shape shape) const;
  void check_fits(const StepShape& shape) const;

  Backend& backend_;
  StepShape capacity_;
  Tensor device_;                // i32, offsets(capacity_).end elements
  std::vector<int32_t> staging_;  // host side of one upload
};

}  // namespace kestrel
