#include "model/model_weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace kestrel {
namespace {

// Rows [begin, begin + count) of a tensor (its first dimension).
struct RowRange {
  int64_t begin = 0;
  int64_t count = 0;
};

class Loader {
 public:
  Loader(const WeightStore& store, Backend& backend, std::string prefix)
      : store_(store), backend_(backend), prefix_(std::move(prefix)) {}

  const TensorInfo& info(const std::string& name, const Shape& shape) {
    const TensorInfo& t = store_.get(name, shape);
    KS_CHECK(t.dtype == DType::kF32 || t.dtype == DType::kF16 || t.dtype == DType::kBF16,
             "weight '{}' has dtype {}; only F32, F16 and BF16 weights are supported", name,
             dtype_name(t.dtype));
    return t;
  }

  Tensor upload(const Tensor& host) {
    Tensor t = backend_.upload(host, backend_.compute_dtype());
    bytes_ += t.nbytes();
    return t;
  }

  // `name` under the decoder prefix, checked against `shape`, uploaded as is.
  Tensor get(const std::string& name, const Shape& shape) {
    return upload(info(prefix_ + name, shape).view());
  }

  // Rows `r` of `name` (full shape `shape`) followed by zero rows up to `padded_rows`. A
  // range inside the tensor is uploaded straight from the mapping; padding needs one copy
  // of the shard, still in the file's dtype.
  Tensor rows(const std::string& name, const Shape& shape, RowRange r, int64_t padded_rows) {
    const TensorInfo& t = info(prefix_ + name, shape);
    const int64_t end = std::min(r.begin + r.count, shape[0]);
    const Tensor view = t.view().slice(std::min(r.begin, end), end);
    if (view.dim(0) == padded_rows) return upload(view);
    Shape padded = shape;
    padded[0] = padded_rows;
    Tensor host = Tensor::host(t.dtype, padded);  // zero-initialised
    std::memcpy(host.data(), view.data(), view.nbytes());
    return upload(host);
  }

  // Columns [begin, begin + count) of the 2-D `name` (full shape `shape`): a strided copy
  // of the shard in the file's dtype, or the mapping itself when it is every column.
  Tensor columns(const std::string& name, const Shape& shape, int64_t begin, int64_t count) {
    const TensorInfo& t = info(prefix_ + name, shape);
    if (begin == 0 && count == shape[1]) return upload(t.view());
    const size_t elem = dtype_size(t.dtype);
    Tensor host = Tensor::host(t.dtype, {shape[0], count});
    const char* src = static_cast<const char*>(t.data) + begin * elem;
    char* dst = static_cast<char*>(host.data());
    for (int64_t row = 0; row < shape[0]; ++row) {
      std::memcpy(dst + row * count * elem, src + row * shape[1] * elem, count * elem);
    }
    return upload(host);
  }

  // Row ranges of several tensors (name, full shape, rows) concatenated along the first
  // dimension, converted to F32 on the host first.
  struct Part {
    std::string name;
    Shape shape;
    RowRange rows;
  };
  Tensor packed(const std::vector<Part>& parts) {
    std::vector<const TensorInfo*> infos;
    int64_t rows = 0;
    for (const Part& p : parts) {
      infos.push_back(&info(prefix_ + p.name, p.shape));
      rows += p.rows.count;
    }
    Shape shape = parts[0].shape;
    shape[0] = rows;
    Tensor host = Tensor::host(DType::kF32, shape);
    float* dst = host.data_as<float>();
    for (size_t i = 0; i < parts.size(); ++i) {
      const TensorInfo& t = *infos[i];
      const int64_t row_elems = t.shape.numel() / t.shape[0];
      const int64_t n = parts[i].rows.count * row_elems;
      const char* src = static_cast<const char*>(t.data) +
                        parts[i].rows.begin * row_elems * static_cast<int64_t>(dtype_size(t.dtype));
      convert_to_f32(src, t.dtype, dst, n);
      dst += n;
    }
    return upload(host);
  }

  bool has(const std::string& name) const { return store_.has(prefix_ + name); }
  size_t bytes() const { return bytes_; }

 private:
  const WeightStore& store_;
  Backend& backend_;
  std::string prefix_;
  size_t bytes_ = 0;
};

}  // namespace

ModelWeights load_model_weights(const WeightStore& store, const ModelConfig& c,
                                const ArchitectureSpec& arch, Backend& backend,
                                const ShardPlan& plan) {
  const int64_t H = c.hidden_size, V = c.vocab_size, I = c.intermediate_size, D = c.head_dim;
  const int64_t q_rows = c.num_attention_heads * D, kv_rows = c.num_key_value_heads * D;
  const bool o_bias = arch.o_proj_bias_with_attention_bias && c.attention_bias;
  // This rank's rows of q, of k and v (its KV heads), of gate and up, and of the vocabulary.
  const RowRange q{plan.q_head_start * D, plan.num_q_heads * D};
  const RowRange kv{plan.kv_head_start * D, plan.num_kv_heads * D};
  const RowRange mlp{plan.intermediate_start, plan.intermediate};
  const RowRange vocab{plan.vocab_start, plan.vocab_per_rank};
  Loader in(store, backend, std::string(arch.prefix));
  Loader top(store, backend, "");

  ModelWeights w;
  w.embed = in.rows("embed_tokens.weight", {V, H}, vocab, vocab.count);
  w.final_norm = in.get("norm.weight", {H});
  w.layers.resize(c.num_hidden_layers);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = fmt::format("layers.{}.", l);
    LayerWeights& L = w.layers[l];
    L.input_norm = in.get(p + "input_layernorm.weight", {H});
    L.post_norm = in.get(p + "post_attention_layernorm.weight", {H});
    L.qkv = in.packed({{p + "self_attn.q_proj.weight", {q_rows, H}, q},
                       {p + "self_attn.k_proj.weight", {kv_rows, H}, kv},
                       {p + "self_attn.v_proj.weight", {kv_rows, H}, kv}});
    if (c.attention_bias) {
      L.qkv_bias = in.packed({{p + "self_attn.q_proj.bias", {q_rows}, q},
                              {p + "self_attn.k_proj.bias", {kv_rows}, kv},
                              {p + "self_attn.v_proj.bias", {kv_rows}, kv}});
    }
    if (c.qk_norm) {
      L.q_norm = in.get(p + "self_attn.q_norm.weight", {D});
      L.k_norm = in.get(p + "self_attn.k_norm.weight", {D});
    }
    L.o_proj = in.columns(p + "self_attn.o_proj.weight", {H, q_rows}, q.begin, q.count);
    // Every rank's o_proj output is a partial sum: the bias must enter it once.
    if (o_bias && plan.rank == 0) L.o_bias = in.get(p + "self_attn.o_proj.bias", {H});
    L.gate_up = in.packed(
        {{p + "mlp.gate_proj.weight", {I, H}, mlp}, {p + "mlp.up_proj.weight", {I, H}, mlp}});
    L.down = in.columns(p + "mlp.down_proj.weight", {H, I}, mlp.begin, mlp.count);
  }
  w.lm_head =
      c.tie_word_embeddings ? w.embed : top.rows("lm_head.weight", {V, H}, vocab, vocab.count);
  w.bytes = in.bytes() + top.bytes();
  return w;
}

ModelWeights load_model_weights(const WeightStore& store, const ModelConfig& config,
                                const ArchitectureSpec& arch, Backend& backend) {
  return load_model_weights(store, config, arch, backend, ShardPlan::make(config, 0, 1));
}

}  // namespace kestrel
