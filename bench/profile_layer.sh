#!/usr/bin/env bash
# Where the `octet bench layer` step's time goes, f32 against FP8 delayed scaling:
#  - every dnnl_sgemm call timed by shape (bench/sgemm_timer.cpp, preloaded), so each Linear
#    GEMM (fprop, dgrad, wgrad of qkv, proj, fc1, fc2) and the attention's per-head GEMMs get
#    their own milliseconds: with OCTET_CPU_GEMM=onednn only (octet's own sgemm, the default,
#    calls no dnnl_sgemm; its kernels and packing are perf groups of their own);
#  - everything else from a perf sample profile (cpu-clock), by function, put into groups
#    (operand conversions, FP8 casts, attention, norms, GELU, AdamW, OpenMP, memory ...).
# Run on one thread by default, where CPU time is wall time and the groups add up to the step.
#   bench/profile_layer.sh [octet binary] [threads] [reps]   (defaults: build/octet, 1, 10)
# Needs perf (linux-perf); without it, only the GEMM part.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
octet="${1:-$root/build/octet}"
threads="${2:-1}"
reps="${3:-10}"
warmup=2
shim="$(dirname "$octet")/bench/liboctet_sgemm_timer.so"
[ -f "$shim" ] || shim="$root/build/bench/liboctet_sgemm_timer.so"
[ -f "$shim" ] || { echo "profile_layer: build the octet_sgemm_timer target first" >&2; exit 1; }
python="${PYTHON:-python3}"
have_perf=0
perf --version >/dev/null 2>&1 && have_perf=1

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for p in f32 delayed; do
  cmd=("$octet" bench layer --precision "$p" --reps "$reps" --warmup "$warmup" --threads "$threads")
  if [ "$have_perf" = 1 ]; then
    OCTET_SGEMM_TIMER_OUT="$out/$p.gemm" LD_PRELOAD="$shim" \
      perf record -q -F 999 -e cpu-clock -o "$out/$p.perf" "${cmd[@]}" > "$out/$p.bench"
    perf script -i "$out/$p.perf" -F ip,sym,dso 2>/dev/null > "$out/$p.samples"
  else
    OCTET_SGEMM_TIMER_OUT="$out/$p.gemm" LD_PRELOAD="$shim" "${cmd[@]}" > "$out/$p.bench"
    : > "$out/$p.samples"
  fi
done
[ "$have_perf" = 1 ] || echo "perf not found: GEMM times only"

"$python" - "$out" "$threads" "$reps" "$warmup" <<'EOF'
import collections, re, sys
out, threads, reps, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
steps = reps + warmup  # the GEMM shim and perf see the warm-up steps too
d, tokens = 768, 1024
linear = {"qkv": (d, 3 * d), "proj": (d, d), "fc1": (d, 4 * d), "fc2": (4 * d, d)}

def gemm_name(ta, tb, m, n, k):
    # As modules/operand.cpp calls them: f32 fprop NT, dgrad NN, wgrad TN; FP8 all NT.
    # The shim sees shapes only: GEMMs of one shape (fc1 fprop and fc2 dgrad, say) share a row.
    names = []
    for name, (i, o) in linear.items():
        if (m, n, k) == (tokens, o, i): names.append(f"{name} fprop")
        if (m, n, k) == (tokens, i, o): names.append(f"{name} dgrad")
        if (m, n, k) == (o, i, tokens): names.append(f"{name} wgrad")
    return "+".join(names) if names else "attention (per head)"

GROUPS = [  # (group, regex on "symbol dso"), first match wins
    ("setup: weights' random init", r"philox|uniforms_to_normal|__cos|__sin|__ieee754_log|fill_normal"),
    ("GEMM kernels (oneDNN)", r"\[JIT\]|perf-\d+\.map|libdnnl"),
    ("GEMM micro-kernels (octet's own sgemm)", r"octet::cpu::.*kernel_(avx512|avx2|scalar)"),
    ("GEMM packing and conversion (own sgemm)", r"octet::cpu::.*(pack_|transpose_panel|sgemm\b)|fp8_to_f32_transposed"),
    ("GEMM operand to f32 / untranspose", r"to_f32_matrix|transpose16_avx512|transpose_tile|octet::cpu::to_f32\b"),
    ("GEMM bias, GELU epilogue", r"octet::cpu::gemm\b|gelu_block"),
    ("LayerNorm fused with FP8 cast", r"norm_quantize_fp8"),
    ("FP8 cast (scale, amax, column-wise copy)", r"cast_block|quantize_fp8|count_fp8|amax"),
    ("FP8 byte transpose", r"transpose_tiles|transpose_2d"),
    ("attention (softmax, masking, glue)", r"rowops::|softmax|causal_attention|scores|head_of"),
    ("LayerNorm", r"norm|grad_sums|grad_row\b|row_sum"),
    ("GELU", r"forward_block<|backward_block<"),
    ("AdamW", r"adamw"),
    ("bias gradients (column sums)", r"sum_rows"),
    ("elementwise (residuals, grad sums)", r"binary_f32|axpy|scale|store_from_f32|fill|copy"),
    ("libgomp (fork/join, spin-wait)", r"libgomp"),
    ("memory (memcpy/memset, malloc, page faults)", r"memmove|memset|memcpy|malloc|free|\[kernel"),
]

