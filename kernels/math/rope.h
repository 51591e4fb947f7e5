// Rotary position embedding, rotate-half layout (Hugging Face's Llama): a head vector x of D values
// is D/2 pairs (x[i], x[i + D/2]), each rotated by its position's angle for frequency i. Shared by
// the CPU and CUDA kernels so both compute the same bits (no contraction on either).
#pragma once

#include "runtime/macros.h"

namespace octet::math {

// (lo, hi) rotated by the angle whose cosine and sine are c and s.
OCTET_HD void rope_rotate(float lo, float hi, float c, float s, float& out_lo, float& out_hi) {
  out_lo = lo * c - hi * s;
  out_hi = hi * c + lo * s;
}

// The transpose (the inverse rotation): the gradient of rope_rotate's inputs from its outputs'.
OCTET_HD void rope_rotate_back(float dlo, float dhi, float c, float s, float& out_lo,
                               float& out_hi) {
  out_lo = dlo * c + dhi * s;
  out_hi = dhi * c - dlo * s;
}

}  // namespace octet::math
