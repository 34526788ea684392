// The Responses API's stored responses without a server: what is kept and dropped (by count
// and by bytes), how previous_response_id puts the stored conversation before the input, and
// how item references find stored items.
#include "server/response_store.h"

#include <gtest/gtest.h>

#include <string>

#include "server/api_error.h"

namespace kestrel::server {
namespace {

using ojson = nlohmann::ordered_json;

ojson response(const std::string& id, const std::string& text) {
  return {{"id", id},
          {"object", "response"},
          {"output",
           ojson::array({{{"id", "msg_" + id},
                          {"type", "message"},
                          {"status", "completed"},
                          {"role", "assistant"},
                          {"content", ojson::array({{{"type", "output_text"},
                                                     {"text", text},
                                                     {"annotations", ojson::array()}}})}}})}};
}

ojson user(const std::string& text) { return {{"role", "user"}, {"content", text}}; }

TEST(ResponseStore, KeepsTheNewestByCount) {
  ResponseStore store(2);
  store.put(response("resp_a", "A"), ojson::array({user("1")}));
  store.put(response("resp_b", "B"), ojson::array({user("2")}));
  store.put(response("resp_c", "C"), ojson::array({user("3")}));
  EXPECT_EQ(store.size(), 2u);
  EXPECT_FALSE(store.response("resp_a"));  // the oldest went first
  ASSERT_TRUE(store.response("resp_b"));
  EXPECT_EQ(*store.response("resp_b"), response("resp_b", "B"));
  // Storing an id again replaces it and makes it the newest.
  store.put(response("resp_b", "B2"), ojson::array({user("2")}));
  store.put(response("resp_d", "D"), ojson::array({user("4")}));
  EXPECT_FALSE(store.response("resp_c"));
  EXPECT_EQ((*store.response("resp_b"))["output"][0]["content"][0]["text"], "B2");
  EXPECT_TRUE(store.erase("resp_b"));
  EXPECT_FALSE(store.erase("resp_b"));
  EXPECT_FALSE(store.response("resp_b"));
  EXPECT_EQ(store.size(), 1u);
}

TEST(ResponseStore, KeepsTheNewestByBytes) {
  const ojson items = ojson::array({user(std::string(1000, 'x'))});
  const size_t one = response("resp_a", "A").dump().size() + items.dump().size();
  ResponseStore store(100, 2 * one + one / 2);  // room for two
  store.put(response("resp_a", "A"), items);
  store.put(response("resp_b", "B"), items);
  store.put(response("resp_c", "C"), items);
  EXPECT_EQ(store.size(), 2u);
  EXPECT_FALSE(store.response("resp_a"));
  EXPECT_TRUE(store.response("resp_c"));
  // One larger than the whole limit is not kept, and drops nothing.
  store.put(response("resp_big", "B"), ojson::array({user(std::string(3 * one, 'y'))}));
  EXPECT_FALSE(store.response("resp_big"));
  EXPECT_EQ(store.size(), 2u);
}

TEST(ResponseStore, OffStoresNothing) {
  ResponseStore store(0);
  EXPECT_FALSE(store.enabled());
  store.put(response("resp_a", "A"), ojson::array());
  EXPECT_EQ(store.size(), 0u);
}

TEST(ResponseStore, PreviousResponseComesBeforeTheInput) {
  ResponseStore store(8);
  // A chain: resp_a answered [user 1]; resp_b continued it with [user 2].
  store.put(response("resp_a", "A"), ojson::array({user("1")}));
  const ojson b_items = with_stored_items(
      ojson{{"input", "2"}, {"previous_response_id", "resp_a"}}, store)["input"];
  store.put(response("resp_b", "B"), b_items);
  const ojson body = ojson::parse(
      R"({"input": [{"role": "user", "content": "3"}], "previous_response_id": "resp_b",
          "instructions": "Be brief.", "max_output_tokens": 5})");
  const ojson out = with_stored_items(body, store);
  EXPECT_FALSE(out.contains("previous_response_id"));
  EXPECT_EQ(out["instructions"], "Be brief.");  // the request's own, not carried over
  EXPECT_EQ(out["max_output_tokens"], 5);
  const ojson& input = out["input"];
  ASSERT_EQ(input.size(), 5u);
  EXPECT_EQ(input[0], user("1"));
  EXPECT_EQ(input[1], response("resp_a", "A")["output"][0]);
  EXPECT_EQ(input[2], user("2"));
  EXPECT_EQ(input[3], response("resp_b", "B")["output"][0]);
  EXPECT_EQ(input[4], user("3"));
  // Without the key, or with null, the body is unchanged.
  const ojson plain = ojson{{"input", "x"}};
  EXPECT_EQ(with_stored_items(plain, store), plain);
  const ojson null_id = ojson{{"input", "x"}, {"previous_response_id", nullptr}};
  EXPECT_EQ(with_stored_items(null_id, store), null_id);
}

TEST(ResponseStore, ItemReferencesAreReplacedByTheStoredItems) {
  ResponseStore store(2);
  // Input items sent with an id are findable too (a client's earlier output, sent back).
  ojson sent = user("1");
  sent["id"] = "msg_sent";
  store.put(response("resp_a", "A"), ojson::array({sent}));
  ASSERT_TRUE(store.item("msg_resp_a"));
  EXPECT_EQ(*store.item("msg_resp_a"), response("resp_a", "A")["output"][0]);
  EXPECT_EQ(*store.item("msg_sent"), sent);
  EXPECT_FALSE(store.item("msg_none"));
  const ojson body = ojson::parse(R"({"input": [{"role": "user", "content": "0"},
      {"type": "item_reference", "id": "msg_resp_a"}, {"role": "user", "content": "2"}]})");
  const ojson out = with_stored_items(body, store);
  ASSERT_EQ(out["input"].size(), 3u);
  EXPECT_EQ(out["input"][1], response("resp_a", "A")["output"][0]);
  EXPECT_EQ(out["input"][2], user("2"));
  // An item two responses hold stays findable while either does.
  store.put(response("resp_b", "B"), ojson::array({sent}));
  EXPECT_TRUE(store.erase("resp_b"));
  EXPECT_EQ(*store.item("msg_sent"), sent);  // through resp_a again
  store.put(response("resp_b", "B"), ojson::array({sent}));
  EXPECT_TRUE(store.erase("resp_a"));
  EXPECT_FALSE(store.item("msg_resp_a"));
  EXPECT_EQ(*store.item("msg_sent"), sent);
  // Dropped as the oldest: its items go with it.
  store.put(response("resp_c", "C"), ojson::array());
  store.put(response("resp_d", "D"), ojson::array());
  EXPECT_FALSE(store.item("msg_sent"));
  EXPECT_FALSE(store.item("msg_resp_b"));
  EXPECT_TRUE(store.item("msg_resp_d"));
}

