#include "server/response_items_page.h"

#include <algorithm>
#include <charconv>

#include "server/api_error.h"
#include "server/request_fields.h"

namespace kestrel::server {

using ojson = nlohmann::ordered_json;

namespace {

constexpr int kDefaultLimit = 20, kMaxLimit = 100;

int page_limit(const std::optional<std::string>& text) {
  if (!text) return kDefaultLimit;
  int limit = 0;
  const char* end = text->data() + text->size();
  const auto [ptr, ec] = std::from_chars(text->data(), end, limit);
  if (ec != std::errc() || ptr != end || limit < 1 || limit > kMaxLimit) {
    throw_bad_request("limit", "'limit' must be an integer from 1 to {}, got '{}'", kMaxLimit,
                      *text);
  }
  return limit;
}

// The place of the item with this id in `items`, for the cursor parameter `param`.
size_t place_of(const ojson& items, const std::string& id, const char* param) {
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].is_object() && string_member(items[i], "id") == id) return i;
  }
  throw_bad_request(param, "'{}': no input item of this response has the id '{}'", param, id);
}

ojson as_listed(ojson item) {
  if (!item.is_object()) return item;
  if (!item.contains("type") && item.contains("role")) item["type"] = "message";
  if (string_member(item, "type") != "message") return item;
  const auto content = item.find("content");
  if (content != item.end() && content->is_string()) {
    const bool assistant = string_member(item, "role") == "assistant";
    ojson part = {{"type", assistant ? "output_text" : "input_text"}, {"text", *content}};
    if (assistant) part["annotations"] = ojson::array();
    *content = ojson::array({std::move(part)});
  }
  return item;
}

}  // namespace

ojson input_items_page(const ojson& items, const ItemsPageQuery& query) {
  const int limit = page_limit(query.limit);
  const std::string order = query.order.value_or("desc");
  if (order != "asc" && order != "desc") {
    throw_bad_request("order", "'order' must be 'asc' or 'desc', got '{}'", order);
  }
  ojson seq = items.is_array() ? items : ojson::array();
  if (order == "desc") std::reverse(seq.begin(), seq.end());
  const size_t begin = query.after ? place_of(seq, *query.after, "after") + 1 : 0;
  const size_t end = query.before ? place_of(seq, *query.before, "before") : seq.size();
  ojson data = ojson::array();
  for (size_t i = begin; i < end && data.size() < size_t(limit); ++i) data.push_back(as_listed(seq[i]));
  const auto id_of = [&](const ojson& item) {
    return item.is_object() && item.contains("id") ? item["id"] : ojson(nullptr);
  };
  return {{"object", "list"},
          {"data", data},
          {"first_id", data.empty() ? ojson(nullptr) : id_of(data.front())},
          {"last_id", data.empty() ? ojson(nullptr) : id_of(data.back())},
          {"has_more", begin + data.size() < end}};
}

ojson with_item_ids(ojson items, const std::function<std::string(const char*)>& new_id) {
  if (!items.is_array()) return items;
  for (ojson& item : items) {
    if (!item.is_object() || (item.contains("id") && item["id"].is_string())) continue;
    const std::string type = item.contains("type") ? string_member(item, "type") : "message";
    const char* prefix = type == "message"                ? "msg_"
                         : type == "function_call"        ? "fc_"
                         : type == "function_call_output" ? "fco_"
                                                          : "item_";
    item["id"] = new_id(prefix);
  }
  return items;
}

}  // namespace kestrel::server
