#!/usr/bin/env bash
# Generation speed beside PyTorch in one run: `octet bench generate` (f32, key/value cache) and
# bench/torch_generate.py (the same model shape with a key/value cache in PyTorch), alternated
# over rounds; prints each one's ms per token at positions 128 and 1024, octet's 1024/128 ratio
# and PyTorch / octet, with the processor.
#   bench/generate_bench.sh [octet binary] [rounds] [threads]   (defaults: build/octet, 3, 2)
source "$(dirname "${BASH_SOURCE[0]}")/../tools/lib.sh"
octet="${1:-$root/build/octet}"
rounds="${2:-3}"
threads="${3:-2}"
require_torch
echo "processor: $(processor), $threads threads"
for r in $(seq "$rounds"); do
  "$octet" bench generate --precision f32 --threads "$threads" --json --reps 3 \
    > "$work/octet.$r.json"
  OMP_WAIT_POLICY=PASSIVE "$python" "$root/bench/torch_generate.py" "$threads" 3 > "$work/torch.$r.jsonl"
done
"$python" - "$work" "$rounds" <<'PY'
import json, statistics, sys
log, rounds = sys.argv[1], int(sys.argv[2])
octet, torch = {}, {}
for r in range(1, rounds + 1):
    for row in json.load(open(f"{log}/octet.{r}.json")):
        octet.setdefault(row["bench"], []).append(row["median_ms"])
    for line in open(f"{log}/torch.{r}.jsonl"):
        row = json.loads(line)
        torch.setdefault(row["bench"], []).append(row["median_ms"])
print(f"{'bench':24} {'octet ms/token':>15} {'torch ms/token':>15} {'torch/octet':>12}")
for name in sorted(octet):
    o = statistics.median(octet[name])
    t = statistics.median(torch[name]) if name in torch else float("nan")
    print(f"{name:24} {o:15.2f} {t:15.2f} {t / o:12.2f}")
o128, o1024 = statistics.median(octet["generate.kv_pos128"]), statistics.median(octet["generate.kv_pos1024"])
print(f"octet cost at 1024 / at 128: {o1024 / o128:.2f}x")
PY