// The 400 of each mistake, naming previous_response_id (or input).
void expect_bad(const ojson& body, const ResponseStore& store, const std::string& param,
                const std::string& needle) {
  try {
    (void)with_stored_items(body, store);
    ADD_FAILURE() << "accepted: " << body.dump();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << e.what();
    EXPECT_EQ(e.param(), param) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ResponseStore, BadPreviousResponseIsA400) {
  ResponseStore store(8), off(0);
  store.put(response("resp_a", "A"), ojson::array({user("1")}));
  expect_bad({{"input", "x"}, {"previous_response_id", "resp_zz"}}, store,
             "previous_response_id", "'resp_zz' not found");
  expect_bad({{"input", "x"}, {"previous_response_id", 7}}, store, "previous_response_id",
             "must be a string");
  expect_bad({{"input", "x"}, {"previous_response_id", "resp_a"}}, off, "previous_response_id",
             "stores none");
  expect_bad({{"input", 3}, {"previous_response_id", "resp_a"}}, store, "input",
             "a string or a list");
  const ojson ref = ojson::parse(R"({"input": [{"type": "item_reference", "id": "msg_zz"}]})");
  expect_bad(ref, store, "input", "'input[0]': no stored item has the id 'msg_zz'");
  expect_bad(ref, off, "input", "stores none");
  expect_bad(ojson::parse(R"({"input": [{"type": "item_reference", "id": 5}]})"), store, "input",
             "needs a string 'id'");
}

}  // namespace
}  // namespace kestrel::server
