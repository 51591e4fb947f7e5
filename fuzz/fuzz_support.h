// What every fuzz harness shares: the input written to a file (on a RAM file system where there
// is one), the rule that bad input ends as an octet::Error naming the input, and the abort that
// makes libFuzzer keep any input breaking a rule.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <typeinfo>

#include "runtime/error.h"
#include "runtime/tensor.h"

namespace octet::fuzz {

// A path for `name` in this process's own scratch directory (under /dev/shm when it exists, so
// the harnesses' writes and fsyncs never touch a disk). Made once, removed at exit.
std::string scratch_path(std::string_view name);

void write_file(const std::string& path, std::string_view bytes);
std::string read_file(const std::string& path);

// Prints `what` and aborts: libFuzzer reports the input as a crash and keeps it.
[[noreturn]] void fail(const std::string& what);

// Logging off (a warning per input would slow the fuzzer down to the speed of the terminal),
// one CPU thread. Called from each harness's LLVMFuzzerInitialize.
void quiet_library();

// Whether `text` names a device or kernel file (/dev/, /proc/, /sys/): a config may name a recipe
// file, and reading /dev/zero or /dev/stdin as one never ends. That is the operating system's
// behaviour, not a parser's, so the config harnesses skip such inputs.
bool names_special_file(std::string_view text);

// The harness's entry points: libFuzzer's initialisation quiets the library (quiet_library), and
// every input goes, as bytes, to `fn(const std::string&)`, which returns 0.
#define OCTET_FUZZ_HARNESS(fn)                                              \
  extern "C" int LLVMFuzzerInitialize(int*, char***) {                      \
    octet::fuzz::quiet_library();                                           \
    return 0;                                                               \
  }                                                                         \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { \
    return fn(std::string(reinterpret_cast<const char*>(data), size));      \
  }

// Whether two tensors hold the same dtype, shape and bytes.
bool same_tensor(const Tensor& a, const Tensor& b);

// Runs `parse`. Returns true when it returned; false when it threw an octet::Error whose message
// holds `names` (the file, or what the input is called; empty: any message). Any other
// exception, or an Error that does not name the input, aborts.
template <typename Fn>
bool parses(std::string_view names, Fn&& parse) {
  try {
    parse();
    return true;
  } catch (const Error& e) {
    if (!names.empty() && std::string_view(e.what()).find(names) == std::string_view::npos) {
      fail("the error does not name \"" + std::string(names) + "\": " + e.what());
    }
    return false;
  } catch (const std::exception& e) {
    fail(std::string("an exception other than octet::Error escaped: ") + typeid(e).name() + ": " +
         e.what());
  } catch (...) {
    fail("an exception that is not a std::exception escaped");
  }
}

// A rule that holds for every input that parsed.
#define OCTET_FUZZ_CHECK(cond, ...)                                                        \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      ::octet::fuzz::fail(                                                                 \
          ::octet::detail::concat("check failed: " #cond " " __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                                                      \
  } while (0)

}  // namespace octet::fuzz
