#!/usr/bin/env bash
# The test command: sets up if needed (tools/setup.sh), builds, runs the whole ctest suite, then
# runs the CUDA backend's tests (tests/cuda, and tests/devices on every device) on the CPU in the
# CUDA emulation build: the real kernel sources on an emulated device (tests/cuda_emu/README.md),
# since CI has no GPU.
#   tools/test.sh [build-dir]          (the emulation build goes to <build-dir>-emu)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
emu="${build}-emu"

"$root/tools/setup.sh" "$build"
(cd "$build" && ctest --output-on-failure --timeout 900)

if [ ! -f "$emu/build.ninja" ]; then
  cmake -S "$root" -B "$emu" -G Ninja -DCMAKE_BUILD_TYPE=Release -DOCTET_CUDA_EMULATION=ON
fi
cmake --build "$emu" --target octet_cuda_tests octet_devices_tests octet_cuda_emu_selftest
(cd "$emu" && ctest -L cuda --output-on-failure --timeout 900)
