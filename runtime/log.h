// Logging through spdlog to stderr (the library never writes to stdout).
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace octet {

spdlog::logger& logger();
// "trace", "debug", "info", "warn", "error", "critical", "off"; anything else throws.
void set_log_level(std::string_view level);

}  // namespace octet

#define OCTET_LOG_DEBUG(...) ::octet::logger().debug(__VA_ARGS__)
#define OCTET_LOG_INFO(...) ::octet::logger().info(__VA_ARGS__)
#define OCTET_LOG_WARN(...) ::octet::logger().warn(__VA_ARGS__)
#define OCTET_LOG_ERROR(...) ::octet::logger().error(__VA_ARGS__)
