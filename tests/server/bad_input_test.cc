// Bad input gets an OpenAI-style error ({"error": {"message", "type", "param", "code"}})
// with the right status, never a crash, and a request streaming at the same time is
// unaffected.
#include <algorithm>
#include <future>

#include "raw_http.h"
#include "server_harness.h"

namespace kestrel::server_test {
namespace {

using json = nlohmann::json;

struct Case {
  std::string name;
  std::string path;
  std::string body;
  int status;
  std::string param;  // "" : null
  std::string message_part;
};

// Checks the status and the error shape; returns the error object.
json expect_error(const httplib::Result& res, int status, const std::string& param,
                  const std::string& message_part, const std::string& what) {
  if (!res) {
    ADD_FAILURE() << what << ": no response";
    return {};
  }
  EXPECT_EQ(res->status, status) << what << ": " << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json") << what;
  const json body = json::parse(res->body, nullptr, false);
  if (body.is_discarded() || !body.contains("error") || !body["error"].is_object()) {
    ADD_FAILURE() << what << ": not an OpenAI error body: " << res->body;
    return {};
  }
  const json& e = body["error"];
  EXPECT_TRUE(e.contains("message") && e["message"].is_string() &&
              !e["message"].get<std::string>().empty())
      << what;
  EXPECT_TRUE(e.contains("type") && e["type"].is_string()) << what;
  EXPECT_TRUE(e.contains("code")) << what;
  EXPECT_TRUE(e.contains("param")) << what;
  if (param.empty()) {
    EXPECT_TRUE(e["param"].is_null()) << what << ": " << res->body;
  } else {
    EXPECT_EQ(e.value("param", json()).dump(), json(param).dump()) << what << ": " << res->body;
  }
  if (!message_part.empty()) {
    EXPECT_NE(e["message"].get<std::string>().find(message_part), std::string::npos)
        << what << ": " << e["message"];
  }
  return e;
}

std::string long_prompt(int tokens) {
  json ids = json::array();
  for (int i = 0; i < tokens; ++i) ids.push_back(100 + i % 1000);
  return ids.dump();
}

const std::string kC = "/v1/completions";
const std::string kChat = "/v1/chat/completions";
const std::string kMsgs = R"("messages": [{"role": "user", "content": "hi"}])";

std::vector<Case> cases() {
  return {
      {"malformed JSON", kC, R"({"prompt": "hi",)", 400, "", "not valid JSON"},
      {"body not an object", kC, R"([1, 2])", 400, "", "JSON object"},
      {"nested too deep", kC,
       R"({"prompt": "hi", "user": )" + std::string(100, '[') + std::string(100, ']') + "}", 400,
       "", "nested deeper"},
      {"temperature wrong type", kC, R"({"prompt": "hi", "temperature": "hot"})", 400,
       "temperature", "number"},
      {"max_tokens wrong type", kC, R"({"prompt": "hi", "max_tokens": "5"})", 400, "max_tokens",
       "integer"},
      {"n not an integer", kC, R"({"prompt": "hi", "n": 1.5})", 400, "n", "integer"},
      {"documents not a list", kChat,
       R"({"messages": [{"role": "user", "content": "hi"}], "documents": 123})", 400, "documents",
       "must be a list"},
      {"too many template kwargs", kChat, [] {
         std::string body = R"({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {)";
         for (int i = 0; i < 300; ++i) body += (i ? ", " : "") + std::string("\"k") + std::to_string(i) + "\": 1";
         return body + "}}";
       }(), 400, "chat_template_kwargs", "300 keys; at most 256"},
      {"too many sequences", kC, [] {
         std::string prompts = R"({"n": 128, "max_tokens": 1, "prompt": [)";
         for (int i = 0; i < 40; ++i) prompts += i ? R"(, [1, 2])" : R"([1, 2])";
         return prompts + "]}";
       }(), 400, "prompt", "5120 sequences (40 prompts x n = 128); at most 4096"},
      {"stream wrong type", kC, R"({"prompt": "hi", "stream": "yes"})", 400, "stream", "boolean"},
      {"prompt wrong type", kC, R"({"prompt": 5})", 400, "prompt", ""},
      {"prompt mixed list", kC, R"({"prompt": ["a", 5]})", 400, "prompt", ""},
      {"prompt missing", kC, R"({"max_tokens": 5})", 400, "prompt", "required"},
      {"prompt empty string", kC, R"({"prompt": ""})", 400, "prompt", "empty"},
      {"prompt empty list", kC, R"({"prompt": []})", 400, "prompt", "empty"},
      {"prompt token outside vocabulary", kC, R"({"prompt": [1, 2, 99999999]})", 400, "prompt",
       "vocabulary"},
      {"stop wrong type", kC, R"({"prompt": "hi", "stop": 5})", 400, "stop", ""},
      {"unknown field", kC, R"({"prompt": "hi", "foo": 1})", 400, "foo",
       "Unrecognized request argument supplied: foo"},
      {"chat field on completions", kC, R"({"prompt": "hi", "messages": []})", 400, "messages",
       "Unrecognized"},
      {"unknown chat field", kChat, "{" + kMsgs + R"(, "bar": true})", 400, "bar", "Unrecognized"},
      {"temperature < 0", kC, R"({"prompt": "hi", "temperature": -1})", 400, "temperature",
       "temperature"},
      {"top_p 0", kC, R"({"prompt": "hi", "top_p": 0})", 400, "top_p", "top_p"},
      {"top_k -2", kC, R"({"prompt": "hi", "top_k": -2})", 400, "top_k", "top_k"},
      {"min_p 2", kC, R"({"prompt": "hi", "min_p": 2})", 400, "min_p", "min_p"},
      {"n 0", kC, R"({"prompt": "hi", "n": 0})", 400, "n", "n must be"},
      {"max_tokens 0", kC, R"({"prompt": "hi", "max_tokens": 0})", 400, "max_tokens", "max_tokens"},
      {"logprobs 21", kC, R"({"prompt": "hi", "logprobs": 21})", 400, "logprobs", "logprobs"},
      {"presence_penalty 3", kC, R"({"prompt": "hi", "presence_penalty": 3})", 400,
       "presence_penalty", ""},
      {"frequency_penalty -3", kC, R"({"prompt": "hi", "frequency_penalty": -3})", 400,
       "frequency_penalty", ""},
      {"repetition_penalty 0", kC, R"({"prompt": "hi", "repetition_penalty": 0})", 400,
       "repetition_penalty", ""},
      {"min_tokens > max_tokens", kC, R"({"prompt": "hi", "max_tokens": 2, "min_tokens": 3})", 400,
       "min_tokens", ""},
      {"stop_token_ids outside vocabulary", kC, R"({"prompt": "hi", "stop_token_ids": [99999999]})",
       400, "stop_token_ids", ""},
      // 2^32 once became token 0, and 2^32 + an id that id (session 31's fuzzing).
      {"stop_token_ids 2^32", kC, R"({"prompt": "hi", "stop_token_ids": [4294967296]})", 400,
       "stop_token_ids", "4294967296"},
      {"stop_token_ids -2^32", kC, R"({"prompt": "hi", "stop_token_ids": [-4294967296]})", 400,
       "stop_token_ids", "-4294967296"},
      {"empty stop string", kC, R"({"prompt": "hi", "stop": [""]})", 400, "stop", "empty"},
      {"stream_options without stream", kC,
       R"({"prompt": "hi", "stream_options": {"include_usage": true}})", 400, "stream_options", ""},
      {"continuous_usage_stats not a boolean", kC,
       R"({"prompt": "hi", "stream": true, "stream_options": {"include_usage": true, "continuous_usage_stats": "on"}})",
       400, "stream_options.continuous_usage_stats", "boolean"},
      {"parallel_tool_calls not a boolean", kChat, "{" + kMsgs + R"(, "parallel_tool_calls": 0})",
       400, "parallel_tool_calls", "boolean"},
      {"logit_bias key not a token id", kC, R"({"prompt": "hi", "logit_bias": {"hi": 10}})", 400,
       "logit_bias", "token ids"},
      {"logit_bias out of range", kC, R"({"prompt": "hi", "logit_bias": {"5": 1000}})", 400,
       "logit_bias", "[-100, 100]"},
      {"top_logprobs without logprobs", kChat, "{" + kMsgs + R"(, "top_logprobs": 2})", 400,
       "top_logprobs", ""},
      {"chat logprobs not a boolean", kChat, "{" + kMsgs + R"(, "logprobs": 3})", 400, "logprobs",
       "boolean"},
      {"empty messages", kChat, R"({"messages": []})", 400, "messages", "empty"},
      // Qwen3's template renders nothing for a role it does not know: the text never reached
      // the model, and the request answered 200 (session 31's fuzzing).
      {"unknown role", kChat, R"({"messages": [{"role": "wizard", "content": "hi"}]})", 400,
       "messages", "role 'wizard'"},
      {"empty role", kChat, R"({"messages": [{"role": "", "content": "hi"}]})", 400, "messages",
       "role ''"},
      {"user content null", kChat, R"({"messages": [{"role": "user", "content": null}]})", 400,
       "messages", "needs 'content'"},
      {"user content missing", kChat, R"({"messages": [{"role": "user"}]})", 400, "messages",
       "needs 'content'"},
      // Malformed tools reached the template when tool_choice did not force a call.
      {"tool without function", kChat, "{" + kMsgs + R"(, "tools": [{"type": "function"}]})", 400,
       "tools", "tools[0]"},
      {"tool name not a string", kChat,
       "{" + kMsgs + R"(, "tools": [{"type": "function", "function": {"name": 5}}], "tool_choice": "auto"})",
       400, "tools", "tools[0]"},
      {"tool_choice naming no function", kChat,
       "{" + kMsgs + R"(, "tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": {"type": "function", "function": {"name": ""}}})",
       400, "tool_choice", "names no function"},
      {"too many messages", kChat,
       [] {
         std::string body = R"({"messages": [)";
         for (int i = 0; i < 10001; ++i) {
           if (i > 0) body += ",";
           body += R"({"role": "user", "content": "a"})";
         }
         return body + "]}";
       }(),
       400, "messages", "at most 10000"},
      {"messages not a list", kChat, R"({"messages": "hi"})", 400, "messages", "list"},
      {"message without role", kChat, R"({"messages": [{"content": "hi"}]})", 400, "messages",
       "role"},
      {"content wrong type", kChat, R"({"messages": [{"role": "user", "content": 5}]})", 400,
       "messages", "content"},
      {"image content part", kChat,
       R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})",
       400, "messages", "text"},
      // Found by fuzz_test.cc: a "type" that is not a string was a 500 (nlohmann's type_error).
      {"content part type not a string", kChat,
       R"({"messages": [{"role": "user", "content": [{"type": 5, "text": "hi"}]}]})", 400,
       "messages", "not a text part"},
      {"tool_choice type not a string", kChat,
       "{" + kMsgs + R"(, "tool_choice": {"type": [], "function": {"name": "f"}}})", 400,
       "tool_choice", ""},
      {"chat_template_kwargs not an object", kChat, "{" + kMsgs + R"(, "chat_template_kwargs": 1})",
       400, "chat_template_kwargs", ""},
      // Per-request templates are untrusted: runaway recursion, allocation and loops are
      // template errors (400), not a crashed or exhausted server (src/chat/limits.h).
      {"chat_template recursing forever", kChat,
       "{" + kMsgs +
           R"(, "chat_template": "{% macro f(n) %}{{ f(n+1) }}{% endmacro %}{{ f(0) }}"})",
       400, "messages", "maximum recursion depth"},
      {"chat_template repeating a string 2**63-1 times", kChat,
       "{" + kMsgs + R"(, "chat_template": "{{ 'x' * 9223372036854775807 }}"})", 400, "messages",
       "string too long"},
      {"chat_template looping 1e10 times", kChat,
       "{" + kMsgs +
           R"(, "chat_template": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"})",
       400, "messages", "too long"},
      {"prompt longer than the context", kC, R"({"prompt": )" + long_prompt(4096) + "}", 400,
       "prompt", "maximum context length is 4096"},
      {"prompt + max_tokens beyond the context", kC, R"({"prompt": "hi", "max_tokens": 5000})", 400,
       "max_tokens", "maximum context length"},
      // INT_MAX: the sum with the prompt's length overflowed int and the request passed.
      {"max_tokens 2^31 - 1", kC, R"({"prompt": "hi", "max_tokens": 2147483647})", 400,
       "max_tokens", "maximum context length"},
      {"unknown model", kC, R"({"prompt": "hi", "model": "gpt-4"})", 404, "model",
       "does not exist"},
      {"unknown model (chat)", kChat, "{" + kMsgs + R"(, "model": "gpt-4"})", 404, "model",
       "does not exist"},
  };
}

