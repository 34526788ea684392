// Stored responses of the Responses API: what `previous_response_id` continues from and what
// GET / DELETE /v1/responses/{id} read and remove, as OpenAI's API keeps them (`store`, true
// unless the request says false). Kept in memory for the server's life, at most
// max_responses of them and kMaxBytes of JSON in all; beyond either the oldest go first, so
// a client that continues an old response may get a 400 saying it is no longer stored.
//
// Each entry holds the whole response object and its conversation: every input item of the
// chain it continues (previous responses' input and output items, in order) then its own
// input items. Instructions are not part of it: as on OpenAI's API, a request's
// `instructions` apply to that request alone. The items that carry an "id" (every output
// item; input items sent back with theirs) can be referenced from a later input as
// {"type": "item_reference", "id"}, as Codex-style clients do. Thread safety: every method
// locks.
#pragma once

#include <cstddef>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>

namespace kestrel::server {

class ResponseStore {
 public:
  static constexpr size_t kMaxBytes = size_t{256} << 20;

  // max_responses 0: nothing is stored (previous_response_id is then a 400).
  explicit ResponseStore(size_t max_responses, size_t max_bytes = kMaxBytes);

  bool enabled() const { return max_responses_ > 0; }

  // Keeps `response` (its "id" is the key) and `items`, the input items it answered (the
  // chain's and its own). A response larger than the byte limit alone is not kept.
  void put(const nlohmann::ordered_json& response, nlohmann::ordered_json items);
  std::optional<nlohmann::ordered_json> response(const std::string& id) const;
  // The conversation after response `id`: its items, then its output items (as input items:
  // a response's output can be sent back as it is). nullopt: not stored.
  std::optional<nlohmann::ordered_json> conversation(const std::string& id) const;
  // The input items response `id` answered (the chain's, then its own), as put. nullopt: not
  // stored.
  std::optional<nlohmann::ordered_json> answered_items(const std::string& id) const;
  // The stored item with this "id" (an output item, or an input item that has one), from the
  // newest response that holds it (while any does). nullopt: none.
  std::optional<nlohmann::ordered_json> item(const std::string& item_id) const;
  bool erase(const std::string& id);
  size_t size() const;

 private:
  struct Entry {
    nlohmann::ordered_json response, items;
    size_t bytes = 0;
    std::list<std::string>::iterator age;
  };
  void erase_locked(std::unordered_map<std::string, Entry>::iterator it);
  // f(entry) for the entry of response `id`, under the lock; nullopt when it is not stored.
  template <typename F>
  std::optional<nlohmann::ordered_json> read(const std::string& id, F&& f) const;

  const size_t max_responses_, max_bytes_;
  mutable std::mutex mu_;
  std::list<std::string> oldest_first_;
  std::unordered_map<std::string, Entry> entries_;
  std::unordered_map<std::string, std::string> item_owner_;  // item id -> response id
  size_t bytes_ = 0;
};

// A Responses request's `input` as a list of items: a string is one user message.
nlohmann::ordered_json input_items(const nlohmann::ordered_json& input);

// The request body with what it refers to in the store put in place: with
// `previous_response_id`, the stored conversation's items before the request's own input
// items, and the key removed; each {"type": "item_reference", "id"} input item replaced by
// the stored item. A body that refers to nothing comes back as it is. Throws a 400 ApiError
// naming previous_response_id (not a string, not stored, or the server stores nothing) or
// input (an item reference to no stored item, with its place).
nlohmann::ordered_json with_stored_items(const nlohmann::ordered_json& body,
                                         const ResponseStore& store);

}  // namespace kestrel::server
