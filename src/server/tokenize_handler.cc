#include "server/tokenize_handler.h"

#include "server/api_error.h"
#include "server/request_fields.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::server {
namespace {

using ojson = nlohmann::ordered_json;

// The generation endpoints' parser (its nesting limit too), and an object.
ojson parse_body(const std::string& body) {
  ojson j = parse_request_body(body);
  if (!j.is_object()) throw ApiError(400, "The request body must be a JSON object.");
  return j;
}

const Tokenizer& tokenizer_of(const ServingContext& ctx) {
  if (ctx.tokenizer == nullptr) {
    throw ApiError(400, "This model has no tokenizer.json: send and receive token ids.");
  }
  return *ctx.tokenizer;
}

}  // namespace

nlohmann::json tokenize(const ServingContext& ctx, const std::string& body) {
  const ojson j = parse_body(body);
  const FieldReader f(j);
  check_model(f, ctx);
  std::vector<int> tokens;
  if (f.find("messages")) {
    // The chat request's own rendering and tokenizing, so both count alike.
    f.reject_unknown({"model", "messages", "add_generation_prompt", "continue_final_message",
                      "add_special_tokens", "chat_template", "chat_template_kwargs", "tools",
                      "documents"});
    ojson chat = j;
    chat["max_tokens"] = 1;
    tokens = parse_chat_request(chat, ctx).prompts.at(0);
  } else {
    f.reject_unknown({"model", "prompt", "add_special_tokens"});
    const std::optional<std::string> prompt = f.string("prompt");
    if (!prompt) throw_bad_request("prompt", "'prompt' (a string) or 'messages' is required");
    tokens = tokenizer_of(ctx).encode(*prompt, f.boolean("add_special_tokens").value_or(true));
  }
  return {{"count", tokens.size()},
          {"max_model_len", ctx.max_model_len},
          {"tokens", tokens},
          {"token_strs", nullptr}};
}

nlohmann::json detokenize(const ServingContext& ctx, const std::string& body) {
  const ojson j = parse_body(body);
  const FieldReader f(j);
  f.reject_unknown({"model", "tokens"});
  check_model(f, ctx);
  const ojson* tokens = f.find("tokens");
  if (tokens == nullptr || !tokens->is_array()) {
    throw_bad_request("tokens", "'tokens' must be a list of token ids");
  }
  std::vector<int> ids;
  for (const ojson& t : *tokens) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= ctx.vocab_size) {
      throw_bad_request("tokens", "'tokens' holds {}, not a token id in [0, {})", t.dump(),
                        ctx.vocab_size);
    }
    ids.push_back(t.get<int>());
  }
  return {{"prompt", tokenizer_of(ctx).decode(ids, false)}};
}

}  // namespace kestrel::server
