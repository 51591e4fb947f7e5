#!/usr/bin/env bash
# `octet train` (the default model and task) on a quiet machine and on a busy one: BUSY other
# processes that each keep a core busy (`yes > /dev/null`) run beside it. Quiet and busy runs take
# turns, REPEATS times, and the script prints each run's wall time, the medians and their ratio
# (a fair share on a 2-core machine with two busy processes is 2x). No environment variable is
# set for octet. The processor comes first (lscpu).
#   bench/busy_bench.sh [OCTET] [STEPS] [REPEATS] [BUSY]     (defaults: build/octet 2000 3 2)
source "$(dirname "${BASH_SOURCE[0]}")/../tools/lib.sh"
octet="${1:-$root/build/octet}"
steps="${2:-2000}"
repeats="${3:-3}"
busy="${4:-2}"
hogs=()
on_exit() {
  for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done
}

# One training; prints its wall time in seconds.
run() {
  local out="$work/run"
  rm -rf "$out"
  local t0 t1
  t0=$(date +%s.%N)
  "$octet" train --out "$out" --quiet --set "training.steps=$steps" >"$work/log" 2>&1 || {
    cat "$work/log" >&2
    return 1
  }
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", b - a }' 
}

echo "processor: $(processor), $(nproc) CPUs;" \
  "octet train, $steps steps, default config; busy = $busy x 'yes > /dev/null'"
quiet_times=()
busy_times=()
for ((r = 1; r <= repeats; r++)); do
  q=$(run)
  quiet_times+=("$q")
  for ((i = 0; i < busy; i++)); do
    yes >/dev/null &
    hogs+=("$!")
  done
  b=$(run)
  busy_times+=("$b")
  for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done
  wait "${hogs[@]}" 2>/dev/null || true
  hogs=()
  printf 'turn %d: quiet %.2f s, busy %.2f s\n' "$r" "$q" "$b"
done
qm=$(printf '%s\n' "${quiet_times[@]}" | median)
bm=$(printf '%s\n' "${busy_times[@]}" | median)
printf 'median: quiet %.2f s, busy %.2f s, busy / quiet %.2fx\n' "$qm" "$bm" "$(awk -v a="$bm" -v b="$qm" 'BEGIN { print a / b }')"
