// The real Qwen3 and Llama 3.1 tokenizers beyond the golden ids: round trips on random
// text (NFC from utf8proc as the oracle for Qwen's normalizer), invalid UTF-8 input,
// tokenizer_config.json fields, chat templates, and concurrent encoding.
#include <gtest/gtest.h>
#include <unistd.h>
#include <utf8proc.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/utf8.h"

namespace kestrel {
namespace {

using testing::escaped;

// Random valid UTF-8 drawn from ranges that stress the pipeline: ASCII, Latin with
// combining marks, Hangul jamo and syllables, CJK, emoji with ZWJ and variation selectors,
// astral letters, controls and unusual spaces.
std::string random_text(std::mt19937& rng) {
  static const std::vector<std::pair<char32_t, char32_t>> ranges = {
      {0x20, 0x7E},       {0x20, 0x7E},       {0x09, 0x0D},       {0x00, 0x1F},
      {0xA0, 0x24F},      {0x300, 0x36F},     {0x370, 0x3FF},     {0x400, 0x4FF},
      {0x590, 0x6FF},     {0x900, 0x97F},     {0x0BBE, 0x0BD7},   {0x1100, 0x11FF},
      {0xAC00, 0xD7A3},   {0x2000, 0x206F},   {0x3000, 0x30FF},   {0x4E00, 0x9FFF},
      {0xF900, 0xFAFF},   {0xFE00, 0xFE0F},   {0xFF00, 0xFFEF},   {0x1F300, 0x1FAFF},
      {0x1D400, 0x1D7FF}, {0x10000, 0x1007F}, {0xE0000, 0xE007F}, {0x20000, 0x2A6DF}};
  std::uniform_int_distribution<size_t> pick(0, ranges.size() - 1);
  std::uniform_int_distribution<int> len(0, 40);
  std::string s;
  for (int n = len(rng); n > 0; --n) {
    const auto [lo, hi] = ranges[pick(rng)];
    const char32_t cp = std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    utf8::append(s, cp);
    if (cp == 0x1F468 && n % 2) s += "\u200D";  // sometimes start a ZWJ sequence
  }
  return s;
}

std::string nfc(const std::string& s) {
  utf8proc_uint8_t* out = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                              static_cast<utf8proc_ssize_t>(s.size()), &out,
                              utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  EXPECT_GE(n, 0);
  std::string r(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return r;
}

TEST(Tokenizer, Llama3RoundTripsAnyValidText) {
  const Tokenizer& tok = testing::llama3();
  for (const std::string& s : testing::corpus()) {
    ASSERT_EQ(tok.decode(tok.encode(s, false)), s) << escaped(s);
  }
  std::mt19937 rng(1234);
  for (int i = 0; i < 3000; ++i) {
    const std::string s = random_text(rng);
    ASSERT_EQ(tok.decode(tok.encode(s, false)), s) << escaped(s);
  }
}

TEST(Tokenizer, Qwen3RoundTripsToNfc) {
  const Tokenizer& tok = testing::qwen3();
  std::mt19937 rng(99);
  int changed_by_nfc = 0;
  for (int i = 0; i < 3000; ++i) {
    const std::string s = random_text(rng);
    const std::string want = nfc(s);
    changed_by_nfc += want != s;
    ASSERT_EQ(tok.decode(tok.encode(s, false)), want) << escaped(s);
  }
  EXPECT_GT(changed_by_nfc, 100);  // the random text really exercises normalization
}

TEST(Tokenizer, Qwen3ComposesPairsWhoseSecondHalfIsASpacingMark) {
  // NFC pairs where the second character has combining class 0 (easy to miss in a quick
  // check): Tamil, Bengali, Oriya and Myanmar vowel signs, Hangul jamo. Compositions from
  // the Unicode Character Database.
  const Tokenizer& tok = testing::qwen3();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"\u0BC6\u0BBE", "\u0BCA"},    {"\u09C7\u09BE", "\u09CB"}, {"\u0B47\u0B3E", "\u0B4B"},
      {"\u1025\u102E", "\u1026"},    {"\u1100\u1161", "\uAC00"}, {"\uAC00\u11A8", "\uAC01"},
      {"x\u0BC6\u0BD7y", "x\u0BCCy"}};
  for (const auto& [in, want] : cases) {
    EXPECT_EQ(tok.decode(tok.encode(in, false)), want) << escaped(in);
  }
}

TEST(Tokenizer, SpecialTokensInTextAreAlwaysRecognised) {
  const Tokenizer& qwen = testing::qwen3();
  const std::vector<int> ids = qwen.encode("<|im_start|>user\nhi<|im_end|>", false);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 151644);
  EXPECT_EQ(ids.back(), 151645);
  EXPECT_EQ(qwen.encode("<|im_start|>", true), std::vector<int>{151644});  // no BOS for Qwen
  EXPECT_TRUE(qwen.is_special(151645));
  EXPECT_FALSE(qwen.is_special(151667));  // <think> is added but not special
  EXPECT_EQ(qwen.vocab_size(), 151669);

