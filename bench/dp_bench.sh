#!/usr/bin/env bash
# Data-parallel throughput on the CPU: `octet train` (the default model and task) as 1 rank x 2
# threads against 2 ranks x 1 thread (plain, ZeRO-1, and ZeRO-1 with FP8 primary weights, whose
# GEMM weights are gathered as FP8 bytes), with the same global batch of 64
# sequences (1 x 64, or 2 x 32). The configurations take turns, REPEATS times, so that noise
# on the machine falls on all of them; each run's tokens/s is the median of its logged
# intervals after the first two (warm-up), and the table gives the median over the repeats, the
# ratio to 1 x 2 measured in the same run of this script, and the bytes each rank sent per step
# (metrics.jsonl's comm_bytes). The processor comes first (lscpu).
#   bench/dp_bench.sh [OCTET] [STEPS] [REPEATS]     (defaults: build/octet 300 3)
source "$(dirname "${BASH_SOURCE[0]}")/../tools/lib.sh"
octet="${1:-$root/build/octet}"
steps="${2:-300}"
repeats="${3:-3}"
# A benchmark run by hand as root (a container) needs Open MPI's consent; set for this script.
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

common=(--quiet --set "training.steps=$steps" --set training.eval_interval=0
  --set training.eval_examples=64 --set training.checkpoint_interval=0
  --set training.log_interval=25)

field() { sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p"; }

# run NAME RANKS ARGS...: one training (RANKS > 1: under mpirun, each rank bound to a core);
# prints the run's median tokens/s.
run() {
  local name="$1" ranks="$2" out="$work/$1"
  shift 2
  local launcher=()
  if [ "$ranks" -gt 1 ]; then launcher=(mpirun -np "$ranks" --bind-to core); fi
  rm -rf "$out"
  "${launcher[@]}" "$octet" train --out "$out" "${common[@]}" "$@" >"$work/$name.log" 2>&1 || {
    cat "$work/$name.log" >&2
    return 1
  }
  grep '"tokens_per_s"' "$out/metrics.jsonl" | tail -n +3 | field tokens_per_s | median
}

echo "processor: $(processor), $(nproc) cores"
echo "octet train, default model and task, global batch 64 sequences, $steps steps per run, $repeats repeats"
declare -A rates=()
for _ in $(seq "$repeats"); do
  rates[1x2]+="$(run one 1 --threads 2 --set training.batch_size=64) "
  rates[2x1]+="$(run two 2 --threads 1 --set training.batch_size=32) "
  rates[2x1z]+="$(run zero 2 --threads 1 --set training.batch_size=32 --set training.zero_stage=1) "
  rates[2x1zp]+="$(run zerofp8 2 --threads 1 --set training.batch_size=32 --set training.zero_stage=1 \
    --set model.fp8_primary_weights=true) "
done
base="$(echo "${rates[1x2]}" | tr ' ' '\n' | grep . | median)"
bytes_of() { grep '"comm_bytes"' "$work/$1/metrics.jsonl" | tail -n 1 | sed 's/.*"comm_bytes":\({[^}]*}\).*/\1/'; }
printf '| %-22s | %12s | %8s | %s |\n' "ranks x threads" "tokens/s" "vs 1x2" "bytes per step and rank"
printf '|%s|%s|%s|%s|\n' "------------------------" "--------------" "----------" "---"
for key in 1x2 2x1 2x1z 2x1zp; do
  m="$(echo "${rates[$key]}" | tr ' ' '\n' | grep . | median)"
  case "$key" in
    1x2) label="1 x 2" bytes="-" ;;
    2x1) label="2 x 1" bytes="$(bytes_of two)" ;;
    2x1z) label="2 x 1, ZeRO-1" bytes="$(bytes_of zero)" ;;
    2x1zp) label="2 x 1, ZeRO-1, FP8 pw" bytes="$(bytes_of zerofp8)" ;;
  esac
  printf '| %-22s | %12.0f | %7.2fx | %s |\n' "$label" "$m" "$(awk -v a="$m" -v b="$base" 'BEGIN {print a / b}')" "$bytes"
done
echo "each run's tokens/s (in the order run): 1x2 ${rates[1x2]}; 2x1 ${rates[2x1]};" \
  "2x1 ZeRO-1 ${rates[2x1z]}; 2x1 ZeRO-1 FP8 primary weights ${rates[2x1zp]}"
