// Tokenizer behaviour on small tokenizer.json documents written here, with expected ids
// worked out by hand from HF's documented semantics: added-token flags, BPE merge order,
// ignore_merges, byte_fallback / unk, Split behaviors, ByteLevel options, post-processors,
// and the errors for files kestrel cannot load.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

using nlohmann::json;
using Ids = std::vector<int>;

// GPT-2's byte alphabet, written out independently of src/tokenizer/byte_level.cc.
std::string byte_char(int b) {
  int cp = b;
  if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) {
    int n = 0;
    for (int x = 0; x < b; ++x) n += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

// Byte-level BPE whose ids 0..255 are the bytes themselves; extra tokens get 256, 257, ...
json byte_level_doc(const std::vector<std::string>& extra_tokens = {},
                    const std::vector<std::string>& merges = {}) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  for (size_t i = 0; i < extra_tokens.size(); ++i) vocab[extra_tokens[i]] = 256 + int(i);
  return {{"version", "1.0"},
          {"added_tokens", json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "ByteLevel"},
            {"add_prefix_space", false},
            {"trim_offsets", false},
            {"use_regex", false}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

json added(int id, const std::string& content, bool special, bool lstrip = false,
           bool rstrip = false, bool single_word = false, bool normalized = false) {
  return {{"id", id},
          {"content", content},
          {"special", special},
          {"lstrip", lstrip},
          {"rstrip", rstrip},
          {"single_word", single_word},
          {"normalized", normalized}};
}

Ids bytes(std::string_view s) {
  return Ids(reinterpret_cast<const unsigned char*>(s.data()),
             reinterpret_cast<const unsigned char*>(s.data()) + s.size());
}

Ids cat(std::initializer_list<Ids> parts) {
  Ids out;
  for (const Ids& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

Tokenizer load(const json& doc) { return Tokenizer::from_json_string(doc.dump()); }

TEST(SyntheticTokenizer, AddedTokenStripAndSingleWord) {
  json doc = byte_level_doc();
  doc["added_tokens"] = {added(300, "<m>", true, /*lstrip=*/true, /*rstrip=*/true),
                         added(301, "<w>", false, false, false, /*single_word=*/true),
                         added(302, "<p>", false)};
  const Tokenizer tok = load(doc);
  // lstrip/rstrip swallow the white space (any Unicode White_Space) around the token.
  EXPECT_EQ(tok.encode("x  <m>\t y", false), cat({bytes("x"), {300}, bytes("y")}));
  EXPECT_EQ(tok.encode("x\u3000<m>", false), cat({bytes("x"), {300}}));
  // A plain token leaves the spaces as text.
  EXPECT_EQ(tok.encode("x <p> y", false), cat({bytes("x "), {302}, bytes(" y")}));
  // single_word: only when no word character touches it.
  EXPECT_EQ(tok.encode("a <w> b", false), cat({bytes("a "), {301}, bytes(" b")}));
  EXPECT_EQ(tok.encode("a<w> b", false), bytes("a<w> b"));
  EXPECT_EQ(tok.encode("a <w>é", false), bytes("a <w>é"));
  EXPECT_EQ(tok.encode("(<w>)", false), cat({bytes("("), {301}, bytes(")")}));
  // Leftmost-longest among overlapping tokens.
  doc["added_tokens"].push_back(added(303, "<p><p>", false));
  EXPECT_EQ(load(doc).encode("<p><p><p>", false), Ids({303, 302}));
}

TEST(SyntheticTokenizer, NormalizedAddedTokensMatchAfterTheNormalizer) {
  json doc = byte_level_doc();
  doc["normalizer"] = {{"type", "NFKC"}};
  doc["added_tokens"] = {added(300, "ab", false, false, false, false, /*normalized=*/true),
                         added(301, "\uFF41\uFF43", false, false, false, false, false)};
  const Tokenizer tok = load(doc);
  EXPECT_EQ(tok.encode("\uFF41\uFF42", false), Ids({300}));  // fullwidth "ab" -> NFKC "ab"
  EXPECT_EQ(tok.encode("ab", false), Ids({300}));
  EXPECT_EQ(tok.encode("\uFF41\uFF43", false), Ids({301}));  // raw match before NFKC
  EXPECT_EQ(tok.encode("ac", false), bytes("ac"));
  EXPECT_EQ(tok.encode("x\uFF41\uFF44", false), bytes("xad"));  // normalized plain text
}

TEST(SyntheticTokenizer, SpecialFlagDrivesSkipAndIsSpecial) {
  json doc = byte_level_doc();
  doc["added_tokens"] = {added(300, "<s>", true), added(301, "<t>", false)};
  const Tokenizer tok = load(doc);
  EXPECT_TRUE(tok.is_special(300));
  EXPECT_FALSE(tok.is_special(301));
  EXPECT_FALSE(tok.is_special(65));
  const Ids ids = tok.encode("<s>hi<t>", false);
  EXPECT_EQ(ids, cat({{300}, bytes("hi"), {301}}));
  EXPECT_EQ(tok.decode(ids, false), "<s>hi<t>");
  EXPECT_EQ(tok.decode(ids, true), "hi<t>");
  EXPECT_EQ(tok.vocab_size(), 302);
  EXPECT_EQ(tok.token_to_id("<t>"), 301);
  EXPECT_EQ(tok.id_to_token(300), "<s>");
  EXPECT_EQ(tok.id_to_token(32), "\u0120");            // ' ' is spelled Ġ
  EXPECT_THROW(tok.id_to_token(299), Error);           // a hole in the id space
  EXPECT_EQ(tok.decode(Ids{299, 72, -5, 1000}), "H");  // unknown ids are skipped, as in HF
}

TEST(SyntheticTokenizer, MergesApplyLowestRankFirstThenLeftmost) {
  // Ranks: "b c" < "a b" < "ab c".
  EXPECT_EQ(load(byte_level_doc({"bc", "ab", "abc"}, {"b c", "a b", "ab c"})).encode("abc", false),
            Ids({'a', 256}));
  // Ranks: "a b" < "b c" < "ab c"; pair form of merges.
  json doc = byte_level_doc({"ab", "bc", "abc"});
  doc["model"]["merges"] =
      json::array({json::array({"a", "b"}), json::array({"b", "c"}), json::array({"ab", "c"})});
  EXPECT_EQ(load(doc).encode("abc", false), Ids({258}));
  // Equal ranks: leftmost first. "aaa" -> "aa" + "a".
  const Tokenizer aa = load(byte_level_doc({"aa", "aaaa"}, {"a a", "aa aa"}));
  EXPECT_EQ(aa.encode("aaa", false), Ids({256, 'a'}));
  // 40 symbols take the linear path, 70 and 101 the heap path; both must agree with the
  // hand count: pairs of "a" first (leftmost), then pairs of "aa".
  EXPECT_EQ(aa.encode(std::string(40, 'a'), false), Ids(10, 257));
  EXPECT_EQ(aa.encode(std::string(70, 'a'), false), cat({Ids(17, 257), {256}}));
  EXPECT_EQ(aa.encode(std::string(101, 'a'), false), cat({Ids(25, 257), {'a'}}));
  EXPECT_EQ(aa.encode(std::string(1000, 'a'), false), Ids(250, 257));
}

TEST(SyntheticTokenizer, IgnoreMergesTakesWholeWordsFromTheVocab) {
  json doc = byte_level_doc({"ab", "abc"}, {"a b"});
  EXPECT_EQ(load(doc).encode("abc", false), Ids({256, 'c'}));
  doc["model"]["ignore_merges"] = true;
  EXPECT_EQ(load(doc).encode("abc", false), Ids({257}));
  EXPECT_EQ(load(doc).encode("abcab", false), Ids({256, 'c', 256}));  // not a vocab word
}

TEST(SyntheticTokenizer, ByteFallbackAndUnknownCharacters) {
  // A character-level BPE (no ByteLevel pre-tokenizer).
  json vocab = {{"a", 0}, {"<unk>", 1}, {"<0xC3>", 2}, {"<0xA9>", 3}};
  json doc = {{"model",
               {{"type", "BPE"},
                {"vocab", vocab},
                {"merges", json::array()},
                {"byte_fallback", true},
                {"unk_token", "<unk>"}}},
              {"decoder", {{"type", "ByteLevel"}}}};
  EXPECT_EQ(load(doc).encode("a\u00e9", false), Ids({0, 2, 3}));   // é = C3 A9
  EXPECT_EQ(load(doc).encode("a\u00e8a", false), Ids({0, 1, 0}));  // no <0xA8>: unk
  doc["model"]["byte_fallback"] = false;
  EXPECT_EQ(load(doc).encode("a\u00e9\u00e9", false), Ids({0, 1, 1}));
  doc["model"]["fuse_unk"] = true;
  EXPECT_EQ(load(doc).encode("a\u00e9\u00e9a", false), Ids({0, 1, 0}));
  doc["model"]["unk_token"] = nullptr;
  EXPECT_EQ(load(doc).encode("a\u00e9a", false), Ids({0, 0}));  // dropped, as HF does
}

std::vector<std::string> pre_tokenize(const json& j, std::string_view text) {
  std::vector<std::string> words;
  PreTokenizer::from_json(j).run(text, true, [&](std::string_view w) { words.emplace_back(w); });
  return words;
}

TEST(SyntheticTokenizer, SplitBehaviors) {
  using W = std::vector<std::string>;
  auto split = [](const char* behavior, bool invert) {
    return json{{"type", "Split"},
                {"pattern", {{"Regex", "\\w+|[^\\w\\s]+"}}},
                {"behavior", behavior},
                {"invert", invert}};
  };
  const std::string text = "How are you doing?";
  // invert: the spaces are the "matches".
  EXPECT_EQ(pre_tokenize(split("Removed", true), text), (W{"How", "are", "you", "doing", "?"}));
  EXPECT_EQ(pre_tokenize(split("Isolated", true), text),
            (W{"How", " ", "are", " ", "you", " ", "doing", "?"}));
  EXPECT_EQ(pre_tokenize(split("MergedWithPrevious", true), text),
            (W{"How ", "are ", "you ", "doing", "?"}));
  EXPECT_EQ(pre_tokenize(split("MergedWithNext", true), text),
            (W{"How", " are", " you", " doing", "?"}));
  EXPECT_EQ(pre_tokenize(split("Contiguous", true), text),
            (W{"How", " ", "are", " ", "you", " ", "doing?"}));
  EXPECT_EQ(pre_tokenize(split("Removed", false), text), (W{" ", " ", " "}));
  const json literal = {{"type", "Split"}, {"pattern", {{"String", "."}}}, {"behavior", "Removed"}};
  EXPECT_EQ(pre_tokenize(literal, "a.b..c"), (W{"a", "b", "c"}));
}

TEST(SyntheticTokenizer, ByteLevelPrefixSpaceAndRegex) {
  using W = std::vector<std::string>;
  const json gpt2 = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  EXPECT_EQ(pre_tokenize(gpt2, "Hello world!!"), (W{" Hello", " world", "!!"}));
  EXPECT_EQ(pre_tokenize(gpt2, " it's 42"), (W{" it", "'s", " 42"}));
  const json plain = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  EXPECT_EQ(pre_tokenize(plain, "Hello world"), (W{"Hello world"}));
}

TEST(SyntheticTokenizer, PostProcessorsWrapTheSequence) {
  json doc = byte_level_doc();
  doc["added_tokens"] = {added(300, "[CLS]", true), added(301, "[SEP]", true)};
  doc["post_processor"] = {{"type", "TemplateProcessing"},
                           {"single",
                            {{{"SpecialToken", {{"id", "[CLS]"}, {"type_id", 0}}}},
                             {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                             {{"SpecialToken", {{"id", "[SEP]"}, {"type_id", 0}}}}}},
                           {"pair", json::array()},
                           {"special_tokens",
                            {{"[CLS]", {{"id", "[CLS]"}, {"ids", {300}}}},
                             {"[SEP]", {{"id", "[SEP]"}, {"ids", {301}}}}}}};
  EXPECT_EQ(load(doc).encode("hi", true), Ids({300, 'h', 'i', 301}));
  EXPECT_EQ(load(doc).encode("hi", false), Ids({'h', 'i'}));
  doc["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       {{{"type", "ByteLevel"}},
        {{"type", "BertProcessing"}, {"sep", {"[SEP]", 301}}, {"cls", {"[CLS]", 300}}}}}};
  EXPECT_EQ(load(doc).encode("", true), Ids({300, 301}));
}

void expect_load_error(const std::string& text, const std::string& needle) {
  try {
    Tokenizer::from_json_string(text);
    ADD_FAILURE() << "loaded without error; wanted one mentioning " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(SyntheticTokenizer, UnsupportedOrBrokenFilesFailAtLoad) {
  expect_load_error("{not json", "not valid JSON");
  expect_load_error("[]", "top level");
  expect_load_error("{\"decoder\": {\"type\": \"ByteLevel\"}}", "no \"model\"");
  json doc = byte_level_doc();
  doc["model"]["type"] = "WordPiece";
  expect_load_error(doc.dump(), "WordPiece");
  doc = byte_level_doc();
  doc["normalizer"] = {{"type", "BertNormalizer"}};
  expect_load_error(doc.dump(), "BertNormalizer");
  doc = byte_level_doc();
  doc["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_load_error(doc.dump(), "Whitespace");
  doc = byte_level_doc();
  doc["decoder"] = {{"type", "WordPiece"}};
  expect_load_error(doc.dump(), "WordPiece");
  doc["decoder"] = nullptr;
  expect_load_error(doc.dump(), "no decoder");
  doc["decoder"] = {{"type", "Sequence"},
                    {"decoders", {{{"type", "Fuse"}}, {{"type", "ByteFallback"}}}}};
  expect_load_error(doc.dump(), "ByteFallback");
  doc = byte_level_doc();
  doc["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "ab"}};
  expect_load_error(doc.dump(), "one character");
  doc = byte_level_doc();
  doc["post_processor"] = {{"type", "Mystery"}};
  expect_load_error(doc.dump(), "Mystery");
  expect_load_error(byte_level_doc({}, {"a zz"}).dump(), "\"zz\"");
  expect_load_error(byte_level_doc({}, {"ab"}).dump(), "\"ab\"");
  doc = byte_level_doc();
  doc["model"]["vocab"]["x"] = "seven";
  expect_load_error(doc.dump(), "\"x\"");
  doc = byte_level_doc();
  doc["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "([a-z"}}}, {"behavior", "Isolated"}};
  expect_load_error(doc.dump(), "([a-z");
  try {
    Tokenizer::from_file("/nonexistent/tokenizer.json");
    ADD_FAILURE() << "no error for a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/tokenizer.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace kestrel
