// Logging through spdlog. Use KS_LOG_INFO("loaded {} tensors", n) and friends.
#pragma once

#include <spdlog/spdlog.h>

#define KS_LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define KS_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define KS_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define KS_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)
