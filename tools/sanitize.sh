#!/usr/bin/env bash
# Sanitizers and fuzzers (docs/dev/testing.md), run by tools/test.sh after the other
# suites:
#   1. a clang build with ASan + UBSan (OCTET_SANITIZE=address,undefined), no CUDA and no MPI,
#      with the libFuzzer harnesses (OCTET_FUZZ=ON): the library, the CPU test suite, the fuzzers;
#   2. the CPU ctest suite in it (which also makes the seed corpora and runs every seed through
#      its harness);
#   3. each fuzzer for FUZZ_SECONDS (default 60), two at a time; a crash fails the script and its
#      input stays in <build-dir>/fuzz/crashes/;
#   4. a TSan build (OCTET_SANITIZE=thread) of only the test files the threaded tests live in
#      (one binary, octet_threaded_tests), and those tests (TSAN_TESTS, a ctest -R regex).
# Each phase's wall time is printed, and again in the summary at the end.
#   tools/sanitize.sh [build-dir]     (default build-san; the TSan build goes to <build-dir>-tsan)
# Environment: FUZZ_SECONDS, FUZZ_JOBS (fuzzers at once, default 2), TSAN_TESTS,
# SANITIZE_JOBS (ninja -j, default: the cores), SANITIZE_SKIP=asan,fuzz,tsan (phases to skip).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
build="${1:-$root/build-san}"
tsan_build="${build}-tsan"
fuzz_seconds="${FUZZ_SECONDS:-60}"
fuzz_jobs="${FUZZ_JOBS:-2}"
jobs="${SANITIZE_JOBS:-$(nproc)}"
skip=",${SANITIZE_SKIP:-},"

# The tests that run on several threads: std::thread in the allocator tests, parallel_for and the
# reductions on 1, 2 and more threads, an exception inside a parallel region, and kernels,
# modules and the trainer at sizes where parallel_for splits the work.
tsan_tests="${TSAN_TESTS:-^(ThreadPool\..*|Memory\.(ConcurrentAllocationIsExact|ScopeIsPerThread)|Reductions\..*|GraphContract\..*Parallel.*|Rng\.FillMatchesTheDocumentedDrawsForAnyThreadCount|Gemm\..*|CausalAttention\..*|LayerNormMLP\..*|Trainer\..*|TrainerDeferred\..*)$}"
# The binary those tests are in: their files only (tests/CMakeLists.txt, octet_threaded_tests);
# the TSan build compiles nothing else.
tsan_targets=(octet_threaded_tests)

# ctest entries that run no octet code under the sanitizers (formatting, include layering,
# scripts), or cannot: the install test builds an uninstrumented consumer against the
# instrumented static libraries.
# Not run here: entries that run no octet code, the exhaustive conversion tests (every one of
# the 2^32 f32 inputs against CUDA's host conversions: 20-33 s each under ASan, about 150 s of the
# phase; the same conversion code runs under the sanitizers in every other cast test), and the
# 300-step training of each recipe (GPTTraining: 100-115 s under ASan, one test that ends the
# phase alone; the same modules, recipes and optimizer steps run under the sanitizers in the
# module, recipe-resume and trainer tests), and the whole GEMM suite run again on the opt-in own
# sgemm (kernels.gemm_own*: with its f64 references about 60 s of the phase under ASan; the own
# sgemm's packing and kernels run under the sanitizers in OwnGemm.*, on every path). All of them
# run in the plain build's suite.
not_sanitized='^((style|layers|install|tools\.gpu_check)\.|Fp8Exhaustive\.|GPTTraining\.|kernels\.gemm_own)'

clangxx="$(command -v clang++ || command -v clang++-14 || true)"
[ -n "$clangxx" ] || die "clang++ not found (tools/setup.sh installs clang)"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$root/tools/sanitize/lsan.supp:print_suppressions=0}"

summary=()
# What a failed fuzzer printed, repeated after the phase times: the end of the output is what a
# CI log keeps, and the fuzzers' own reports come minutes before it. The failing inputs (base64,
# up to 22 KB of text each) come first and the reports last, so that a log cut to its last few
# KB still says what failed.
failure_report="$work/failure_report"
failure_inputs="$work/failure_inputs"
phase() {  # phase NAME COMMAND...: runs it, prints and records its wall time
  local name=$1 start end rc=0
  shift
  echo "== sanitize: $name"
  start=$(date +%s)
  "$@" || rc=$?
  end=$(date +%s)
  summary+=("$(printf '%-34s %4d s%s' "$name" $((end - start)) "$([ $rc -eq 0 ] || echo "  FAILED ($rc)")")")
  echo "== sanitize: $name took $((end - start)) s"
  return $rc
}
print_summary() {
  echo "== sanitize: phase times ($(nproc) cores: $(processor))"
  printf '   %s\n' "${summary[@]}"
  if [ -s "$failure_inputs" ]; then
    echo "== sanitize: the failing inputs"
    cat "$failure_inputs"
  fi
  if [ -s "$failure_report" ]; then
    echo "== sanitize: what failed"
    cat "$failure_report"
  fi
}
on_exit() { print_summary; }

