// Stop strings end a sample early: its engine sequence is dropped at once (blocks freed),
// n > 1 samples stop independently, and nothing keeps running (or spinning) afterwards.
#include "server_harness.h"

namespace kestrel::server_test {
namespace {

using json = nlohmann::json;

json post(int port, const json& body) {
  auto res = client(port).Post("/v1/completions", body.dump(), "application/json");
  if (!res || res->status != 200) throw std::runtime_error(res ? res->body : "no response");
  return json::parse(res->body);
}

// A completion without max_tokens stops at 16 tokens, as OpenAI's and vLLM's do; a chat
// completion without it runs to the context's end (only EOS, here ignored, or the context
// stop it), which 40 tokens of a 4,096-token context exceed.
TEST(StopStrings, CompletionsDefaultTo16TokensChatToTheContext) {
  ServerProcess server;
  const json out = post(server.port(), {{"model", kModelName}, {"prompt", "Count:"},
                                        {"temperature", 0}, {"ignore_eos", true}});
  EXPECT_EQ(out["usage"]["completion_tokens"], 16);
  EXPECT_EQ(out["choices"][0]["finish_reason"], "length");
  const json chat = {{"model", kModelName},
                     {"messages", {{{"role", "user"}, {"content", "Count:"}}}},
                     {"temperature", 0},
                     {"ignore_eos", true}};
  auto res = client(server.port()).Post("/v1/chat/completions", chat.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_GT(json::parse(res->body)["usage"]["completion_tokens"].get<int>(), 40);
}

TEST(StopStrings, SamplesStopIndependentlyAndLeaveTheEngineIdle) {
  ServerProcess server;
  const int port = server.port();
  const json base = {{"model", kModelName}, {"prompt", "Write a list of words:"},
                     {"max_tokens", 200},   {"temperature", 1.0},
                     {"seed", 5},           {"n", 2},
                     {"ignore_eos", true}};
  const json free_run = post(port, base);
  const std::string text0 = free_run["choices"][0]["text"];
  const std::string text1 = free_run["choices"][1]["text"];
  // A stop string early in sample 0's text (ASCII, so it cannot split a character).
  std::string stop;
  for (size_t k = 4; k + 3 <= text0.size() && stop.empty(); ++k) {
    const std::string s = text0.substr(k, 3);
    bool ascii = true;
    for (unsigned char c : s) ascii = ascii && c >= 0x21 && c < 0x7f;
    if (ascii && text0.find(s) == k) stop = s;
  }
  ASSERT_FALSE(stop.empty()) << text0;

  const std::string before = get_metrics(port);
  json with_stop = base;
  with_stop["stop"] = stop;
  const json out = post(port, with_stop);
  const json& c0 = out["choices"][0];
  EXPECT_EQ(c0["text"], text0.substr(0, text0.find(stop)));
  EXPECT_EQ(c0["finish_reason"], "stop");
  EXPECT_EQ(c0["stop_reason"], stop);
  const size_t cut = text1.find(stop);
  EXPECT_EQ(out["choices"][1]["text"], cut == std::string::npos ? text1 : text1.substr(0, cut));
  EXPECT_EQ(out["choices"][1]["finish_reason"], cut == std::string::npos ? "length" : "stop");
  EXPECT_LT(out["usage"]["completion_tokens"].get<int>(), 400);

  // n = 1 as well, then everything must be idle: no sequence, no block, no busy thread.
  json single = with_stop;
  single["n"] = 1;
  const json single_out = post(port, single);
  EXPECT_EQ(single_out["choices"][0]["finish_reason"], "stop");
  ASSERT_TRUE(wait_engine_idle(port, 5s));
  const std::string after = get_metrics(port);
  EXPECT_EQ(*metric(after, "kestrel:request_success_total", "finished_reason=\"stop\"") -
                *metric(before, "kestrel:request_success_total", "finished_reason=\"stop\""),
            2);
  // A stopped sample's sequence is dropped within a few steps of the stop string (the
  // handler may lag the engine a little), not run on to max_tokens (200).
  const int reported = out["usage"]["completion_tokens"].get<int>() +
                       single_out["usage"]["completion_tokens"].get<int>();
  const int stopped_samples = cut == std::string::npos ? 2 : 3;
  EXPECT_LE(*metric(after, "kestrel:generation_tokens_total") -
                *metric(before, "kestrel:generation_tokens_total"),
            reported + 40 * stopped_samples);
  const double cpu0 = cpu_seconds(server.child().pid());
  std::this_thread::sleep_for(1s);
  EXPECT_LT(cpu_seconds(server.child().pid()) - cpu0, 0.2) << "the idle server keeps a core busy";
}

}  // namespace
}  // namespace kestrel::server_test
