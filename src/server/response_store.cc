#include "server/response_store.h"

#include <utility>

#include "server/api_error.h"
#include "server/request_fields.h"

namespace kestrel::server {

using ojson = nlohmann::ordered_json;

ResponseStore::ResponseStore(size_t max_responses, size_t max_bytes)
    : max_responses_(max_responses), max_bytes_(max_bytes) {}

void ResponseStore::put(const ojson& response, ojson items) {
  if (!enabled()) return;
  const std::string id = response.at("id").get<std::string>();
  const size_t bytes = response.dump().size() + items.dump().size();
  if (bytes > max_bytes_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = entries_.find(id); it != entries_.end()) erase_locked(it);
  while (!oldest_first_.empty() &&
         (entries_.size() >= max_responses_ || bytes_ + bytes > max_bytes_)) {
    erase_locked(entries_.find(oldest_first_.front()));
  }
  oldest_first_.push_back(id);
  entries_.emplace(id, Entry{response, std::move(items), bytes, std::prev(oldest_first_.end())});
  bytes_ += bytes;
}

void ResponseStore::erase_locked(std::unordered_map<std::string, Entry>::iterator it) {
  bytes_ -= it->second.bytes;
  oldest_first_.erase(it->second.age);
  entries_.erase(it);
}

std::optional<ojson> ResponseStore::response(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return it->second.response;
}

std::optional<ojson> ResponseStore::conversation(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  ojson items = it->second.items;
  for (const ojson& item : it->second.response.at("output")) items.push_back(item);
  return items;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  erase_locked(it);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

ojson input_items(const ojson& input) {
  if (input.is_string()) return ojson::array({{{"role", "user"}, {"content", input}}});
  return input;  // a list, or a wrong type that the request parser names
}

ojson with_previous_response(const ojson& body, const ResponseStore& store) {
  const auto previous = body.find("previous_response_id");
  if (previous == body.end() || previous->is_null()) return body;
  if (!previous->is_string()) {
    throw_bad_request("previous_response_id", "'previous_response_id' must be a string, got {}",
                      json_type_name(*previous));
  }
  const std::string id = previous->get<std::string>();
  if (!store.enabled()) {
    throw_bad_request("previous_response_id",
                      "'previous_response_id' needs stored responses, and this server stores "
                      "none (kestrel serve --responses-store-max 0)");
  }
  std::optional<ojson> items = store.conversation(id);
  if (!items) {
    throw ApiError(400, fmt::format("Previous response with id '{}' not found.", id),
                   "previous_response_id", "invalid_request_error", "previous_response_not_found");
  }
  ojson out = body;
  out.erase("previous_response_id");
  if (const auto input = body.find("input"); input != body.end()) {
    const ojson own = input_items(*input);
    if (!own.is_array()) {
      throw_bad_request("input", "'input' must be a string or a list of items, got {}",
                        json_type_name(own));
    }
    for (const ojson& item : own) items->push_back(item);
  }
  out["input"] = std::move(*items);
  return out;
}

}  // namespace kestrel::server
