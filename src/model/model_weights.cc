#include "model/model_weights.h"

#include <fmt/format.h>

#include "core/error.h"

namespace kestrel {
namespace {

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

  // Tensors concatenated along their first dimension, converted to F32 on the host first.
  Tensor packed(const std::vector<std::pair<std::string, Shape>>& parts) {
    std::vector<const TensorInfo*> infos;
    int64_t rows = 0;
    for (const auto& [name, shape] : parts) {
      infos.push_back(&info(prefix_ + name, shape));
      rows += shape[0];
    }
    Shape shape = parts[0].second;
    shape[0] = rows;
    Tensor host = Tensor::host(DType::kF32, shape);
    float* dst = host.data_as<float>();
    for (const TensorInfo* t : infos) {
      const int64_t n = t->shape.numel();
      convert_to_f32(t->data, t->dtype, dst, n);
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
                                const ArchitectureSpec& arch, Backend& backend) {
  const int64_t H = c.hidden_size, V = c.vocab_size, I = c.intermediate_size, D = c.head_dim;
  const int64_t q_rows = c.num_attention_heads * D, kv_rows = c.num_key_value_heads * D;
  const bool o_bias = arch.o_proj_bias_with_attention_bias && c.attention_bias;
  Loader in(store, backend, std::string(arch.prefix));
  Loader top(store, backend, "");

  ModelWeights w;
  w.embed = in.get("embed_tokens.weight", {V, H});
  w.final_norm = in.get("norm.weight", {H});
  w.layers.resize(c.num_hidden_layers);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = fmt::format("layers.{}.", l);
    LayerWeights& L = w.layers[l];
    L.input_norm = in.get(p + "input_layernorm.weight", {H});
    L.post_norm = in.get(p + "post_attention_layernorm.weight", {H});
    L.qkv = in.packed({{p + "self_attn.q_proj.weight", {q_rows, H}},
                       {p + "self_attn.k_proj.weight", {kv_rows, H}},
                       {p + "self_attn.v_proj.weight", {kv_rows, H}}});
    if (c.attention_bias) {
      L.qkv_bias = in.packed({{p + "self_attn.q_proj.bias", {q_rows}},
                              {p + "self_attn.k_proj.bias", {kv_rows}},
                              {p + "self_attn.v_proj.bias", {kv_rows}}});
    }
    if (c.qk_norm) {
      L.q_norm = in.get(p + "self_attn.q_norm.weight", {D});
      L.k_norm = in.get(p + "self_attn.k_norm.weight", {D});
    }
    L.o_proj = in.get(p + "self_attn.o_proj.weight", {H, q_rows});
    if (o_bias) L.o_bias = in.get(p + "self_attn.o_proj.bias", {H});
    L.gate_up =
        in.packed({{p + "mlp.gate_proj.weight", {I, H}}, {p + "mlp.up_proj.weight", {I, H}}});
    L.down = in.get(p + "mlp.down_proj.weight", {H, I});
  }
  w.lm_head = c.tie_word_embeddings ? w.embed : top.get("lm_head.weight", {V, H});
  w.bytes = in.bytes() + top.bytes();
  return w;
}

}  // namespace kestrel
