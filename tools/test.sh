#!/usr/bin/env bash
# The test command: sets up if needed (tools/setup.sh), builds, runs the whole ctest suite.
#   tools/test.sh [build-dir]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"

"$root/tools/setup.sh" "$build"
cd "$build"
ctest --output-on-failure --timeout 900
