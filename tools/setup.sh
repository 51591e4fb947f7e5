#!/usr/bin/env bash
# Installs what octet needs on Debian 12 (only what is missing), then configures and builds.
# Safe to run again: a second run installs nothing and rebuilds only what changed.
#   tools/setup.sh [build-dir]      (default: build)
#   OCTET_CUDA_ARCHITECTURES=90a tools/setup.sh   builds the CUDA kernels for those GPUs only
#   OCTET_SETUP_PEERS=1 tools/setup.sh   also installs python3-torch (large), the PyTorch peer of
#                                        bench/peer_bench.sh; nothing else needs it
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"

packages=(cmake ninja-build g++ pkg-config libfmt-dev libspdlog-dev nlohmann-json3-dev
          libgtest-dev libdnnl-dev clang-format libopenmpi-dev openmpi-bin
          vim-runtime   # vim-runtime: the text of bench/text_bench.sh
          python3-numpy  # tests/support/hf_reference.py: Hugging Face folders and GPT-2 logits
          libopenblas-dev  # only bench/octet_gemm_peers links it (optional: it builds without)
          # tools/sanitize.sh: clang with the sanitizer and libFuzzer runtimes, LLVM's OpenMP
          # (clang's -fopenmp) and llvm-symbolizer for readable sanitizer reports
          clang libclang-rt-14-dev libomp-dev llvm)
[ "${OCTET_SETUP_PEERS:-0}" = 1 ] && packages+=(python3-torch)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# CUDA is optional. nvcc may be installed without being on PATH (the toolkit's default place).
# OCTET_CUDA_ARCHITECTURES picks the GPU architectures (default: CMakeLists.txt's 89 and 90a).
cuda_args=()
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  cuda_args=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi
if [ -n "${OCTET_CUDA_ARCHITECTURES:-}" ]; then
  cuda_args+=("-DCMAKE_CUDA_ARCHITECTURES=$OCTET_CUDA_ARCHITECTURES")
fi

bash "$root/tests/support/node/setup.sh" || echo "setup: npm packages unavailable; the tokenizer's peer tests will fail"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}"
fi
cmake --build "$build"
