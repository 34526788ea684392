// The kestrel subcommands. Each registers itself on the app and returns the function that
// runs it once parsing succeeded.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace kestrel::cli {

using Runner = std::function<int()>;

Runner add_generate_command(CLI::App& app);
Runner add_bench_command(CLI::App& app);
Runner add_make_model_command(CLI::App& app);
Runner add_serve_command(CLI::App& app);
Runner add_bench_serve_command(CLI::App& app);
Runner add_chat_command(CLI::App& app);

}  // namespace kestrel::cli
