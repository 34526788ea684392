// GET /v1/responses/{id}/input_items: a page of a stored response's input items (every item
// of the conversation it answered: the chain it continued, then its own input), as OpenAI's
// API lists them: {"object": "list", "data", "first_id", "last_id", "has_more"}, newest
// first unless `order` is "asc", at most `limit` (1..100, default 20) items after the item
// `after` and before the item `before` in that order. Clients page by sending the last id
// they got as `after` (the openai client's CursorPage does).
//
// Items are listed as OpenAI shows input items: a message without a "type" gets
// "type": "message", and text content given as a string becomes one input_text part
// (output_text for the assistant's). Every stored item has an "id" (with_item_ids).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace kestrel::server {

// The query's parameters as sent (absent: nullopt); `include` is accepted and ignored.
struct ItemsPageQuery {
  std::optional<std::string> after, before, limit, order;
};

// Throws a 400 ApiError naming `limit` or `order` (not a valid value) or `after` / `before`
// (no item of the list has that id).
nlohmann::ordered_json input_items_page(const nlohmann::ordered_json& items,
                                        const ItemsPageQuery& query);

// `items` with an "id" on every object item that has none: new_id("msg_") for messages,
// "fc_" for function calls, "fco_" for their outputs, "item_" otherwise. Given before a
// response's items are stored, so that they can be listed, paged and referenced.
nlohmann::ordered_json with_item_ids(nlohmann::ordered_json items,
                                     const std::function<std::string(const char*)>& new_id);

}  // namespace kestrel::server
