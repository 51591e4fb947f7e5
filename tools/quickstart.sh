#!/usr/bin/env bash
# The README's first command: installs what is missing and builds (tools/setup.sh), then runs
# the built-in default training run (`octet train`) into runs/default.
#   tools/quickstart.sh [octet train options...]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/tools/setup.sh" "$root/build"
cd "$root"
exec "$root/build/octet" train "$@"
