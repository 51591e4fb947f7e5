#!/usr/bin/env bash
# `octet train` under mpirun -np 2, as a user runs it. One check per call:
#   run         rank 0 alone prints and writes; metrics lines carry world_size and the bytes a
#               step communicated; a resume with the same ranks continues bit for bit, and one
#               in one process works and says so
#   bad_launch  ranks started with different configs fail before step 1, naming the key
#   rank_error  an exception on one rank (its own data file is too short) ends both ranks with
#               a message naming the rank, well within 60 s
#   kill        a SIGKILLed rank ends the run within 60 s with an error naming the rank
#   llama       a Llama-shaped model (rotary positions, grouped-query heads, RMSNorm, SwiGLU, an
#               untied head) trains on 2 ranks with ZeRO-1 and resumes bit for bit
#   tests/dist/cli_test.sh CHECK OCTET MPIRUN
set -uo pipefail

check="$1"
octet="$2"
mpirun="$3"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
ranks() { bash "$here/run_ranks.sh" "$mpirun" "$@"; }
fail() {
  echo "FAIL: $*"
  exit 1
}
# A short run of the default task: 2 x 8 sequences per step, no evaluation until the end.
short=(--quiet --set training.batch_size=8 --set training.eval_interval=0
  --set training.eval_examples=64 --set training.eval_batches=2 --set schedule.warmup_steps=5
  --set schedule.total_steps=30 --set training.log_interval=1)
# The losses of metrics.jsonl from step $2 on, one per line, as written (every digit).
losses_from() { grep '"loss":' "$1" | grep -v '"eval"' | sed 's/.*"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/' | awk -v s="$2" '$1 >= s'; }

