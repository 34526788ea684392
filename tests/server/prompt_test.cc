// What the server feeds the engine, checked against oracles outside the server:
//  - chat with tools, a tool call whose arguments come as JSON text, and
//    chat_template_kwargs: the prompt must be what Python's jinja2 renders (tools/render_jinja.py)
//    tokenized by the tokenizer, shown by the usage count and by the greedy continuation
//    matching the offline engine's on that prompt;
//  - stop_token_ids and echo against the offline engine's tokens.
#include <cstdio>
#include <fstream>

#include "kestrel/llm.h"
#include "server_harness.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::server_test {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Python's jinja2, run the way transformers runs chat templates.
std::string render_with_python(const ojson& job) {
  const std::string dir = std::string(KESTREL_BINARY_DIR);
  const std::string in = dir + "/server_jinja_in_" + std::to_string(getpid()) + ".json";
  const std::string out = dir + "/server_jinja_out_" + std::to_string(getpid()) + ".txt";
  std::ofstream(in) << job.dump();
  const std::string cmd =
      "python3 " + source_path("tools/render_jinja.py") + " < " + in + " > " + out;
  const int rc = std::system(cmd.c_str());
  std::string text = read_file(out);
  std::remove(in.c_str());
  std::remove(out.c_str());
  if (rc != 0) throw std::runtime_error("render_jinja.py failed");
  return text;
}

std::vector<int> greedy(LLM& llm, const std::vector<int>& prompt, int max_tokens) {
  SamplingParams p = llm.default_sampling_params();
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return llm.generate(std::vector<std::vector<int>>{prompt}, p, false)
      .at(0)
      .outputs.at(0)
      .token_ids;
}

TEST(Prompt, ChatWithToolsAndKwargsIsWhatJinja2Renders) {
  const ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Weather in a city", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
  const ojson messages = ojson::parse(R"([
      {"role": "system", "content": "Use tools when useful."},
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
      {"role": "user", "content": [{"type": "text", "text": "And"}, {"type": "text", "text": "tomorrow?"}]}])");

  // What the server should render: vLLM's inputs to the template (text parts joined with
  // "\n", tool-call arguments as an object), plus the template kwargs.
  ojson py_messages = messages;
  py_messages[2]["tool_calls"][0]["function"]["arguments"] = ojson{{"city", "Paris"}};
  py_messages[4]["content"] = "And\ntomorrow?";
  const Tokenizer tokenizer = Tokenizer::from_dir(model_dir());
  const json config = json::parse(read_file(model_dir() + "/tokenizer_config.json"));
  const ojson job = {{"template", config["chat_template"]},
                     {"context",
                      {{"messages", py_messages},
                       {"tools", tools},
                       {"add_generation_prompt", true},
                       {"enable_thinking", false},
                       {"bos_token", tokenizer.bos_token()},
                       {"eos_token", tokenizer.eos_token()}}}};
  const std::string rendered = render_with_python(job);
  ASSERT_NE(rendered.find("get_weather"), std::string::npos) << rendered;
  ASSERT_NE(rendered.find("<think>\n\n</think>"), std::string::npos) << rendered;
  const std::vector<int> prompt = tokenizer.encode(rendered, false);

  LLM llm = offline_llm();
  const std::string expected = tokenizer.decode(greedy(llm, prompt, 8), true);

  ServerProcess server;
  const ojson body = {{"model", kModelName},
                      {"messages", messages},
                      {"tools", tools},
                      {"tool_choice", "auto"},
                      {"chat_template_kwargs", {{"enable_thinking", false}}},
                      {"max_tokens", 8},
                      {"temperature", 0},
                      {"ignore_eos", true}};
  auto res = client(server.port()).Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json out = json::parse(res->body);
  EXPECT_EQ(out["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(out["choices"][0]["message"]["content"], expected);
}

// The shapes clients send that the template must see as its usual ones (session 31's
// fuzzing: the first two were template errors, 400): an assistant turn that only calls a tool
// with content null or absent renders as with content "" (the form the test above checks
// against jinja2), and a "developer" message as a system one.
TEST(Prompt, ClientMessageShapesRenderAsTheirUsualForms) {
  ServerProcess server;
  auto tokens = [&](const ojson& messages) {
    const ojson body = {{"model", kModelName}, {"messages", messages}};
    auto res = client(server.port()).Post("/tokenize", body.dump(), "application/json");
    EXPECT_TRUE(res);
    if (!res) return json();
    EXPECT_EQ(res->status, 200) << res->body;
    return json::parse(res->body)["tokens"];
  };
  const ojson turn = ojson::parse(R"([{"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}])");
  const json expected = tokens(turn);
  ASSERT_TRUE(expected.is_array() && !expected.empty());
  ojson null_content = turn;
  null_content[1]["content"] = nullptr;
  EXPECT_EQ(tokens(null_content), expected);
  ojson no_content = turn;
  no_content[1].erase("content");
  EXPECT_EQ(tokens(no_content), expected);

  const json system = tokens(ojson::parse(R"([{"role": "system", "content": "Be brief."},
                                             {"role": "user", "content": "Hi"}])"));
  EXPECT_EQ(tokens(ojson::parse(R"([{"role": "developer", "content": "Be brief."},
                                   {"role": "user", "content": "Hi"}])")),
            system);
}

