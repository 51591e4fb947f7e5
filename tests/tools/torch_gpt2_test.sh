#!/usr/bin/env bash
# bench/torch_gpt2.py and `octet bench model` compare only if they read the same tokens and
# count the same model: octet reads the shard the script writes (--write-shard, no torch needed),
# and both report the parameters and FLOPs a token worked out by hand in tests/tools/
# bench_test.cpp (2 layers, d 64, 4 heads, vocab 256, seq 32: 118528 and 748032). Where a python3
# has torch, the script's own run on that shard must print the same two numbers.
#   tests/tools/torch_gpt2_test.sh OCTET
set -euo pipefail

octet=$1
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/torch_gpt2_test.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
field() { grep -o "\"$1\": *[^,}]*" "$2" | tail -n 1 | sed 's/^[^:]*: *//'; }
shape=(--layers 2 --d-model 64 --heads 4 --vocab 256 --seq 32 --batch 2)

python3 "$root/bench/torch_gpt2.py" --write-shard "$tmp/tokens.bin" --shard-tokens 129 \
  --vocab 256 || fail "--write-shard failed"
"$octet" bench model --json --precision f32 --reps 1 --warmup 0 "${shape[@]}" \
  --data "$tmp/tokens.bin" >"$tmp/octet.json" || fail "octet bench model could not read the shard"
[ "$(field params "$tmp/octet.json")" = 118528 ] || fail "octet params: $(cat "$tmp/octet.json")"
[ "$(field flops_per_token "$tmp/octet.json")" = 748032.0 ] ||
  fail "octet FLOPs a token: $(cat "$tmp/octet.json")"
echo "octet read the script's shard: 118528 parameters, 748032 FLOPs a token"

for python in python3 /usr/bin/python3; do
  if "$python" -c "import torch" 2>/dev/null; then
    "$python" "$root/bench/torch_gpt2.py" --device cpu --threads 1 --steps 1 --warmup 0 \
      --no-compile "${shape[@]}" --data "$tmp/tokens.bin" >"$tmp/torch.json" ||
      fail "bench/torch_gpt2.py failed"
    [ "$(field params "$tmp/torch.json")" = 118528 ] || fail "torch params: $(cat "$tmp/torch.json")"
    [ "$(field flops_per_token "$tmp/torch.json")" = 748032 ] ||
      fail "torch FLOPs a token: $(cat "$tmp/torch.json")"
    echo "$python's torch $(field torch "$tmp/torch.json"): the same counts"
    exit 0
  fi
done
echo "no python3 with torch here: the PyTorch side was not run (apt-get install python3-torch)"
