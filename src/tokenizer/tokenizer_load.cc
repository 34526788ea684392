// Building a Tokenizer from tokenizer.json (+ tokenizer_config.json for from_dir).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/tokenizer_json.h"

namespace kestrel {
namespace {

using nlohmann::json;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KS_CHECK(in.good(), "tokenizer: cannot open {}", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool flag(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? fallback : it->get<bool>();
}

std::vector<AddedToken> parse_added_tokens(const json& j) {
  std::vector<AddedToken> tokens;
  if (j.is_null()) return tokens;
  KS_CHECK(j.is_array(), "\"added_tokens\" must be an array");
  for (const auto& e : j) {
    AddedToken t;
    t.id = e.at("id").get<int>();
    KS_CHECK(t.id >= 0, "added token has negative id {}", t.id);
    t.content = e.at("content").get<std::string>();
    t.special = flag(e, "special", false);
    t.single_word = flag(e, "single_word", false);
    t.lstrip = flag(e, "lstrip", false);
    t.rstrip = flag(e, "rstrip", false);
    t.normalized = flag(e, "normalized", !t.special);
    tokens.push_back(std::move(t));
  }
  return tokens;
}

// Ids a post-processor puts around a single sequence when add_special_tokens is true.
void parse_post_processor(const json& j, std::vector<int>& prefix, std::vector<int>& suffix) {
  if (j.is_null()) return;
  const std::string type = j.at("type").get<std::string>();
  if (type == "ByteLevel") return;  // only adjusts offsets
  if (type == "Sequence") {
    for (const auto& p : j.at("processors")) {
      std::vector<int> pre, suf;
      parse_post_processor(p, pre, suf);
      prefix.insert(prefix.begin(), pre.begin(), pre.end());
      suffix.insert(suffix.end(), suf.begin(), suf.end());
    }
    return;
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    prefix.push_back(j.at("cls").at(1).get<int>());
    suffix.push_back(j.at("sep").at(1).get<int>());
    return;
  }
  KS_CHECK(type == "TemplateProcessing",
           "unsupported post_processor type \"{}\" (supported: ByteLevel, TemplateProcessing, "
           "BertProcessing, RobertaProcessing, Sequence, null)",
           type);
  const json& specials = j.at("special_tokens");
  bool seen_sequence = false;
  for (const auto& item : j.at("single")) {
    if (item.contains("Sequence")) {
      KS_CHECK(!seen_sequence, "TemplateProcessing single template has two sequences");
      seen_sequence = true;
      continue;
    }
    KS_CHECK(item.contains("SpecialToken"),
             "TemplateProcessing item is neither SpecialToken nor Sequence");
    const std::string name = item.at("SpecialToken").at("id").get<std::string>();
    KS_CHECK(specials.contains(name),
             "TemplateProcessing uses \"{}\", which is not in its special_tokens", name);
    for (const auto& id : specials.at(name).at("ids")) {
      (seen_sequence ? suffix : prefix).push_back(id.get<int>());
    }
  }
}

std::shared_ptr<TokenizerImpl> build(TokenizerJson doc) {
  const json& root = doc.root;
  KS_CHECK(root.is_object(), "top level must be an object");
  KS_CHECK(root.contains("model"), "no \"model\"");
  auto impl = std::make_shared<TokenizerImpl>();
  TokenizerImpl& t = *impl;
  t.normalizer = Normalizer::from_json(root.value("normalizer", json()));
  t.pre_tokenizer = PreTokenizer::from_json(root.value("pre_tokenizer", json()));
  t.decoder = Decoder::from_json(root.value("decoder", json()));
  t.model = BpeModel::from_json(root.at("model"), std::move(doc.vocab), doc.merges,
                                t.pre_tokenizer.byte_level());
  parse_post_processor(root.value("post_processor", json()), t.prefix, t.suffix);
  t.added = parse_added_tokens(root.value("added_tokens", json()));

  int max_id = t.model.max_id();
  for (const AddedToken& a : t.added) max_id = std::max(max_id, a.id);
  t.vocab_size = max_id + 1;
  t.added_index.assign(t.vocab_size, -1);
  std::vector<AddedToken> raw, norm;
  std::vector<std::string> raw_patterns, norm_patterns;
  for (size_t i = 0; i < t.added.size(); ++i) {
    const AddedToken& a = t.added[i];
    t.added_index[a.id] = static_cast<int>(i);
    t.added_by_content[a.content] = a.id;
    if (a.normalized) {
      std::string scratch;
      norm.push_back(a);
      norm_patterns.emplace_back(t.normalizer.normalize(a.content, scratch));
    } else {
      raw.push_back(a);
      raw_patterns.push_back(a.content);
    }
  }
  // HF's matcher lists special tokens before the other added tokens.
  auto special_first = [](std::vector<AddedToken>& tokens, std::vector<std::string>& patterns) {
    std::vector<size_t> order(tokens.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_partition(order.begin(), order.end(), [&](size_t i) { return tokens[i].special; });
    std::vector<AddedToken> t2;
    std::vector<std::string> p2;
    for (size_t i : order) {
      t2.push_back(tokens[i]);
      p2.push_back(patterns[i]);
    }
    tokens.swap(t2);
    patterns.swap(p2);
  };
  special_first(raw, raw_patterns);
  special_first(norm, norm_patterns);
  t.raw_matcher = AddedTokenMatcher(std::move(raw), std::move(raw_patterns));
  t.norm_matcher = AddedTokenMatcher(std::move(norm), std::move(norm_patterns));

  // What each id contributes to a text; added tokens win over the vocab.
  t.offsets.assign(t.vocab_size + 1, 0);
  t.known.assign(t.vocab_size, false);
  t.bytes.reserve(static_cast<size_t>(t.vocab_size) * 6);
  for (int id = 0; id < t.vocab_size; ++id) {
    t.offsets[id] = static_cast<uint32_t>(t.bytes.size());
    const std::string* token =
        t.added_index[id] >= 0 ? &t.added[t.added_index[id]].content : t.model.token_of(id);
    if (token != nullptr) {
      t.known[id] = true;
      t.bytes += t.decoder.token_bytes(*token);
    }
  }
  t.offsets[t.vocab_size] = static_cast<uint32_t>(t.bytes.size());
  return impl;
}

std::shared_ptr<TokenizerImpl> parse_and_build(std::string_view text, const std::string& what) {
  try {
    return build(parse_tokenizer_json(text));
  } catch (const json::exception& e) {
    throw_error("tokenizer: {} is not a valid tokenizer.json: {}", what, e.what());
  } catch (const Error& e) {
    throw_error("tokenizer: {}: {}", what, e.what());
  }
}

// tokenizer_config.json names special tokens either as strings or as AddedToken objects.
std::string config_token(const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content")) return it->at("content").get<std::string>();
  throw_error("\"{}\" must be a string or an object with \"content\"", key);
}

}  // namespace

Tokenizer Tokenizer::from_json_string(std::string_view json_text) {
  return Tokenizer(parse_and_build(json_text, "tokenizer.json text"));
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  return Tokenizer(parse_and_build(read_file(path), path));
}

Tokenizer Tokenizer::from_dir(const std::string& model_dir) {
  namespace fs = std::filesystem;
  const fs::path dir(model_dir);
  const fs::path tok_path = dir / "tokenizer.json";
  KS_CHECK(fs::exists(tok_path), "tokenizer: {} has no tokenizer.json", model_dir);
  std::shared_ptr<TokenizerImpl> impl = parse_and_build(read_file(tok_path), tok_path.string());
  Tokenizer probe(impl);  // for token_to_id while impl is still being filled in

  const fs::path config_path = dir / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    try {
      const json config = json::parse(read_file(config_path.string()));
      for (auto [key, slot] : {std::pair{"bos_token", &impl->bos},
                               {"eos_token", &impl->eos},
                               {"pad_token", &impl->pad},
                               {"unk_token", &impl->unk}}) {
        slot->text = config_token(config, key);
        if (!slot->text.empty()) slot->id = probe.token_to_id(slot->text);
      }
      if (auto it = config.find("chat_template"); it != config.end() && !it->is_null()) {
        if (it->is_string()) {
          impl->chat_templates["default"] = it->get<std::string>();
        } else {
          KS_CHECK(it->is_array(),
                   "\"chat_template\" must be a string or a list of {{\"name\", \"template\"}}");
          for (const auto& e : *it) {
            impl->chat_templates[e.at("name").get<std::string>()] =
                e.at("template").get<std::string>();
          }
        }
      }
    } catch (const json::exception& e) {
      throw_error("tokenizer: {} is not a valid tokenizer_config.json: {}", config_path.string(),
                  e.what());
    } catch (const Error& e) {
      throw_error("tokenizer: {}: {}", config_path.string(), e.what());
    }
  }
  const fs::path jinja_path = dir / "chat_template.jinja";
  if (impl->chat_templates.empty() && fs::exists(jinja_path)) {
    impl->chat_templates["default"] = read_file(jinja_path.string());
  }
  if (auto it = impl->chat_templates.find("default"); it != impl->chat_templates.end()) {
    impl->chat_template = it->second;
  }
  return probe;
}

}  // namespace kestrel
