# Sourced by the scripts in bench/ and tools/: strict mode, $root (the repository), $work (a
# scratch folder removed on exit) and the checks and lines those scripts share.
#   source "$(dirname "${BASH_SOURCE[0]}")/../tools/lib.sh"
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
script="$(basename "$0" .sh)"  # the prefix of this script's messages

# A script that has more to undo on exit defines on_exit; it runs before $work is removed.
work="$(mktemp -d)"
lib_exit() {
  if declare -F on_exit >/dev/null; then on_exit; fi
  rm -rf "$work"
}
trap lib_exit EXIT

die() {  # die MESSAGE...: the message on stderr, prefixed with the script's name; exit 1
  echo "$script: $*" >&2
  exit 1
}

require_binary() {  # require_binary PATH WHAT: exits when PATH is not an executable
  [ -x "$1" ] || die "no $2 binary at $1 (build first)"
}

# The processor's model name: /proc/cpuinfo's, else lscpu's.
processor() {
  local cpu
  cpu="$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null |
    sed 's/^model name[[:space:]]*:[[:space:]]*//' || true)"
  [ -n "$cpu" ] || cpu="$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -1)"
  echo "${cpu:-unknown}"
}

# require_torch: sets $python (PYTHON, else /usr/bin/python3, else python3 on PATH); without
# PyTorch there it says so and exits 0, since a missing peer is no failure.
require_torch() {
  python="${PYTHON:-/usr/bin/python3}"
  [ -n "${PYTHON:-}" ] || [ -x "$python" ] || python=python3
  if ! "$python" -c "import torch" 2>/dev/null; then
    echo "python3-torch not installed: apt-get install python3-torch (or OCTET_SETUP_PEERS=1 tools/setup.sh)"
    exit 0
  fi
}

median() {  # the median of the numbers on stdin, one a line
  sort -g | awk '{a[NR]=$1} END {if (NR) print (NR % 2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'
}
