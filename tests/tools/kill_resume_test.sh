#!/usr/bin/env bash
# kill -9 at random moments of `octet train`, then --resume, again and again: the losses of the
# finished run must equal an uninterrupted run's bit for bit (every digit metrics.jsonl holds).
#   tests/tools/kill_resume_test.sh OCTET [KILLS] [SEED]
# ctest runs 3 kills; by hand, e.g. `tests/tools/kill_resume_test.sh build/octet 20`. A kill may
# land anywhere: at start-up, mid-step, while metrics.jsonl is appended or rewritten, while a
# checkpoint is written. A run killed before its first checkpoint starts over (--overwrite); a
# run that finished before its kill is checked and a new one started, so every kill is counted.
set -uo pipefail

octet="$1"
kills="${2:-3}"
seed="${3:-$(date +%s)}"
RANDOM="$seed"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL (seed $seed): $*"
  exit 1
}
echo "kill_resume_test: $kills kills, seed $seed"

# The tiny model of tests/tools/cli_test.cpp for 100 steps (about a second), a checkpoint every
# 4 steps, a line every step.
run=(--quiet --threads 1 --set model.n_layer=1 --set model.d_model=32 --set model.n_head=2
  --set data.task_digits=4 --set training.steps=100 --set training.batch_size=8
  --set training.eval_examples=16 --set training.eval_batches=1 --set training.eval_interval=0
  --set training.checkpoint_interval=4 --set training.log_interval=1 --set schedule.warmup_steps=2)
# "step loss" of every training line, as written.
losses() { grep -v '"eval"' "$1" | sed -n 's/^{"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/p'; }

start_ns=$(date +%s%N)
"$octet" train --out "$work/ref" "${run[@]}" >"$work/ref.out" 2>&1 || fail "reference run failed: $(cat "$work/ref.out")"
ref_ms=$((($(date +%s%N) - start_ns) / 1000000))
losses "$work/ref/metrics.jsonl" >"$work/ref.losses"
[ "$(wc -l <"$work/ref.losses")" = 100 ] || fail "the reference run logged $(wc -l <"$work/ref.losses") steps, not 100"

check_finished() {
  losses "$work/run/metrics.jsonl" >"$work/run.losses"
  diff "$work/ref.losses" "$work/run.losses" >"$work/diff" ||
    fail "after $1 kills the losses differ from the uninterrupted run's: $(head -5 "$work/diff")"
}

done_kills=0
finished=0
while [ "$done_kills" -lt "$kills" ]; do
  if [ -f "$work/run/checkpoint.safetensors" ]; then
    mode=(--resume)
  else
    mode=(--overwrite)  # killed before its first checkpoint (or never started): start over
  fi
  "$octet" train --out "$work/run" "${mode[@]}" "${run[@]}" >>"$work/run.out" 2>&1 &
  pid=$!
  # Anywhere in the time a whole run takes, start-up included.
  delay_ms=$((RANDOM % (ref_ms + 1)))
  sleep "$((delay_ms / 1000)).$(printf '%03d' $((delay_ms % 1000)))"
  if kill -9 "$pid" 2>/dev/null; then
    wait "$pid" 2>/dev/null
    done_kills=$((done_kills + 1))
    echo "kill $done_kills after ${delay_ms} ms ($(cat "$work/run/metrics.jsonl" 2>/dev/null | grep -c '"loss"') metrics lines, ${mode[0]})"
  else
    wait "$pid" || fail "a run ended with an error: $(tail -3 "$work/run.out")"
    check_finished "$done_kills"
    finished=$((finished + 1))
    rm -rf "$work/run"  # finished before the kill: check it, then start a new one
  fi
done
if [ -f "$work/run/checkpoint.safetensors" ]; then
  mode=(--resume)
else
  mode=(--overwrite)
fi
"$octet" train --out "$work/run" "${mode[@]}" "${run[@]}" >>"$work/run.out" 2>&1 ||
  fail "the last resume failed: $(tail -3 "$work/run.out")"
check_finished "$done_kills"
echo "kill_resume_test: OK ($kills kills, $((finished + 1)) finished runs equal the uninterrupted one; reference run ${ref_ms} ms)"