  const Tokenizer& llama = testing::llama3();
  EXPECT_EQ(llama.encode("hi", true).front(), 128000);
  EXPECT_NE(llama.encode("hi", false).front(), 128000);
  EXPECT_EQ(llama.encode("<|eot_id|>", false), std::vector<int>{128009});
  EXPECT_EQ(llama.vocab_size(), 128256);
}

TEST(Tokenizer, InvalidUtf8InputIsAnError) {
  const Tokenizer& tok = testing::qwen3();
  for (const std::string& bad :
       std::vector<std::string>{"\xFF", "abc\xC3", "x\xED\xA0\x80y", "\xC0\xAF", "\xF4\x90\x80\x80",
                                "ok \xE2\x28\xA1", "\x80"}) {
    try {
      tok.encode(bad);
      ADD_FAILURE() << "no error for " << escaped(bad);
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("not valid UTF-8"), std::string::npos) << msg;
      EXPECT_NE(msg.find("offset " + std::to_string(utf8::find_invalid(bad))), std::string::npos)
          << msg;
    }
  }
  // Decoding never fails: bytes that are not UTF-8 become U+FFFD.
  const int byte_e2 = *tok.token_to_id("\u00E2");  // the byte 0xE2 in GPT-2's alphabet
  EXPECT_EQ(tok.decode(std::vector<int>{byte_e2}), "\uFFFD");
}

TEST(Tokenizer, FromDirReadsTheConfig) {
  const Tokenizer& qwen = testing::qwen3();
  EXPECT_EQ(qwen.eos_token(), "<|im_end|>");
  EXPECT_EQ(qwen.eos_token_id(), 151645);
  EXPECT_EQ(qwen.pad_token_id(), 151643);
  EXPECT_FALSE(qwen.bos_token_id().has_value());
  EXPECT_EQ(qwen.chat_template().rfind("{%- if tools %}", 0), 0u);
  EXPECT_EQ(qwen.chat_templates().size(), 1u);

  const Tokenizer& llama = testing::llama3();
  EXPECT_EQ(llama.bos_token_id(), 128000);
  EXPECT_EQ(llama.eos_token_id(), 128009);
  EXPECT_FALSE(llama.pad_token_id().has_value());
  EXPECT_NE(llama.chat_template().find("<|start_header_id|>"), std::string::npos);
}

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("kestrel_tok_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  static int& counter() {
    static int n = 0;
    return n;
  }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
  }
};

TEST(Tokenizer, NamedChatTemplatesAndJinjaFile) {
  // Smallest loadable tokenizer.json: a character-level BPE over "a" and two added tokens.
  const std::string tokenizer_json = R"({"model": {"type": "BPE", "vocab": {"a": 0},
      "merges": []}, "decoder": {"type": "ByteLevel"},
      "added_tokens": [{"id": 1, "content": "<s>", "special": true},
                       {"id": 2, "content": "</s>", "special": true}]})";
  TempDir with_list;
  with_list.write("tokenizer.json", tokenizer_json);
  with_list.write("tokenizer_config.json", R"({"bos_token": {"content": "<s>", "lstrip": false},
      "eos_token": "</s>", "pad_token": null,
      "chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]})");
  const Tokenizer a = Tokenizer::from_dir(with_list.path.string());
  EXPECT_EQ(a.chat_template(), "D");
  EXPECT_EQ(a.chat_templates().at("tool_use"), "T");
  EXPECT_EQ(a.bos_token(), "<s>");
  EXPECT_EQ(a.bos_token_id(), 1);
  EXPECT_EQ(a.eos_token_id(), 2);
  EXPECT_FALSE(a.pad_token_id().has_value());

  TempDir with_jinja;
  with_jinja.write("tokenizer.json", tokenizer_json);
  with_jinja.write("chat_template.jinja", "{{ messages }}");
  EXPECT_EQ(Tokenizer::from_dir(with_jinja.path.string()).chat_template(), "{{ messages }}");

  TempDir broken;
  broken.write("tokenizer.json", tokenizer_json);
  broken.write("tokenizer_config.json", "{\"chat_template\": 7}");
  EXPECT_THROW(Tokenizer::from_dir(broken.path.string()), Error);
  EXPECT_THROW(Tokenizer::from_dir((broken.path / "missing").string()), Error);
}

TEST(Tokenizer, ConcurrentEncodeMatchesGolden) {
  const Tokenizer& tok = testing::qwen3();
  std::vector<std::vector<int>> want;
  for (const auto& row :
       testing::read_jsonl(testing::source_path("tests/data/tokenizer/golden_qwen3.jsonl"))) {
    if (row.contains("ids")) want.push_back(row.at("ids").get<std::vector<int>>());
  }
  const auto& corpus = testing::corpus();
  ASSERT_EQ(want.size(), corpus.size());
  constexpr int kThreads = 4;
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Each thread walks the corpus from a different start so the memo is hit and filled
      // concurrently.
      for (size_t k = 0; k < corpus.size(); ++k) {
        const size_t i = (k + t * corpus.size() / kThreads) % corpus.size();
        if (tok.encode(corpus[i], false) != want[i]) ++failures[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace kestrel
