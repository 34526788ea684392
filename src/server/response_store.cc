#include "server/response_store.h"

#include <utility>
#include <vector>

#include "server/api_error.h"
#include "server/request_fields.h"

namespace kestrel::server {

using ojson = nlohmann::ordered_json;

namespace {

// Calls f(item, id) for every item of `entry` (output, then input) that has a string "id".
template <typename Entry, typename F>
void for_each_item_id(const Entry& entry, F&& f) {
  for (const ojson* list : {&entry.response.at("output"), &entry.items}) {
    if (!list->is_array()) continue;
    for (const ojson& item : *list) {
      if (!item.is_object()) continue;
      const auto id = item.find("id");
      if (id != item.end() && id->is_string()) f(item, id->get_ref<const std::string&>());
    }
  }
}

}  // namespace

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
  const Entry& entry =
      entries_
          .emplace(id, Entry{response, std::move(items), bytes, std::prev(oldest_first_.end())})
          .first->second;
  for_each_item_id(entry,
                   [&](const ojson&, const std::string& item_id) { item_owner_[item_id] = id; });
  bytes_ += bytes;
}

void ResponseStore::erase_locked(std::unordered_map<std::string, Entry>::iterator it) {
  const std::string id = it->first;
  bytes_ -= it->second.bytes;
  oldest_first_.erase(it->second.age);
  // The items whose ids this response owned (it was their newest holder) pass to the newest
  // response still holding them, else leave the index. (A chain's later responses hold its
  // earlier items too; eviction takes the oldest first, so ownership rarely moves.)
  std::vector<std::string> owned;
  for_each_item_id(it->second, [&](const ojson&, const std::string& item_id) {
    if (auto owner = item_owner_.find(item_id);
        owner != item_owner_.end() && owner->second == id) {
      owned.push_back(item_id);
      item_owner_.erase(owner);
    }
  });
  entries_.erase(it);
  for (auto age = oldest_first_.rbegin(); age != oldest_first_.rend() && !owned.empty(); ++age) {
    for_each_item_id(entries_.at(*age), [&](const ojson&, const std::string& item_id) {
      if (!item_owner_.contains(item_id) && std::erase(owned, item_id) > 0) {
        item_owner_[item_id] = *age;
      }
    });
  }
}

template <typename F>
std::optional<ojson> ResponseStore::read(const std::string& id, F&& f) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return f(it->second);
}

std::optional<ojson> ResponseStore::response(const std::string& id) const {
  return read(id, [](const Entry& e) { return e.response; });
}

std::optional<ojson> ResponseStore::conversation(const std::string& id) const {
  return read(id, [](const Entry& e) {
    ojson items = e.items;
    for (const ojson& item : e.response.at("output")) items.push_back(item);
    return items;
  });
}

std::optional<ojson> ResponseStore::answered_items(const std::string& id) const {
  return read(id, [](const Entry& e) { return e.items; });
}

std::optional<ojson> ResponseStore::item(const std::string& item_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto owner = item_owner_.find(item_id);
  if (owner == item_owner_.end()) return std::nullopt;
  std::optional<ojson> found;
  for_each_item_id(entries_.at(owner->second), [&](const ojson& item, const std::string& id) {
    if (!found && id == item_id) found = item;
  });
  return found;
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

namespace {

// `input` with each item reference replaced by the stored item it names.
ojson resolve_references(const ojson& input, const ResponseStore& store) {
  if (!input.is_array()) return input;
  ojson out = ojson::array();
  for (size_t i = 0; i < input.size(); ++i) {
    const ojson& item = input[i];
    // string_member: a "type" of another JSON type is not a reference (and not a throw).
    if (!(item.is_object() && string_member(item, "type") == "item_reference")) {
      out.push_back(item);
      continue;
    }
    const auto id = item.find("id");
    if (id == item.end() || !id->is_string()) {
      throw_bad_request("input", "'input[{}]': an item_reference needs a string 'id'", i);
    }
    if (!store.enabled()) {
      throw_bad_request("input",
                        "'input[{}]': item references need stored responses, and this server "
                        "stores none (kestrel serve --responses-store-max 0)",
                        i);
    }
    std::optional<ojson> stored = store.item(id->get<std::string>());
    if (!stored) {
      throw_bad_request("input", "'input[{}]': no stored item has the id '{}'", i,
                        id->get<std::string>());
    }
    out.push_back(std::move(*stored));
  }
  return out;
}

// The body with previous_response_id's conversation before the input, the key removed.
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
  // A background response not yet ended has no answer to continue from.
  if (const std::optional<ojson> previous_response = store.response(id)) {
    const std::string status = previous_response->value("status", "");
    if (status == "queued" || status == "in_progress") {
      throw_bad_request("previous_response_id",
                        "previous response '{}' is still {}: continue from it once it has ended "
                        "(GET /v1/responses/{} says)",
                        id, status, id);
    }
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

}  // namespace

ojson with_stored_items(const ojson& body, const ResponseStore& store) {
  ojson out = with_previous_response(body, store);
  if (const auto input = out.find("input"); input != out.end() && input->is_array()) {
    *input = resolve_references(*input, store);
  }
  return out;
}

}  // namespace kestrel::server
