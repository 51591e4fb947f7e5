#!/usr/bin/env bash
# The test command: sets up if needed (tools/setup.sh), builds, runs the whole ctest suite, then
# runs the CUDA backend's tests (tests/cuda, and tests/devices on every device) on the CPU in the
# CUDA emulation build: the real kernel sources on an emulated device (tests/cuda_emu/README.md),
# since CI has no GPU; then tools/sanitize.sh: the CPU suite under ASan + UBSan, every fuzzer for
# 20 s (FUZZ_SECONDS; tools/sanitize.sh alone gives each 60 s), and the threaded tests under
# TSan. Each phase's time is printed.
#   tools/test.sh [build-dir]          (the emulation build goes to <build-dir>-emu, the
#                                       sanitizer builds to <build-dir>-san and -san-tsan)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
emu="${build}-emu"

# Each phase's wall time, printed as it ends and together at the end (CI must stay under 25 min).
times=()
timed() {  # timed NAME COMMAND...
  local name=$1 start
  shift
  start=$(date +%s)
  "$@"
  times+=("$(printf '%-40s %5d s' "$name" $(($(date +%s) - start)))")
  echo "== test: $name took $(($(date +%s) - start)) s"
}
trap 'echo "== test: phase times"; printf "   %s\n" "${times[@]}"' EXIT
timed "docs check (tools/check_docs.sh)" "$root/tools/check_docs.sh"

# One GPU architecture for the CUDA kernels (90a, Hopper, the GPU gpu-check has run on): they have no
# per-architecture code, so a second one (CMakeLists.txt's default adds 89) doubles nvcc's time
# and checks nothing more. A build folder configured before keeps its architectures.
timed "setup and build ($build)" env OCTET_CUDA_ARCHITECTURES="${OCTET_CUDA_ARCHITECTURES:-90a}" \
  "$root/tools/setup.sh" "$build"
jobs=$(nproc)
timed "ctest ($build)" bash -c "cd '$build' && ctest -j $jobs --output-on-failure --timeout 900"

emu_build() {
  if [ ! -f "$emu/build.ninja" ]; then
    cmake -S "$root" -B "$emu" -G Ninja -DCMAKE_BUILD_TYPE=Release -DOCTET_CUDA_EMULATION=ON
  fi
  cmake --build "$emu" --target octet_cuda_tests octet_devices_tests octet_cuda_emu_selftest
}
timed "CUDA emulation build ($emu)" emu_build
timed "CUDA emulation ctest -L cuda" bash -c "cd '$emu' && ctest -j $jobs -L cuda --output-on-failure --timeout 900"

# ASan + UBSan of the CPU suite, the fuzzers, TSan of the threaded tests (prints its own phases).
# 20 s per fuzzer keeps CI within its time (docs/perf/2026-12-ci-times.md).
timed "sanitizers and fuzzers (tools/sanitize.sh)" \
  env FUZZ_SECONDS="${FUZZ_SECONDS:-20}" "$root/tools/sanitize.sh" "${build}-san"
