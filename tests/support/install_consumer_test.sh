#!/usr/bin/env bash
# Installs the built octet into a temporary prefix, builds examples/consumer against the installed
# CMake package (find_package(octet) + octet::octet) and runs it: the library as a user gets it;
# then, in a build with MPI, runs it again as two data-parallel ranks under mpirun.
# Usage: install_consumer_test.sh <cmake> <build dir> <source dir> <generator> <c++ compiler>
set -euo pipefail

cmake_bin=$1 build_dir=$2 source_dir=$3 generator=$4 cxx=$5

work=$(mktemp -d "${TMPDIR:-/tmp}/octet-install-test.XXXXXX")
trap 'rm -rf "$work"' EXIT

"$cmake_bin" --install "$build_dir" --prefix "$work/prefix" > "$work/install.log"
# The package must stand alone: nothing may point back into the build or source tree.
if grep -rlF -e "$build_dir" -e "$source_dir" "$work/prefix/lib/cmake/octet"; then
  echo "the installed CMake package refers to the build or source tree (see files above)" >&2
  exit 1
fi

"$cmake_bin" -S "$source_dir/examples/consumer" -B "$work/consumer" -G "$generator" \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$work/prefix" \
  > "$work/configure.log" || { cat "$work/configure.log"; exit 1; }
"$cmake_bin" --build "$work/consumer" > "$work/build.log" || { cat "$work/build.log"; exit 1; }
"$work/consumer/consumer"
# The same program data-parallel over two processes, where Open MPI is installed.
if command -v mpirun >/dev/null 2>&1 && [ -f "$build_dir/tests/octet_dist_tests" ]; then
  bash "$source_dir/tests/dist/run_ranks.sh" mpirun 2 "$work/consumer/consumer"
fi
