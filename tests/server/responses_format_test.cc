// The Responses API's objects and stream events from hand-built output: the event order,
// sequence numbers, item shapes, and the final response equal to the one the stream carries.
#include "server/responses_format.h"

#include <gtest/gtest.h>

namespace kestrel::server {
namespace {

using ojson = nlohmann::ordered_json;
using Events = ResponseBuilder::Events;

ResponseBuilder builder() {
  const ojson settings = {{"temperature", 0.0}, {"tools", ojson::array()}};
  auto ids = std::make_shared<int>(0);
  return ResponseBuilder("resp_1", 1700000000, "m", settings, [ids](const char* prefix) {
    return std::string(prefix) + std::to_string(++*ids);
  });
}

void append(Events& all, const Events& more) { all.insert(all.end(), more.begin(), more.end()); }

std::vector<std::string> types(const Events& events) {
  std::vector<std::string> out;
  for (const ojson& e : events) out.push_back(e["type"]);
  return out;
}

TEST(ResponsesFormat, ReasoningTextAndCallsStreamInTheDocumentedOrder) {
  ResponseBuilder b = builder();
  Events all = b.start();
  append(all, b.add_reasoning("Think"));
  append(all, b.add_reasoning("ing."));
  append(all, b.add_text(""));  // nothing
  append(all, b.add_text("Hello"));
  append(all, b.add_text(", world"));
  append(all, b.add_function_call({"get_weather", R"({"city": "Paris"})"}));
  ResponseUsage usage;
  usage.input_tokens = 10;
  usage.output_tokens = 20;
  usage.reasoning_tokens = 3;
  usage.cached_tokens = 8;
  append(all, b.finish("stop", usage));
  EXPECT_EQ(types(all), (std::vector<std::string>{"response.created",
                                                  "response.in_progress",
                                                  "response.output_item.added",
                                                  "response.content_part.added",
                                                  "response.reasoning_text.delta",
                                                  "response.reasoning_text.delta",
                                                  "response.reasoning_text.done",
                                                  "response.content_part.done",
                                                  "response.output_item.done",
                                                  "response.output_item.added",
                                                  "response.content_part.added",
                                                  "response.output_text.delta",
                                                  "response.output_text.delta",
                                                  "response.output_text.done",
                                                  "response.content_part.done",
                                                  "response.output_item.done",
                                                  "response.output_item.added",
                                                  "response.function_call_arguments.delta",
                                                  "response.function_call_arguments.done",
                                                  "response.output_item.done",
                                                  "response.completed"}));
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i]["sequence_number"], i);

  EXPECT_EQ(all[0]["response"]["status"], "in_progress");
  EXPECT_EQ(all[0]["response"]["output"], ojson::array());
  EXPECT_EQ(all[0]["response"]["temperature"], 0.0);  // the settings are in
  EXPECT_EQ(all[11], ojson::parse(R"({"type": "response.output_text.delta", "sequence_number": 11,
      "item_id": "msg_2", "output_index": 1, "content_index": 0, "delta": "Hello", "logprobs": []})"));
  EXPECT_EQ(all[13]["text"], "Hello, world");
  EXPECT_EQ(all[18], ojson::parse(R"({"type": "response.function_call_arguments.done",
      "sequence_number": 18, "item_id": "fc_3", "output_index": 2, "name": "get_weather",
      "arguments": "{\"city\": \"Paris\"}"})"));

  const ojson& r = b.response();
  EXPECT_EQ(all.back()["response"], r);
  EXPECT_EQ(r["id"], "resp_1");
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["created_at"], 1700000000);
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["error"], nullptr);
  EXPECT_EQ(r["incomplete_details"], nullptr);
  EXPECT_EQ(r["output"], ojson::parse(R"([
      {"id": "rs_1", "type": "reasoning", "summary": [],
       "content": [{"type": "reasoning_text", "text": "Thinking."}], "status": "completed"},
      {"id": "msg_2", "type": "message", "status": "completed", "role": "assistant",
       "content": [{"type": "output_text", "text": "Hello, world", "annotations": []}]},
      {"id": "fc_3", "type": "function_call", "status": "completed", "call_id": "call_4",
       "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}])"));
  EXPECT_EQ(r["usage"], ojson::parse(R"({"input_tokens": 10, "input_tokens_details":
      {"cached_tokens": 8}, "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 3},
      "total_tokens": 30})"));
  // Each item's done event carries the item as the response holds it.
  EXPECT_EQ(all[8]["item"], r["output"][0]);
  EXPECT_EQ(all[15]["item"], r["output"][1]);
  EXPECT_EQ(all[19]["item"], r["output"][2]);
}

