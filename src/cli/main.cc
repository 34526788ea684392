// kestrel: the command-line front end.
#include <cstdio>
#include <exception>
#include <optional>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "kestrel/version.h"
#include "kestrel/worker.h"

int main(int argc, char** argv) {
  // A tensor-parallel rank this program started on its own host (worker.h).
  if (std::optional<int> rc = kestrel::run_worker_if_spawned(argc, argv)) return *rc;
  CLI::App app{"kestrel: an LLM inference engine (Qwen3, Qwen2, Llama) for CPU and CUDA"};
  app.set_version_flag("--version", std::string("kestrel ") + kestrel::kVersion);
  app.require_subcommand(1);
  std::vector<std::pair<CLI::App*, kestrel::cli::Runner>> commands;
  auto add = [&](kestrel::cli::Runner (*make)(CLI::App&)) {
    size_t before = app.get_subcommands({}).size();
    kestrel::cli::Runner run = make(app);
    commands.emplace_back(app.get_subcommands({})[before], std::move(run));
  };
  add(kestrel::cli::add_generate_command);
  add(kestrel::cli::add_bench_command);
  add(kestrel::cli::add_make_model_command);
  add(kestrel::cli::add_serve_command);
  add(kestrel::cli::add_bench_serve_command);
  add(kestrel::cli::add_chat_command);
  CLI11_PARSE(app, argc, argv);
  try {
    for (auto& [sub, run] : commands) {
      if (sub->parsed()) return run();
    }
  } catch (const kestrel::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 1;
}
