#include "backend/cpu/cpu_check.h"

#include "core/error.h"

namespace kestrel::cpu {

void check_tensor(const Tensor& t, const char* op, const char* name, DType dtype, int ndim) {
  KS_CHECK(t.defined(), "{}: {} is not defined", op, name);
  KS_CHECK(t.device() == Device::kCpu, "{}: {} is not in CPU memory", op, name);
  KS_CHECK(t.dtype() == dtype, "{}: {} must be {}, got {}", op, name, dtype_name(dtype),
           dtype_name(t.dtype()));
  KS_CHECK(t.ndim() == ndim, "{}: {} must have {} dimensions, got shape {}", op, name, ndim,
           t.shape().str());
}

void check_dim(const Tensor& t, const char* op, const char* name, int i, int64_t expected,
               const char* what) {
  KS_CHECK(t.dim(i) == expected, "{}: {} has shape {}; dimension {} must be {} = {}", op, name,
           t.shape().str(), i, what, expected);
}

void check_attention_shape(const AttentionShape& shape, const char* op) {
  KS_CHECK(shape.num_q_heads > 0 && shape.num_kv_heads > 0 && shape.head_dim > 0,
           "{}: head counts and head_dim must be positive (q heads {}, kv heads {}, dim {})", op,
           shape.num_q_heads, shape.num_kv_heads, shape.head_dim);
  KS_CHECK(shape.num_q_heads % shape.num_kv_heads == 0,
           "{}: {} query heads are not a multiple of {} kv heads", op, shape.num_q_heads,
           shape.num_kv_heads);
}

void check_kv_cache(const LayerKvCache& kv, const char* op, const AttentionShape& shape) {
  KS_CHECK(kv.k.defined(), "{}: kv.k is not defined", op);
  const DType dtype = kv.k.dtype() == DType::kF8E4M3 ? DType::kF8E4M3 : DType::kF32;
  check_tensor(kv.k, op, "kv.k", dtype, 4);
  check_tensor(kv.v, op, "kv.v", dtype, 4);
  KS_CHECK(kv.k.shape() == kv.v.shape(), "{}: kv.k {} and kv.v {} differ in shape", op,
           kv.k.shape().str(), kv.v.shape().str());
  check_dim(kv.k, op, "kv.k", 2, shape.num_kv_heads, "num_kv_heads");
  check_dim(kv.k, op, "kv.k", 3, shape.head_dim, "head_dim");
  if (dtype != DType::kF8E4M3) return;
  const std::pair<const Tensor*, const char*> per_head[] = {
      {&kv.scale, "kv.scale"}, {&kv.amax, "kv.amax"}, {&kv.clamped, "kv.clamped"}};
  for (const auto& [t, name] : per_head) {
    check_tensor(*t, op, name, t == &kv.clamped ? DType::kI64 : DType::kF32, 2);
    check_dim(*t, op, name, 0, 2, "2 (K, V)");
    check_dim(*t, op, name, 1, shape.num_kv_heads, "num_kv_heads");
  }
}

MetadataView check_metadata(const AttentionMetadata& meta, const char* op, int64_t num_blocks) {
  const int T = meta.num_tokens;
  const int B = meta.num_seqs;
  KS_CHECK(T >= 0 && B >= 0, "{}: meta.num_tokens {} / num_seqs {} is negative", op, T, B);
  KS_CHECK(meta.block_size > 0, "{}: meta.block_size must be positive, got {}", op,
           meta.block_size);
  check_tensor(meta.positions, op, "meta.positions", DType::kI32, 1);
  check_dim(meta.positions, op, "meta.positions", 0, T, "num_tokens");
  check_tensor(meta.slot_mapping, op, "meta.slot_mapping", DType::kI32, 1);
  check_dim(meta.slot_mapping, op, "meta.slot_mapping", 0, T, "num_tokens");
  check_tensor(meta.query_start_loc, op, "meta.query_start_loc", DType::kI32, 1);
  check_dim(meta.query_start_loc, op, "meta.query_start_loc", 0, B + 1, "num_seqs + 1");
  check_tensor(meta.seq_lens, op, "meta.seq_lens", DType::kI32, 1);
  check_dim(meta.seq_lens, op, "meta.seq_lens", 0, B, "num_seqs");
  check_tensor(meta.block_tables, op, "meta.block_tables", DType::kI32, 2);
  check_dim(meta.block_tables, op, "meta.block_tables", 0, B, "num_seqs");

  MetadataView v;
  v.num_tokens = T;
  v.num_seqs = B;
  v.block_size = meta.block_size;
  v.max_blocks_per_seq = static_cast<int>(meta.block_tables.dim(1));
  v.positions = meta.positions.data_as<int32_t>();
  v.slot_mapping = meta.slot_mapping.data_as<int32_t>();
  v.query_start_loc = meta.query_start_loc.data_as<int32_t>();
  v.seq_lens = meta.seq_lens.data_as<int32_t>();
  v.block_tables = meta.block_tables.data_as<int32_t>();
  v.token_seq.assign(T, -1);

  KS_CHECK(v.query_start_loc[0] == 0, "{}: meta.query_start_loc[0] must be 0, got {}", op,
           v.query_start_loc[0]);
  for (int b = 0; b < B; ++b) {
    const int begin = v.query_start_loc[b];
    const int end = v.query_start_loc[b + 1];
    const int seq_len = v.seq_lens[b];
    const int query_len = end - begin;
    KS_CHECK(begin <= end && end <= T,
             "{}: meta.query_start_loc [{}, {}] for sequence {} is decreasing or past {} tokens",
             op, begin, end, b, T);
    KS_CHECK(query_len <= seq_len, "{}: sequence {} has {} new tokens but seq_lens[{}] = {}", op, b,
             query_len, b, seq_len);
    KS_CHECK(query_len <= meta.max_query_len,
             "{}: sequence {} has {} new tokens > max_query_len {}", op, b, query_len,
             meta.max_query_len);
    KS_CHECK(seq_len <= meta.max_seq_len, "{}: seq_lens[{}] = {} > max_seq_len {}", op, b, seq_len,
             meta.max_seq_len);
    const int64_t blocks_needed = (static_cast<int64_t>(seq_len) + v.block_size - 1) / v.block_size;
    KS_CHECK(blocks_needed <= v.max_blocks_per_seq,
             "{}: sequence {} of {} tokens needs {} blocks; block_tables has {} columns", op, b,
             seq_len, blocks_needed, v.max_blocks_per_seq);
    const int32_t* table = v.block_tables + static_cast<int64_t>(b) * v.max_blocks_per_seq;
    for (int64_t i = 0; i < blocks_needed; ++i) {
      KS_CHECK(table[i] >= 0 && table[i] < num_blocks,
               "{}: block_tables[{}][{}] = {} is outside the cache of {} blocks", op, b, i,
               table[i], num_blocks);
    }
    for (int t = begin; t < end; ++t) {
      const int expected = seq_len - query_len + (t - begin);
      KS_CHECK(v.positions[t] == expected,
               "{}: positions[{}] = {} disagrees with seq_lens/query_start_loc (expected {})", op,
               t, v.positions[t], expected);
      v.token_seq[t] = b;
    }
  }
  const int64_t num_slots = num_blocks * v.block_size;
  for (int t = 0; t < T; ++t) {
    KS_CHECK(v.slot_mapping[t] >= -1 && v.slot_mapping[t] < num_slots,
             "{}: slot_mapping[{}] = {} is outside the cache of {} slots", op, t, v.slot_mapping[t],
             num_slots);
  }
  return v;
}

}  // namespace kestrel::cpu
