// The server answers with the bytes LLM::generate and LLM::generate_streaming give for the
// same requests (token-id prompts, seeded sampling), streamed (its SSE deltas joined) and
// not: stop strings across token boundaries, unfinished characters, n > 1, logprobs, stop
// token ids. The in-process LLM runs the model and configuration the server
// runs; tests/runtime/output_paths_test.cc holds generate itself to whole-prefix decodes.
#include "server_harness.h"

#include "kestrel/llm.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::server_test {
namespace {

using json = nlohmann::json;

const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// The server's configuration (server_harness.h's ServerProcess).
EngineConfig server_config() {
  EngineConfig c;
  c.device = "cpu";
  c.num_threads = 2;
  c.num_kv_blocks = 1024;
  c.max_model_len = 4096;
  return c;
}

struct Request {
  std::vector<int> prompt;
  uint64_t seed = 1;
  int max_tokens = 48;
  int n = 1;
  std::vector<std::string> stop;
  bool include_stop = false;
  std::vector<int> stop_token_ids;
  std::optional<int> logprobs;
};

json body(const Request& r, bool stream) {
  json b = {{"model", kModelName}, {"prompt", r.prompt},       {"temperature", 1.0},
            {"seed", r.seed},      {"max_tokens", r.max_tokens}, {"ignore_eos", true},
            {"n", r.n},            {"stream", stream}};
  if (!r.stop.empty()) b["stop"] = r.stop;
  if (r.include_stop) b["include_stop_str_in_output"] = true;
  if (!r.stop_token_ids.empty()) b["stop_token_ids"] = r.stop_token_ids;
  if (r.logprobs) b["logprobs"] = *r.logprobs;
  return b;
}

SamplingParams params(const LLM& llm, const Request& r) {
  SamplingParams p = llm.default_sampling_params();  // the server starts from them too
  p.temperature = 1.0f;
  p.seed = r.seed;
  p.max_tokens = r.max_tokens;
  p.ignore_eos = true;
  p.n = r.n;
  p.stop = r.stop;
  p.include_stop_str_in_output = r.include_stop;
  p.stop_token_ids = r.stop_token_ids;
  p.logprobs = r.logprobs;
  return p;
}

json stop_reason(const CompletionOutput& c) {
  if (const auto* s = std::get_if<std::string>(&c.stop_reason)) return *s;
  if (const auto* id = std::get_if<int>(&c.stop_reason)) return *id;
  return nullptr;
}

// Per choice: text, finish_reason, stop_reason, and (not streamed) the logprobs' tokens.
struct Choice {
  std::string text;
  json finish_reason, stop_reason;
};

std::vector<Choice> ask(int port, const Request& r, bool stream) {
  auto res = client(port).Post("/v1/completions", body(r, stream).dump(), "application/json");
  if (!res || res->status != 200) throw std::runtime_error(res ? res->body : "no response");
  std::vector<Choice> choices(r.n);
  auto take = [&](const json& c) {
    Choice& into = choices.at(c["index"].get<size_t>());
    into.text += c["text"].get<std::string>();
    if (!c["finish_reason"].is_null()) {
      into.finish_reason = c["finish_reason"];
      into.stop_reason = c["stop_reason"];
    }
  };
  if (!stream) {
    const json out = json::parse(res->body);
    for (const json& c : out["choices"]) take(c);
    return choices;
  }
  std::istringstream events(res->body);
  for (std::string line; std::getline(events, line);) {
    if (line.rfind("data: ", 0) != 0 || line == "data: [DONE]") continue;
    const json chunk = json::parse(line.substr(6));
    for (const json& c : chunk["choices"]) take(c);
  }
  return choices;
}

// The request from the server, streamed and not, against generate (and generate_streaming
// when n is 1). Returns generate's output.
RequestOutput expect_server_matches(int port, LLM& llm, const Request& r) {
  const SamplingParams p = params(llm, r);
  const RequestOutput want = llm.generate(std::vector<std::vector<int>>{r.prompt}, p, false)[0];
  if (r.n == 1) {
    std::string streamed;
    const RequestOutput s =
        llm.generate_streaming(r.prompt, p, [&](const std::string& piece) { streamed += piece; });
    EXPECT_EQ(streamed, want.outputs[0].text) << "generate_streaming";
    EXPECT_EQ(s.outputs[0].token_ids, want.outputs[0].token_ids) << "generate_streaming";
  }
  for (bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streamed" : "not streamed");
    const std::vector<Choice> got = ask(port, r, stream);
    for (int i = 0; i < r.n; ++i) {
      EXPECT_EQ(got[i].text, want.outputs[i].text) << "choice " << i;
      EXPECT_EQ(got[i].finish_reason, want.outputs[i].finish_reason) << "choice " << i;
      EXPECT_EQ(got[i].stop_reason, stop_reason(want.outputs[i])) << "choice " << i;
    }
  }
  return want;
}

std::string decode(const Tokenizer& tok, const std::vector<int>& ids, size_t from, size_t to) {
  return tok.decode(std::vector<int>(ids.begin() + from, ids.begin() + to), true);
}

TEST(ServerOutputs, SameBytesAsGenerateAndStreaming) {
  ServerProcess server;
  LLM llm(model_dir(), server_config());
  const Tokenizer& tok = *llm.tokenizer();

  // n = 2 with logprobs, then a stop string across sample 0's tokens 10 and 11 (their
  // texts' last and first bytes), with and without the stop text, and a stop token.
  Request r;
  r.prompt = tok.encode("Tell me about the sea", true);
  r.seed = 9;
  r.n = 2;
  r.logprobs = 2;
  const RequestOutput free_run = expect_server_matches(server.port(), llm, r);
  const std::vector<int>& ids = free_run.outputs[0].token_ids;
  std::string stop;
  for (size_t j = 10; j + 1 < ids.size() && stop.empty(); ++j) {
    const std::string a = decode(tok, ids, j, j + 1), b = decode(tok, ids, j + 1, j + 2);
    if (a.empty() || b.empty() || (a.back() & 0x80) || (b.front() & 0x80)) continue;
    if (free_run.outputs[0].text.find(std::string{a.back(), b.front()}) ==
        decode(tok, ids, 0, j + 1).size() - 1) {
      stop = {a.back(), b.front()};
    }
  }
  ASSERT_FALSE(stop.empty()) << free_run.outputs[0].text;
  r.stop = {stop};
  for (bool include : {false, true}) {
    r.include_stop = include;
    const RequestOutput out = expect_server_matches(server.port(), llm, r);
    EXPECT_EQ(out.outputs[0].finish_reason, "stop");
  }
  r.stop_token_ids = {free_run.outputs[1].token_ids[30]};
  EXPECT_EQ(expect_server_matches(server.port(), llm, r).outputs[1].finish_reason, "stop");

  // n = 1 (generate_streaming too) until a run has a token that leaves a character
  // unfinished (the text shows U+FFFD where decode() does).
  Request cjk;
  cjk.prompt = tok.encode("中文的故事", true);
  cjk.max_tokens = 64;
  bool unfinished = false;
  for (cjk.seed = 1; cjk.seed <= 20 && !unfinished; ++cjk.seed) {
    const RequestOutput out = expect_server_matches(server.port(), llm, cjk);
    const std::vector<int>& t = out.outputs[0].token_ids;
    for (size_t j = 0; j < t.size() && !unfinished; ++j) {
      unfinished = decode(tok, t, j, j + 1).find(kReplacement) != std::string::npos;
    }
  }
  EXPECT_TRUE(unfinished) << "no run sampled a token that leaves a character unfinished";
}

}  // namespace
}  // namespace kestrel::server_test
