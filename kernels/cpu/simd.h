// Function multiversioning for hot CPU loops: an AVX-512 clone (x86-64-v4) chosen at load time
// where the processor has it, an AVX2 + FMA clone (x86-64-v3) where it has that, the baseline
// x86-64 build (SSE2) elsewhere. The loops are written plainly so that GCC
// vectorises each clone for its target. kernels/ builds with -ffp-contract=off, so no clone fuses
// a multiply and an add that the source keeps apart; an `omp simd` reduction keeps one partial sum
// per lane, so its order (and bits) follow the clone's vector width: fixed for a machine, whatever
// the thread count.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define OCTET_VECTOR_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define OCTET_VECTOR_CLONES
#endif

// Elements per parallel chunk for memory-bound loops: below this, threads cost more than they save.
inline constexpr long kElementwiseGrain = 1 << 15;
