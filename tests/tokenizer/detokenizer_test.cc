// Streaming detokenizer properties. The oracle for the text is Tokenizer::decode, itself
// checked against HF in golden_test.cc; stop-string expectations are worked out by hand.
#include "tokenizer/detokenizer.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/utf8.h"

namespace kestrel {
namespace {

using testing::escaped;
using Ids = std::vector<int>;

// Reference, written independently: the text a stream may show after `ids`, i.e. their
// decode minus a trailing incomplete character (which decode shows as one U+FFFD).
std::string visible_prefix(const Tokenizer& tok, const Ids& ids, bool skip) {
  std::string raw;
  for (int id : ids) {
    if (!(skip && tok.is_special(id))) raw.append(tok.token_bytes(id));
  }
  // Drop the last 1..3 bytes if they start a multi-byte character that is not finished and
  // has only valid continuation bytes so far.
  for (size_t k = 1; k <= 3 && k <= raw.size(); ++k) {
    const auto lead = static_cast<unsigned char>(raw[raw.size() - k]);
    const size_t need = lead >= 0xF0 && lead <= 0xF4 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC2 ? 2 : 0;
    if (lead < 0xC2 || need <= k) continue;
    const std::string tail = raw.substr(raw.size() - k);
    std::string completed = tail + std::string(need - k, '\x80');
    // Some leads restrict the second byte; try the smallest and largest allowed completions.
    bool completable = false;
    for (unsigned char second : {0x80, 0x90, 0xA0, 0x9F, 0x8F, 0xBF}) {
      std::string c = completed;
      if (k == 1) c[1] = static_cast<char>(second);
      if (utf8::find_invalid(c) == std::string::npos) completable = true;
    }
    if (completable) {
      raw.resize(raw.size() - k);
      break;
    }
  }
  std::string text;
  utf8::append_lossy(text, raw);
  return text;
}

void check_stream(const Tokenizer& tok, const Ids& ids, bool skip) {
  DetokenizerOptions opts;
  opts.skip_special_tokens = skip;
  Detokenizer detok(tok, opts);
  std::string streamed;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string piece = detok.add_token(ids[i]);
    ASSERT_EQ(utf8::find_invalid(piece), std::string::npos);
    streamed += piece;
    // Everything that is final is shown, and nothing that is not.
    const Ids prefix(ids.begin(), ids.begin() + i + 1);
    ASSERT_EQ(streamed, visible_prefix(tok, prefix, skip)) << "after " << i + 1 << " tokens";
  }
  streamed += detok.finish();
  ASSERT_EQ(streamed, tok.decode(ids, skip));
  EXPECT_EQ(detok.output_text(), streamed);
  EXPECT_EQ(detok.finish(), "");
}

TEST(Detokenizer, IncrementsConcatenateToDecodeOnTheCorpus) {
  for (const Tokenizer* tok : {&testing::qwen3(), &testing::llama3()}) {
    const auto& corpus = testing::corpus();
    for (size_t i = 0; i < corpus.size(); i += 3) {
      const Ids ids = tok->encode(corpus[i], true);
      SCOPED_TRACE(escaped(corpus[i]));
      check_stream(*tok, ids, true);
      check_stream(*tok, ids, false);
    }
  }
}

TEST(Detokenizer, RandomBytesNeverShowAPrematureReplacement) {
  // Byte tokens in random order: truncated, invalid and valid multi-byte sequences.
  const Tokenizer& tok = testing::qwen3();
  Ids byte_ids;
  for (const char* b : {"\u00E2", "\u0124", "\u00AC", "\u00F0", "\u0141", "\u013A", "\u00A5", "a",
                        "\u0120", "\u00C3", "\u00A9", "\u00ED", "\u00B4"}) {
    byte_ids.push_back(*tok.token_to_id(b));  // bytes E2 82 AC F0 9F 98 80 'a' ' ' C3 A9 ED ..
  }
  byte_ids.push_back(151645);  // <|im_end|>
  std::mt19937 rng(5);
  std::uniform_int_distribution<size_t> pick(0, byte_ids.size() - 1);
  for (int trial = 0; trial < 500; ++trial) {
    Ids ids;
    for (int n = 1 + trial % 17; n > 0; --n) ids.push_back(byte_ids[pick(rng)]);
    check_stream(tok, ids, trial % 2 == 0);
  }
}

// Feeds `text` one character-level token at a time (byte tokens of ASCII).
Ids ascii_ids(const Tokenizer& tok, const std::string& text) {
  Ids ids;
  for (char c : text) ids.push_back(*tok.token_to_id(c == ' ' ? "\u0120" : std::string(1, c)));
  return ids;
}

struct StreamRun {
  std::vector<std::string> pieces;
  std::string text;
};

StreamRun run(const Tokenizer& tok, const Ids& ids, DetokenizerOptions opts, bool finish = true) {
  Detokenizer d(tok, std::move(opts));
  StreamRun r;
  for (int id : ids) r.pieces.push_back(d.add_token(id));
  if (finish) r.pieces.push_back(d.finish());
  for (const auto& p : r.pieces) r.text += p;
  return r;
}

TEST(Detokenizer, StopStringAcrossTokenBoundaries) {
  const Tokenizer& tok = testing::qwen3();
  const Ids ids = tok.encode("Hello world. The end.", false);  // "Hello", " world", ...
  DetokenizerOptions opts;
  opts.stop = {"lo wor"};  // spans the "Hello" / " world" boundary
  Detokenizer d(tok, opts);
  std::string text;
  for (int id : ids) text += d.add_token(id);
  text += d.finish();
  EXPECT_EQ(text, "Hel");
  EXPECT_TRUE(d.stopped());
  EXPECT_EQ(d.stop_index(), 0u);
  EXPECT_EQ(d.add_token(ids[0]), "");  // nothing after a stop

  opts.include_stop_str_in_output = true;
  EXPECT_EQ(run(tok, ids, opts).text, "Hello wor");
}

TEST(Detokenizer, EarliestStopWinsAndTiesGoToTheFirstListed) {
  const Tokenizer& tok = testing::qwen3();
  const Ids ids = ascii_ids(tok, "Hello world. The end.");
  DetokenizerOptions opts;
  opts.stop = {"end", "The"};
  Detokenizer d(tok, opts);
  std::string text;
  for (int id : ids) text += d.add_token(id);
  EXPECT_EQ(text, "Hello world. ");
  EXPECT_EQ(d.stop_index(), 1u);

  opts.stop = {"wor", "world"};
  Detokenizer tie(tok, opts);
  for (int id : ids) tie.add_token(id);
  EXPECT_EQ(tie.output_text(), "Hello ");
  EXPECT_EQ(tie.stop_index(), 0u);
}

TEST(Detokenizer, HoldsBackOnlyWhatCouldStartAStopString) {
  const Tokenizer& tok = testing::qwen3();
  DetokenizerOptions opts;
  opts.stop = {"xyz"};
  // a, b, x (held: could start "xyz"), q (x is released with q), x, y (held), z (stop).
  const StreamRun r = run(tok, ascii_ids(tok, "abxqxyz"), opts);
  EXPECT_EQ(r.pieces, (std::vector<std::string>{"a", "b", "", "xq", "", "", "", ""}));
  EXPECT_EQ(r.text, "abxq");
  // Without a match the held text comes out at the end.
  const StreamRun r2 = run(tok, ascii_ids(tok, "abxy"), opts);
  EXPECT_EQ(r2.pieces.back(), "xy");
  EXPECT_EQ(r2.text, "abxy");
  // include_stop_str_in_output needs no hold-back.
  opts.include_stop_str_in_output = true;
  const StreamRun r3 = run(tok, ascii_ids(tok, "abxyzq"), opts);
  EXPECT_EQ(r3.pieces, (std::vector<std::string>{"a", "b", "x", "y", "z", "", ""}));
}

TEST(Detokenizer, MinTokensDelaysStopStrings) {
  const Tokenizer& tok = testing::qwen3();
  const Ids ids = ascii_ids(tok, "xyzabxyz");  // one token per character
  DetokenizerOptions opts;
  opts.stop = {"xyz"};
  EXPECT_EQ(run(tok, ids, opts).text, "");  // min_tokens 0: the first "xyz"
  opts.min_tokens = 3;                      // the first "xyz" lies within them
  Detokenizer d(tok, opts);
  std::string text;
  for (int id : ids) text += d.add_token(id);
  EXPECT_EQ(text, "xyzab");
  EXPECT_EQ(d.stop_index(), 0u);
  // A match may start within the first min_tokens ids if it ends after them (vLLM's).
  opts.min_tokens = 2;
  EXPECT_EQ(run(tok, ids, opts).text, "");
  opts.min_tokens = 8;  // every id: no stop at all, the held text comes out at the end
  const StreamRun all = run(tok, ids, opts);
  EXPECT_EQ(all.text, "xyzabxyz");
}

TEST(Detokenizer, SkipSpecialTokensAndStopOnTheirText) {
  const Tokenizer& tok = testing::qwen3();
  const Ids ids = tok.encode("Hi<|im_end|>there", false);
  EXPECT_EQ(run(tok, ids, {}).text, "Hithere");
  DetokenizerOptions keep;
  keep.skip_special_tokens = false;
  EXPECT_EQ(run(tok, ids, keep).text, "Hi<|im_end|>there");
  keep.stop = {"<|im_end|>"};
  EXPECT_EQ(run(tok, ids, keep).text, "Hi");
}

TEST(Detokenizer, UpdateWithTheGrowingListEqualsAddToken) {
  const Tokenizer& tok = testing::llama3();
  const Ids ids = tok.encode("Streaming \u4F60\u597D \U0001F600 text", false);
  Detokenizer d(tok);
  std::string text;
  for (size_t n = 0; n <= ids.size(); ++n) text += d.update(Ids(ids.begin(), ids.begin() + n));
  text += d.finish();
  EXPECT_EQ(text, tok.decode(ids, true));
  EXPECT_EQ(d.num_tokens(), ids.size());
}

TEST(Detokenizer, PromptContextCompletesACharacterStartedInThePrompt) {
  const Tokenizer& tok = testing::qwen3();
  auto byte = [&](const char* spelled) { return *tok.token_to_id(spelled); };
  const int f0 = byte("\u00F0"), x9f = byte("\u0141"), x98 = byte("\u013A"), x80 = byte("\u0122"),
            a = byte("A");
  const Ids prompt = {a, f0, x9f};                           // ends inside U+1F600 (F0 9F 98 80)
  EXPECT_EQ(run(tok, {x98, x80}, {}).text, "\uFFFD\uFFFD");  // no context: as decode shows it
  Detokenizer with(tok, {}, prompt);
  EXPECT_EQ(with.add_token(x98), "");
  EXPECT_EQ(with.add_token(x80), "\U0001F600");
  // The generated bytes do not complete it: the prompt's bytes are dropped, the rest is
  // exactly decode(generated).
  Detokenizer broken(tok, {}, prompt);
  std::string text = broken.add_token(a);
  text += broken.finish();
  EXPECT_EQ(text, "A");
  Detokenizer late(tok, {}, Ids{f0});
  text = late.add_tokens(Ids{x9f, a});
  text += late.finish();
  EXPECT_EQ(text, tok.decode(Ids{x9f, a}));
  // A prompt that ends on a character boundary changes nothing.
  Detokenizer clean(tok, {}, tok.encode("Hello", false));
  EXPECT_EQ(clean.add_tokens(tok.encode(" world", false)), " world");
}

TEST(Detokenizer, RejectsBadStopStrings) {
  DetokenizerOptions opts;
  opts.stop = {""};
  EXPECT_THROW(Detokenizer(testing::qwen3(), opts), Error);
  opts.stop = {"ok", "\xC3"};
  EXPECT_THROW(Detokenizer(testing::qwen3(), opts), Error);
}

}  // namespace
}  // namespace kestrel
