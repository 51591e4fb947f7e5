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
#   TEXT_BENCH_RECIPES="delayed blockwise nvfp4" (the default) picks the recipes beside f32; an
#     entry RECIPE@PATTERN runs RECIPE with the modules PATTERN matches kept in high precision
#     (fp8.high_precision_modules), e.g. nvfp4@layers.*.attn.qkv; an entry RECIPE,KEY=VALUE,...
#     sets recipe keys (configs/README.md), e.g. nvfp4,disable_rht=true,nvfp4_4over6=all (true,
#     false and numbers go in as JSON values, anything else as a string).
#   TEXT_BENCH_SEEDS="1337" (the default) gives the training seeds (weight initialisation): each
#     seed runs f32 and every recipe; a row gives the mean bits per byte and the mean, least and
#     greatest of the per-seed ratios to f32 (one seed's run differs from another's by more than 1%).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
octet="${1:-$root/build/octet}"
steps="${2:-1000}"
text="${3:-/usr/share/vim/vim90/doc/version7.txt}"
shift $(($# < 3 ? $# : 3))
extra=("$@")
recipes="${TEXT_BENCH_RECIPES:-delayed blockwise nvfp4}"
seeds="${TEXT_BENCH_SEEDS:-1337}"
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

# recipe_json "RECIPE,KEY=VALUE,...": the fp8.recipe JSON of an entry's recipe part.
recipe_json() {
  local IFS=, parts kv key value json
  read -ra parts <<<"$1"
  json="{\"recipe\":\"${parts[0]}\""
  for kv in "${parts[@]:1}"; do
    key="${kv%%=*}"
    value="${kv#*=}"
    [[ $value =~ ^(true|false|-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?)$ ]] || value="\"$value\""
    json+=",\"$key\":$value"
  done
  echo "$json}"
}

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
echo "octet train on $text ($(stat -c %s "$text") bytes), $steps steps, batch 16 x 128 bytes, seeds $seeds${extra[*]+, ${extra[*]}}"
# results: lines "ENTRY SEED BPB SECONDS", f32 first for each seed.
results="$work/results"
for seed in $seeds; do
  read -r bpb secs < <(run "f32-$seed" --set fp8.enabled=false --set "training.seed=$seed")
  echo "f32 $seed $bpb $secs" >>"$results"
  for entry in $recipes; do
    recipe="${entry%%@*}"
    args=(--set "fp8.recipe=$(recipe_json "$recipe")" --set "training.seed=$seed")
    [ "$entry" != "$recipe" ] && args+=(--set "fp8.high_precision_modules=[\"${entry#*@}\"]")
    read -r bpb secs < <(run "$seed-$(echo "$entry" | tr -c 'a-z0-9\n' _)" "${args[@]}")
    echo "$entry $seed $bpb $secs" >>"$results"
  done
done
printf '| %-24s | %14s | %25s | %7s |\n' "recipe" "bits per byte" "vs f32 (least-greatest)" "time"
printf '|%s|%s|%s|%s|\n' "--------------------------" "----------------" "---------------------------" "---------"
for entry in f32 $recipes; do
  awk -v e="$entry" '
    $1 == "f32" { f32[$2] = $3 }
    $1 == e { n++; b += $3; t += $4; r = $3 / f32[$2]; s += r
              if (n == 1 || r < lo) lo = r; if (n == 1 || r > hi) hi = r }
    END { printf "| %-24s | %14.4f | %8.4fx (%.4f-%.4f) | %6.0fs |\n", e, b / n, s / n, lo, hi, t / n }
  ' "$results"
done
