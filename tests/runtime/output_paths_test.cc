// One output path: generate(), generate_streaming() and a RequestStream's deltas and
// cumulative outputs give the same bytes for the same request, and those bytes are what
// whole-prefix decodes say (text_model.h's expected_cut, not the Detokenizer): stop strings
// that straddle token boundaries, unfinished characters, n > 1, logprobs, stop token ids.
// tests/server/output_paths_test.cc holds the server to the same outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "kestrel/llm.h"
#include "text_model.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD: decode()'s mark for cut bytes

// The deltas of a kDelta stream, put together per sample (by the test, not the library).
RequestOutput join_deltas(RequestStream& stream) {
  RequestOutput all;
  while (std::optional<RequestOutput> out = stream.next()) {
    if (!out->prompt_token_ids.empty()) all.prompt_token_ids = out->prompt_token_ids;
    for (const CompletionOutput& d : out->outputs) {
      if (all.outputs.size() <= size_t(d.index)) all.outputs.resize(d.index + 1);
      CompletionOutput& c = all.outputs[d.index];
      c.index = d.index;
      c.token_ids.insert(c.token_ids.end(), d.token_ids.begin(), d.token_ids.end());
      c.text += d.text;
      c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
      c.text_offsets.insert(c.text_offsets.end(), d.text_offsets.begin(), d.text_offsets.end());
      c.finish_reason = d.finish_reason;
      c.stop_reason = d.stop_reason;
    }
    all.finished = out->finished;
  }
  return all;
}

RequestOutput last_output(RequestStream& stream) {
  RequestOutput last;
  while (std::optional<RequestOutput> out = stream.next()) last = std::move(*out);
  return last;
}

void expect_same(const RequestOutput& want, const RequestOutput& got, const char* path) {
  SCOPED_TRACE(path);
  EXPECT_TRUE(got.finished);
  EXPECT_EQ(got.prompt_token_ids, want.prompt_token_ids);
  ASSERT_EQ(got.outputs.size(), want.outputs.size());
  for (size_t i = 0; i < want.outputs.size(); ++i) {
    const CompletionOutput& w = want.outputs[i];
    const CompletionOutput& g = got.outputs[i];
    EXPECT_EQ(g.index, w.index);
    EXPECT_EQ(g.token_ids, w.token_ids) << "sample " << i;
    EXPECT_EQ(g.text, w.text) << "sample " << i;
    EXPECT_EQ(g.finish_reason, w.finish_reason) << "sample " << i;
    EXPECT_TRUE(g.stop_reason == w.stop_reason) << "sample " << i;
    EXPECT_EQ(g.text_offsets, w.text_offsets) << "sample " << i;
    ASSERT_EQ(g.logprobs.size(), w.logprobs.size()) << "sample " << i;
    // The runs share the prefix cache and batches differ, so the CPU's sums may differ in
    // the last bits; the tokens may not.
    for (size_t t = 0; t < w.logprobs.size(); ++t) {
      EXPECT_EQ(g.logprobs[t].token_id, w.logprobs[t].token_id);
      EXPECT_NEAR(g.logprobs[t].logprob, w.logprobs[t].logprob, 1e-3);
      ASSERT_EQ(g.logprobs[t].top.size(), w.logprobs[t].top.size());
      for (size_t k = 0; k < w.logprobs[t].top.size(); ++k) {
        EXPECT_EQ(g.logprobs[t].top[k].first, w.logprobs[t].top[k].first);
        EXPECT_NEAR(g.logprobs[t].top[k].second, w.logprobs[t].top[k].second, 1e-3);
      }
    }
  }
}

// The request through every path; returns generate()'s output once the others matched it.
// The two streams run side by side, so one steps the engine for the other too.
RequestOutput every_path(LLM& llm, const std::vector<int>& prompt, const SamplingParams& p) {
  const RequestOutput want = llm.generate(std::vector<std::vector<int>>{prompt}, p, false)[0];
  SamplingParams delta = p, cumulative = p;
  delta.output_kind = OutputKind::kDelta;
  cumulative.output_kind = OutputKind::kCumulative;
  RequestStream deltas = llm.add_request(prompt, delta);
  RequestStream whole = llm.add_request(prompt, cumulative);
  expect_same(want, join_deltas(deltas), "deltas");
  expect_same(want, last_output(whole), "cumulative");
  if (p.n == 1) {
    std::string streamed;
    const RequestOutput out =
        llm.generate_streaming(prompt, p, [&](const std::string& piece) { streamed += piece; });
    expect_same(want, out, "generate_streaming");
    EXPECT_EQ(streamed, want.outputs[0].text);
  }
  EXPECT_FALSE(llm.has_unfinished());
  return want;
}