def profile(p):
    counts = collections.Counter()
    other = collections.Counter()
    by_symbol = collections.defaultdict(collections.Counter)
    for line in open(f"{out}/{p}.samples"):
        m = re.match(r"\s*[0-9a-f]+\s+(.*)\s+\((.*)\)\s*$", line)
        if not m: continue
        key = m.group(1) + " " + m.group(2)
        for g, rx in GROUPS:
            if re.search(rx, key):
                counts[g] += 1
                sym = re.sub(r"\(octet::Tensor const&[^)]*\)", "", m.group(1))
                by_symbol[g][sym[:70]] += 1
                break
        else:
            counts["other"] += 1
            other[m.group(1)[:60] + " (" + m.group(2).split("/")[-1] + ")"] += 1
    return counts, other, by_symbol

def gemms(p):
    rows = collections.defaultdict(float)
    calls = collections.Counter()
    for line in open(f"{out}/{p}.gemm"):
        t, m, n, k, c, ms = line.split()
        name = gemm_name(t[0], t[1], int(m), int(n), int(k))
        rows[f"{name} {m}x{n}x{k} {t}" if "attention" not in name else name] += float(ms) / steps
        calls[name] += int(c)
    return rows

def median_ms(p):
    for line in open(f"{out}/{p}.bench"):
        if line.startswith("layer."): return float(line.split()[2])
    return float("nan")

med = {p: median_ms(p) for p in ("f32", "delayed")}
print(f"octet bench layer, {threads} thread(s), {reps} timed steps after {warmup} warm-up; "
      f"median step: f32 {med['f32']:.1f} ms, delayed {med['delayed']:.1f} ms "
      f"({med['delayed'] / med['f32']:.2f}x)")
print("\nsgemm wall time per step (each call timed on its thread), ms:")
g = {p: gemms(p) for p in ("f32", "delayed")}
def key_of(r):  # "qkv fprop 1024x2304x768 NT" -> "qkv fprop"
    return " ".join(r.split()[:-2]) if "attention" not in r else r
names = []
for p in ("f32", "delayed"):
    for r in g[p]:
        if key_of(r) not in names: names.append(key_of(r))
print(f"  {'GEMM':<22} {'f32':>8} {'delayed':>8} {'diff':>7}   "
      "M x N x K as oneDNN is called (f32 | delayed)")
tot = {"f32": 0.0, "delayed": 0.0}
for n in names:
    v = {p: sum(ms for r, ms in g[p].items() if key_of(r) == n) for p in ("f32", "delayed")}
    shapes = {p: " ".join(r.split()[-2:]) for p in ("f32", "delayed") for r in g[p]
              if key_of(r) == n and "attention" not in n}
    for p in tot: tot[p] += v[p]
    print(f"  {n:<22} {v['f32']:8.1f} {v['delayed']:8.1f} {v['delayed'] - v['f32']:+7.1f}   "
          f"{shapes.get('f32', '')} | {shapes.get('delayed', '')}")
print(f"  {'all sgemm':<22} {tot['f32']:8.1f} {tot['delayed']:8.1f} {tot['delayed'] - tot['f32']:+7.1f}")

prof = {p: profile(p) for p in ("f32", "delayed")}
if sum(prof["f32"][0].values()) == 0:
    sys.exit(0)
print(f"\nCPU time per step by group (perf cpu-clock samples at 999 Hz / {steps} steps"
      f"{'' if threads == 1 else ', summed over the threads'}), ms:")
print(f"  {'group':<44} {'f32':>8} {'delayed':>8} {'diff':>7}")
groups = [grp for grp, _ in GROUPS] + ["other"]
total = {"f32": 0.0, "delayed": 0.0}
for grp in groups:
    v = {p: prof[p][0][grp] / 0.999 / steps for p in ("f32", "delayed")}
    if grp.startswith("setup"):
        print(f"  {grp:<44} {v['f32']:8.1f} {v['delayed']:8.1f}   (not part of a step)")
        continue
    for p in total: total[p] += v[p]
    print(f"  {grp:<44} {v['f32']:8.1f} {v['delayed']:8.1f} {v['delayed'] - v['f32']:+7.1f}")
print(f"  {'total (without setup)':<44} {total['f32']:8.1f} {total['delayed']:8.1f} "
      f"{total['delayed'] - total['f32']:+7.1f}")
for p in ("f32", "delayed"):
    top = ", ".join(f"{s} {c / 0.999 / steps:.1f}" for s, c in prof[p][1].most_common(4))
    if top: print(f"  other, {p}: {top}")
print("\nthe largest functions of each group, ms per step (f32 | delayed):")
for grp in groups:
    if grp.startswith("setup"): continue
    syms = collections.Counter()
    for p in ("f32", "delayed"):
        syms.update(prof[p][2][grp])
    if not syms: continue
    parts = [f"{s} {prof['f32'][2][grp][s] / 0.999 / steps:.1f} | "
             f"{prof['delayed'][2][grp][s] / 0.999 / steps:.1f}" for s, _ in syms.most_common(3)]
    print(f"  {grp}: " + "; ".join(parts))
EOF
