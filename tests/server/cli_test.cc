// The `kestrel` command line on bad and awkward input (issue #17's probe): each case runs
// the built binary on the tiny model and checks the exit status and the message.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server_harness.h"

namespace kestrel::server_test {
namespace {

struct CliRun {
  int code = -1;
  std::string output;
};

// `kestrel <args...>` to its end (60 s at most), stdin closed.
CliRun kestrel_run(std::vector<std::string> args) {
  args.insert(args.begin(), std::string(KESTREL_BINARY_DIR) + "/kestrel");
  Child child(args, child_env());
  child.close_stdin();
  const std::optional<int> code = child.wait(60s);
  return {code.value_or(-1), child.output()};
}

// `generate` on the tiny model; `extra` adds flags (--threads among them: 2 if not given).
std::vector<std::string> generate(std::vector<std::string> extra) {
  std::vector<std::string> args = {"generate",     "--model", model_dir(),     "--device", "cpu",
                                   "--num-kv-blocks", "64",   "--max-tokens", "3",
                                   "--temperature", "0"};
  if (std::find(extra.begin(), extra.end(), "--threads") == extra.end()) {
    args.insert(args.end(), {"--threads", "2"});
  }
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

TEST(Cli, BracketedValuesAreOneValue) {
  const CliRun chat = kestrel_run(generate({"--messages", R"([{"role":"user","content":"Hi"}])"}));
  EXPECT_EQ(chat.code, 0) << chat.output;
  EXPECT_EQ(count(chat.output, "--- prompt:"), 1u) << chat.output;
  const CliRun text = kestrel_run(generate({"--prompt", "[a,b]"}));
  EXPECT_EQ(text.code, 0) << text.output;
  EXPECT_EQ(count(text.output, "--- prompt:"), 1u) << text.output;
  EXPECT_NE(text.output.find("--- prompt: [a,b]"), std::string::npos) << text.output;
  // Repeating the flag still gives several prompts.
  const CliRun two = kestrel_run(generate({"--prompt", "a", "--prompt", "b"}));
  EXPECT_EQ(count(two.output, "--- prompt:"), 2u) << two.output;
}

TEST(Cli, OutOfRangeNumbersGetPlainMessages) {
  const CliRun threads = kestrel_run(generate({"--prompt", "hi", "--threads", "100000"}));
  EXPECT_EQ(threads.code, 1) << threads.output;  // an error, not a crash (139) in OpenMP
  EXPECT_NE(threads.output.find("num_threads must be between 0"), std::string::npos)
      << threads.output;
  for (const char* flag : {"--block-size", "--max-num-seqs"}) {
    const CliRun zero = kestrel_run(generate({"--prompt", "hi", flag, "0"}));
    EXPECT_NE(zero.code, 0) << flag;
    EXPECT_NE(zero.output.find("must be at least 1, got 0"), std::string::npos) << zero.output;
    EXPECT_EQ(zero.output.find("1797693"), std::string::npos) << zero.output;
  }
  const CliRun serve = kestrel_run({"serve", "--model", model_dir(), "--http-threads", "0"});
  EXPECT_NE(serve.output.find("must be at least 1, got 0"), std::string::npos) << serve.output;
  const CliRun bench = kestrel_run({"bench", "--model", model_dir(), "--num-seqs", "0"});
  EXPECT_NE(bench.output.find("must be at least 1, got 0"), std::string::npos) << bench.output;
}

// --chat-template: a file or the template itself replaces the model's; one that cannot be
// used is refused before the model loads, saying why.
TEST(Cli, ChatTemplateFlag) {
  const std::string path = std::string(KESTREL_BINARY_DIR) + "/cli_chat_template_" +
                           std::to_string(getpid()) + ".jinja";
  { std::ofstream(path) << "{% for m in messages %}Q: {{ m.content }}{% endfor %}"; }
  const std::string messages = R"([{"role":"user","content":"Hi"}])";
  const CliRun file = kestrel_run(generate({"--messages", messages, "--chat-template", path}));
  std::remove(path.c_str());
  EXPECT_EQ(file.code, 0) << file.output;
  // The rendered prompt is the text "Q: Hi" (Qwen3's tokenizer adds no special tokens to
  // text): the same greedy tokens as that text given as the prompt, other than another's.
  const CliRun text = kestrel_run(generate({"--prompt", "Q: Hi"}));
  const CliRun other = kestrel_run(generate({"--prompt", "Q: Bye"}));
  auto ids = [](const std::string& out) {
    const size_t at = out.find("token ids:");
    return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
  };
  EXPECT_NE(ids(file.output), "");
  EXPECT_EQ(ids(file.output), ids(text.output)) << file.output << text.output;
  EXPECT_NE(ids(other.output), ids(file.output));
  const CliRun missing = kestrel_run(generate({"--messages", messages, "--chat-template", path}));
  EXPECT_NE(missing.code, 0);
  EXPECT_NE(missing.output.find("no such file"), std::string::npos) << missing.output;
  const CliRun broken = kestrel_run(generate({"--messages", messages, "--chat-template", "{% if %}"}));
  EXPECT_NE(broken.code, 0);
  EXPECT_NE(broken.output.find("--chat-template"), std::string::npos) << broken.output;
  EXPECT_EQ(broken.output.find("cpu backend"), std::string::npos) << broken.output;  // not loaded
}

// NaN passed CLI::Range and at_least; a seed of 2^64 or more was saturated to 2^64 - 1.
TEST(Cli, NanAndSeedsPast64BitsAreRefused) {
  const CliRun nan = kestrel_run(generate({"--prompt", "hi", "--gpu-memory-utilization", "nan"}));
  EXPECT_NE(nan.code, 0) << nan.output;
  EXPECT_NE(nan.output.find("must be between 0.05 and 1, got nan"), std::string::npos) << nan.output;
  const CliRun seed = kestrel_run(generate({"--prompt", "hi", "--seed", "18446744073709551616"}));
  EXPECT_NE(seed.code, 0) << seed.output;
  EXPECT_NE(seed.output.find("must be below 2^64"), std::string::npos) << seed.output;
  const CliRun largest = kestrel_run(generate({"--prompt", "hi", "--seed", "18446744073709551615"}));
  EXPECT_EQ(largest.code, 0) << largest.output;
  const CliRun bench = kestrel_run({"bench", "--model", model_dir(), "--seed", "1e30"});
  EXPECT_NE(bench.output.find("--seed: must be an integer"), std::string::npos) << bench.output;
}

// --logit-bias ID:BIAS: +100 makes every greedy token that id; a malformed entry or a bias
// out of range is refused, naming the flag or the field.
TEST(Cli, LogitBiasSteersAndMalformedEntriesAreRefused) {
  const CliRun forced =
      kestrel_run(generate({"--prompt-ids", "1,2,3", "--ignore-eos", "--logit-bias", "7:100"}));
  EXPECT_EQ(forced.code, 0) << forced.output;
  EXPECT_NE(forced.output.find("token ids: 7 7 7"), std::string::npos) << forced.output;
  for (const char* bad : {"7", "x:1", "7:", ":1", "7:1e", "7:100,9x"}) {
    const CliRun run = kestrel_run(generate({"--prompt-ids", "1,2", "--logit-bias", bad}));
    EXPECT_NE(run.code, 0) << bad;
    EXPECT_NE(run.output.find("--logit-bias: expected ID:BIAS"), std::string::npos) << run.output;
  }
  const CliRun range = kestrel_run(generate({"--prompt-ids", "1,2", "--logit-bias", "7:1000"}));
  EXPECT_NE(range.code, 0) << range.output;
  EXPECT_NE(range.output.find("logit_bias: the bias of token 7 must be in [-100, 100]"),
            std::string::npos)
      << range.output;
}

// An EOS id the vocabulary lacks can never end a sequence: loading says so (it ran to
// max_tokens unexplained).
TEST(Cli, AnEosIdOutsideTheVocabularyIsReported) {
  const fs::path dir = fs::path(KESTREL_BINARY_DIR) / ("cli_test_eos_model" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::copy(model_dir(), dir, fs::copy_options::recursive);
  for (const char* file : {"config.json", "generation_config.json"}) {
    const fs::path path = dir / file;
    if (!fs::exists(path)) continue;
    nlohmann::json j = nlohmann::json::parse(std::ifstream(path));
    // generation_config.json has no vocab_size: an id no tiny model has.
    j["eos_token_id"] = nlohmann::json::array({j.value("vocab_size", 999994) + 5, 1});
    std::ofstream(path) << j.dump();
  }
  std::vector<std::string> args = generate({"--prompt-ids", "1,2"});
  args[2] = dir.string();  // --model's value
  const CliRun run = kestrel_run(args);
  fs::remove_all(dir);
  EXPECT_EQ(run.code, 0) << run.output;
  EXPECT_NE(run.output.find("is outside the vocabulary"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("will not end a sequence"), std::string::npos) << run.output;
}

TEST(Cli, MakeModelRefusesZeroSizesAndNegativeSeeds) {
  const std::string out = std::string(KESTREL_BINARY_DIR) + "/cli_test_model";
  const CliRun heads = kestrel_run({"make-model", "--out", out, "--heads", "0"});
  EXPECT_NE(heads.code, 0) << heads.output;
  EXPECT_NE(heads.output.find("must be at least 1, got 0"), std::string::npos) << heads.output;
  const CliRun seed = kestrel_run({"make-model", "--out", out, "--seed", "-1"});
  EXPECT_NE(seed.code, 0) << seed.output;
  EXPECT_NE(seed.output.find("must be at least 0, got -1"), std::string::npos) << seed.output;
  EXPECT_FALSE(fs::exists(out + "/config.json"));
}

TEST(Cli, MessagesThatAreNotObjectsWithARoleAreRefused) {
  const CliRun strings = kestrel_run(generate({"--messages", R"(["a","b"])"}));
  EXPECT_EQ(strings.code, 1) << strings.output;  // was 0, the template rendered nothing of them
  EXPECT_NE(strings.output.find("chat message 0 must be an object"), std::string::npos)
      << strings.output;
  const CliRun role = kestrel_run(generate({"--messages", R"([{"content":"Hi"}])"}));
  EXPECT_EQ(role.code, 1) << role.output;
  EXPECT_NE(role.output.find("chat message 0 needs a string 'role'"), std::string::npos)
      << role.output;
}

// bench refuses what cannot run before drawing the workload or running it (these took
// minutes of allocation, ended in std::bad_alloc, or wrote nothing and exited 0).
TEST(Cli, BenchRefusesWorkloadsThatCannotRunAndUnwritableJson) {
  const std::vector<std::string> bench = {"bench", "--model", model_dir(), "--device", "cpu",
                                          "--threads", "2", "--no-ceilings"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = bench;
    args.insert(args.end(), extra.begin(), extra.end());
    return kestrel_run(args);
  };
  const CliRun longer = with({"--num-seqs", "100000", "--fixed-input-len", "1000000",
                              "--fixed-output-len", "10"});
  EXPECT_EQ(longer.code, 1) << longer.output;
  EXPECT_NE(longer.output.find("exceed the model's max_position_embeddings"), std::string::npos)
      << longer.output;
  const CliRun overflow = with({"--num-seqs", "1", "--fixed-input-len", "2147483647",
                                "--fixed-output-len", "2147483647"});
  EXPECT_EQ(overflow.code, 1) << overflow.output;
  EXPECT_NE(overflow.output.find("4294967294 in all"), std::string::npos) << overflow.output;
  const CliRun many = with({"--num-seqs", "2000000000", "--max-input-len", "100",
                            "--max-output-len", "100"});
  EXPECT_EQ(many.code, 1) << many.output;
  EXPECT_NE(many.output.find("GiB for their token ids"), std::string::npos) << many.output;
  const std::string missing_dir = std::string(KESTREL_BINARY_DIR) + "/no_such_dir/out.json";
  const CliRun json = with({"--num-seqs", "1", "--fixed-input-len", "4", "--fixed-output-len",
                            "2", "--json", missing_dir});
  EXPECT_EQ(json.code, 1) << json.output;
  EXPECT_NE(json.output.find("--json " + missing_dir + ": cannot write it"), std::string::npos)
      << json.output;
  EXPECT_EQ(json.output.find("output throughput"), std::string::npos) << "ran before refusing";
  const CliRun top_p = with({"--num-seqs", "1", "--fixed-input-len", "4", "--fixed-output-len",
                             "2", "--top-p", "0"});
  EXPECT_EQ(top_p.code, 1) << top_p.output;
  EXPECT_NE(top_p.output.find("top_p must be in (0, 1], got 0"), std::string::npos) << top_p.output;
  const CliRun penalty = with({"--num-seqs", "1", "--fixed-input-len", "4", "--fixed-output-len",
                               "2", "--repetition-penalty", "0"});
  EXPECT_EQ(penalty.code, 1) << penalty.output;
  EXPECT_NE(penalty.output.find("repetition_penalty"), std::string::npos) << penalty.output;
}

// nano-vLLM's prompt ids run to 10,000: a model with fewer ids takes them modulo its
// vocabulary (was "prompt token 6311 ... is outside the vocabulary"), here through two CPU
// ranks, whose line says how the steps were sampled (gathered logits: the CPU has no
// vocab-parallel sampler). Its rows sample with top_k, top_p and penalties.
TEST(Cli, BenchRunsModelsOfSmallVocabulariesAndSaysHowTpSampled) {
  const std::string dir = std::string(KESTREL_BINARY_DIR) + "/cli_test_small_vocab";
  const CliRun made =
      kestrel_run({"make-model", "--out", dir, "--preset", "tiny", "--vocab-size", "1000"});
  ASSERT_EQ(made.code, 0) << made.output;
  const CliRun bench = kestrel_run({"bench", "--model", dir, "--device", "cpu", "--threads", "2",
                                    "--no-ceilings", "--tp", "2", "--num-seqs", "3",
                                    "--fixed-input-len", "12", "--fixed-output-len", "4",
                                    "--top-k", "20", "--top-p", "0.95", "--presence-penalty", "0.5",
                                    "--repetition-penalty", "1.05"});
  EXPECT_EQ(bench.code, 0) << bench.output;
  EXPECT_NE(bench.output.find("output throughput"), std::string::npos) << bench.output;
  EXPECT_NE(bench.output.find("temperature 0.60, top_k 20, top_p 0.95, repetition_penalty 1.05, "
                               "presence_penalty 0.50"),
            std::string::npos)
      << bench.output;
  // Penalised rows overlap on the CPU (the runner feeds the token in flight to the sampler).
  const size_t overlapped = bench.output.find(" steps launched while the one before ran");
  ASSERT_NE(overlapped, std::string::npos) << bench.output;
  const size_t from = bench.output.rfind("; ", overlapped);
  ASSERT_NE(from, std::string::npos);
  EXPECT_GT(std::stoi(bench.output.substr(from + 2)), 0) << bench.output;
  EXPECT_NE(bench.output.find("tensor parallel:   2 ranks (gloo); 0 of"), std::string::npos)
      << bench.output;
  fs::remove_all(dir);
}

// --regex constrains every output (structured outputs over the model's tokenizer), and on
// the host sampler the constrained steps still overlap (deferred sampling).
TEST(Cli, BenchConstrainsOutputsToARegexAndOverlapsTheirSteps) {
  const CliRun bench = kestrel_run({"bench", "--model", model_dir(), "--device", "cpu", "--threads",
                                    "2", "--no-ceilings", "--num-seqs", "3", "--fixed-input-len",
                                    "12", "--fixed-output-len", "8", "--regex", "[a-z ]+"});
  EXPECT_EQ(bench.code, 0) << bench.output;
  EXPECT_NE(bench.output.find("temperature 0.60, regex [a-z ]+"), std::string::npos) << bench.output;
  const size_t overlapped = bench.output.find(" steps launched while the one before ran");
  ASSERT_NE(overlapped, std::string::npos) << bench.output;
  const size_t from = bench.output.rfind("; ", overlapped);
  ASSERT_NE(from, std::string::npos);
  EXPECT_GT(std::stoi(bench.output.substr(from + 2)), 0) << bench.output;
  const CliRun bad = kestrel_run({"bench", "--model", model_dir(), "--device", "cpu", "--no-ceilings",
                                  "--num-seqs", "1", "--fixed-input-len", "4", "--fixed-output-len",
                                  "2", "--regex", "(unclosed"});
  EXPECT_EQ(bad.code, 1) << bad.output;
}

// Sizes the disk or memory cannot hold are refused before a byte is written (--layers
// 100000 of the 32B preset wrote gigabytes a second until the disk was full).
TEST(Cli, MakeModelRefusesModelsTooLargeForTheDiskOrMemory) {
  const std::string out = std::string(KESTREL_BINARY_DIR) + "/cli_test_huge_model";
  const CliRun disk =
      kestrel_run({"make-model", "--out", out, "--preset", "qwen3-32b", "--layers", "100000"});
  EXPECT_EQ(disk.code, 1) << disk.output;
  EXPECT_NE(disk.output.find("GiB free"), std::string::npos) << disk.output;
  EXPECT_FALSE(fs::exists(out + "/model.safetensors"));
  // Was "error: std::bad_alloc" after config.json and a stub of the weights were written.
  const CliRun vocab = kestrel_run(
      {"make-model", "--out", out, "--vocab-size", "2000000000", "--hidden-size", "4096"});
  EXPECT_EQ(vocab.code, 1) << vocab.output;
  EXPECT_NE(vocab.output.find("random model:"), std::string::npos) << vocab.output;
  EXPECT_EQ(vocab.output.find("bad_alloc"), std::string::npos) << vocab.output;
  EXPECT_FALSE(fs::exists(out + "/model.safetensors"));
  fs::remove_all(out);
}

// Interactive chat: /help and /reset answer without the model, an unknown /command is named,
// and Ctrl-C stops the reply in progress, not the program.
TEST(Cli, ChatCommandsAndCtrlC) {
  Child chat({std::string(KESTREL_BINARY_DIR) + "/kestrel", "chat", "--model", model_dir(),
              "--device", "cpu", "--threads", "2", "--num-kv-blocks", "512", "--ignore-eos",
              "--max-tokens", "3000", "--temperature", "1", "--seed", "3"},
             child_env());
  chat.write_stdin("/help\n/reset\n/frobnicate\n");
  ASSERT_TRUE(chat.wait_for(std::regex("unknown command /frobnicate"), 60s)) << chat.output();
  EXPECT_NE(chat.output().find("/reset  clear the conversation"), std::string::npos);
  EXPECT_NE(chat.output().find("(conversation cleared)"), std::string::npos);
  // A long reply (3,000 tokens): stop it once it has begun.
  const size_t before = chat.output().size();
  chat.write_stdin("Tell me a long story\n");
  const auto deadline = Clock::now() + 60s;
  while (chat.output().size() < before + 200 && Clock::now() < deadline) chat.pump(100ms);
  chat.signal(SIGINT);
  ASSERT_TRUE(chat.wait_for(std::regex(R"( \[stopped\]\n> )"), 30s)) << chat.output();
  chat.write_stdin("/exit\n");
  const std::optional<int> code = chat.wait(30s);
  ASSERT_TRUE(code.has_value()) << chat.output();
  EXPECT_EQ(*code, 0) << chat.output();
}

// The generated text of a one-prompt run: the line after "--- prompt: ...".
std::string text_of(const std::string& out) {
  const size_t prompt = out.find("--- prompt:");
  if (prompt == std::string::npos) return "<no output>";
  const size_t begin = out.find('\n', prompt) + 1;
  return out.substr(begin, out.find("\n--- ", begin) - begin);
}

// --grammar, --grammar-file, --json-schema and --regex (llama.cpp's flag names): each output
// matches what its flag asked, checked here by hand (a choice, a class) and by nlohmann's
// JSON parser; two at once, or one the compiler refuses, is an error naming the flag.
TEST(Cli, StructuredOutputFlags) {
  const CliRun gbnf = kestrel_run(generate({"--prompt", "hi", "--grammar", R"(root ::= "yes" | "no")"}));
  EXPECT_EQ(gbnf.code, 0) << gbnf.output;
  EXPECT_TRUE(text_of(gbnf.output) == "yes" || text_of(gbnf.output) == "no") << gbnf.output;
  const std::string path = std::string(KESTREL_BINARY_DIR) + "/cli_grammar_" + std::to_string(getpid()) + ".lark";
  { std::ofstream(path) << "start: LETTER DIGIT\nLETTER: /[a-c]/\nDIGIT: \"0\"..\"2\"\n"; }
  const CliRun lark = kestrel_run(generate({"--prompt", "hi", "--grammar-file", path}));
  std::remove(path.c_str());
  EXPECT_EQ(lark.code, 0) << lark.output;
  const std::string two = text_of(lark.output);
  EXPECT_TRUE(two.size() == 2 && two[0] >= 'a' && two[0] <= 'c' && two[1] >= '0' && two[1] <= '2')
      << lark.output;
  const CliRun schema = kestrel_run(generate({"--prompt", "hi", "--json-schema", R"({"type": "boolean"})"}));
  EXPECT_EQ(schema.code, 0) << schema.output;
  EXPECT_TRUE(nlohmann::json::parse(text_of(schema.output), nullptr, false).is_boolean()) << schema.output;
  const CliRun regex = kestrel_run(generate({"--prompt", "hi", "--regex", "[0-9]"}));
  EXPECT_EQ(regex.code, 0) << regex.output;
  EXPECT_TRUE(text_of(regex.output).size() == 1 && std::isdigit(text_of(regex.output)[0])) << regex.output;
  const CliRun both = kestrel_run(generate({"--prompt", "hi", "--regex", "a", "--grammar", "root ::= \"a\""}));
  EXPECT_NE(both.code, 0);
  EXPECT_NE(both.output.find("'--grammar' and '--regex' both constrain the output: give one"), std::string::npos) << both.output;
  const CliRun bad = kestrel_run(generate({"--prompt", "hi", "--grammar", "root ::= x"}));
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.output.find("'--grammar': grammar: rule 'x' is used but not defined"), std::string::npos) << bad.output;
  const CliRun not_json = kestrel_run(generate({"--prompt", "hi", "--json-schema", "{oops"}));
  EXPECT_NE(not_json.code, 0);
  EXPECT_NE(not_json.output.find("'--json-schema' is a string that is not a JSON schema"),
            std::string::npos)
      << not_json.output;
  const CliRun missing = kestrel_run(generate({"--prompt", "hi", "--json-schema", "@/nonexistent.json"}));
  EXPECT_NE(missing.output.find("--json-schema: cannot read '/nonexistent.json'"), std::string::npos)
      << missing.output;
}

}  // namespace
}  // namespace kestrel::server_test
