// The "octet" spdlog logger.
#include "runtime/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "runtime/error.h"
#include "runtime/log_plain.h"

namespace octet {

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> instance = [] {
    auto existing = spdlog::get("octet");
    return existing ? existing : spdlog::stderr_color_mt("octet");
  }();
  return *instance;
}

void set_log_level(std::string_view level) {
  static constexpr std::string_view kNames[] = {"trace", "debug",    "info", "warn",
                                                "error", "critical", "off"};
  for (size_t i = 0; i < std::size(kNames); ++i) {
    if (kNames[i] == level) {
      logger().set_level(static_cast<spdlog::level::level_enum>(i));
      return;
    }
  }
  OCTET_FAIL("unknown log level \"", level,
             "\": expected trace, debug, info, warn, error, critical or off");
}

void log_info_message(std::string_view message) { logger().info("{}", message); }
void log_warning_message(std::string_view message) { logger().warn("{}", message); }

}  // namespace octet
