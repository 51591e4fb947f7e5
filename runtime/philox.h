// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"), one definition for
// the host (runtime/rng.cpp) and the CUDA kernels (dropout), so both draw the same stream bit for
// bit. No std::array: it is not usable in device code.
#pragma once

#include <cstdint>

#include "runtime/macros.h"

namespace octet::detail {

// The four 32-bit words of one Philox block.
struct PhiloxBlock {
  uint32_t w[4];
};

// The Philox4x32-10 block for counter `counter` (the low two words; the high two are 0) and key
// `seed`.
OCTET_HD PhiloxBlock philox_block(uint64_t counter, uint64_t seed) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = 0u, c3 = 0u;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {{c0, c1, c2, c3}};
}

// Draw number `index` of the stream of `seed`: word index % 4 of block index / 4.
OCTET_HD uint32_t philox_word(uint64_t seed, uint64_t index) {
  return philox_block(index / 4, seed).w[index % 4];
}

}  // namespace octet::detail
