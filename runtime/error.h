// octet::Error and the check macros every layer uses: caller errors, invariants, unconditional
// failures.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace octet {

// The one exception type of the library: message carries file:line and the offending values.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {

template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream out;
  ((out << std::forward<Args>(args)), ...);
  return out.str();
}

[[noreturn]] void throw_error(const char* file, int line, const char* kind, const std::string& msg);

}  // namespace detail
}  // namespace octet

// Caller error: `OCTET_CHECK(n % 16 == 0, "last dim ", n, " must be a multiple of 16")`.
#define OCTET_CHECK(cond, ...)                                            \
  do {                                                                    \
    if (!(cond)) [[unlikely]] {                                           \
      ::octet::detail::throw_error(__FILE__, __LINE__, nullptr,           \
                                   ::octet::detail::concat(__VA_ARGS__)); \
    }                                                                     \
  } while (0)

// Internal invariant: a failure is a bug in octet, not in the caller.
#define OCTET_ASSERT(cond, ...)                                                             \
  do {                                                                                      \
    if (!(cond)) [[unlikely]] {                                                             \
      ::octet::detail::throw_error(__FILE__, __LINE__, "internal error: " #cond,            \
                                   ::octet::detail::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                                                       \
  } while (0)

// Unconditional failure, for the branch that must never be taken or the unsupported case.
#define OCTET_FAIL(...) \
  ::octet::detail::throw_error(__FILE__, __LINE__, nullptr, ::octet::detail::concat(__VA_ARGS__))
