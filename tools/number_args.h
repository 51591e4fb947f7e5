// Numbers given on the command line: the whole text must be the number, else an error that names
// the option, what it expects and what it got.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>

#include "runtime/error.h"

namespace octet::cli {

inline int64_t parse_int(const std::string& text, std::string_view option, int64_t min) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  OCTET_CHECK(ec == std::errc() && end == text.data() + text.size() && v >= min, option,
              ": expected an integer >= ", min, ", got \"", text, "\"");
  return v;
}

// A finite number, above `min` when `positive`.
inline double parse_double(const std::string& text, std::string_view option,
                           bool positive = false) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  OCTET_CHECK(used == text.size() && used > 0 && std::isfinite(v) && (!positive || v > 0), option,
              ": expected a ", positive ? "positive " : "", "number, got \"", text, "\"");
  return v;
}

}  // namespace octet::cli
