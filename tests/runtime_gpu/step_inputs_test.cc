// StepInputs packs a step into one buffer, padded for graphs (src/runtime/step_inputs.h),
// and CudaGraphRunner's capture sizes; checked on the CPU backend against hand-written
// arrays.
#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "runtime/cuda_graph_runner.h"
#include "runtime/step_inputs.h"

namespace kestrel {
namespace {

std::vector<int> values(const Tensor& t) {
  const int* p = t.data_as<int>();
  return std::vector<int>(p, p + t.numel());
}

// Two decoding sequences: lengths 5 (blocks 7, 3) and 2 (block 9), block size 4.
HostBatch two_decodes() {
  HostBatch b;
  b.input_ids = {11, 22};
  b.positions = {4, 1};
  b.slot_mapping = {3 * 4 + 0, 9 * 4 + 1};
  b.query_start_loc = {0, 1, 2};
  b.seq_lens = {5, 2};
  b.block_tables = {7, 3, 9, 0};
  b.max_blocks = 2;
  b.max_query_len = 1;
  b.max_seq_len = 5;
  b.sample_rows = {0, 1};
  b.sample_seqs = {0, 1};
  return b;
}

TEST(StepInputs, PadsADecodeBatchForAGraph) {
  CpuBackend cpu(1);
  StepInputs in(cpu, 16, 8, 6);
  const StepShape shape{4, 4, 4, 3};  // graph of 4 sequences, 3 block-table columns
  in.upload(two_decodes(), shape);
  EXPECT_EQ(values(in.input_ids(shape)), (std::vector<int>{11, 22, 0, 0}));
  EXPECT_EQ(values(in.sample_rows(shape)), (std::vector<int>{0, 1, 2, 3}));
  const AttentionMetadata m = in.metadata(shape, 1, 100, 4);
  EXPECT_EQ(m.num_tokens, 4);
  EXPECT_EQ(m.num_seqs, 4);
  EXPECT_EQ(m.max_seq_len, 100);
  EXPECT_EQ(m.block_size, 4);
  EXPECT_EQ(values(m.positions), (std::vector<int>{4, 1, 0, 0}));
  EXPECT_EQ(values(m.slot_mapping), (std::vector<int>{12, 37, -1, -1}));
  EXPECT_EQ(values(m.query_start_loc), (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(values(m.seq_lens), (std::vector<int>{5, 2, 1, 1}));
  EXPECT_EQ(values(m.seq_order), (std::vector<int>{0, 1, 2, 3}));  // longest first, ties in order
  EXPECT_EQ(m.block_tables.dim(0), 4);
  EXPECT_EQ(m.block_tables.dim(1), 3);
  EXPECT_EQ(values(m.block_tables), (std::vector<int>{7, 3, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0}));
}

TEST(StepInputs, SameShapeSameAddresses) {
  CpuBackend cpu(1);
  StepInputs in(cpu, 16, 8, 6);
  const StepShape shape{4, 4, 4, 3};
  in.upload(two_decodes(), shape);
  const void* ids = in.input_ids(shape).data();
  const void* tables = in.metadata(shape, 1, 5, 4).block_tables.data();
  HostBatch one = two_decodes();  // a different batch of the same padded shape
  one.input_ids = {33};
  one.positions = {7};
  one.slot_mapping = {5};
  one.query_start_loc = {0, 1};
  one.seq_lens = {8};
  one.block_tables = {2, 1};
  one.sample_rows = {0};
  one.sample_seqs = {0};
  in.upload(one, shape);
  EXPECT_EQ(in.input_ids(shape).data(), ids);
  EXPECT_EQ(in.metadata(shape, 1, 5, 4).block_tables.data(), tables);
  EXPECT_EQ(values(in.input_ids(shape)), (std::vector<int>{33, 0, 0, 0}));
  EXPECT_EQ(values(in.metadata(shape, 1, 8, 4).seq_lens), (std::vector<int>{8, 1, 1, 1}));
  EXPECT_EQ(values(in.metadata(shape, 1, 8, 4).seq_order), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(values(in.metadata(shape, 1, 8, 4).query_start_loc), (std::vector<int>{0, 1, 2, 3, 4}));
}

// Decodes of 3, 9, 1 and 9 keys (one block each, block size 16): the order lists the longest
// first, the two of 9 in batch order, then the padding sequence (seq_len 1) after the real one.
TEST(StepInputs, SequenceOrderIsLongestFirst) {
  CpuBackend cpu(1);
  StepInputs in(cpu, 16, 8, 6);
  HostBatch b;
  b.input_ids = {1, 2, 3, 4};
  b.positions = {2, 8, 0, 8};
  b.slot_mapping = {2, 24, 32, 56};
  b.query_start_loc = {0, 1, 2, 3, 4};
  b.seq_lens = {3, 9, 1, 9};
  b.block_tables = {0, 1, 2, 3};
  b.max_blocks = 1;
  b.max_query_len = 1;
  b.max_seq_len = 9;
  b.sample_rows = {0, 1, 2, 3};
  b.sample_seqs = {0, 1, 2, 3};
  const StepShape shape{5, 5, 5, 1};  // one padding sequence
  in.upload(b, shape);
  const AttentionMetadata m = in.metadata(shape, 1, 9, 16);
  EXPECT_EQ(values(m.seq_lens), (std::vector<int>{3, 9, 1, 9, 1}));
  EXPECT_EQ(values(m.seq_order), (std::vector<int>{1, 3, 0, 2, 4}));
}

TEST(StepInputs, PromptChunkWithoutSampleRowsSamplesTheLastToken) {
  CpuBackend cpu(1);
  StepInputs in(cpu, 16, 8, 6);
  HostBatch b;
  b.input_ids = {5, 6, 7};
  b.positions = {0, 1, 2};
  b.slot_mapping = {8, 9, 10};
  b.query_start_loc = {0, 3};
  b.seq_lens = {3};
  b.block_tables = {2};
  b.max_blocks = 1;
  const StepShape shape{3, 1, 1, 1};
  in.upload(b, shape);
  EXPECT_EQ(values(in.sample_rows(shape)), (std::vector<int>{2}));
  EXPECT_EQ(values(in.metadata(shape, 3, 3, 4).slot_mapping), (std::vector<int>{8, 9, 10}));
}

TEST(StepInputs, PaddingOnlyAndCapacity) {
  CpuBackend cpu(1);
  StepInputs in(cpu, 16, 8, 6);
  const StepShape shape{2, 2, 2, 6};
  in.upload_padding(shape);
  EXPECT_EQ(values(in.metadata(shape, 1, 1, 4).slot_mapping), (std::vector<int>{-1, -1}));
  EXPECT_EQ(values(in.metadata(shape, 1, 1, 4).seq_lens), (std::vector<int>{1, 1}));
  EXPECT_THROW(in.upload_padding(StepShape{9, 9, 9, 1}), Error);   // 9 > 8 sequences
  EXPECT_THROW(in.upload_padding(StepShape{2, 2, 2, 7}), Error);   // 7 > 6 columns
}

TEST(CudaGraphRunner, CaptureSizes) {
  EXPECT_EQ(CudaGraphRunner::capture_sizes(32), (std::vector<int>{1, 2, 4, 8, 16, 24, 32}));
  EXPECT_EQ(CudaGraphRunner::capture_sizes(7), (std::vector<int>{1, 2, 4, 7}));
  EXPECT_EQ(CudaGraphRunner::capture_sizes(1), (std::vector<int>{1}));
  const std::vector<int> s256 = CudaGraphRunner::capture_sizes(256);
  EXPECT_EQ(s256.size(), 35u);  // 1, 2, 4 and 8..256 in steps of 8
  EXPECT_EQ(s256.back(), 256);
  const std::vector<int> s300 = CudaGraphRunner::capture_sizes(300);
  EXPECT_EQ(std::vector<int>(s300.end() - 4, s300.end()), (std::vector<int>{256, 272, 288, 300}));
  CudaGraphRunner none(32);  // nothing captured: no size is served
  EXPECT_EQ(none.padded_size(3), 0);
}

}  // namespace
}  // namespace kestrel
