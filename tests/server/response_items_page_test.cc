// A stored response's input items as GET /v1/responses/{id}/input_items pages them, without a
// server: ids given to the items that have none, the order, the cursors and the limit as
// OpenAI's API documents them, the listing's form of a message, and the 400s.
#include "server/response_items_page.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/api_error.h"

namespace kestrel::server {
namespace {

using ojson = nlohmann::ordered_json;

// Five items with ids a..e, in the order the conversation had them.
ojson five() {
  ojson items = ojson::array();
  for (const char* id : {"a", "b", "c", "d", "e"}) {
    items.push_back({{"id", id}, {"type", "message"}, {"role", "user"}, {"content", id}});
  }
  return items;
}

std::vector<std::string> ids(const ojson& page) {
  std::vector<std::string> out;
  for (const ojson& item : page["data"]) out.push_back(item["id"]);
  return out;
}

using Ids = std::vector<std::string>;

TEST(ResponseItemsPage, NewestFirstByDefault) {
  const ojson page = input_items_page(five(), {});
  EXPECT_EQ(page["object"], "list");
  EXPECT_EQ(ids(page), (Ids{"e", "d", "c", "b", "a"}));
  EXPECT_EQ(page["first_id"], "e");
  EXPECT_EQ(page["last_id"], "a");
  EXPECT_EQ(page["has_more"], false);
}

TEST(ResponseItemsPage, CursorsAndLimitWalkTheList) {
  ojson page = input_items_page(five(), {std::nullopt, std::nullopt, "2", "asc"});
  EXPECT_EQ(ids(page), (Ids{"a", "b"}));
  EXPECT_EQ(page["has_more"], true);
  page = input_items_page(five(), {"b", std::nullopt, "2", "asc"});
  EXPECT_EQ(ids(page), (Ids{"c", "d"}));
  EXPECT_EQ(page["has_more"], true);
  page = input_items_page(five(), {"d", std::nullopt, "2", "asc"});
  EXPECT_EQ(ids(page), (Ids{"e"}));
  EXPECT_EQ(page["has_more"], false);
  // Cursors count in the order asked for.
  EXPECT_EQ(ids(input_items_page(five(), {"c", std::nullopt, std::nullopt, "desc"})),
            (Ids{"b", "a"}));
  EXPECT_EQ(ids(input_items_page(five(), {std::nullopt, "b", std::nullopt, std::nullopt})),
            (Ids{"e", "d", "c"}));
  // Up to `before` only: no more past it.
  page = input_items_page(five(), {"a", "d", "2", "asc"});
  EXPECT_EQ(ids(page), (Ids{"b", "c"}));
  EXPECT_EQ(page["has_more"], false);
  // Nothing after the last item: an empty page.
  page = input_items_page(five(), {"e", std::nullopt, std::nullopt, "asc"});
  EXPECT_TRUE(page["data"].empty());
  EXPECT_TRUE(page["first_id"].is_null());
  EXPECT_EQ(page["has_more"], false);
}

TEST(ResponseItemsPage, MessagesAreListedAsInputItems) {
  const ojson items = ojson::array(
      {{{"id", "m1"}, {"role", "user"}, {"content", "Hi"}},
       {{"id", "m2"}, {"role", "assistant"}, {"content", "Hello"}},
       {{"id", "m3"}, {"type", "message"}, {"role", "user"},
        {"content", ojson::array({{{"type", "input_text"}, {"text", "parts stay"}}})}},
       {{"id", "fc1"}, {"type", "function_call_output"}, {"call_id", "c"}, {"output", "21"}}});
  const ojson data = input_items_page(items, {std::nullopt, std::nullopt, std::nullopt, "asc"})["data"];
  ASSERT_EQ(data.size(), 4u);
  EXPECT_EQ(data[0], (ojson{{"id", "m1"}, {"role", "user"},
                            {"content", ojson::array({{{"type", "input_text"}, {"text", "Hi"}}})},
                            {"type", "message"}}));
  EXPECT_EQ(data[1]["content"], ojson::array({{{"type", "output_text"}, {"text", "Hello"},
                                               {"annotations", ojson::array()}}}));
  EXPECT_EQ(data[2], items[2]);
  EXPECT_EQ(data[3], items[3]);
}

TEST(ResponseItemsPage, BadQueriesAre400sNamingTheParameter) {
  auto param_of = [](const ItemsPageQuery& q) {
    try {
      input_items_page(five(), q);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      return e.param();
    }
    return std::string("accepted");
  };
  for (const char* limit : {"0", "101", "x", "5x", "", "-1"}) {
    EXPECT_EQ(param_of({std::nullopt, std::nullopt, limit, std::nullopt}), "limit") << limit;
  }
  EXPECT_EQ(param_of({std::nullopt, std::nullopt, "100", std::nullopt}), "accepted");
  EXPECT_EQ(param_of({std::nullopt, std::nullopt, std::nullopt, "up"}), "order");
  EXPECT_EQ(param_of({"zz", std::nullopt, std::nullopt, std::nullopt}), "after");
  EXPECT_EQ(param_of({std::nullopt, "zz", std::nullopt, std::nullopt}), "before");
}

TEST(ResponseItemsPage, ItemsWithoutIdsGetOne) {
  int n = 0;
  auto new_id = [&n](const char* prefix) { return prefix + std::to_string(n++); };
  const ojson items = with_item_ids(
      ojson::array({{{"role", "user"}, {"content", "x"}},
                    {{"type", "function_call"}, {"call_id", "c"}, {"name", "f"}, {"arguments", "{}"}},
                    {{"type", "function_call_output"}, {"call_id", "c"}, {"output", "1"}},
                    {{"type", "reasoning"}, {"summary", ojson::array()}},
                    {{"id", "kept"}, {"role", "user"}, {"content", "y"}}}),
      new_id);
  EXPECT_EQ(items[0]["id"], "msg_0");
  EXPECT_EQ(items[1]["id"], "fc_1");
  EXPECT_EQ(items[2]["id"], "fco_2");
  EXPECT_EQ(items[3]["id"], "item_3");
  EXPECT_EQ(items[4]["id"], "kept");
  EXPECT_EQ(n, 4);
}

}  // namespace
}  // namespace kestrel::server