case "$check" in
  run)
    ranks 2 "$octet" train --out "$work/a" "${short[@]}" --set training.steps=20 >"$work/a.out" 2>&1 ||
      fail "2-rank run failed: $(tail -5 "$work/a.out")"
    [ "$(grep -c '^done: 20 steps' "$work/a.out")" = 1 ] || fail "not one summary line: $(cat "$work/a.out")"
    line="$(grep '"step":20,"loss"' "$work/a/metrics.jsonl")"
    echo "$line" | grep -q '"world_size":2' || fail "no world_size 2 in: $line"
    echo "$line" | grep -q '"comm_bytes":{"grads":[1-9][0-9]*,"params":0,"sent":[1-9]' ||
      fail "no comm_bytes in: $line"
    grep -q '"world_size":2,"eval"' "$work/a/metrics.jsonl" || fail "eval line without world_size"
    [ -f "$work/a/checkpoint.safetensors" ] && [ -f "$work/a/loss.svg" ] || fail "run directory incomplete"
    # Uninterrupted to 30 against 20 + resume to 30, both with 2 ranks: the same losses.
    ranks 2 "$octet" train --out "$work/b" "${short[@]}" --set training.steps=30 >"$work/b.out" 2>&1 ||
      fail "30-step run failed: $(tail -5 "$work/b.out")"
    cp -r "$work/a" "$work/c"
    ranks 2 "$octet" train --resume --out "$work/c" --set training.steps=30 --quiet >"$work/c.out" 2>&1 ||
      fail "resume failed: $(tail -5 "$work/c.out")"
    diff <(losses_from "$work/b/metrics.jsonl" 21) <(losses_from "$work/c/metrics.jsonl" 21) ||
      fail "a resume with the same ranks is not bit-exact"
    [ "$(losses_from "$work/c/metrics.jsonl" 21 | wc -l)" = 10 ] || fail "resumed run logged no steps 21-30"
    # One process continues the 2-rank run and says so.
    cp -r "$work/a" "$work/d"
    "$octet" train --resume --out "$work/d" --set training.steps=30 --set training.batch_size=16 \
      >"$work/d.out" 2>&1 || fail "resume in one process failed: $(tail -5 "$work/d.out")"
    grep -q "written by 2 ranks, continued by 1" "$work/d.out" || fail "no note of the rank change: $(cat "$work/d.out")"
    grep -q '"step":30,"loss".*"world_size":1' "$work/d/metrics.jsonl" || fail "one-process resume logged no step 30"
    ;;
  llama)
    llama=(--set model.arch=llama --set model.n_kv_head=2 --set model.norm=rmsnorm
      --set model.activation=swiglu --set model.bias=false --set model.tie_embeddings=false
      --set training.zero_stage=1)
    ranks 2 "$octet" train --out "$work/l30" "${short[@]}" "${llama[@]}" --set training.steps=30 \
      >"$work/l30.out" 2>&1 || fail "2-rank Llama run failed: $(tail -5 "$work/l30.out")"
    ranks 2 "$octet" train --out "$work/l" "${short[@]}" "${llama[@]}" --set training.steps=20 \
      >"$work/l.out" 2>&1 || fail "2-rank Llama run to 20 failed: $(tail -5 "$work/l.out")"
    ranks 2 "$octet" train --resume --out "$work/l" --set training.steps=30 --quiet \
      >"$work/lr.out" 2>&1 || fail "Llama resume failed: $(tail -5 "$work/lr.out")"
    diff <(losses_from "$work/l30/metrics.jsonl" 21) <(losses_from "$work/l/metrics.jsonl" 21) ||
      fail "a 2-rank Llama resume is not bit-exact"
    [ "$(losses_from "$work/l/metrics.jsonl" 21 | wc -l)" = 10 ] || fail "resumed Llama logged no steps 21-30"
    ;;
  bad_launch)
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
      "$mpirun" --oversubscribe --bind-to none \
      -np 1 "$octet" train --out "$work/e" "${short[@]}" --set training.steps=5 --set training.batch_size=8 : \
      -np 1 "$octet" train --out "$work/e" "${short[@]}" --set training.steps=5 --set training.batch_size=16 \
      >"$work/e.out" 2>&1 && fail "ranks with different configs ran"
    grep -q "rank 1 has training.batch_size=16 but rank 0 has training.batch_size=8" "$work/e.out" ||
      fail "the error does not name the key: $(cat "$work/e.out")"
    [ ! -e "$work/e/metrics.jsonl" ] || fail "a step ran before the error"
    ;;
  rank_error)
    mkdir -p "$work/r0" "$work/r1"
    head -c 20000 /dev/urandom | base64 >"$work/r0/input.txt"
    head -c 60 /dev/urandom | base64 >"$work/r1/input.txt"  # too short for one batch
    text=(--set data.kind=text --set data.path=input.txt --set model.seq_len=32 --set training.steps=50)
    start=$SECONDS
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
      "$mpirun" --oversubscribe --bind-to none \
      -np 1 -wdir "$work/r0" "$octet" train --out out "${short[@]}" "${text[@]}" : \
      -np 1 -wdir "$work/r1" "$octet" train --out out "${short[@]}" "${text[@]}" \
      >"$work/r.out" 2>&1 && fail "a failing rank did not fail the run"
    elapsed=$((SECONDS - start))
    grep -q "rank 1: error: octet train: .*has no segment of" "$work/r.out" ||
      fail "no error naming rank 1: $(cat "$work/r.out")"
    [ "$elapsed" -lt 60 ] || fail "the run took ${elapsed}s to end"
    echo "ended ${elapsed}s after the start"
    ;;
  kill)
    ranks 2 "$octet" train --out "$work/k" "${short[@]}" --set training.steps=100000 \
      --set schedule.total_steps=100000 >"$work/k.out" 2>&1 &
    launcher=$!
    for _ in $(seq 300); do
      grep -q '"step":3,' "$work/k/metrics.jsonl" 2>/dev/null && break
      sleep 0.1
    done
    grep -q '"step":3,' "$work/k/metrics.jsonl" || fail "training did not start: $(cat "$work/k.out")"
    victim=""
    for pid in $(pgrep -f "$octet train --out $work/k"); do
      if tr '\0' '\n' </proc/"$pid"/environ 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then victim=$pid; fi
    done
    [ -n "$victim" ] || fail "rank 1 not found"
    start=$SECONDS
    kill -KILL "$victim"
    for _ in $(seq 600); do
      kill -0 "$launcher" 2>/dev/null || break
      sleep 0.1
    done
    elapsed=$((SECONDS - start))
    if kill -0 "$launcher" 2>/dev/null; then
      kill -KILL "$launcher"
      fail "the run was still going 60 s after rank 1 was killed"
    fi
    wait "$launcher" && fail "mpirun exited 0 after a rank was killed"
    grep -q "rank 1 .*exited on signal 9" "$work/k.out" || fail "no message naming rank 1: $(cat "$work/k.out")"
    echo "ended ${elapsed}s after rank 1 was killed"
    ;;
  *)
    fail "unknown check $check"
    ;;
esac
echo "PASS: $check"
