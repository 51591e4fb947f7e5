#!/usr/bin/env bash
# Held-out bits per byte of the block-scaled recipes against f32 on a real text: `octet train` on
# Vim's version-7 notes (/usr/share/vim/vim90/doc/version7.txt, 675 KB of English prose and
# lists, shipped by Debian's vim-runtime, which tools/setup.sh installs), a byte-level GPT
# (2 layers, d_model 128, context 128, batch 16), the same seeds and the same data order in every
# run; the last 10% of the file is held out. Each run evaluates once, at the end, on 16 batches of
# 16 x 128 held-out bytes (half of the held-out part, the same bytes for every run); the table
# gives the bits per byte and the ratio to f32's. Prints the processor first.
#   bench/text_bench.sh [OCTET] [STEPS] [TEXT] [--set KEY=VALUE ...]
#     (defaults: build/octet 1000 version7.txt); the --set arguments after the text go to every
#     run after the ones above, e.g. a wider model: --set model.d_model=256
#   TEXT_BENCH_RECIPES="delayed blockwise nvfp4" (the default) picks the recipes beside f32.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
octet="${1:-$root/build/octet}"
steps="${2:-1000}"
text="${3:-/usr/share/vim/vim90/doc/version7.txt}"
shift $(($# < 3 ? $# : 3))
extra=("$@")
recipes="${TEXT_BENCH_RECIPES:-delayed blockwise nvfp4}"
if [ ! -r "$text" ]; then
  echo "text_bench: $text is missing (Debian's vim-runtime ships it; tools/setup.sh installs it)" >&2
  exit 1
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

common=(--quiet --set data.kind=text --set "data.path=$text" --set data.val_fraction=0.1
  --set model.n_layer=2 --set model.d_model=128 --set model.n_head=4 --set model.seq_len=128
  --set training.batch_size=16 --set "training.steps=$steps" --set training.eval_interval=0
  --set training.eval_batches=16 --set training.checkpoint_interval=0 --set training.log_interval=50
  --set optimizer.lr=0.002 --set schedule.warmup_steps=100)

# run NAME ARGS...: one training; prints its final held-out bits per byte and wall seconds.
run() {
  local name="$1" out="$work/$1"
  shift
  local start end
  start="$(date +%s.%N)"
  "$octet" train --out "$out" "${common[@]}" ${extra[@]+"${extra[@]}"} "$@" >"$work/$name.log" 2>&1 || {
    cat "$work/$name.log" >&2
    return 1
  }
  end="$(date +%s.%N)"
  local bpb
  bpb="$(grep '"eval"' "$out/metrics.jsonl" | tail -n 1 | sed -n 's/.*"value":\([0-9.e+-]*\).*/\1/p')"
  echo "$bpb $(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.0f", b - a}')"
}

echo "processor: $(lscpu | sed -n 's/^Model name: *//p' | head -n 1), $(nproc) cores"
echo "octet train on $text ($(stat -c %s "$text") bytes), $steps steps, batch 16 x 128 bytes${extra[*]+, ${extra[*]}}"
read -r f32 f32_s < <(run f32 --set fp8.enabled=false)
printf '| %-10s | %14s | %8s | %6s |\n' "recipe" "bits per byte" "vs f32" "time"
printf '|%s|%s|%s|%s|\n' "------------" "----------------" "----------" "--------"
printf '| %-10s | %14.4f | %8s | %5ss |\n' "f32" "$f32" "1" "$f32_s"
for recipe in $recipes; do
  read -r bpb secs < <(run "$recipe" --set "fp8.recipe={\"recipe\":\"$recipe\"}")
  printf '| %-10s | %14.4f | %7.4fx | %5ss |\n' "$recipe" "$bpb" \
    "$(awk -v a="$bpb" -v b="$f32" 'BEGIN {print a / b}')" "$secs"
done
