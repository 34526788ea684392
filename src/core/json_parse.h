// JSON from outside (request bodies, schemas given as text) parsed with bounds on what it can
// make the parser do.
//
// nlohmann's ordered_json (which keeps an object's keys in their order: a schema's properties
// are generated in it) finds each new key among the object's earlier keys by a scan, so an
// object of n keys costs n^2 / 2 comparisons: 100,000 keys in a 1 MB body took 7 s, and a
// 16 MB body would hold a server thread for about half an hour. The sum of n^2 over a text's
// objects is held to kMaxJsonKeyWork (one object of 20,000 keys, or more smaller ones), counted
// key by key, so a text past it costs no more than one at it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "core/error.h"

namespace kestrel {

constexpr int kMaxJsonDepth = 64;  // recursive code walks what is parsed
constexpr int64_t kMaxJsonKeyWork = int64_t{20000} * 20000;

// A text past those bounds. what() completes "The request body ..." ("is nested deeper than
// 64 levels").
class JsonLimitError : public Error {
 public:
  using Error::Error;
};

// Throws JsonLimitError past the bounds, nlohmann::json::exception for text that is not JSON.
nlohmann::ordered_json parse_untrusted_json(std::string_view text);

}  // namespace kestrel
