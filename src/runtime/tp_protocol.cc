#include "runtime/tp_protocol.h"

#include <nlohmann/json.hpp>

#include <array>
#include <bit>
#include <climits>

#include "core/error.h"

namespace kestrel {
namespace {

// The arrays of a kForward step, in wire order, with their lengths from the header.
template <typename Batch>
auto arrays(Batch& hb) {
  return std::array{&hb.input_ids, &hb.positions,  &hb.slot_mapping, &hb.query_start_loc,
                    &hb.seq_lens,  &hb.block_tables, &hb.sample_rows, &hb.prompt_rows,
                    &hb.row_sampling};
}

std::array<size_t, 9> lengths(const StepHeader& h) {
  const size_t T = h.num_tokens, B = h.num_seqs;
  return {T, T, T, B + 1, B, B * h.max_blocks, static_cast<size_t>(h.num_rows),
          static_cast<size_t>(h.num_prompt_rows), static_cast<size_t>(h.num_row_sampling)};
}

constexpr size_t kRowSamplingWords = 4;

nlohmann::json to_json(const EngineConfig& c) {
  return {{"device", c.device},
          {"max_num_seqs", c.max_num_seqs},
          {"max_num_batched_tokens", c.max_num_batched_tokens},
          {"max_model_len", c.max_model_len},
          {"block_size", c.block_size},
          {"num_kv_blocks", c.num_kv_blocks},
          {"kv_cache_memory_bytes", c.kv_cache_memory_bytes},
          {"gpu_memory_utilization", c.gpu_memory_utilization},
          {"kv_cache_dtype", c.kv_cache_dtype},
          {"enable_prefix_caching", c.enable_prefix_caching},
          {"enable_chunked_prefill", c.enable_chunked_prefill},
          {"num_threads", c.num_threads},
          {"enforce_eager", c.enforce_eager},
          {"async_scheduling", c.async_scheduling},
          {"seed", c.seed},
          {"tensor_parallel_size", c.tensor_parallel_size},
          {"tp_rendezvous", c.tp_rendezvous}};
}

EngineConfig from_json(const nlohmann::json& j) {
  EngineConfig c;
  c.device = j.at("device");
  c.max_num_seqs = j.at("max_num_seqs");
  c.max_num_batched_tokens = j.at("max_num_batched_tokens");
  c.max_model_len = j.at("max_model_len");
  c.block_size = j.at("block_size");
  c.num_kv_blocks = j.at("num_kv_blocks");
  c.kv_cache_memory_bytes = j.at("kv_cache_memory_bytes");
  c.gpu_memory_utilization = j.at("gpu_memory_utilization");
  c.kv_cache_dtype = j.at("kv_cache_dtype");
  c.enable_prefix_caching = j.at("enable_prefix_caching");
  c.enable_chunked_prefill = j.at("enable_chunked_prefill");
  c.num_threads = j.at("num_threads");
  c.enforce_eager = j.at("enforce_eager");
  c.async_scheduling = j.at("async_scheduling");
  c.seed = j.at("seed");
  c.tensor_parallel_size = j.at("tensor_parallel_size");
  c.tp_rendezvous = j.at("tp_rendezvous");
  return c;
}

}  // namespace

void send_header(ProcessGroup& group, const StepHeader& header) {
  StepHeader h = header;
  group.broadcast(&h, sizeof(h), 0);
}

void send_forward(ProcessGroup& group, const HostBatch& hb) {
  StepHeader h;
  h.kind = StepKind::kForward;
  h.num_tokens = static_cast<int32_t>(hb.input_ids.size());
  h.num_seqs = static_cast<int32_t>(hb.seq_lens.size());
  h.num_rows = static_cast<int32_t>(hb.sample_rows.size());
  h.num_prompt_rows = static_cast<int32_t>(hb.prompt_rows.size());
  h.num_row_sampling = static_cast<int32_t>(hb.row_sampling.size());
  h.max_blocks = hb.max_blocks;
  h.max_query_len = hb.max_query_len;
  h.max_seq_len = hb.max_seq_len;
  send_header(group, h);
  std::vector<int32_t> payload;
  const auto lens = lengths(h);
  const auto parts = arrays(hb);
  for (size_t i = 0; i < parts.size(); ++i) {
    KS_ASSERT(parts[i]->size() == lens[i], "host batch array {} has {} entries, not {}", i,
              parts[i]->size(), lens[i]);
    payload.insert(payload.end(), parts[i]->begin(), parts[i]->end());
  }
  group.broadcast(payload.data(), payload.size() * sizeof(int32_t), 0);
}

StepHeader receive_step(ProcessGroup& group, HostBatch& hb) {
  StepHeader h;
  group.broadcast(&h, sizeof(h), 0);
  if (h.kind != StepKind::kForward) return h;
  KS_CHECK(h.num_tokens > 0 && h.num_seqs > 0 && h.num_rows >= 0 && h.max_blocks >= 0 &&
               h.num_prompt_rows >= 0 && h.num_prompt_rows <= h.num_tokens &&
               (h.num_row_sampling == 0 || h.num_row_sampling == kRowSamplingWords * h.num_rows),
           "tensor-parallel step from rank 0 has impossible sizes (T {}, B {}, S {}, W {}, P {}, "
           "sampling {})",
           h.num_tokens, h.num_seqs, h.num_rows, h.max_blocks, h.num_prompt_rows,
           h.num_row_sampling);
  const auto lens = lengths(h);
  size_t total = 0;
  for (size_t n : lens) total += n;
  std::vector<int32_t> payload(total);
  group.broadcast(payload.data(), payload.size() * sizeof(int32_t), 0);
  const int32_t* p = payload.data();
  const auto parts = arrays(hb);
  for (size_t i = 0; i < parts.size(); ++i) {
    parts[i]->assign(p, p + lens[i]);
    p += lens[i];
  }
  hb.max_blocks = h.max_blocks;
  hb.max_query_len = h.max_query_len;
  hb.max_seq_len = h.max_seq_len;
  hb.sample_seqs.clear();
  hb.prompt_seqs.clear();
  return h;
}

std::vector<int> encode_row_sampling(const SamplingBatch& batch) {
  std::vector<int> words;
  words.reserve(kRowSamplingWords * static_cast<size_t>(batch.num_rows));
  for (int r = 0; r < batch.num_rows; ++r) {
    const uint64_t seed = batch.seed[r];
    words.push_back(std::bit_cast<int>(batch.temperature[r]));
    words.push_back(static_cast<int>(static_cast<uint32_t>(seed)));
    words.push_back(static_cast<int>(static_cast<uint32_t>(seed >> 32)));
    KS_CHECK(batch.position[r] >= 0 && batch.position[r] <= INT32_MAX,
             "row {}: position {} does not fit the step message", r, batch.position[r]);
    words.push_back(static_cast<int>(batch.position[r]));
  }
  return words;
}

SamplingBatch decode_row_sampling(const std::vector<int>& words) {
  KS_CHECK(words.size() % kRowSamplingWords == 0, "row sampling of {} words", words.size());
  SamplingBatch b;
  b.num_rows = static_cast<int>(words.size() / kRowSamplingWords);
  for (int r = 0; r < b.num_rows; ++r) {
    const int* w = words.data() + kRowSamplingWords * static_cast<size_t>(r);
    SamplingParams p;
    p.temperature = std::bit_cast<float>(w[0]);
    const uint64_t seed = static_cast<uint64_t>(static_cast<uint32_t>(w[1])) |
                          static_cast<uint64_t>(static_cast<uint32_t>(w[2])) << 32;
    b.add_row_params(p, seed, w[3]);
  }
  return b;
}

StartupMessage broadcast_startup(ProcessGroup& group, const StartupMessage& from_rank0) {
  std::string text;
  if (group.rank() == 0) {
    text = nlohmann::json{{"model_dir", from_rank0.model_dir},
                          {"config", to_json(from_rank0.config)}}
               .dump();
  }
  int64_t size = static_cast<int64_t>(text.size());
  group.broadcast(&size, sizeof(size), 0);
  text.resize(static_cast<size_t>(size));
  group.broadcast(text.data(), text.size(), 0);
  const nlohmann::json j = nlohmann::json::parse(text);
  return StartupMessage{j.at("model_dir").get<std::string>(), from_json(j.at("config"))};
}

}  // namespace kestrel