TEST(ResponsesFormat, LengthMakesTheResponseAndItsOpenItemIncomplete) {
  ResponseBuilder b = builder();
  (void)b.start();
  (void)b.add_text("cut sho");
  const Events end = b.finish("length", {});
  EXPECT_EQ(end.back()["type"], "response.incomplete");
  const ojson& r = b.response();
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["incomplete_details"], ojson::parse(R"({"reason": "max_output_tokens"})"));
  EXPECT_EQ(r["output"][0]["status"], "incomplete");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "cut sho");
}

TEST(ResponsesFormat, AnEmptyOutputIsAnEmptyMessage) {
  ResponseBuilder b = builder();
  (void)b.start();
  const Events end = b.finish("stop", {});
  EXPECT_EQ(types(end),
            (std::vector<std::string>{"response.output_item.added", "response.content_part.added",
                                      "response.output_text.done", "response.content_part.done",
                                      "response.output_item.done", "response.completed"}));
  EXPECT_EQ(b.response()["output"][0]["content"][0]["text"], "");
}

TEST(ResponsesFormat, FailureEndsWithResponseFailed) {
  ResponseBuilder b = builder();
  (void)b.start();
  (void)b.add_text("partial");
  const Events end = b.fail("engine fault");
  EXPECT_EQ(end.back()["type"], "response.failed");
  EXPECT_EQ(b.response()["status"], "failed");
  EXPECT_EQ(b.response()["error"],
            ojson::parse(R"({"code": "server_error", "message": "engine fault"})"));
}

TEST(ResponsesFormat, SseEventsNameTheirType) {
  const ojson e = {{"type", "response.output_text.delta"}, {"sequence_number", 4}, {"delta", "é"}};
  EXPECT_EQ(
      responses_sse_event(e),
      "event: response.output_text.delta\n"
      "data: {\"type\":\"response.output_text.delta\",\"sequence_number\":4,\"delta\":\"é\"}\n\n");
}

TEST(ResponsesFormat, ListedLogprobsGoWithTheirTextAndGatherInThePart) {
  const ojson hel = {{"token", "Hel"}, {"logprob", -0.5}, {"bytes", {72, 101, 108}}, {"top_logprobs", ojson::array()}};
  const ojson lo = {{"token", "lo"}, {"logprob", -1.25}, {"bytes", {108, 111}}, {"top_logprobs", ojson::array()}};
  // Without list_logprobs the lists stay empty whatever add_text is given.
  {
    ResponseBuilder b = builder();
    (void)b.start();
    const Events e = b.add_text("Hel", ojson::array({hel}));
    EXPECT_EQ(e.back()["logprobs"], ojson::array());
    (void)b.finish("stop", {});
    EXPECT_FALSE(b.response()["output"][0]["content"][0].contains("logprobs"));
  }
  ResponseBuilder b = builder();
  b.list_logprobs();
  Events all = b.start();
  append(all, b.add_reasoning("Hmm"));
  append(all, b.add_text("Hel", ojson::array({hel})));
  append(all, b.add_text("lo", ojson::array({lo})));
  append(all, b.finish("stop", {}));
  std::vector<ojson> deltas, done, parts;
  for (const ojson& e : all) {
    if (e["type"] == "response.output_text.delta") deltas.push_back(e["logprobs"]);
    if (e["type"] == "response.output_text.done") done.push_back(e["logprobs"]);
    if (e["type"] == "response.content_part.added" && e["part"]["type"] == "output_text") {
      parts.push_back(e["part"]["logprobs"]);
    }
  }
  EXPECT_EQ(deltas, (std::vector<ojson>{ojson::array({hel}), ojson::array({lo})}));
  EXPECT_EQ(done, (std::vector<ojson>{ojson::array({hel, lo})}));
  EXPECT_EQ(parts, (std::vector<ojson>{ojson::array()}));  // added empty
  const ojson& message = b.response()["output"][1];
  EXPECT_EQ(message["content"][0]["text"], "Hello");
  EXPECT_EQ(message["content"][0]["logprobs"], ojson::array({hel, lo}));
  EXPECT_FALSE(b.response()["output"][0]["content"][0].contains("logprobs"));  // reasoning
}

}  // namespace
}  // namespace kestrel::server
