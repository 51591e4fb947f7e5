// GoogleTest entry point shared by every test binary: quiet library logging unless asked.
//
// OCTET_TEST_ONLY_WITH_AVX512=1 (set by the ctest entries that run tests again with every CPU
// path held to AVX2, tests/CMakeLists.txt): on a processor without AVX-512 the default entries
// already took those paths, so the binary runs nothing, prints why and exits with
// kSkipReturnCode, which ctest reports as skipped (not passed).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/fp8_simd.h"
#include "runtime/log.h"

namespace {
constexpr int kSkipReturnCode = 77;  // SKIP_RETURN_CODE of those entries
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const char* only_avx512 = std::getenv("OCTET_TEST_ONLY_WITH_AVX512");
  if (only_avx512 != nullptr && std::strcmp(only_avx512, "1") == 0 &&
      !octet::cpu::simd_path_available(octet::cpu::SimdPath::kAvx512)) {
    std::printf(
        "skipped: this processor has no AVX-512 (widest path: %s), so holding the CPU "
        "paths to AVX2 repeats what the default entries ran\n",
        octet::cpu::simd_path_name(octet::cpu::default_simd_path()));
    return kSkipReturnCode;
  }
  octet::set_log_level("warn");
  return RUN_ALL_TESTS();
}
