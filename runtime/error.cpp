// Builds the text of an octet::Error: "file:line: message".
#include "runtime/error.h"

#include <cstring>

namespace octet::detail {

[[noreturn]] void throw_error(const char* file, int line, const char* kind,
                              const std::string& msg) {
  const char* base = std::strrchr(file, '/');
  std::string text = concat(base ? base + 1 : file, ":", line, ": ");
  if (kind != nullptr) {
    text += kind;
    if (!msg.empty()) text += ": ";
  }
  text += msg;
  throw Error(text);
}

}  // namespace octet::detail