TEST(BadInput, EachClassGetsItsStatusAndAnOpenAIErrorWhileOthersRun) {
  ServerProcess server;
  const int port = server.port();
  // A streaming request runs while the bad ones come in.
  const json good = {{"model", kModelName}, {"prompt", "A long and steady story"},
                     {"max_tokens", 120},   {"temperature", 1.0},
                     {"seed", 99},          {"ignore_eos", true}};
  auto stream = std::async(std::launch::async, [&] {
    json body = good;
    body["stream"] = true;
    std::string text, events;
    auto res = client(port).Post("/v1/completions", body.dump(), "application/json");
    if (!res) return std::string("no response");
    for (size_t pos = 0; (pos = res->body.find("data: {", pos)) != std::string::npos;) {
      const size_t end = res->body.find("\n\n", pos);
      json chunk = json::parse(res->body.substr(pos + 6, end - pos - 6));
      for (const auto& c : chunk["choices"]) text += c["text"].get<std::string>();
      pos = end;
    }
    return text;
  });

  for (const Case& c : cases()) {
    expect_error(client(port).Post(c.path, c.body, "application/json"), c.status, c.param,
                 c.message_part, c.name);
  }
  // The same mistakes in streaming requests fail before any stream starts.
  expect_error(
      client(port).Post(kC, R"({"prompt": "hi", "stream": true, "top_p": 0})", "application/json"),
      400, "top_p", "", "streamed top_p 0");

  // Body over --max-body-bytes (1,000,000).
  const std::string big = R"({"prompt": ")" + std::string(1'100'000, 'a') + R"("})";
  expect_error(client(port).Post(kC, big, "application/json"), 413, "", "limit", "body too large");
  // The same body chunked (no Content-Length), which httplib alone reads whole however long.
  auto in_chunks = [](const std::string& body) {
    return [&body](size_t offset, httplib::DataSink& sink) {
      const size_t n = std::min<size_t>(size_t{64} << 10, body.size() - offset);
      sink.write(body.data() + offset, n);
      if (offset + n == body.size()) sink.done();
      return true;
    };
  };
  expect_error(client(port).Post(kC, in_chunks(big), "application/json"), 413, "", "limit",
               "chunked body too large");
  // A chunked body under the limit is read as usual.
  const std::string small = R"({"prompt": "hi", "max_tokens": 1})";
  auto chunked = client(port).Post(kC, in_chunks(small), "application/json");
  ASSERT_TRUE(chunked);
  EXPECT_EQ(chunked->status, 200) << chunked->body;
  EXPECT_FALSE(json::parse(chunked->body, nullptr, false).is_discarded()) << chunked->body;

  // A multipart form is refused by name (it was a 500), and a chunked body whose chunk size
  // is not hex is a 400 that says so (it was a 413 "too large"; http_framing_test.cc has the
  // rest of the chunk grammar).
  expect_error(client(port).Post(kC, "--x\r\nContent-Disposition: form-data; name=\"prompt\"\r\n\r\nhi\r\n--x--\r\n",
                                 "multipart/form-data; boundary=x"),
               415, "", "multipart/form-data", "multipart body");
  {
    // httplib's client frames chunks itself, so the malformed framing goes over a raw socket.
    const std::string head = "POST " + kC + " HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " +
                             kApiKey + "\r\nContent-Type: application/json\r\n"
                             "Transfer-Encoding: chunked\r\n\r\n";
    const std::string answer = raw_exchange(port, head + "zz\r\n");
    EXPECT_EQ(answer.rfind("HTTP/1.1 400", 0), 0u) << answer;
    EXPECT_NE(answer.find("is not a chunk size"), std::string::npos) << answer;
  }

  // A Range header does not cut an API answer (httplib would send a 206 with a slice).
  auto ranged = client(port).Post(kC, httplib::Headers{{"Range", "bytes=0-1"}},
                                  R"({"prompt": "hi", "max_tokens": 1})", "application/json");
  ASSERT_TRUE(ranged);
  EXPECT_EQ(ranged->status, 200) << ranged->body;
  EXPECT_FALSE(json::parse(ranged->body, nullptr, false).is_discarded()) << ranged->body;

  // API key: /v1/* needs it; /health and /metrics do not.
  expect_error(client(port, false).Post(kC, R"({"prompt": "hi"})", "application/json"), 401, "", "",
               "no API key");
  auto wrong = client(port, false);
  wrong.set_default_headers({{"Authorization", "Bearer nope"}, {"x-request-id", "trace-401"}});
  auto refused = wrong.Get("/v1/models");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->get_header_value("x-request-id"), "trace-401") << "a refusal keeps the id";
  const json e = expect_error(refused, 401, "", "", "wrong API key");
  EXPECT_EQ(e.value("code", json()), "invalid_api_key");
  // A refused POST's body is never read: the connection closes after the 401, rather than
  // reading the body as the next request (a keep-alive client's next call got a 400).
  {
    const std::string body = R"({"prompt": "hi", "max_tokens": 1})";
    const std::string answer = raw_exchange(
        port, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nope\r\n"
              "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
              "\r\n\r\n" + body + "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_EQ(answer.rfind("HTTP/1.1 401", 0), 0u) << answer;
    EXPECT_NE(answer.find("Connection: close"), std::string::npos) << answer;
    EXPECT_EQ(answer.find("Malformed"), std::string::npos) << answer;
  }
  auto health = client(port, false).Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto metrics = client(port, false).Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);

  // No such route.
  expect_error(client(port).Get("/v1/nothing"), 404, "", "Not found", "unknown route");

  // The stream was not disturbed: its text equals the same request made alone afterwards.
  const std::string streamed = stream.get();
  auto alone = client(port).Post("/v1/completions", good.dump(), "application/json");
  ASSERT_TRUE(alone);
  ASSERT_EQ(alone->status, 200) << alone->body;
  const json alone_body = json::parse(alone->body);
  EXPECT_EQ(streamed, alone_body["choices"][0]["text"].get<std::string>());
  EXPECT_EQ(alone_body["usage"]["completion_tokens"], 120);
  // And the server is still up.
  EXPECT_FALSE(server.child().wait(0ms).has_value()) << server.child().output();
}

}  // namespace
}  // namespace kestrel::server_test
