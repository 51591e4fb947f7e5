#!/usr/bin/env bash
# octet's layer step beside PyTorch's (bench/torch_layer.py), interleaved in one run: each round
# runs `octet bench layer` (f32 and FP8 delayed) and the PyTorch step once per setting, and the
# table gives the medians over the rounds of each run's median, with the ratios.
#   bench/peer_bench.sh [octet binary] [rounds] [threads] [reps]
#   (defaults: build/octet, 5, 2, 5). PEER_AVX2=0 skips the emulated AVX2 machine.
# Settings:
#   octet                  as detected (no environment variable)
#   torch SkylakeX         OPENBLAS_CORETYPE=SkylakeX (Debian's OpenBLAS 0.3.21 can take a
#                          recent AVX-512 processor for "Prescott" otherwise)
#   torch detected         OpenBLAS's own choice
#   octet avx2             ONEDNN_MAX_CPU_ISA=AVX2 (octet's GEMM and kernels held to AVX2)
#   torch avx2             OPENBLAS_CORETYPE=Haswell
# PyTorch runs with OMP_WAIT_POLICY=PASSIVE (its OpenMP threads would otherwise spin against
# OpenBLAS's) and torch.set_num_threads(threads).
source "$(dirname "${BASH_SOURCE[0]}")/../tools/lib.sh"
octet="${1:-$root/build/octet}"
rounds="${2:-5}"
threads="${3:-2}"
reps="${4:-5}"
avx2="${PEER_AVX2:-1}"
# Forcing OpenBLAS's SkylakeX kernels, or holding a process to AVX2, needs (and only means
# something on) a processor with AVX-512; on an AVX2 machine the detected settings are the AVX2
# measurement.
avx512=1
grep -q -w avx512f /proc/cpuinfo 2>/dev/null || { avx512=0; avx2=0; }
require_torch
require_binary "$octet" octet

run_octet() {  # name, env...
  local name="$1"; shift
  env "$@" "$octet" bench layer --precision f32,delayed --reps "$reps" --threads "$threads" \
    --json > "$work/out.json"
  "$python" - "$work/out.json" "$name" >> "$work/results" <<'EOF'
import json, sys
for r in json.load(open(sys.argv[1])):
    print(sys.argv[2], r["precision"], r["median_ms"])
EOF
}

run_torch() {  # name, env...
  local name="$1"; shift
  env "$@" OMP_WAIT_POLICY=PASSIVE "$python" "$root/bench/torch_layer.py" --threads "$threads" \
    --reps "$reps" > "$work/out.json"
  "$python" - "$work/out.json" "$name" >> "$work/results" <<'EOF'
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print(sys.argv[2], "f32", r["median_ms"])
print("#", sys.argv[2], "torch", r["torch"], "openblas core", r["openblas_core"],
      "attention:", r["attention"])
EOF
}

echo "peer_bench: $rounds rounds, $threads threads, median of $reps steps per run"
processor
[ "$avx512" = 1 ] || echo "no AVX-512 here: no torch SkylakeX and no held-to-AVX2 settings (the detected ones are AVX2)"
per_round=$((3 + avx512 + 3 * avx2))  # result lines a round adds
for ((round = 1; round <= rounds; ++round)); do
  run_octet octet -u ONEDNN_MAX_CPU_ISA -u OPENBLAS_CORETYPE
  if [ "$avx512" = 1 ]; then run_torch torch-SkylakeX OPENBLAS_CORETYPE=SkylakeX; fi
  run_torch torch-detected -u OPENBLAS_CORETYPE
  if [ "$avx2" = 1 ]; then
    run_octet octet-avx2 -u OPENBLAS_CORETYPE ONEDNN_MAX_CPU_ISA=AVX2
    run_torch torch-avx2 OPENBLAS_CORETYPE=Haswell
  fi
  echo "round $round: $(grep -v '^#' "$work/results" | tail -n "$per_round" |
    awk '{printf "%s %s %.1f ms; ", $1, $2, $3}')"
done

"$python" - "$work/results" <<'EOF'
import collections, statistics, sys
runs = collections.defaultdict(list)
notes = set()
for line in open(sys.argv[1]):
    if line.startswith("#"):
        notes.add(line[2:].strip())
        continue
    name, precision, ms = line.split()
    runs[(name, precision)].append(float(ms))
for n in sorted(notes):
    print(n)
med = {k: statistics.median(v) for k, v in runs.items()}
print()
print(f"{'setting':<16} {'precision':<9} {'median ms':>10} {'range of runs':>18}  ratio")
def row(name, precision, ratio_text):
    v = runs[(name, precision)]
    print(f"{name:<16} {precision:<9} {med[(name, precision)]:10.1f} "
          f"{min(v):8.1f} - {max(v):7.1f}  {ratio_text}")
for suffix in ("", "-avx2"):
    octet = "octet" + suffix
    if (octet, "f32") not in med:
        continue
    base = med[(octet, "f32")]
    row(octet, "f32", "1.00x")
    row(octet, "delayed", f"{med[(octet, 'delayed')] / base:.2f}x octet f32 (FP8 / f32)")
    peers = ["torch-SkylakeX", "torch-detected"] if suffix == "" else ["torch-avx2"]
    for p in peers:
        if (p, "f32") in med:
            row(p, "f32", f"{med[(p, 'f32')] / base:.2f}x octet f32 (torch / octet)")
EOF