configure() {  # configure DIR SANITIZERS FUZZ
  [ -f "$1/build.ninja" ] && return 0
  mkdir -p "$1"
  cmake -S "$root" -B "$1" -G Ninja -DCMAKE_CXX_COMPILER="$clangxx" -DCMAKE_BUILD_TYPE=Sanitize \
    -DCMAKE_CXX_FLAGS_SANITIZE="-O1 -gline-tables-only" -DOCTET_CUDA=OFF -DOCTET_MPI=OFF \
    -DOCTET_SANITIZE="$2" -DOCTET_FUZZ="$3" > "$1/configure.log" 2>&1 ||
    { cat "$1/configure.log"; return 1; }
}

# ---- ASan + UBSan: the CPU suite and the fuzzers ----
asan_targets=(octet_runtime_tests octet_kernels_tests octet_autograd_tests octet_modules_tests
              octet_data_tests octet_train_tests octet_tools_tests octet_devices_tests octet_cli
              octet_fuzz_seeds)

build_asan() {
  configure "$build" address,undefined ON || return 1
  local fuzzers
  fuzzers=$(sed -n 's/^set(OCTET_FUZZERS \([a-z_ ]*\))$/\1/p' "$root/fuzz/CMakeLists.txt" | head -1)
  cmake --build "$build" -j "$jobs" --target "${asan_targets[@]}" \
    $(for f in $fuzzers; do echo "octet_fuzz_$f"; done)
}
test_asan() {
  (cd "$build" && ctest -j "$jobs" -E "$not_sanitized" --output-on-failure --timeout 900)
}

fuzz_one() {  # fuzz_one NAME: FUZZ_SECONDS of libFuzzer on a corpus kept in the build folder
  local name=$1 dir="$build/fuzz"
  mkdir -p "$dir/corpus/$name" "$dir/crashes"
  if "$dir/octet_fuzz_$name" -max_total_time="$fuzz_seconds" -timeout=25 -rss_limit_mb=2048 \
       -print_final_stats=1 -artifact_prefix="$dir/crashes/$name-" \
       "$dir/corpus/$name" "$dir/seeds/$name" > "$dir/$name.log" 2>&1; then
    echo "fuzz $name: $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$dir/$name.log" |
                         grep -o '[0-9]*$') inputs in ${fuzz_seconds} s, no crash"
  else
    # libFuzzer's own verdicts too (a timeout, out-of-memory or a leak ends the run without
    # a sanitizer report), and the log's end when none of them matched.
    {
      echo "fuzz $name: FAILED (a ${fuzz_seconds} s run); the input is in $dir/crashes/ (log: $dir/$name.log):"
      if grep -q -E '^(octet fuzz:|==[0-9]+==|SUMMARY|.*runtime error)' "$dir/$name.log"; then
        grep -A30 -E '^(octet fuzz:|==[0-9]+==|SUMMARY|.*runtime error)' "$dir/$name.log" | head -60
      else
        tail -30 "$dir/$name.log"
      fi
    } | tee -a "$failure_report" >&2
    # The input itself, so that a failure on a machine whose build folder is gone (CI's clean
    # clone) can be replayed: `base64 -d > input; <build-dir>/fuzz/octet_fuzz_NAME input`.
    local input
    for input in "$dir/crashes/$name-"*; do
      [ -f "$input" ] || continue
      echo "fuzz $name: $(basename "$input") ($(stat -c %s "$input") bytes), base64 (first 16 KiB):"
      head -c 16384 "$input" | base64 -w 100
    done | tee -a "$failure_inputs" >&2
    return 1
  fi
}
run_fuzzers() {
  [ -d "$build/fuzz/seeds/config" ] || "$build/fuzz/octet_fuzz_seeds" "$build/fuzz/seeds" ||
    return 1
  local names failed=0 pids=() name
  names=$(sed -n 's/^set(OCTET_FUZZERS \([a-z_ ]*\))$/\1/p' "$root/fuzz/CMakeLists.txt" | head -1)
  for name in $names; do
    fuzz_one "$name" &
    pids+=($!)
    if [ ${#pids[@]} -ge "$fuzz_jobs" ]; then
      wait "${pids[0]}" || failed=1
      pids=("${pids[@]:1}")
    fi
  done
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  return $failed
}

# ---- TSan: the threaded tests ----
build_tsan() {
  configure "$tsan_build" thread OFF || return 1
  cmake --build "$tsan_build" -j "$jobs" --target "${tsan_targets[@]}"
}
test_tsan() {
  # Archer tells TSan about LLVM OpenMP's barriers and locks (the build uses clang's libomp).
  local archer
  archer=$(ls /usr/lib/llvm-*/lib/libarcher.so 2>/dev/null | head -1 || true)
  (cd "$tsan_build" &&
     OMP_TOOL_LIBRARIES="${archer}" \
     TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1}" \
     ctest -j "$jobs" -R "$tsan_tests" --output-on-failure --timeout 900)
}

status=0
if [[ $skip != *,asan,* ]]; then
  phase "asan+ubsan: configure and build" build_asan
  phase "asan+ubsan: ctest" test_asan || status=1
fi
if [[ $skip != *,fuzz,* ]]; then
  phase "fuzz: ${fuzz_seconds} s per fuzzer, ${fuzz_jobs} at once" run_fuzzers || status=1
fi
if [[ $skip != *,tsan,* ]]; then
  phase "tsan: configure and build" build_tsan
  phase "tsan: threaded tests" test_tsan || status=1
fi
exit $status
