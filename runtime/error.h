// octet::Error and the check macros every layer uses: caller errors, invariants, unconditional
// failures.
#pragma once

#include <new>
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

namespace octet {

// Runs `fn` (a parser of outside input) so that it fails only with octet::Error: another
// exception (std::bad_alloc from an absurd size, a library's own exception) becomes an Error
// whose message starts with `context` (which names the file).
template <typename Fn>
decltype(auto) with_error_context(const std::string& context, Fn&& fn) {
  try {
    return fn();
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    OCTET_FAIL(context, ": out of memory while reading it (a size in it is too large?)");
  } catch (const std::exception& e) {
    OCTET_FAIL(context, ": ", e.what());
  }
}

}  // namespace octet