// --chat-template (vLLM's flag): a file used instead of the model's template, rendered as
// Python's jinja2 renders it.
TEST(Prompt, ChatTemplateFlagReplacesTheModels) {
  const std::string tmpl =
      "{% for m in messages %}<{{ m.role | upper }}>{{ m.content }}\n{% endfor %}"
      "{% if add_generation_prompt %}<ASSISTANT>{% endif %}";
  const std::string path = std::string(KESTREL_BINARY_DIR) + "/server_chat_template_" +
                           std::to_string(getpid()) + ".jinja";
  std::ofstream(path) << tmpl;
  const ojson messages = ojson::parse(R"([{"role": "system", "content": "Be brief."},
                                          {"role": "user", "content": "Hello there"}])");
  const std::string rendered = render_with_python(
      {{"template", tmpl}, {"context", {{"messages", messages}, {"add_generation_prompt", true}}}});
  ASSERT_EQ(rendered, "<SYSTEM>Be brief.\n<USER>Hello there\n<ASSISTANT>");
  const Tokenizer tokenizer = Tokenizer::from_dir(model_dir());

  ServerProcess server({"--chat-template", path});
  const ojson body = {{"model", kModelName}, {"messages", messages}, {"max_tokens", 2}};
  auto res = client(server.port()).Post("/v1/chat/completions", body.dump(), "application/json");
  std::remove(path.c_str());
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body)["usage"]["prompt_tokens"], tokenizer.encode(rendered, false).size());
}

TEST(Prompt, StopTokenIdsAndEchoAgainstTheOfflineEngine) {
  const Tokenizer tokenizer = Tokenizer::from_dir(model_dir());
  const std::string text = "Counting sheep: one, two, three, four";
  const std::vector<int> prompt = tokenizer.encode(text, true);
  LLM llm = offline_llm();
  const std::vector<int> reference = greedy(llm, prompt, 12);
  // Stop at the third generated token's id: the output ends at its first occurrence.
  const int stop_id = reference[2];
  const size_t first = std::find(reference.begin(), reference.end(), stop_id) - reference.begin();

  ServerProcess server;
  const json body = {{"model", kModelName}, {"prompt", text},     {"max_tokens", 12},
                     {"temperature", 0},    {"ignore_eos", true}, {"stop_token_ids", {stop_id}}};
  auto res = client(server.port()).Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json out = json::parse(res->body);
  EXPECT_EQ(out["usage"]["completion_tokens"], first + 1);
  EXPECT_EQ(out["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(out["choices"][0]["stop_reason"], stop_id);
  // The stop token itself adds no text (vLLM's rule, without include_stop_str_in_output).
  const std::vector<int> kept(reference.begin(), reference.begin() + first);
  EXPECT_EQ(out["choices"][0]["text"], tokenizer.decode(kept, true));

  // echo: the prompt text, then the completion.
  json echo = body;
  echo.erase("stop_token_ids");
  echo["echo"] = true;
  auto echoed = client(server.port()).Post("/v1/completions", echo.dump(), "application/json");
  ASSERT_TRUE(echoed);
  ASSERT_EQ(echoed->status, 200) << echoed->body;
  EXPECT_EQ(json::parse(echoed->body)["choices"][0]["text"],
            text + tokenizer.decode(reference, true));
}

}  // namespace
}  // namespace kestrel::server_test
