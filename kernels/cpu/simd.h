// Function multiversioning for hot CPU loops: an AVX-512 clone chosen at load time where the
// processor has it, the baseline x86-64 build elsewhere. The loops are written plainly so that
// GCC vectorises each clone for its target.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define OCTET_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "default")))
#else
#define OCTET_VECTOR_CLONES
#endif

// Elements per parallel chunk for memory-bound loops: below this, threads cost more than they save.
inline constexpr long kElementwiseGrain = 1 << 15;
