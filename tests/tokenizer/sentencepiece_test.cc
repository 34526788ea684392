// SentencePiece-converted tokenizers (Mistral 7B's and Gemma 3's tokenizer.json): the
// streaming detokenizer against decode (itself checked against Tokenizers.js in
// golden_test.cc) and against the golden text directly; HF's Rust semantics where the JS
// references differ (byte-fallback runs that are not UTF-8, ids past the vocabulary), worked
// out by hand from byte_fallback.rs / tokenizer/mod.rs; Metaspace and the normalizers on
// small hand-made files.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "test_util.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace kestrel {
namespace {

using Ids = std::vector<int>;
using json = nlohmann::json;
using testing::escaped;

const std::string kFffd(utf8::kReplacement);

// Streams `ids`; after every prefix checks that what was shown is a prefix of the decode of
// every longer prefix (it is final) and that finishing there gives decode(prefix) exactly.
void check_every_prefix(const Tokenizer& tok, const Ids& ids, bool skip) {
  DetokenizerOptions opts;
  opts.skip_special_tokens = skip;
  const std::string whole = tok.decode(ids, skip);
  for (size_t k = 0; k <= ids.size(); ++k) {
    Detokenizer detok(tok, opts);
    std::string shown;
    for (size_t i = 0; i < k; ++i) {
      const std::string piece = detok.add_token(ids[i]);
      ASSERT_EQ(utf8::find_invalid(piece), std::string::npos);
      shown += piece;
    }
    ASSERT_TRUE(whole.starts_with(shown)) << "after " << k << ": " << escaped(shown);
    shown += detok.finish();
    ASSERT_EQ(shown, tok.decode(Ids(ids.begin(), ids.begin() + k), skip)) << "prefix " << k;
  }
}

std::string stream_all(const Tokenizer& tok, const Ids& ids, bool skip, const Ids& prompt = {}) {
  DetokenizerOptions opts;
  opts.skip_special_tokens = skip;
  Detokenizer detok(tok, opts, prompt);
  std::string out = detok.add_tokens(ids);
  return out + detok.finish();
}

TEST(SentencePiece, StreamEqualsGoldenTextOnTheCorpus) {
  for (const auto& [tok, name] :
       {std::pair{&testing::mistral(), "mistral"}, std::pair{&testing::gemma3(), "gemma3"}}) {
    int checked = 0;
    for (const auto& row : testing::read_jsonl(
             testing::source_path("tests/data/tokenizer/golden_" + std::string(name) + ".jsonl"))) {
      if (!row.contains("ids_special")) continue;
      const Ids ids = row.at("ids_special").get<Ids>();
      const std::string text = row.contains("text") ? row.at("text").get<std::string>()
                                                    : testing::corpus().at(row.at("id"));
      const std::string want = row.value("decoded", text);
      const std::string want_skip = row.value("decoded_skip", want);
      ASSERT_EQ(stream_all(*tok, ids, false), want) << name << " " << escaped(text);
      ASSERT_EQ(stream_all(*tok, ids, true), want_skip) << name << " " << escaped(text);
      ++checked;
    }
    EXPECT_GT(checked, 2700) << name;
  }
}

TEST(SentencePiece, EveryPrefixOfRandomIdsStreamsToItsDecode) {
  std::mt19937 rng(11);
  for (const Tokenizer* tok : {&testing::mistral(), &testing::gemma3()}) {
    const int byte0 = *tok->token_to_id("<0x00>");
    const int space = *tok->token_to_id("\u2581");
    for (int c = 0; c < 150; ++c) {
      Ids ids;
      const int n = 1 + static_cast<int>(rng() % 10);
      for (int k = 0; k < n; ++k) {
        const unsigned r = rng() % 10;
        if (r < 4) {
          ids.push_back(byte0 + static_cast<int>(rng() % 256));  // valid or not
        } else if (r < 5) {
          ids.push_back(space);
        } else if (r < 6) {
          ids.push_back(static_cast<int>(rng() % 4));  // specials
        } else {
          ids.push_back(static_cast<int>(rng() % static_cast<unsigned>(tok->vocab_size())));
        }
      }
      SCOPED_TRACE(testing::escaped(json(ids).dump()));
      check_every_prefix(*tok, ids, false);
      check_every_prefix(*tok, ids, true);
    }
  }
}

TEST(SentencePiece, HandCheckedIds) {
  const Tokenizer& m = testing::mistral();
  // Mistral 7B v0.1 (the files of the npm package named llama2): "▁Hello" 22557, "▁world"
  // 1526, "▁" 28705, <s> 1; byte tokens are <0x00> = 3 ... <0xFF> = 258.
  EXPECT_EQ(m.encode("Hello world", true), Ids({1, 22557, 1526}));
  EXPECT_EQ(m.encode(" Hello", false), Ids({28705, 22557}));    // Prepend, then " " -> "▁"
  EXPECT_EQ(m.encode("<s>Hello", false), Ids({1, 22557}));      // Prepend runs per segment
  EXPECT_EQ(m.encode("\n", false), Ids({28705, 13}));           // <0x0A> by byte fallback
  EXPECT_EQ(m.decode(Ids{1, 22557, 1526}), "<s> Hello world");  // Strip only the first char
  EXPECT_EQ(m.decode(Ids{1, 22557, 1526}, true), "Hello world");
  EXPECT_EQ(m.decode(Ids{28705, 22557}), " Hello");
  const Tokenizer& g = testing::gemma3();
  EXPECT_EQ(g.encode("Hello world", true), Ids({2, 9259, 1902}));  // no Prepend in Gemma
  EXPECT_EQ(g.decode(Ids{2, 9259, 1902}, true), "Hello world");
}

TEST(SentencePiece, ByteFallbackRunsAsHuggingFaceRust) {
  const Tokenizer& m = testing::mistral();
  auto b = [](int byte) { return 3 + byte; };
  // A run that is UTF-8 is one piece; one that is not shows U+FFFD for every byte of the
  // run, valid characters inside it included (String::from_utf8 fails for the whole run).
  EXPECT_EQ(m.decode(Ids{b(0xE4), b(0xBD), b(0xA0)}), "\u4f60");
  EXPECT_EQ(m.decode(Ids{b(0xE4), b(0xBD), 264}), kFffd + kFffd + " a");
  EXPECT_EQ(m.decode(Ids{b(0xE4), b(0xBD), b(0xA0), b(0xFF)}), kFffd + kFffd + kFffd + kFffd);
  EXPECT_EQ(m.decode(Ids{b(0xE4), 1, b(0xBD)}, true), kFffd + kFffd);  // skipped <s> joins runs
  EXPECT_EQ(m.decode(Ids{b(0xE4), 1, b(0xBD)}, false), kFffd + "<s>" + kFffd);
  // Ids past the vocabulary are skipped (HF), not decoded as <unk>.
  EXPECT_EQ(m.decode(Ids{32005, 22557, 99999}), "Hello");
  // The stream holds a run back until it ends: a later byte could still spoil it.
  Detokenizer detok(m, {});
  EXPECT_EQ(detok.add_token(b(0xE4)), "");
  EXPECT_EQ(detok.add_token(b(0xBD)), "");
  EXPECT_EQ(detok.add_token(b(0xA0)), "");
  EXPECT_EQ(detok.add_token(264), "\u4f60 a");
}

TEST(SentencePiece, PromptContextKeepsTheLeadingSpace) {
  const Tokenizer& m = testing::mistral();
  const Ids prompt = m.encode("Hello", true);
  const Ids gen = {1526};                                 // "▁world"
  EXPECT_EQ(stream_all(m, gen, true), "world");           // decode(generated)
  EXPECT_EQ(stream_all(m, gen, true, prompt), " world");  // after "Hello", as vLLM shows it
  EXPECT_EQ(stream_all(m, gen, true, Ids{1}), "world");   // only a skipped special before
  // A character the prompt's byte tokens leave unfinished is completed by the generation.
  auto b = [](int byte) { return 3 + byte; };
  const Ids open = {1, 22557, b(0xE4), b(0xBD)};
  EXPECT_EQ(stream_all(m, Ids{b(0xA0), 264}, true, open), "\u4f60 a");
  EXPECT_EQ(stream_all(m, Ids{264}, true, open), " a");  // not completed: dropped
  // ... and a character the prompt finished is not shown again.
  EXPECT_EQ(stream_all(m, Ids{264}, true, Ids{b(0xE4), b(0xBD), b(0xA0)}), " a");
}

json sp_doc(json pre_tokenizer, json decoder) {
  json vocab = {{"<unk>", 0}, {"<s>", 1}};
  int id = 2;
  for (const char* t : {"\u2581", "a", "b", "H", "e", "y", "\u2581a", "\u2581b", "\u2581H"}) {
    vocab[t] = id++;
  }
  return {{"added_tokens",
           {{{"id", 1},
             {"content", "<s>"},
             {"special", true},
             {"lstrip", false},
             {"rstrip", false},
             {"single_word", false},
             {"normalized", false}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer", pre_tokenizer},
          {"decoder", decoder},
          {"model",
           {{"type", "BPE"},
            {"vocab", vocab},
            {"merges", json::array({"\u2581 a", "\u2581 b", "\u2581 H"})},
            {"unk_token", "<unk>"}}}};
}

TEST(SentencePiece, MetaspacePreTokenizerAndDecoder) {
  auto words = [](const json& j, std::string_view text, bool at_start) {
    std::vector<std::string> out;
    PreTokenizer::from_json(j).run(text, at_start,
                                   [&](std::string_view w) { out.emplace_back(w); });
    return out;
  };
  using W = std::vector<std::string>;
  json ms = {{"type", "Metaspace"},
             {"replacement", "\u2581"},
             {"prepend_scheme", "always"},
             {"split", true}};
  // HF metaspace.rs tests: "Hey friend!" and "Hey   friend!".
  EXPECT_EQ(words(ms, "Hey friend!", true), W({"\u2581Hey", "\u2581friend!"}));
  EXPECT_EQ(words(ms, "Hey   friend!", true),
            W({"\u2581Hey", "\u2581", "\u2581", "\u2581friend!"}));
  EXPECT_EQ(words(ms, " Hey", false), W({"\u2581Hey"}));  // already starts with it
  ms["prepend_scheme"] = "first";
  EXPECT_EQ(words(ms, "Hey", true), W({"\u2581Hey"}));
  EXPECT_EQ(words(ms, "Hey", false), W({"Hey"}));  // not at offset 0 of the input
  ms["split"] = false;
  EXPECT_EQ(words(ms, "a b", true), W({"\u2581a\u2581b"}));
  ms["prepend_scheme"] = "never";
  EXPECT_EQ(words(ms, "a b", true), W({"a\u2581b"}));
  json legacy = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"add_prefix_space", true}};
  EXPECT_EQ(words(legacy, "a b", false), W({"\u2581a", "\u2581b"}));  // always, split

  json pre = {{"type", "Metaspace"},
              {"replacement", "\u2581"},
              {"prepend_scheme", "first"},
              {"split", true}};
  json dec = {{"type", "Metaspace"},
              {"replacement", "\u2581"},
              {"prepend_scheme", "first"},
              {"split", true}};
  const Tokenizer tok = Tokenizer::from_json_string(sp_doc(pre, dec).dump());
  EXPECT_EQ(tok.encode("a b", false), Ids({8, 9}));
  EXPECT_EQ(tok.encode("<s>a b", false), Ids({1, 3, 9}));  // after an added token: no "▁"
  EXPECT_EQ(tok.decode(Ids{8, 9}), "a b");
  // Only the first token loses its replacement characters (decode_chain, i == 0).
  EXPECT_EQ(tok.decode(Ids{2, 2, 8}), "  a");
  EXPECT_EQ(tok.decode(Ids{1, 8}), "<s> a");
  check_every_prefix(tok, Ids{2, 8, 2, 9, 1, 8}, false);
  check_every_prefix(tok, Ids{2, 8, 2, 9, 1, 8}, true);
  dec["prepend_scheme"] = "never";
  EXPECT_EQ(Tokenizer::from_json_string(sp_doc(pre, dec).dump()).decode(Ids{8, 9}), " a b");
}

TEST(SentencePiece, NormalizersAndTextDecoders) {
  json doc = sp_doc(nullptr,
                    {{"type", "Sequence"},
                     {"decoders",
                      {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                       {{"type", "Fuse"}},
                       {{"type", "Strip"}, {"content", " "}, {"start", 2}, {"stop", 1}},
                       {{"type", "Replace"}, {"pattern", {{"String", "ab"}}}, {"content", "X"}}}}});
  doc["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}},
        {{"type", "Lowercase"}},
        {{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", " "}},
        {{"type", "Prepend"}, {"prepend", "\u2581"}},
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}};
  const Tokenizer tok = Tokenizer::from_json_string(doc.dump());
  // "\u3000 A \t B\n" -> strip -> "A \t B" -> "a \t b" -> "a b" -> "▁a b" -> "▁a▁b"
  EXPECT_EQ(tok.encode("\u3000 A \t B\n", false), Ids({8, 9}));
  EXPECT_EQ(tok.encode("", false), Ids({}));  // Prepend leaves empty text empty
  // Tokens " ", " ", "a", "b", " ": strip 2 leading spaces and 1 trailing, then "ab" -> "X".
  EXPECT_EQ(tok.decode(Ids{2, 2, 3, 4, 2}), "X");
  EXPECT_EQ(tok.decode(Ids{2, 2, 2, 3, 2, 2}), " a ");
  check_every_prefix(tok, Ids{2, 2, 3, 4, 2, 3, 2, 2, 4}, false);
  check_every_prefix(tok, Ids{3, 1, 4, 2, 2}, true);
}

}  // namespace
}  // namespace kestrel
