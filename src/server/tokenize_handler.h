// vLLM's /tokenize and /detokenize: the model's tokenizer (and chat template) over HTTP, so
// that clients count tokens exactly as the server will.
//
//   POST /tokenize   {"prompt": "text", "add_special_tokens": true}
//                or  {"messages": [...], "add_generation_prompt": true, ...chat fields}
//                ->  {"count": N, "max_model_len": M, "tokens": [ids], "token_strs": null}
//   POST /detokenize {"tokens": [ids]} -> {"prompt": "text"}
// Bad bodies throw ApiError (400 naming the field; 404 for another model's name).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "server/request_parser.h"

namespace kestrel::server {

nlohmann::json tokenize(const ServingContext& ctx, const std::string& body);
nlohmann::json detokenize(const ServingContext& ctx, const std::string& body);

}  // namespace kestrel::server
