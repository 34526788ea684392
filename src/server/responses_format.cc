#include "server/responses_format.h"

#include <utility>

namespace kestrel::server {
namespace {

using ojson = nlohmann::ordered_json;

ojson usage_json(const ResponseUsage& u) {
  return {{"input_tokens", u.input_tokens},
          {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
          {"output_tokens", u.output_tokens},
          {"output_tokens_details", {{"reasoning_tokens", u.reasoning_tokens}}},
          {"total_tokens", u.input_tokens + u.output_tokens}};
}

}  // namespace

ojson ResponseBuilder::text_part(bool reasoning, std::string text) const {
  if (reasoning) return {{"type", "reasoning_text"}, {"text", std::move(text)}};
  ojson part = {{"type", "output_text"}, {"text", std::move(text)}, {"annotations", ojson::array()}};
  if (list_logprobs_) part["logprobs"] = open_logprobs_;  // the open message's so far
  return part;
}

ResponseBuilder::ResponseBuilder(std::string id, int64_t created_at, std::string model,
                                 const ojson& settings, NewId new_id)
    : new_id_(std::move(new_id)) {
  response_ = {{"id", std::move(id)},
               {"object", "response"},
               {"created_at", created_at},
               {"status", "in_progress"},
               {"background", false},
               {"error", nullptr},
               {"incomplete_details", nullptr},
               {"model", std::move(model)},
               {"output", ojson::array()},
               {"previous_response_id", nullptr},
               {"usage", nullptr}};
  for (const auto& [key, value] : settings.items()) response_[key] = value;
}

ojson ResponseBuilder::event(const char* type, ojson fields) {
  ojson e = {{"type", type}, {"sequence_number", sequence_number_++}};
  for (auto& [key, value] : fields.items()) e[key] = std::move(value);
  return e;
}

ResponseBuilder::Events ResponseBuilder::start() {
  Events out;
  out.push_back(event("response.created", {{"response", response_}}));
  out.push_back(event("response.in_progress", {{"response", response_}}));
  return out;
}

ResponseBuilder::Events ResponseBuilder::start_queued() {
  ojson queued = response_;
  queued["status"] = "queued";
  Events out;
  out.push_back(event("response.created", {{"response", queued}}));
  out.push_back(event("response.queued", {{"response", queued}}));
  return out;
}

ResponseBuilder::Events ResponseBuilder::in_progress() {
  return {event("response.in_progress", {{"response", response_}})};
}

void ResponseBuilder::open(Open kind, Events& out) {
  if (open_ == kind) return;
  close("completed", out);
  const bool reasoning = kind == Open::kReasoning;
  ojson item;
  if (reasoning) {
    item = {{"id", new_id_("rs_")},
            {"type", "reasoning"},
            {"summary", ojson::array()},
            {"content", ojson::array()},
            {"status", "in_progress"}};
  } else {
    item = {{"id", new_id_("msg_")},
            {"type", "message"},
            {"status", "in_progress"},
            {"role", "assistant"},
            {"content", ojson::array()}};
  }
  const std::string id = item["id"];
  response_["output"].push_back(item);
  open_ = kind;
  open_text_.clear();
  open_logprobs_ = ojson::array();
  const int index = open_index();
  out.push_back(event("response.output_item.added", {{"output_index", index}, {"item", item}}));
  out.push_back(event("response.content_part.added", {{"item_id", id},
                                                      {"output_index", index},
                                                      {"content_index", 0},
                                                      {"part", text_part(reasoning, "")}}));
}

void ResponseBuilder::close(const char* status, Events& out) {
  if (open_ == Open::kNone) return;
  const bool reasoning = open_ == Open::kReasoning;
  const int index = open_index();
  ojson& item = response_["output"][index];
  const std::string id = item["id"];
  const ojson base = {{"item_id", id}, {"output_index", index}, {"content_index", 0}};
  ojson done = base;
  done["text"] = open_text_;
  if (!reasoning) done["logprobs"] = list_logprobs_ ? open_logprobs_ : ojson::array();
  out.push_back(event(reasoning ? "response.reasoning_text.done" : "response.output_text.done",
                      std::move(done)));
  ojson part_done = base;
  part_done["part"] = text_part(reasoning, open_text_);
  out.push_back(event("response.content_part.done", std::move(part_done)));
  item["content"] = ojson::array({text_part(reasoning, open_text_)});
  item["status"] = status;
  out.push_back(event("response.output_item.done", {{"output_index", index}, {"item", item}}));
  open_ = Open::kNone;
  open_text_.clear();
  open_logprobs_ = ojson::array();
}

ResponseBuilder::Events ResponseBuilder::add_piece(Open kind, std::string_view text,
                                                   ojson logprobs) {
  Events out;
  if (text.empty()) return out;
  open(kind, out);
  open_text_ += text;
  if (kind == Open::kMessage && list_logprobs_) {
    for (const ojson& entry : logprobs) open_logprobs_.push_back(entry);
  }
  ojson fields = {{"item_id", response_["output"][open_index()]["id"]},
                  {"output_index", open_index()},
                  {"content_index", 0},
                  {"delta", std::string(text)}};
  if (kind == Open::kMessage) fields["logprobs"] = list_logprobs_ ? std::move(logprobs) : ojson::array();
  out.push_back(
      event(kind == Open::kMessage ? "response.output_text.delta" : "response.reasoning_text.delta",
            std::move(fields)));
  return out;
}

ResponseBuilder::Events ResponseBuilder::add_function_call(const ToolCall& call) {
  Events out;
  close("completed", out);
  ojson item = {{"id", new_id_("fc_")},        {"type", "function_call"}, {"status", "in_progress"},
                {"call_id", new_id_("call_")}, {"name", call.name},       {"arguments", ""}};
  const std::string id = item["id"];
  response_["output"].push_back(item);
  const int index = open_index();
  out.push_back(event("response.output_item.added", {{"output_index", index}, {"item", item}}));
  out.push_back(event("response.function_call_arguments.delta",
                      {{"item_id", id}, {"output_index", index}, {"delta", call.arguments}}));
  out.push_back(event("response.function_call_arguments.done", {{"item_id", id},
                                                                {"output_index", index},
                                                                {"name", call.name},
                                                                {"arguments", call.arguments}}));
  ojson& stored = response_["output"][index];
  stored["arguments"] = call.arguments;
  stored["status"] = "completed";
  out.push_back(event("response.output_item.done", {{"output_index", index}, {"item", stored}}));
  return out;
}

ResponseBuilder::Events ResponseBuilder::finish(const std::string& finish_reason,
                                                const ResponseUsage& usage) {
  Events out;
  const bool complete = finish_reason != "length" && finish_reason != "abort";
  if (response_["output"].empty()) open(Open::kMessage, out);
  close(complete ? "completed" : "incomplete", out);
  response_["status"] = complete ? "completed" : "incomplete";
  if (finish_reason == "length")
    response_["incomplete_details"] = {{"reason", "max_output_tokens"}};
  response_["usage"] = usage_json(usage);
  out.push_back(
      event(complete ? "response.completed" : "response.incomplete", {{"response", response_}}));
  return out;
}

void ResponseBuilder::cancel(const ResponseUsage& usage) {
  Events unsent;
  close("incomplete", unsent);
  response_["status"] = "cancelled";
  response_["usage"] = usage_json(usage);
}

ResponseBuilder::Events ResponseBuilder::fail(const std::string& message) {
  Events out;
  close("incomplete", out);
  response_["status"] = "failed";
  response_["error"] = {{"code", "server_error"}, {"message", message}};
  out.push_back(event("response.failed", {{"response", response_}}));
  return out;
}

std::string responses_sse_event(const ojson& event) {
  return "event: " + event.value("type", "") +
         "\ndata: " + event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
}

}  // namespace kestrel::server