SamplingParams sampled(uint64_t seed, int max_tokens) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = seed;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

std::string decode(const Tokenizer& tok, const std::vector<int>& ids, size_t from, size_t to) {
  return tok.decode(std::vector<int>(ids.begin() + from, ids.begin() + to), true);
}

TEST(OutputPaths, StopStringAcrossATokenBoundary) {
  LLM llm(tiny_model_dir(), config());
  const Tokenizer& tok = *llm.tokenizer();
  const std::vector<int> prompt = tok.encode("Tell me about the sea", true);
  // A free run with two neighbouring tokens whose texts are whole and end / start in ASCII:
  // the stop string is the last byte of one and the first of the next, first seen there.
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const SamplingParams p = sampled(seed, 48);
    const std::vector<int> ids = llm.generate(std::vector<std::vector<int>>{prompt}, p, false)[0]
                                     .outputs[0].token_ids;
    const std::string text = tok.decode(ids, true);
    for (size_t j = 4; j + 1 < ids.size(); ++j) {
      const std::string a = decode(tok, ids, j, j + 1), b = decode(tok, ids, j + 1, j + 2);
      if (a.empty() || b.empty() || (a.back() & 0x80) || (b.front() & 0x80)) continue;
      const std::string stop = {a.back(), b.front()};
      const std::string before = decode(tok, ids, 0, j + 1);
      if (before.find(kReplacement) != std::string::npos ||
          text.find(stop) != before.size() - 1) {
        continue;
      }
      for (bool include : {false, true}) {
        SCOPED_TRACE(testing::Message() << "seed " << seed << " stop '" << stop << "' include "
                                        << include);
        SamplingParams q = p;
        q.stop = {"never seen", stop};
        q.include_stop_str_in_output = include;
        const RequestOutput out = every_path(llm, prompt, q);
        const Cut want = expected_cut(tok, ids, stop, include);
        ASSERT_TRUE(want.stopped);
        EXPECT_EQ(want.tokens.size(), j + 2);  // the token that completed it is kept
        const CompletionOutput& c = out.outputs[0];
        EXPECT_EQ(c.token_ids, want.tokens);
        EXPECT_EQ(c.text, want.text);
        EXPECT_EQ(c.finish_reason, "stop");
        EXPECT_TRUE(c.stop_reason == decltype(c.stop_reason)(stop));
      }
      return;
    }
  }
  FAIL() << "no run had two ASCII-bounded neighbouring tokens";
}

// A token that leaves a character unfinished: the text shows U+FFFD where decode() does, in
// every path. (Characters completed across tokens are pinned token by token in
// output_processor_test.cc: a random model almost never samples a completing token.)
TEST(OutputPaths, UnfinishedCharacters) {
  LLM llm(tiny_model_dir(), config());
  const Tokenizer& tok = *llm.tokenizer();
  const std::vector<int> prompt = tok.encode("中文的故事", true);
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const SamplingParams p = sampled(seed, 64);
    const RequestOutput out = every_path(llm, prompt, p);
    const std::vector<int>& ids = out.outputs[0].token_ids;
    EXPECT_EQ(out.outputs[0].text, tok.decode(ids, true));
    for (size_t j = 0; j < ids.size(); ++j) {
      if (decode(tok, ids, j, j + 1).find(kReplacement) != std::string::npos) return;
    }
  }
  FAIL() << "no run sampled a token that leaves a character unfinished";
}

