// Golden equality for every corpus string: encode with and without special tokens, decode
// with and without skipping special tokens, decode of random id lists (broken UTF-8, added
// tokens, ids past the vocabulary) and id_to_token. Qwen3 and Llama 3.1: against Hugging Face
// `tokenizers` 0.23.2 (tools/tokenizer_golden.py, run where HF is installed). Mistral 7B and
// Gemma 3 (SentencePiece-converted): against Tokenizers.js, with transformers.js agreeing
// (tools/tokenizer_golden_sp.mjs); their files add "extra" rows that carry their own text.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "test_util.h"

namespace kestrel {
namespace {

using testing::escaped;

struct Golden {
  nlohmann::json meta;
  std::vector<nlohmann::json> strings, decodes, tokens;
};

Golden load_golden(const std::string& name) {
  Golden g;
  for (auto& row : testing::read_jsonl(
           testing::source_path("tests/data/tokenizer/golden_" + name + ".jsonl"))) {
    if (row.contains("meta")) {
      g.meta = row.at("meta");
    } else if (row.contains("decode_ids")) {
      g.decodes.push_back(std::move(row));
    } else if (row.contains("token_id")) {
      g.tokens.push_back(std::move(row));
    } else {
      g.strings.push_back(std::move(row));
    }
  }
  return g;
}

std::vector<int> ids_of(const nlohmann::json& j) { return j.get<std::vector<int>>(); }

std::string show(const std::vector<int>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(ids[i]);
  }
  s += ']';
  return s;
}

// Runs every check for one tokenizer; reports up to 10 failing strings per kind.
void check_golden(const Tokenizer& tok, const std::string& name) {
  const Golden g = load_golden(name);
  const auto& corpus = testing::corpus();
  ASSERT_GE(corpus.size(), 2000u);
  size_t extra = 0, left_out = 0;
  for (const auto& row : g.strings) extra += row.contains("text");
  for (const auto& row : g.meta.value("left_out", nlohmann::json::array())) {
    left_out += row.contains("id");
  }
  ASSERT_EQ(g.strings.size() - extra + left_out, corpus.size())
      << "golden file is stale: rerun the golden script";
  ASSERT_EQ(g.meta.at("vocab_size").get<int>(), tok.vocab_size());

  int bad_plain = 0, bad_special = 0, bad_decode = 0, bad_skip = 0;
  for (const auto& row : g.strings) {
    const bool is_extra = row.contains("text");
    const size_t i = is_extra ? 0 : row.at("id").get<size_t>();
    const std::string text = is_extra ? row.at("text").get<std::string>() : corpus.at(i);
    const std::vector<int> want_plain = ids_of(row.at("ids"));
    std::vector<int> want_special;
    if (row.contains("ids_special")) {
      want_special = ids_of(row.at("ids_special"));
    } else {
      want_special = ids_of(row.at("prefix"));
      want_special.insert(want_special.end(), want_plain.begin(), want_plain.end());
      for (int id : ids_of(row.at("suffix"))) want_special.push_back(id);
    }
    const std::vector<int> plain = tok.encode(text, false);
    if (plain != want_plain && ++bad_plain <= 10) {
      ADD_FAILURE() << name << " #" << i << " " << escaped(text) << "\n  got  " << show(plain)
                    << "\n  want " << show(want_plain);
    }
    const std::vector<int> special = tok.encode(text, true);
    if (special != want_special && ++bad_special <= 10) {
      ADD_FAILURE() << name << " #" << i << " add_special_tokens " << escaped(text) << "\n  got  "
                    << show(special) << "\n  want " << show(want_special);
    }
    const std::string want_decoded = row.value("decoded", text);
    const std::string want_skip = row.value("decoded_skip", want_decoded);
    if (tok.decode(want_special, false) != want_decoded && ++bad_decode <= 10) {
      ADD_FAILURE() << name << " #" << i << " decode " << escaped(tok.decode(want_special, false))
                    << " want " << escaped(want_decoded);
    }
    if (tok.decode(want_special, true) != want_skip && ++bad_skip <= 10) {
      ADD_FAILURE() << name << " #" << i << " decode(skip) "
                    << escaped(tok.decode(want_special, true)) << " want " << escaped(want_skip);
    }
  }
  EXPECT_EQ(bad_plain, 0);
  EXPECT_EQ(bad_special, 0);
  EXPECT_EQ(bad_decode, 0);
  EXPECT_EQ(bad_skip, 0);

  ASSERT_GE(g.decodes.size(), 100u);
  int bad_random = 0;
  for (const auto& row : g.decodes) {
    ASSERT_FALSE(row.contains("error")) << "HF refused a decode: " << row.dump();
    const std::vector<int> ids = ids_of(row.at("decode_ids"));
    const std::string got = tok.decode(ids, false), got_skip = tok.decode(ids, true);
    if ((got != row.at("text").get<std::string>() ||
         got_skip != row.at("text_skip").get<std::string>()) &&
        ++bad_random <= 10) {
      ADD_FAILURE() << name << " decode " << show(ids) << "\n  got  " << escaped(got) << " / "
                    << escaped(got_skip) << "\n  want " << escaped(row.at("text")) << " / "
                    << escaped(row.at("text_skip"));
    }
  }
  EXPECT_EQ(bad_random, 0);

  ASSERT_GE(g.tokens.size(), 100u);
  for (const auto& row : g.tokens) {
    const int id = row.at("token_id").get<int>();
    if (row.at("token").is_null()) {
      EXPECT_FALSE(tok.is_known(id)) << id;
      EXPECT_THROW(tok.id_to_token(id), Error) << id;
    } else {
      EXPECT_EQ(tok.id_to_token(id), row.at("token").get<std::string>()) << id;
      EXPECT_EQ(tok.token_to_id(row.at("token").get<std::string>()), id);
    }
  }
}

TEST(TokenizerGolden, Qwen3MatchesHuggingFace) { check_golden(testing::qwen3(), "qwen3"); }

TEST(TokenizerGolden, Llama3MatchesHuggingFace) { check_golden(testing::llama3(), "llama3"); }

TEST(TokenizerGolden, MistralMatchesTokenizersJs) { check_golden(testing::mistral(), "mistral"); }

TEST(TokenizerGolden, Gemma3MatchesTokenizersJs) { check_golden(testing::gemma3(), "gemma3"); }

}  // namespace
}  // namespace kestrel
