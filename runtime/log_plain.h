// Logging for translation units that cannot include spdlog (CUDA files: nvcc does not compile
// fmt 9's compile-time format checks). The messages go to the same "octet" logger as
// OCTET_LOG_* (runtime/log.h).
#pragma once

#include <string_view>

namespace octet {

void log_info_message(std::string_view message);
void log_warning_message(std::string_view message);

}  // namespace octet