TEST(OutputPaths, ParallelSamplesWithLogprobsAndStopTokens) {
  LLM llm(tiny_model_dir(), config());
  const Tokenizer& tok = *llm.tokenizer();
  const std::vector<int> prompt = tok.encode("Three short poems:", true);
  SamplingParams p = sampled(77, 40);
  p.n = 3;
  p.logprobs = 2;
  const RequestOutput free_run = every_path(llm, prompt, p);
  for (const CompletionOutput& c : free_run.outputs) {
    EXPECT_EQ(c.text, tok.decode(c.token_ids, true));
    EXPECT_EQ(c.logprobs.size(), c.token_ids.size());
    EXPECT_EQ(c.text_offsets.size(), c.token_ids.size());
  }
  // Sample 1 ends at a stop token (kept, its id the stop reason); sample 0 at a stop string
  // taken from its own text; each cut where its own text says.
  const std::vector<int>& ids0 = free_run.outputs[0].token_ids;
  const std::vector<int>& ids1 = free_run.outputs[1].token_ids;
  std::string stop;
  for (size_t j = 10; j + 2 <= ids0.size() && stop.empty(); ++j) {
    const std::string piece = decode(tok, ids0, j, j + 2);
    if (!piece.empty() && piece.find(kReplacement) == std::string::npos) stop = piece;
  }
  ASSERT_FALSE(stop.empty());
  p.stop = {stop};
  p.stop_token_ids = {ids1[20]};
  const RequestOutput out = every_path(llm, prompt, p);
  for (int s = 0; s < 3; ++s) {
    SCOPED_TRACE(testing::Message() << "sample " << s);
    const std::vector<int>& ids = free_run.outputs[s].token_ids;
    const Cut want = expected_cut(tok, ids, stop, false);
    const auto id_stop = std::find(ids.begin(), ids.end(), ids1[20]);
    const size_t id_cut = size_t(id_stop - ids.begin()) + (id_stop == ids.end() ? 0 : 1);
    const CompletionOutput& c = out.outputs[s];
    // The stop token's text is not rendered (as in vLLM), so a stop string it would complete
    // does not match.
    if (want.stopped && want.tokens.size() < id_cut) {
      EXPECT_EQ(c.token_ids, want.tokens);
      EXPECT_EQ(c.text, want.text);
      EXPECT_TRUE(c.stop_reason == decltype(c.stop_reason)(stop));
    } else if (id_stop != ids.end()) {
      EXPECT_EQ(c.token_ids, std::vector<int>(ids.begin(), ids.begin() + id_cut));
      EXPECT_EQ(c.text, tok.decode(std::span(c.token_ids).first(id_cut - 1), true));
      EXPECT_TRUE(c.stop_reason == decltype(c.stop_reason)(ids1[20]));
    } else {
      EXPECT_EQ(c.token_ids, ids);
      EXPECT_EQ(c.finish_reason, "length");
    }
    EXPECT_EQ(c.logprobs.size(), c.token_ids.size());
    for (size_t t = 0; t < c.token_ids.size(); ++t) {
      EXPECT_EQ(c.logprobs[t].token_id, c.token_ids[t]);
      EXPECT_NEAR(c.logprobs[t].logprob, free_run.outputs[s].logprobs[t].logprob, 1e-3);
    }
  }
  EXPECT_EQ(out.outputs[0].finish_reason, "stop");
  EXPECT_EQ(out.outputs[1].finish_reason, "stop");
}

TEST(OutputPaths, StreamsAbortAndOutliveTheirLlm) {
  std::optional<RequestStream> kept;
  {
    LLM llm(tiny_model_dir(), config());
    const std::vector<int> prompt = llm.tokenizer()->encode("Abort me", true);
    SamplingParams p = sampled(3, 200);
    p.output_kind = OutputKind::kDelta;
    RequestStream stream = llm.add_request(prompt, p, "mine");
    ASSERT_TRUE(stream.next().has_value());
    EXPECT_THROW(llm.add_request(prompt, p, "mine"), Error);  // the id is in use
    stream.abort();
    EXPECT_TRUE(stream.finished());
    EXPECT_FALSE(stream.next().has_value());
    EXPECT_FALSE(llm.has_unfinished());
    EXPECT_EQ(llm.stats().num_running + llm.stats().num_waiting, 0);
    {
      RequestStream dropped = llm.add_request(prompt, p);  // destroyed unfinished: aborted
    }
    EXPECT_FALSE(llm.has_unfinished());
    kept.emplace(llm.add_request(prompt, p));
    ASSERT_TRUE(kept->next().has_value());
  }
  EXPECT_FALSE(kept->next().has_value());  // the LLM is gone: nothing more, no crash
}

}  // namespace
}  // namespace kestrel
